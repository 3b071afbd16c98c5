//! `tokenrouter gateway` (and the `tokenrouter-gateway` binary, which links
//! no libtorch): the OpenAI gateway alone, in front of remote groups (entry subservers started with `tokenrouter subserver --admin`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use engine_config::EngineConfig;

/// Arguments of `gateway`.
#[derive(Debug, clap::Args)]
pub struct GatewayArgs {
    /// Group config (YAML): the models, and `gateway.groups` / `gateway.groups_file`.
    #[arg(long)]
    config: PathBuf,
    /// Address to bind (overrides `gateway.host`).
    #[arg(long)]
    host: Option<String>,
    /// Port to bind (overrides `gateway.port`; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
}

/// Runs `gateway` until SIGTERM or ctrl-c, then drains.
pub fn run(args: GatewayArgs) -> Result<()> {
    let cfg = EngineConfig::from_file(&args.config)?;
    let host = args.host.unwrap_or_else(|| cfg.gateway().host.clone());
    let port = args.port.unwrap_or(cfg.gateway().port);
    crate::listen::block_on(async move {
        let (gw, discovery) = crate::app::remote(&cfg)
            .await
            .context("starting the gateway")?;
        crate::listen::serve_until_signal(gw, &host, port, "tokenrouter gateway").await?;
        drop(discovery);
        Ok(())
    })
}
