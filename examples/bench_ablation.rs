//! `make bench-ablation`: the paper's ablation on the simulated backend.
//! Two models with 6.0 / 27.9 ms steps, R2R hand-over with probability 0.35,
//! closed-loop clients at N in {1, 2, 4, 8, 16}: Std. Serving, `serial`,
//! `lockstep`, `async`, and `async_delayed` with the tuner's B, each beside
//! the Markov chain's prediction where the chain models the mode.
//!
//! Run twice: with batch-independent steps (the chain's assumption), and
//! with step times that grow with the batch as a measured engine profile
//! says (`make bench-engine` saves the CPU engine's; a GPU machine's
//! profile works the same way), scaled to 6.0 / 27.9 ms at batch 1. Every request has its own seed; each cell is the
//! mean over `--seeds` runs with different run seeds.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use loadgen::page::Page;
use loadgen::plot::{chart, Series, Style};
use subserver::bench::profile::{RelativeCosts, StepProfile};
use subserver::bench::sim_bench::{run, BenchMode, SimBenchOptions};
use tuner::{best, predict, StepLatency, TunerInputs};

#[derive(Parser)]
struct Args {
    /// Measured seconds per run.
    #[arg(long, default_value_t = 6.0)]
    duration_s: f64,
    /// Warm-up seconds per run.
    #[arg(long, default_value_t = 1.0)]
    warmup_s: f64,
    /// Runs per cell, each with its own run seed.
    #[arg(long, default_value_t = 2)]
    seeds: u64,
    /// Concurrencies.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    ns: Vec<usize>,
    /// Step profile (JSON from `bench_engine --profile-out`) for the
    /// batch-dependent run; without one only the batch-independent run.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// The page to write.
    #[arg(long)]
    out: Option<PathBuf>,
}

const LAT: [f64; 2] = [6.0, 27.9];
const P: f64 = 0.35;
const MODES: [(BenchMode, &str); 5] = [
    (BenchMode::StdServing, "Std. Serving"),
    (BenchMode::Serial, "serial"),
    (BenchMode::Lockstep, "lockstep"),
    (BenchMode::Async, "async"),
    (BenchMode::AsyncDelayed, "async_delayed"),
];

/// Step-time model of one variant: (base, per_seq, per_token) ms per model.
type Costs = [(f64, f64, f64); 2];

fn inputs(n: usize, costs: &Costs) -> Result<TunerInputs> {
    let lat = |m: usize| {
        let (b, s, t) = costs[m];
        if s + t == 0.0 {
            StepLatency::Constant(b)
        } else {
            // Decode: every sequence brings one token.
            StepLatency::Table(
                (1..=n.max(1))
                    .map(|k| (k, b + (s + t) * k as f64))
                    .collect(),
            )
        }
    };
    Ok(TunerInputs::new(
        vec![lat(0), lat(1)],
        vec![vec![1.0 - P, P], vec![1.0, 0.0]],
        vec![vec![1.0, 0.0], vec![1.0, 0.0]],
        0.1,
        n,
    )?)
}

/// One cell: mean throughput and large share over the seeds.
struct Cell {
    tok_s: f64,
    spread: f64,
    share: f64,
    predicted: Option<f64>,
    thresholds: Vec<usize>,
}

