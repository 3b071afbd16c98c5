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
use engine_bench::profile::{RelativeCosts, StepProfile};
use engine_bench::sim_bench::{run, BenchMode, SimBenchOptions};
use loadgen::page::Page;
use loadgen::plot::{chart, Series, Style};
use loadgen::verdict::NOISY_LOAD;
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
    /// Concurrencies of the long-output section.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    long_ns: Vec<usize>,
    /// Output caps of the long-output section (the paper's 2,048 and 8,192).
    #[arg(long, value_delimiter = ',', default_value = "2048,8192")]
    caps: Vec<usize>,
}

#[path = "bench_ablation/context_cost.rs"]
mod context_cost;
#[path = "bench_ablation/verdict.rs"]
mod verdict;

const LAT: [f64; 2] = [6.0, 27.9];
const P: f64 = 0.35;
const MODES: [(BenchMode, &str); 5] = [
    (BenchMode::StdServing, "Std. Serving"),
    (BenchMode::Serial, "serial"),
    (BenchMode::Lockstep, "lockstep"),
    (BenchMode::Async, "async"),
    (BenchMode::AsyncDelayed, "async_delayed"),
];

/// Step-time model of one variant: (base, per_seq, per_token, per_context) ms per model.
type Costs = [(f64, f64, f64, f64); 2];

/// The chain's inputs; it has no context, so each sequence is charged the
/// context `context` (the mean over an answer) as part of its per-sequence cost.
fn inputs(n: usize, costs: &Costs, context: f64) -> Result<TunerInputs> {
    let lat = |m: usize| {
        let (b, s, t, c) = costs[m];
        let s = s + c * context;
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
    /// Throughput of each seed, in seed order.
    per_seed: Vec<f64>,
    /// Load average (1 min) when the cell started.
    load: Option<f64>,
}

impl Cell {
    /// "noisy" when the cell started at a load average above 2.
    fn noise(&self) -> &'static str {
        if self.load.is_some_and(|l| l > NOISY_LOAD) {
            "noisy"
        } else {
            ""
        }
    }
}

