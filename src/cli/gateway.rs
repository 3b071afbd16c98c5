//! `tokenrouter gateway`: the OpenAI gateway alone, in front of remote
//! groups (entry subservers started with `tokenrouter subserver --admin`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use subserver::config::EngineConfig;

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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("gateway")
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let (gw, discovery) = gateway::app::remote(&cfg)
            .await
            .context("starting the gateway")?;
        let server = gateway::GatewayServer::bind(gw, &format!("{host}:{port}")).await?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "tokenrouter gateway: listening on http://{}",
            server.local_addr()
        )?;
        out.flush()?;
        drop(out);
        gateway::shutdown::signal().await;
        server.drain().await;
        drop(discovery);
        anyhow::Ok(())
    })
}