fn cell(args: &Args, mode: BenchMode, n: usize, costs: &Costs) -> Result<Cell> {
    let (thresholds, predicted) = match mode {
        BenchMode::AsyncDelayed => {
            let b = best(&inputs(n, costs)?)?.best.thresholds.clone();
            let p = predict(&inputs(n, costs)?, &b)?.throughput_tok_s;
            (b, Some(p))
        }
        BenchMode::Async => (
            vec![1, 1],
            Some(predict(&inputs(n, costs)?, &[1, 1])?.throughput_tok_s),
        ),
        _ => (vec![1, 1], None),
    };
    let mut tputs = Vec::new();
    let mut shares = Vec::new();
    for seed in 1..=args.seeds.max(1) {
        let r = run(&SimBenchOptions {
            mode,
            concurrency: n,
            latencies_ms: vec![costs[0].0, costs[1].0],
            per_seq_ms: vec![costs[0].1, costs[1].1],
            per_token_ms: vec![costs[0].2, costs[1].2],
            route_probability: P,
            thresholds: thresholds.clone(),
            duration_s: args.duration_s,
            warmup_s: args.warmup_s,
            seed,
            prompt_tokens: 16,
            max_batch_wait_ms: 200.0,
            tch: None,
        })?;
        tputs.push(r.throughput_tok_s);
        shares.push(r.large_share);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (lo, hi) = tputs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    Ok(Cell {
        tok_s: mean(&tputs),
        spread: (hi - lo) / 2.0,
        share: mean(&shares),
        predicted,
        thresholds,
    })
}

/// Runs every mode at every N for one step-time model; adds its section.
fn variant(
    args: &Args,
    page: &mut Page,
    name: &str,
    costs: &Costs,
    svg: &str,
) -> Result<Vec<(BenchMode, usize, Cell)>> {
    let mut cells = Vec::new();
    let mut rows = Vec::new();
    for &n in &args.ns {
        for (mode, label) in MODES {
            let c = cell(args, mode, n, costs)?;
            let pred = c
                .predicted
                .map_or_else(|| "–".into(), |p| format!("{p:.1}"));
            let ratio = c
                .predicted
                .map_or_else(|| "–".into(), |p| format!("{:.3}", c.tok_s / p));
            let row = vec![
                n.to_string(),
                label.to_string(),
                format!("{:?}", c.thresholds),
                format!("{:.1} ± {:.1}", c.tok_s, c.spread),
                pred,
                ratio,
                format!("{:.3}", c.share),
            ];
            eprintln!("{name}: {}", row.join(" | "));
            rows.push(row);
            cells.push((mode, n, c));
        }
    }
    page.table(
        &[
            "N",
            "mode",
            "B",
            "measured tok/s (± half range over seeds)",
            "predicted tok/s",
            "measured / predicted",
            "large share",
        ],
        &rows,
    );
    let mut series: Vec<Series> = MODES
        .iter()
        .map(|(m, label)| Series {
            name: label.to_string(),
            points: cells
                .iter()
                .filter(|c| c.0 == *m)
                .map(|c| (c.1 as f64, c.2.tok_s))
                .collect(),
        })
        .collect();
    series.push(Series {
        name: "async_delayed, predicted".into(),
        points: cells
            .iter()
            .filter(|c| c.0 == BenchMode::AsyncDelayed)
            .filter_map(|c| c.2.predicted.map(|p| (c.1 as f64, p)))
            .collect(),
    });
    if let Some(out) = &args.out {
        let dir = out.with_extension("");
        chart(
            &dir.join(svg),
            &format!("Throughput, {name}"),
            "N (active requests)",
            "output tokens / s",
            &series,
            Style::Lines,
        )?;
        let stem = dir
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("ablation");
        page.image(
            &format!("throughput against N, {name}"),
            &format!("{stem}/{svg}"),
        );
    }
    Ok(cells)
}

fn summary(page: &mut Page, cells: &[(BenchMode, usize, Cell)], target_check: bool) {
    let at = |m: BenchMode, n: usize| cells.iter().find(|c| c.0 == m && c.1 == n).map(|c| &c.2);
    let n = 8;
    if let (Some(ad), Some(l), Some(s)) = (
        at(BenchMode::AsyncDelayed, n),
        at(BenchMode::Lockstep, n),
        at(BenchMode::StdServing, n),
    ) {
        let mut text = format!(
            "At N=8: async_delayed / lockstep = **{:.2}** (target ≥ 1.5), async_delayed / Std. Serving = **{:.2}** (target ≥ 1.3)",
            ad.tok_s / l.tok_s,
            ad.tok_s / s.tok_s
        );
        if let (true, Some(p)) = (target_check, ad.predicted) {
            text.push_str(&format!(
                ", async_delayed measured / predicted = **{:.3}** (target within 3%)",
                ad.tok_s / p
            ));
        }
        text.push('.');
        page.para(&text);
    }
    let drift: Vec<f64> = cells
        .iter()
        .filter_map(|c| c.2.predicted.map(|p| (c.2.tok_s / p - 1.0).abs()))
        .collect();
    if !drift.is_empty() {
        let mean = drift.iter().sum::<f64>() / drift.len() as f64;
        let max = drift.iter().copied().fold(0.0, f64::max);
        page.para(&format!(
            "Measured against predicted, over every modelled cell (async and async_delayed at every N): \
             mean |measured / predicted − 1| = **{:.1}%**, largest **{:.1}%**.",
            mean * 100.0,
            max * 100.0
        ));
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut page = Page::begin(
        "Ablation: execution modes on the simulated backend",
        "make bench-ablation",
    );
    page.para(&format!(
        "Two simulated models (small {} ms, large {} ms per step at batch 1), R2R semantics with a \
         Bernoulli({P}) router: the small model's token is dropped with probability {P} and the large \
         model writes that position and returns. Closed-loop clients keep N requests active, each \
         request with its own seed (so its own routing draws). Each cell: {} run(s) with run seeds 1..{}, \
         {} s measured after {} s warm-up. Std. Serving = two single-model servers and an external \
         forwarder asking for one token per call. Predictions: the tuner's exact Markov chain \
         (the `tuner` crate) for the modes it models (async = B [1, 1]; async_delayed = the tuner's B*).",
        LAT[0], LAT[1], args.seeds, args.seeds, args.duration_s, args.warmup_s
    ));
    page.section("1. Batch-independent steps (the chain's assumption)");
    let flat: Costs = [(LAT[0], 0.0, 0.0), (LAT[1], 0.0, 0.0)];
    let cells = variant(
        &args,
        &mut page,
        "batch-independent steps",
        &flat,
        "independent.svg",
    )?;
    summary(&mut page, &cells, true);

    match args.profile.as_deref().filter(|p| p.exists()) {
        Some(path) => {
            page.section("2. Batch-dependent steps (a measured engine profile)");
            let prof = StepProfile::load(path)?;
            let rel: RelativeCosts = prof.relative();
            let costs: Costs = [rel.scaled(LAT[0]), rel.scaled(LAT[1])];
            let measured: Vec<String> = prof
                .decode_ms
                .iter()
                .map(|(b, ms)| format!("B={b}: {ms:.1} ms"))
                .collect();
            page.para(&format!(
            "Profile `{}` (written by `make bench-engine`: SmolLM2-135M, f32, bare forward, greedy decode \
             steps; prefill of one {}-token prompt: {:.1} ms): {}. Fitted as \
             `step = L × ({:.3} + {:.4} × sequences + {:.4} × new tokens)`, with L = {} / {} ms, so a \
             one-sequence decode step keeps the paper's latency and a batch of 16 costs {:.2}× as much. \
             The chain gets the decode-step table `L × ({:.3} + {:.4} × B)`; it does not model prefill.",
            path.file_name().and_then(|f| f.to_str()).unwrap_or("profile"),
            prof.prefill_tokens,
            prof.prefill_ms,
            measured.join(", "),
            rel.base,
            rel.per_seq,
            rel.per_token,
            LAT[0],
            LAT[1],
            rel.base + 16.0 * (rel.per_seq + rel.per_token),
            rel.base,
            rel.per_seq + rel.per_token,
        ));
            let cells = variant(
                &args,
                &mut page,
                "batch-dependent steps",
                &costs,
                "dependent.svg",
            )?;
            summary(&mut page, &cells, false);
        }
        None => {
            page.para(
                "Batch-dependent run skipped: no engine profile (run `make bench-engine` first).",
            );
        }
    }
    print!("{}", page.render());
    if let Some(out) = &args.out {
        page.write(out)?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}
