//! Assembling a gateway from engine configs: in front of remote groups
//! (`tokenrouter gateway`, the gateway pod), or with the in-process groups
//! of `tokenrouter serve` (every subserver in this process; feature
//! `inproc`), one routed group per config.

use std::sync::Arc;

use engine_config::{EngineConfig, TextSideSource};
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
    /// Two configs name their routed group alike.
    #[error(
        "two configs serve a group named `{name}` (configs {first} and {second}): \
         give each a different gateway.served_model_name"
    )]
    DuplicateGroup {
        /// The shared name.
        name: String,
        /// 1-based position of the first config naming it.
        first: usize,
        /// 1-based position of the second.
        second: usize,
    },
    /// No config was given.
    #[error("no engine config to serve")]
    NoGroup,
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
            Self::DuplicateGroup { .. } => "duplicate_group",
            Self::NoGroup => "no_group",
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

/// The served names of `cfg`, with their sampling defaults.
pub fn catalog(cfg: &EngineConfig) -> Catalog {
    Catalog {
        served: cfg.gateway().served_model_name.clone(),
        members: cfg.model_names().iter().map(|s| s.to_string()).collect(),
        entry: cfg.entry_index() as u16,
        defaults: cfg.generation_defaults(),
        member_defaults: (0..cfg.models().len())
            .map(|i| cfg.model_generation_defaults(i))
            .collect(),
        member_precision: cfg.models().iter().map(|m| m.precision()).collect(),
        learned: Default::default(),
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

/// Refuses two groups of one name. Members shared by name between groups
/// are served by the first group that has one; a warning says so when the
/// later group's member is another model (another path).
pub fn check_names(cfgs: &[EngineConfig]) -> Result<(), AppError> {
    for (j, b) in cfgs.iter().enumerate() {
        let name = &b.gateway().served_model_name;
        if let Some(i) = cfgs[..j]
            .iter()
            .position(|a| &a.gateway().served_model_name == name)
        {
            return Err(AppError::DuplicateGroup {
                name: name.clone(),
                first: i + 1,
                second: j + 1,
            });
        }
        for m in b.models() {
            let earlier = cfgs[..j]
                .iter()
                .find_map(|a| a.models().iter().find(|x| x.name == m.name).map(|x| (a, x)));
            if let Some((a, first)) = earlier.filter(|(_, x)| x.path != m.path) {
                tracing::warn!(
                    model = %m.name,
                    served_by = %a.gateway().served_model_name,
                    shadowed_in = %name,
                    "two groups have a member of this name with different paths: \
                     requests naming it go to the first group's ({:?})",
                    first.path
                );
            }
        }
    }
    Ok(())
}

/// Logs the sampling defaults in force for every served name of `catalog`.
pub fn log_defaults(catalog: &Catalog) {
    tracing::info!(
        model = %catalog.served,
        routing = "token-level",
        defaults = %catalog.defaults_for(crate::validate::Target::Routed),
        "sampling defaults"
    );
    for (i, m) in catalog.members.iter().enumerate() {
        tracing::info!(
            model = %m,
            routing = "query-level",
            defaults = %catalog.defaults_for(crate::validate::Target::Pinned(i as u16)),
            "sampling defaults"
        );
    }
}

/// Starts every model of `cfg` in this process and a gateway in front of
/// them. The [`Service`] must outlive the gateway's requests (drop it after
/// the server has drained).
#[cfg(feature = "inproc")]
pub fn inproc(cfg: &EngineConfig) -> Result<(Arc<Gateway>, Service), AppError> {
    let (gw, mut services) = inproc_groups(std::slice::from_ref(cfg))?;
    let service = services.pop().ok_or(AppError::NoGroup)?;
    Ok((gw, service))
}

/// Starts every model of every config in this process, each config as its
/// own routed group named by its `gateway.served_model_name`, behind one
/// gateway whose HTTP settings (auth, admission, limits) are the first
/// config's. Two groups of one name are refused. The [`Service`]s (one per
/// config, in order) must outlive the gateway's requests.
#[cfg(feature = "inproc")]
pub fn inproc_groups(cfgs: &[EngineConfig]) -> Result<(Arc<Gateway>, Vec<Service>), AppError> {
    let first = cfgs.first().ok_or(AppError::NoGroup)?;
    check_names(cfgs)?;
    let keys = api_keys(first)?;
    let mut sides = Vec::with_capacity(cfgs.len());
    for cfg in cfgs {
        let catalog = catalog(cfg);
        log_defaults(&catalog);
        sides.push((catalog, text_side(cfg)?));
    }
    let mut services = Vec::with_capacity(cfgs.len());
    for cfg in cfgs {
        services.push(Service::start(cfg, None)?);
    }
    let registries = cfgs
        .iter()
        .zip(&services)
        .map(|(c, s)| (c.gateway().served_model_name.clone(), s.registry().clone()))
        .collect();
    let gw = Gateway::with_groups(
        sides,
        keys,
        GatewayOptions::from_config(first.gateway()),
        registries,
    )?;
    for (served, service) in gw.served.iter().zip(&services) {
        served.pool.set_backends(vec![Arc::new(InProcBackend::new(
            service.group().clone(),
            "inproc",
        ))]);
    }
    Ok((Arc::new(gw), services))
}

/// A gateway in front of the remote groups `cfg` lists (`gateway.groups`,
/// `gateway.groups_file`); the models of `cfg` name the served models and
/// its entry model's directory gives the tokenizer, or with
/// `gateway.text_side: backend` the first group that serves it (see
/// [`crate::text_source`]). Needs a tokio runtime.
pub async fn remote(
    cfg: &EngineConfig,
) -> Result<(Arc<Gateway>, crate::discovery::Discovery), AppError> {
    let from_backend = cfg.gateway().text_side == TextSideSource::Backend;
    let text = if from_backend {
        tracing::info!(
            "gateway.text_side: backend: the tokenizer comes from the first healthy group"
        );
        TextSide::pending()
    } else {
        text_side(cfg)?
    };
    let keys = api_keys(cfg)?;
    let g = cfg.gateway();
    let catalog = catalog(cfg);
    log_defaults(&catalog);
    let gw = Arc::new(Gateway::new(
        catalog,
        text,
        keys,
        GatewayOptions::from_config(g),
        vec![],
    )?);
    let mut discovery =
        crate::discovery::start(gw.clone(), g.groups.clone(), g.groups_file.clone()).await;
    if from_backend {
        discovery.hold(crate::text_source::spawn(
            gw.clone(),
            cfg.generation_override(),
        ));
    }
    Ok((gw, discovery))
}
