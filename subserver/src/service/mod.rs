//! A routed group built from an `EngineConfig`: runners (libtorch or
//! simulated), policies, thresholds and settings, plus the subserver's HTTP
//! surface (`/metrics`, `/health`, admin) backed by the live group.

pub mod admin;
pub mod build;
pub mod drain;
pub mod member;
pub mod tensor_parallel;

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus::Registry;

use crate::config::EngineConfig;
use crate::http::{ControlAccess, SubserverHttp};
use crate::metrics::SubserverMetrics;
use crate::scheduler::group::Group;

/// Errors while building or starting a group.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A model could not be loaded or sized.
    #[error("model `{model}`: {source}")]
    Model {
        /// The model's name in the config.
        model: String,
        /// What failed.
        #[source]
        source: crate::error::EngineError,
    },
    /// The policy rejected its configuration.
    #[error(transparent)]
    Policy(#[from] policies::PolicyError),
    /// Something the config allows but this build does not do.
    #[error("{0}")]
    Unsupported(String),
    /// Metrics registration failed.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// The HTTP surface could not start.
    #[error(transparent)]
    Http(#[from] crate::http::HttpError),
}

impl ServiceError {
    /// Stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Model { .. } => "model",
            Self::Policy(_) => "policy",
            Self::Unsupported(_) => "unsupported",
            Self::Metrics(_) => "metrics",
            Self::Http(_) => "http",
        }
    }
}

/// A running group with its metrics and (optionally) its HTTP surface.
/// Dropping it stops the HTTP server, then every scheduler.
pub struct Service {
    http: Option<SubserverHttp>,
    group: Arc<Group>,
    registry: Registry,
    drain: drain::Drain,
}

impl Service {
    /// Loads every model of `cfg` and starts the group; with `admin`, also
    /// serves `/metrics`, `/health`, `/admin/*` and the client ingress
    /// `/internal/generate` there.
    /// The control endpoints take the token of the environment
    /// ([`ControlAccess::from_env`]).
    pub fn start(cfg: &EngineConfig, admin: Option<SocketAddr>) -> Result<Self, ServiceError> {
        let access = match admin {
            Some(_) => ControlAccess::from_env().map_err(crate::http::HttpError::Access)?,
            None => ControlAccess::default(),
        };
        Self::start_with_access(cfg, admin, access)
    }

    /// [`Self::start`] with the control endpoints exposed as `access` says.
    pub fn start_with_access(
        cfg: &EngineConfig,
        admin: Option<SocketAddr>,
        access: ControlAccess,
    ) -> Result<Self, ServiceError> {
        // Before any model loads: a refused exposure costs nothing.
        access.check().map_err(crate::http::HttpError::Access)?;
        let registry = Registry::new();
        let metrics = SubserverMetrics::new(&registry)?;
        crate::cuda::metrics::register(&registry)
            .map_err(|e| ServiceError::Unsupported(format!("CUDA graph metrics: {e}")))?;
        let members = build::members(cfg)?;
        let knob = members.iter().find_map(|m| m.policy.knob());
        let group = Arc::new(Group::start_with_metrics(
            members,
            build::settings(cfg)?,
            Some(&metrics),
        ));
        let drain = drain::Drain::default();
        let http = match admin {
            Some(addr) => {
                let api = Arc::new(
                    admin::GroupAdmin::new(group.clone(), knob)
                        .with_text_dir(crate::http::TextDir::entry_of(cfg)),
                );
                let api = Arc::new(drain::DrainingAdmin::new(api, drain.clone()));
                let ingress: Arc<dyn crate::http::Ingress> =
                    Arc::new(drain::DrainingIngress::new(group.clone(), drain.clone()));
                Some(SubserverHttp::start_secured(
                    addr,
                    api,
                    registry.clone(),
                    Some(ingress),
                    access,
                )?)
            }
            None => None,
        };
        Ok(Self {
            http,
            group,
            registry,
            drain,
        })
    }

    /// Drains (see [`drain`]): readiness fails, new requests get a 503,
    /// and this waits up to `deadline` for the group's active requests.
    /// Returns how many were left; dropping the service cancels them.
    pub fn drain(&self, deadline: std::time::Duration) -> usize {
        self.drain.wait_idle(deadline, || self.group.active())
    }

    /// The group (submit, cancel, stats).
    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }

    /// The Prometheus registry the group counts into.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Where the HTTP surface listens.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // Stop taking admin calls before the schedulers go.
        self.http.take();
        self.group.shutdown_requests();
    }
}

#[cfg(test)]
mod tests;
