//! Assembling a gateway from an engine config: in front of remote groups
//! (`tokenrouter gateway`, the gateway pod), or with the in-process group of
//! `tokenrouter serve` (every subserver in this process; feature `inproc`).

use std::sync::Arc;

use engine_config::EngineConfig;
#[cfg(feature = "inproc")]
use subserver::service::{Service, ServiceError};

use crate::auth::{ApiKeys, AuthError};
#[cfg(feature = "inproc")]
use crate::backend::inproc::InProcBackend;
use crate::state::{Gateway, GatewayOptions};
use crate::text::TextSide;
use crate::validate::Catalog;

/// Why a gateway could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The group did not start.
    #[cfg(feature = "inproc")]
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The tokenizer of the entry model could not be loaded.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] textio::TokenizerError),
    /// The API keys could not be read.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// Metrics registration failed.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

impl AppError {
    /// Stable label for logs and metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            #[cfg(feature = "inproc")]
            Self::Service(e) => e.error_type(),
            Self::Tokenizer(_) => "tokenizer",
            Self::Auth(_) => "auth",
            Self::Metrics(_) => "metrics",
        }
    }
}

/// The tokenizer side of `cfg`'s entry model (none for a sim model without a path).
pub fn text_side(cfg: &EngineConfig) -> Result<TextSide, AppError> {
    match &cfg.entry_model().path {
        Some(dir) => Ok(TextSide::from_dir(dir)?),
        None => Ok(TextSide::none()),
    }
}

/// The served names of `cfg`.
pub fn catalog(cfg: &EngineConfig) -> Catalog {
    Catalog {
        served: cfg.gateway().served_model_name.clone(),
        members: cfg.model_names().iter().map(|s| s.to_string()).collect(),
        entry: cfg.entry_index() as u16,
    }
}

/// The API keys `cfg` names.
pub fn api_keys(cfg: &EngineConfig) -> Result<ApiKeys, AppError> {
    let g = cfg.gateway();
    Ok(ApiKeys::load(
        g.api_keys_file.as_deref(),
        g.api_keys_env.as_deref(),
    )?)
}

/// Starts every model of `cfg` in this process and a gateway in front of
/// them. The [`Service`] must outlive the gateway's requests (drop it after
/// the server has drained).
#[cfg(feature = "inproc")]
pub fn inproc(cfg: &EngineConfig) -> Result<(Arc<Gateway>, Service), AppError> {
    let text = text_side(cfg)?;
    let keys = api_keys(cfg)?;
    let service = Service::start(cfg, None)?;
    let gw = Gateway::new(
        catalog(cfg),
        text,
        keys,
        GatewayOptions::from_config(cfg.gateway()),
        vec![service.registry().clone()],
    )?;
    gw.pool.set_backends(vec![Arc::new(InProcBackend::new(
        service.group().clone(),
        "inproc",
    ))]);
    Ok((Arc::new(gw), service))
}

/// A gateway in front of the remote groups `cfg` lists (`gateway.groups`,
/// `gateway.groups_file`); the models of `cfg` name the served models and
/// its entry model's directory gives the tokenizer. Needs a tokio runtime.
pub async fn remote(
    cfg: &EngineConfig,
) -> Result<(Arc<Gateway>, crate::discovery::Discovery), AppError> {
    let text = text_side(cfg)?;
    let keys = api_keys(cfg)?;
    let g = cfg.gateway();
    let gw = Arc::new(Gateway::new(
        catalog(cfg),
        text,
        keys,
        GatewayOptions::from_config(g),
        vec![],
    )?);
    let discovery =
        crate::discovery::start(gw.clone(), g.groups.clone(), g.groups_file.clone()).await;
    Ok((gw, discovery))
}
