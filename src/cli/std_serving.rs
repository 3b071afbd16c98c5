//! `tokenrouter std-serving`: the Std. Serving baseline as a command. One
//! ordinary single-model server per model, and an external forwarder that
//! asks for one token per call and routes with the config's Bernoulli rule.
//! With `--serve`, the same forwarder answers behind the OpenAI gateway, so
//! `tokenrouter bench` measures it like any other server.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use subserver::config::EngineConfig;
use subserver::sampling::SamplingParams;
use subserver::std_serving::{generate, StdServers};

/// Arguments of `std-serving`.
#[derive(Debug, clap::Args)]
pub struct StdServingArgs {
    /// Group config (YAML); its models become independent servers.
    #[arg(long)]
    config: PathBuf,
    /// Raw prompt text (one request, streamed to stdout).
    #[arg(long, required_unless_present = "serve")]
    prompt: Option<String>,
    /// Serve the OpenAI API instead (until SIGTERM or ctrl-c).
    #[arg(long, conflicts_with = "prompt")]
    serve: bool,
    /// Address to bind with `--serve` (default: the config's `gateway.host`).
    #[arg(long, requires = "serve")]
    host: Option<String>,
    /// Port to bind with `--serve` (0 picks a free one; default: `gateway.port`).
    #[arg(long, requires = "serve")]
    port: Option<u16>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Seed of the routing draws for this request.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Runs `std-serving`.
pub fn run(args: StdServingArgs) -> Result<()> {
    let cfg = EngineConfig::from_file(&args.config)?;
    let (servers, rule, tokenizer) = StdServers::from_config(&cfg)?;
    let tokenizer = tokenizer.context("std-serving needs a text tokenizer: use backend tch (sim-bench --mode std_serving measures the simulated backend)")?;
    let Some(text) = args.prompt else {
        return serve(&cfg, servers, rule, tokenizer, args.host, args.port);
    };
    let prompt = tokenizer.encode(&text, true)?;
    let mut decoder = tokenizer.incremental_decoder(true);
    let mut by_model = vec![0usize; cfg.models().len()];
    let mut stdout = std::io::stdout().lock();
    let t0 = Instant::now();
    let params = SamplingParams::greedy(1);
    let out = generate(
        &servers,
        rule,
        args.seed,
        &prompt,
        args.max_tokens,
        &params,
        |token, writer| {
            by_model[writer] += 1;
            if let Ok(text) = decoder.push(token) {
                let _ = write!(stdout, "{text}");
                let _ = stdout.flush();
            }
            true
        },
    )?;
    writeln!(stdout, "{}", decoder.flush().unwrap_or_default())?;
    let names: Vec<String> = cfg.models().iter().map(|m| m.name.clone()).collect();
    let shares: Vec<String> = names
        .iter()
        .zip(&by_model)
        .map(|(n, c)| format!("{n}={c}"))
        .collect();
    eprintln!(
        "{} tokens in {:.2}s, one call per token; tokens by model: {}",
        out.len(),
        t0.elapsed().as_secs_f64(),
        shares.join(", ")
    );
    Ok(())
}

/// Serves Std. Serving behind the gateway until a signal.
fn serve(
    cfg: &EngineConfig,
    servers: StdServers,
    rule: subserver::std_serving::ForwardRule,
    tokenizer: subserver::tokenizer::TextTokenizer,
    host: Option<String>,
    port: Option<u16>,
) -> Result<()> {
    use gateway::app;
    let gw = gateway::Gateway::new(
        app::catalog(cfg),
        app::text_side(cfg)?,
        app::api_keys(cfg)?,
        gateway::GatewayOptions::from_config(cfg.gateway()),
        vec![],
    )?;
    gw.primary().pool.set_backends(vec![std::sync::Arc::new(
        gateway::backend::std_serving::StdServingBackend::new(servers, rule, tokenizer),
    )]);
    let host = host.unwrap_or_else(|| cfg.gateway().host.clone());
    let port = port.unwrap_or(cfg.gateway().port);
    gateway::listen::block_on(gateway::listen::serve_until_signal(
        std::sync::Arc::new(gw),
        &host,
        port,
        "tokenrouter std-serving",
    ))
}