fn cell(args: &Args, mode: BenchMode, n: usize, costs: &Costs, cap: Option<usize>) -> Result<Cell> {
    let load = loadgen::machine::load_average();
    let context = cap.map_or(0.0, |c| c as f64 / 2.0);
    let (thresholds, predicted) = match mode {
        BenchMode::AsyncDelayed => {
            let b = best(&inputs(n, costs, context)?)?.best.thresholds.clone();
            let p = predict(&inputs(n, costs, context)?, &b)?.throughput_tok_s;
            (b, Some(p))
        }
        BenchMode::Async => (
            vec![1, 1],
            Some(predict(&inputs(n, costs, context)?, &[1, 1])?.throughput_tok_s),
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
            per_context_ms: vec![costs[0].3, costs[1].3],
            output_cap: cap,
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
        per_seed: tputs,
        load,
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
            let c = cell(args, mode, n, costs, None)?;
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
                c.noise().to_string(),
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
            "load > 2",
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
        let mut parts = Vec::new();
        for (name, other, min) in [("lockstep", l, 1.5), ("Std. Serving", s, 1.3)] {
            if let Some(r) = verdict::per_seed_ratio(&ad.per_seed, &other.per_seed) {
                parts.push(format!(
                    "async_delayed / {name} = **{:.2} ± {:.2}** (target ≥ {min}: **{}**)",
                    r.mean,
                    r.spread,
                    verdict::within(r.mean, min, None)
                ));
            }
        }
        if let (true, Some(p)) = (target_check, ad.predicted) {
            let off = (ad.tok_s / p - 1.0).abs();
            parts.push(format!(
                "async_delayed measured / predicted = **{:.3}** (target within 3%: **{}**)",
                ad.tok_s / p,
                verdict::within(-off, -0.03, None)
            ));
        }
        let noisy = [ad, l, s].iter().any(|c| !c.noise().is_empty());
        page.para(&format!(
            "At N=8 (ratios seed by seed, mean ± half range): {}.{}",
            parts.join("; "),
            if noisy {
                " Measured at a load average above 2: **noisy**."
            } else {
                ""
            }
        ));
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

/// The long-output modes: TokenRouter (its best mode) and Std. Serving.
const LONG_MODES: [(BenchMode, &str); 2] = [
    (BenchMode::AsyncDelayed, "TokenRouter (async_delayed)"),
    (BenchMode::StdServing, "Std. Serving"),
];

/// Section 3: the paper's long-output result. The same fitted costs plus
/// the cost per context position, at each output cap, and the loss of each
/// system from the shortest cap to the longest, seed by seed.
fn long_output(args: &Args, page: &mut Page, prof: &StepProfile, costs: &Costs) -> Result<()> {
    page.section("3. Long outputs: output cap 2,048 against 8,192 (context-dependent steps)");
    let (Some(&short), Some(&long)) = (args.caps.iter().min(), args.caps.iter().max()) else {
        page.para("Long-output section skipped: no --caps given.");
        return Ok(());
    };
    if prof.context.is_empty() || costs.iter().all(|c| c.3 == 0.0) {
        page.para(
            "**SKIP**: the profile has no context points (it predates them, or its decode steps \
             did not grow with context), so the sim has no context cost to charge. Rerun \
             `make bench-engine`, then `make bench-ablation`.",
        );
        return Ok(());
    }
    let points: Vec<String> = prof
        .context
        .iter()
        .map(|p| {
            format!(
                "{} tokens: decode {:.1} ms, prefill {:.0} ms",
                p.tokens, p.decode_ms, p.prefill_ms
            )
        })
        .collect();
    page.para(&format!(
        "Step = section 2's fit plus **{:.3e} × L per position of context** the batch spans (fitted \
         from the profile's one-sequence decode steps at longer contexts: {}), i.e. {:.3} / {:.3} ms \
         per 1,000 positions for the small / large model. Prefill costs per new token as in section 2, \
         so Std. Serving pays for what each server has not cached at every call: every call is a new \
         request, whose prompt hits the server's prefix cache only in whole 16-token blocks it wrote \
         before, and the large server prefills every token the small one wrote since its last turn. \
         Each client starts staggered over the cap (its first request carries a history of \
         (c + ½)/N × cap tokens, brought in at no simulated cost), so the measured window sees \
         answers of every length, as a long run would. Caps {}.",
        costs[0].3 / LAT[0],
        points.join("; "),
        costs[0].3 * 1e3,
        costs[1].3 * 1e3,
        args.caps.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "),
    ));
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for &n in &args.long_ns {
        for (mode, label) in LONG_MODES {
            let mut by_cap = Vec::new();
            for &cap in &args.caps {
                let c = cell(args, mode, n, costs, Some(cap))?;
                let row = vec![
                    n.to_string(),
                    label.to_string(),
                    cap.to_string(),
                    format!("{:?}", c.thresholds),
                    format!("{:.1} ± {:.1}", c.tok_s, c.spread),
                    format!("{:.3}", c.share),
                    c.noise().to_string(),
                ];
                eprintln!("long output: {}", row.join(" | "));
                rows.push(row);
                by_cap.push((cap, c));
            }
            let at = |cap: usize| by_cap.iter().find(|c| c.0 == cap).map(|c| &c.1);
            if let (Some(s), Some(l)) = (at(short), at(long)) {
                if let Some(r) = verdict::per_seed_ratio(&l.per_seed, &s.per_seed) {
                    verdicts.push((n, mode, label, r));
                }
            }
        }
    }
    page.table(
        &[
            "N",
            "system",
            "output cap",
            "B",
            "tok/s (± half range over seeds)",
            "large share",
            "load > 2",
        ],
        &rows,
    );
    let mut lines = Vec::new();
    for (n, mode, label, r) in &verdicts {
        let loss = 1.0 - r.mean;
        let (target, met) = match mode {
            BenchMode::StdServing => (
                "paper: loses 58–85%",
                verdict::within(loss, 0.58, Some(0.85)),
            ),
            _ => (
                "roughly flat: loses at most 15%",
                verdict::within(-loss, -0.15, None),
            ),
        };
        lines.push(vec![
            n.to_string(),
            label.to_string(),
            format!("{:.3} ± {:.3}", r.mean, r.spread),
            format!("{:.0}%", 100.0 * loss),
            target.to_string(),
            format!("**{met}**"),
        ]);
    }
    page.para(&format!(
        "Throughput at cap {long} over throughput at cap {short}, seed by seed (mean ± half range over \
         {} seeds), and the paper's claim for each system:",
        args.seeds.max(1)
    ));
    page.table(
        &[
            "N",
            "system",
            &format!("tok/s at {long} / at {short}"),
            "loss",
            "target",
            "verdict",
        ],
        &lines,
    );
    let step = |m: usize| context_cost::StepCost {
        fixed_ms: costs[m].0 + costs[m].1 + costs[m].2,
        per_position_ms: costs[m].3,
    };
    page.para(&context_cost::explain(step(0), step(1), short, long));
    Ok(())
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
    let flat: Costs = [(LAT[0], 0.0, 0.0, 0.0), (LAT[1], 0.0, 0.0, 0.0)];
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
            let with_context = |l: f64, c: f64| {
                let (b, s, t) = rel.scaled(l);
                (b, s, t, c * rel.scaled_context(l))
            };
            let costs: Costs = [with_context(LAT[0], 0.0), with_context(LAT[1], 0.0)];
            let measured: Vec<String> = prof
                .decode_ms
                .iter()
                .map(|(b, ms)| format!("B={b}: {ms:.1} ms"))
                .collect();
            page.para(&format!(
            "Profile `{}` (written by `make bench-engine`: SmolLM2-135M in {}, bare forward, greedy decode \
             steps; prefill of one {}-token prompt: {:.1} ms): {}. Fitted as \
             `step = L × ({:.3} + {:.4} × sequences + {:.4} × new tokens)`, with L = {} / {} ms, so a \
             one-sequence decode step keeps the paper's latency and a batch of 16 costs {:.2}× as much. \
             The chain gets the decode-step table `L × ({:.3} + {:.4} × B)`; it does not model prefill.",
            path.file_name().and_then(|f| f.to_str()).unwrap_or("profile"),
            prof.dtype.as_deref().unwrap_or("a dtype it did not record"),
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
            let long: Costs = [with_context(LAT[0], 1.0), with_context(LAT[1], 1.0)];
            long_output(&args, &mut page, &prof, &long)?;
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
