//! The reconciler's one error type; `metric_label()` names it in metrics.

/// Everything a reconcile can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The finalizer machinery failed (adding, removing, or the inner step).
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// The resource has no namespace (the CRD is namespaced, so never in practice).
    #[error("{0} has no namespace")]
    NoNamespace(String),
    /// An object could not be (de)serialized.
    #[error("serialization: {0}")]
    Serialization(#[from] serde_json::Error),
}

impl Error {
    /// A short stable label for metrics (`reconcile_errors_total{error=...}`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::NoNamespace(_) => "no_namespace",
            Error::Serialization(_) => "serialization",
        }
    }
}

/// The reconciler's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
