//! Offline model assets: GGUF import, derived partners, random checkpoints.

/// Asset conversion errors.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    /// Placeholder until the assets module lands.
    #[error("{0}")]
    Other(String),
}
