//! `tokenrouter serve`: the gateway and every subserver of one or more
//! routed groups in one process (in-process transport), one group per
//! `--config`. With no config, the embedded groups `default`, `fast` and
//! `coder`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use subserver::config::EngineConfig;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Engine config (YAML) of one routed group, named by its
    /// `gateway.served_model_name`; repeat to serve several groups (the
    /// first one's `gateway:` settings bind the server). Default: the
    /// built-in groups `default` (config/default.yaml), `fast`
    /// (config/fast.yaml) and `coder` (config/coder.yaml).
    #[arg(long)]
    config: Vec<PathBuf>,
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
    let mut cfgs = if args.config.is_empty() {
        EngineConfig::embedded_groups()?
    } else {
        args.config
            .iter()
            .map(|path| EngineConfig::from_file(path))
            .collect::<Result<Vec<_>, _>>()?
    };
    for cfg in &mut cfgs {
        if let Some(tokens) = args.max_total_tokens {
            cfg.override_kv_tokens(tokens)?;
        }
        if let Some(on) = args.cuda_graphs {
            cfg.override_cuda_graphs(on);
        }
    }
    // The first config's gateway settings bind the server.
    let first = cfgs.first().context("no engine config to serve")?.gateway();
    let host = args.host.unwrap_or_else(|| first.host.clone());
    let port = args.port.unwrap_or(first.port);
    let (gw, services) = gateway::app::inproc_groups(&cfgs).context("starting the groups")?;
    // Scripts and tests read the bound address from the "listening" line.
    gateway::listen::block_on(gateway::listen::serve_until_signal(
        gw,
        &host,
        port,
        "tokenrouter serve",
    ))?;
    drop(services);
    Ok(())
}
