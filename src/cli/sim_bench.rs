//! `tokenrouter sim-bench`: measures the runtime on the simulated backend and
//! prints JSON that scripts depend on. With `--presets`, the same runtime
//! over random-weight models built on `--device` (the GPU benchmark).

use anyhow::Result;
use engine_bench::sim_bench::{run as run_bench, BenchMode, SimBenchOptions, TchModels};
use subserver::cuda::parse_switch;

/// Arguments of `sim-bench`.
#[derive(Debug, clap::Args)]
pub struct SimBenchArgs {
    /// async_delayed | async | lockstep | serial | std_serving | large_only | small_only.
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
    /// Extra step time per position of context the batch spans, per model (ms).
    #[arg(long, value_delimiter = ',', default_value = "0,0")]
    per_context_ms: Vec<f64>,
    /// Output cap of the simulated models' requests; clients then start
    /// staggered over the cap (first requests carry histories).
    #[arg(long)]
    output_cap: Option<usize>,
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
    /// Real models instead of simulated ones: two gen-random presets, small
    /// first (e.g. qwen3-0.6b,qwen3-8b), random weights built on --device.
    #[arg(long, value_delimiter = ',')]
    presets: Vec<String>,
    /// Device of --presets models: cpu, cuda, cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Dtype of --presets models: f32, bf16, f16.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Decode steps as CUDA graphs (--presets on CUDA): on | off.
    #[arg(long, default_value = "off", value_parser = parse_switch, action = clap::ArgAction::Set)]
    cuda_graphs: bool,
    /// A CUDA stream per model (--presets on CUDA): on | off.
    #[arg(long, default_value = "on", value_parser = parse_switch, action = clap::ArgAction::Set)]
    cuda_streams: bool,
    /// Tokens per request with --presets (then the client sends the next).
    #[arg(long, default_value_t = 256)]
    answer_tokens: usize,
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
        per_context_ms: args.per_context_ms,
        output_cap: args.output_cap,
        route_probability: args.route_probability,
        thresholds: args.thresholds,
        duration_s: args.duration_s,
        warmup_s: args.warmup_s,
        seed: args.seed,
        prompt_tokens: args.prompt_tokens,
        max_batch_wait_ms: args.max_batch_wait_ms,
        tch: match args.presets.len() {
            0 => None,
            2 => Some(TchModels {
                presets: args.presets,
                device: args.device,
                dtype: args.dtype,
                cuda_graphs: args.cuda_graphs,
                cuda_streams: args.cuda_streams,
                answer_tokens: args.answer_tokens.max(1),
            }),
            n => anyhow::bail!("--presets needs 2 presets (small, large), got {n}"),
        },
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
