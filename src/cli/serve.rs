//! `tokenrouter serve`: the gateway and every subserver of the group in one
//! process (in-process transport). With no config, the embedded default.

use std::path::PathBuf;

use anyhow::{Context, Result};
use subserver::config::EngineConfig;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Engine config (YAML); default: the built-in SmolLM2 pair (config/default.yaml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to bind (overrides `gateway.host`).
    #[arg(long)]
    host: Option<String>,
    /// Port to bind (overrides `gateway.port`; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
    /// KV cache size of every model, in tokens (overrides the config's
    /// `mem_fraction_static` / `kv_cache_tokens`, as SGLang's flag does).
    #[arg(long)]
    max_total_tokens: Option<usize>,
    /// Decode steps of CUDA models as CUDA graphs: on | off (overrides
    /// `system.cuda_graphs`; refused for a model on the CPU).
    #[arg(long, value_parser = subserver::cuda::parse_switch, action = clap::ArgAction::Set)]
    cuda_graphs: Option<bool>,
}

/// Runs `serve` until SIGTERM or ctrl-c, then drains.
pub fn run(args: ServeArgs) -> Result<()> {
    let mut cfg = match &args.config {
        Some(path) => EngineConfig::from_file(path)?,
        None => EngineConfig::embedded_default()?,
    };
    if let Some(tokens) = args.max_total_tokens {
        cfg.override_kv_tokens(tokens)?;
    }
    if let Some(on) = args.cuda_graphs {
        cfg.override_cuda_graphs(on);
    }
    let host = args.host.unwrap_or_else(|| cfg.gateway().host.clone());
    let port = args.port.unwrap_or(cfg.gateway().port);
    let (gw, service) = gateway::app::inproc(&cfg).context("starting the group")?;
    // Scripts and tests read the bound address from the "listening" line.
    gateway::listen::block_on(gateway::listen::serve_until_signal(
        gw,
        &host,
        port,
        "tokenrouter serve",
    ))?;
    drop(service);
    Ok(())
}
