//! `tokenrouter sim-bench`: measures the runtime on the simulated backend and
//! prints JSON that scripts depend on.

use anyhow::Result;
use subserver::bench::sim_bench::{run as run_bench, BenchMode, SimBenchOptions};

/// Arguments of `sim-bench`.
#[derive(Debug, clap::Args)]
pub struct SimBenchArgs {
    /// async_delayed | async | lockstep | serial | std_serving.
    #[arg(long, default_value = "async_delayed")]
    mode: String,
    /// Active requests kept by closed-loop clients.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Step latency per model in ms, small first.
    #[arg(long, value_delimiter = ',', default_value = "6.0,27.9")]
    latencies_ms: Vec<f64>,
    /// Extra step time per request in the batch, per model (ms).
    #[arg(long, value_delimiter = ',', default_value = "0,0")]
    per_seq_ms: Vec<f64>,
    /// Extra step time per new token, per model (ms): the cost of computing KV.
    #[arg(long, value_delimiter = ',', default_value = "0,0")]
    per_token_ms: Vec<f64>,
    /// Probability a small-model token goes to the large model.
    #[arg(long, default_value_t = 0.35)]
    route_probability: f64,
    /// Delayed-batching B per model (small, large).
    #[arg(long, value_delimiter = ',', default_value = "1,1")]
    thresholds: Vec<usize>,
    /// Measured seconds.
    #[arg(long, default_value_t = 20.0)]
    duration_s: f64,
    /// Warm-up seconds before measuring.
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    /// Seed for tokens and routing draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 16)]
    prompt_tokens: usize,
    /// Bound on a delayed-batching wait (ms).
    #[arg(long, default_value_t = 200.0)]
    max_batch_wait_ms: f64,
    /// Print JSON (otherwise a short summary).
    #[arg(long)]
    json: bool,
}

/// Runs `sim-bench`.
pub fn run(args: SimBenchArgs) -> Result<()> {
    let mode: BenchMode = args.mode.parse().map_err(anyhow::Error::msg)?;
    let opts = SimBenchOptions {
        mode,
        concurrency: args.concurrency,
        latencies_ms: args.latencies_ms,
        per_seq_ms: args.per_seq_ms,
        per_token_ms: args.per_token_ms,
        route_probability: args.route_probability,
        thresholds: args.thresholds,
        duration_s: args.duration_s,
        warmup_s: args.warmup_s,
        seed: args.seed,
        prompt_tokens: args.prompt_tokens,
        max_batch_wait_ms: args.max_batch_wait_ms,
    };
    let report = run_bench(&opts)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{:?} N={}: {:.1} tok/s, large share {:.3}, steps {:?}, mean batch {:?}",
            mode,
            opts.concurrency,
            report.throughput_tok_s,
            report.large_share,
            report.steps_per_model,
            report.mean_batch_per_model
        );
    }
    Ok(())
}
