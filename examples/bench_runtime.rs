//! `make bench-runtime`: the routed runtime on the simulated backend against
//! the delayed-batching Markov chain, and the execution modes against each
//! other, all measured in one run. Writes `docs/results/runtime.md`.
//!
//! Usage: bench_runtime [--duration-s 10] [--warmup-s 2] [--out FILE]

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use subserver::bench::sim_bench::{run, BenchMode, SimBenchOptions, SimBenchReport};
use tuner::{best, predict, StepLatency, TunerInputs};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    #[arg(long)]
    out: Option<PathBuf>,
}

const LAT: [f64; 2] = [6.0, 27.9];
const P: f64 = 0.35;

fn inputs(n: usize) -> Result<TunerInputs> {
    Ok(TunerInputs::new(
        vec![StepLatency::Constant(LAT[0]), StepLatency::Constant(LAT[1])],
        vec![vec![1.0 - P, P], vec![1.0, 0.0]],
        vec![vec![1.0, 0.0], vec![1.0, 0.0]],
        0.1,
        n,
    )?)
}

fn bench(
    args: &Args,
    mode: BenchMode,
    n: usize,
    thresholds: &[usize],
    per_token: [f64; 2],
) -> Result<SimBenchReport> {
    Ok(run(&SimBenchOptions {
        mode,
        concurrency: n,
        latencies_ms: LAT.to_vec(),
        per_seq_ms: vec![0.0, 0.0],
        per_token_ms: per_token.to_vec(),
        route_probability: P,
        thresholds: thresholds.to_vec(),
        duration_s: args.duration_s,
        warmup_s: args.warmup_s,
        seed: 1,
        prompt_tokens: 16,
        max_batch_wait_ms: 200.0,
    })?)
}

fn row(label: &str, r: &SimBenchReport) -> String {
    format!(
        "| {label} | {:.1} | {:.3} | {:?} | [{:.2}, {:.2}] |\n",
        r.throughput_tok_s,
        r.large_share,
        r.steps_per_model,
        r.mean_batch_per_model[0],
        r.mean_batch_per_model[1]
    )
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut doc = String::new();
    let header =
        "| run | tok/s | large share | steps per model | mean batch |\n|---|---:|---:|---|---|\n";

    // 1. Measured against the chain's prediction.
    let mut pred_rows = String::from("| N | thresholds | predicted tok/s | measured tok/s | measured / predicted |\n|---:|---|---:|---:|---:|\n");
    let b8 = best(&inputs(8)?)?.best.thresholds.clone();
    let mut runs = String::from(header);
    for (n, th) in [(4usize, vec![1usize, 3]), (8, b8.clone())] {
        let predicted = predict(&inputs(n)?, &th)?.throughput_tok_s;
        let r = bench(&args, BenchMode::AsyncDelayed, n, &th, [0.0, 0.0])?;
        pred_rows.push_str(&format!(
            "| {n} | {th:?} | {predicted:.1} | {:.1} | {:.3} |\n",
            r.throughput_tok_s,
            r.throughput_tok_s / predicted
        ));
        runs.push_str(&row(&format!("async_delayed N={n} B={th:?}"), &r));
        eprint!("{}", row(&format!("async_delayed N={n} B={th:?}"), &r));
    }

    // 2. Modes at N = 8.
    let mut modes = Vec::new();
    for (mode, th) in [
        (BenchMode::AsyncDelayed, b8.clone()),
        (BenchMode::Async, vec![1, 1]),
        (BenchMode::Lockstep, vec![1, 1]),
        (BenchMode::Serial, vec![1, 1]),
        (BenchMode::StdServing, vec![1, 1]),
    ] {
        let r = bench(&args, mode, 8, &th, [0.0, 0.0])?;
        let label = format!("{mode:?} N=8");
        runs.push_str(&row(&label, &r));
        eprint!("{}", row(&label, &r));
        modes.push((mode, r.throughput_tok_s));
    }
    let tput = |m: BenchMode| {
        modes
            .iter()
            .find(|x| x.0 == m)
            .map(|x| x.1)
            .unwrap_or(f64::NAN)
    };
    let (ad, a, l, s, std) = (
        tput(BenchMode::AsyncDelayed),
        tput(BenchMode::Async),
        tput(BenchMode::Lockstep),
        tput(BenchMode::Serial),
        tput(BenchMode::StdServing),
    );

    // 3. Std. Serving when (re)computing KV costs time: 0.05 / 0.25 ms per new token.
    let cost = [0.05, 0.25];
    let r_async_cost = bench(&args, BenchMode::Async, 8, &[1, 1], cost)?;
    let r_std_cost = bench(&args, BenchMode::StdServing, 8, &[1, 1], cost)?;
    runs.push_str(&row(
        "Async N=8, KV cost 0.05/0.25 ms per token",
        &r_async_cost,
    ));
    runs.push_str(&row(
        "StdServing N=8, KV cost 0.05/0.25 ms per token",
        &r_std_cost,
    ));

    // 4. Scaling from 1 to 16 with the tuner's thresholds.
    let b1 = best(&inputs(1)?)?.best.thresholds.clone();
    let b16 = best(&inputs(16)?)?.best.thresholds.clone();
    let r1 = bench(&args, BenchMode::AsyncDelayed, 1, &b1, [0.0, 0.0])?;
    let r16 = bench(&args, BenchMode::AsyncDelayed, 16, &b16, [0.0, 0.0])?;
    runs.push_str(&row(&format!("async_delayed N=1 B={b1:?}"), &r1));
    runs.push_str(&row(&format!("async_delayed N=16 B={b16:?}"), &r16));

    let ratios = format!(
        "| ratio | value |\n|---|---:|\n\
         | async_delayed / async (N=8) | {:.3} |\n\
         | async / lockstep (N=8) | {:.3} |\n\
         | lockstep / serial (N=8) | {:.3} |\n\
         | async_delayed / std_serving (N=8, no KV cost) | {:.3} |\n\
         | async / std_serving (N=8, KV cost 0.05/0.25 ms per token) | {:.3} |\n\
         | throughput N=16 / N=1 | {:.2} |\n",
        ad / a,
        a / l,
        l / s,
        ad / std,
        r_async_cost.throughput_tok_s / r_std_cost.throughput_tok_s,
        r16.throughput_tok_s / r1.throughput_tok_s
    );
    let cmd = std::env::args().collect::<Vec<_>>().join(" ");
    doc.push_str(&format!(
        "# Runtime on the simulated backend\n\nMeasured by `make bench-runtime`, which ran:\n\n```\n{cmd}\n```\n\n\
         Two simulated models (step latency {} ms and {} ms, independent of batch size), R2R semantics with a \
         Bernoulli({P}) router: the small model's token is dropped and the large model writes that position and \
         returns. Closed-loop clients keep N requests active; each run measured {} s after a {} s warm-up; every \
         figure below comes from the same run of this program.\n\n\
         ## Against the Markov-chain prediction\n\n{pred_rows}\n## Ratios\n\n{ratios}\n## All runs\n\n{runs}",
        LAT[0], LAT[1], args.duration_s, args.warmup_s
    ));
    println!("{doc}");
    if let Some(p) = &args.out {
        std::fs::write(p, &doc)?;
    }
    Ok(())
}
