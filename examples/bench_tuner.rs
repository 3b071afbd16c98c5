//! `make bench-tuner`: the delayed-batching tuner's B* tables, predictions,
//! search cost and limits, each section one `tokenrouter tune` command run
//! here (through the same library call) and timed, written to
//! docs/results/tuner.md through the shared page writer.
//!
//! Usage: bench_tuner [--quick] [--out FILE]
//! (`--quick`: concurrency at most 4 and no exhaustive checks, to check the
//! target end to end in seconds.)

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use loadgen::page::Page;
use loadgen::verdict::Goal;
use serde_json::Value;
use tuner::cli::TuneArgs;

#[allow(dead_code)] // Each bench uses its own part of the shared support.
#[path = "support/targets.rs"]
mod targets;

#[derive(Parser)]
struct Args {
    /// Small concurrencies only, no exhaustive checks (seconds, not minutes).
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `tokenrouter tune ARGS` parsed by the real CLI definition.
#[derive(Parser)]
struct Tune {
    #[command(flatten)]
    args: TuneArgs,
}

const REF: &str = "--latencies-ms 6.0,27.9 --transition [[0.65,0.35],[1,0]] \
                   --credit [[1,0],[1,0]] --delta-ms 0.1";
const ME: &str = "--transition [[0.5,0.3,0.2],[0.5,0.3,0.2],[0.5,0.3,0.2]] \
                  --credit [[1,1,1],[1,1,1],[1,1,1]] --delta-ms 0.1";
const TABLE: &str = "--latency-table [[[1,6.0],[4,6.3],[16,7.5]],[[1,27.9],[4,28.6],[16,33.0]]] \
                     --transition [[0.65,0.35],[1,0]] --credit [[1,0],[1,0]]";

/// One run of the tuner: the command as a user types it, its output and wall time.
struct Ran {
    command: String,
    output: String,
    wall_s: f64,
}

fn tune(args: &str) -> Result<Ran> {
    let argv: Vec<&str> = args.split_whitespace().collect();
    let parsed = Tune::try_parse_from(std::iter::once("tune").chain(argv.iter().copied()))
        .with_context(|| format!("tune {args}"))?;
    let t0 = Instant::now();
    let output = tuner::cli::report(&parsed.args).with_context(|| format!("tune {args}"))?;
    let command = std::iter::once("tokenrouter tune".to_string())
        .chain(argv.iter().map(|a| {
            if a.starts_with('[') {
                format!("'{a}'")
            } else {
                a.to_string()
            }
        }))
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Ran {
        command,
        output,
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

fn vector(v: &Value) -> String {
    let items: Vec<String> = v
        .as_array()
        .map(|a| a.iter().map(|x| x.to_string()).collect())
        .unwrap_or_default();
    format!("[{}]", items.join(", "))
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Table rows from `tune --json` output.
fn rows(json: &str) -> Result<Vec<Vec<String>>> {
    let v: Value = serde_json::from_str(json).context("tune --json output")?;
    let results = v["results"].as_array().context("no results")?;
    Ok(results
        .iter()
        .map(|r| {
            let s = &r["search"];
            let n = |k: &str| s[k].as_u64().map_or_else(|| "–".into(), thousands);
            vec![
                r["concurrency"].to_string(),
                vector(&r["thresholds"]),
                format!("{:.2}", r["throughput_tok_s"].as_f64().unwrap_or(f64::NAN)),
                match r["runner_up"].as_object() {
                    Some(u) => format!(
                        "{} {:.2}",
                        vector(&u["thresholds"]),
                        u["throughput_tok_s"].as_f64().unwrap_or(f64::NAN)
                    ),
                    None => "–".into(),
                },
                s["strategy"].as_str().unwrap_or("–").to_string(),
                n("evaluated"),
                n("infeasible"),
                n("states_total"),
                n("states_max"),
                r["states"].as_u64().map_or_else(|| "–".into(), thousands),
                s["elapsed_s"]
                    .as_f64()
                    .map_or_else(|| "–".into(), |x| format!("{x:.3}")),
            ]
        })
        .collect())
}

const HEADER: &[&str] = &[
    "N",
    "B*",
    "tok/s",
    "runner-up (tok/s)",
    "search",
    "vectors",
    "deadlock",
    "states, all vectors",
    "states, largest vector",
    "states, B*",
    "search s",
];

/// Runs `tune ARGS --json`, shows the command, its wall time and the table.
fn table_section(page: &mut Page, args: &str) -> Result<Vec<Vec<String>>> {
    let ran = tune(&format!("{args} --json"))?;
    eprintln!("{:.2} s: {}", ran.wall_s, ran.command);
    let r = rows(&ran.output)?;
    page.code(&ran.command);
    page.para(&format!("Wall time **{:.2} s**.", ran.wall_s));
    page.table(HEADER, &r);
    Ok(r)
}

/// Runs `tune ARGS` and shows the command and its text output.
fn text_section(page: &mut Page, args: &str) -> Result<Ran> {
    let ran = tune(args)?;
    eprintln!("{:.2} s: {}", ran.wall_s, ran.command);
    page.code(&ran.command);
    page.code(&ran.output);
    page.para(&format!("Wall time {:.2} s.", ran.wall_s));
    Ok(ran)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let q = args.quick;
    let mut page = Page::begin("Delayed-batching tuner", "make bench-tuner");
    intro(&mut page, q);
    let n16 = upto(q, 16);
    let reference = reference_setting(&mut page, q)?;
    large_n(&mut page, q)?;
    let mismatches = three_models(&mut page, q)?;
    independent_of_delta(&mut page, &reference, n16)?;
    latency_table_gaps_limits(&mut page, q, n16)?;
    let verdict = targets::verdict(
        "Concurrencies where the local search's B* differs from the exhaustive one (3 models)",
        "tuner.local_vs_exhaustive_mismatches_max",
        Goal::AtMost,
        mismatches,
    )?;
    targets::section(&mut page, &[verdict]);

    print!("{}", page.render());
    if let Some(path) = &args.out {
        page.write(path)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// `n`, or at most 4 in a quick run.
fn upto(quick: bool, n: usize) -> usize {
    if quick {
        n.min(4)
    } else {
        n
    }
}

/// What the tables are and how they were made.
fn intro(page: &mut Page, q: bool) {
    page.para(
        "Every table below is one `tokenrouter tune` command (shown above it), run by this \
         target through the same library call and timed on this machine. The chain (slots of \
         `delta`, per model the waiting count, running batch and remaining slots, a model starts \
         when `waiting >= B_m`, routing by `P`, credits `C`) is solved exactly as an embedded \
         semi-Markov chain at step-completion events: `throughput = sum pi R / sum pi dt`. Only \
         reachable states are built. \"states\": reachable states of the embedded chain summed \
         over all evaluated vectors, of the largest evaluated vector, and of B*; \"deadlock\": \
         vectors with a reachable state where nothing runs and nothing can start (never ranked). \
         Details: module docs of `tuner/src/lib.rs`.",
    );
    if q {
        page.para("**Quick run** (`--quick`): concurrency capped at 4, no exhaustive checks.");
    }
}

/// The R2R pair at N = 1..16, exhaustive, and one vector predicted and
/// simulated; the reference table's rows.
fn reference_setting(page: &mut Page, q: bool) -> Result<Vec<Vec<String>>> {
    let n16 = upto(q, 16);
    page.section("Reference setting, 2 models (exact, exhaustive)");
    page.para(
        "L = 6.0, 27.9 ms; P = [[0.65,0.35],[1,0]] (R2R hand-over with probability 0.35); \
         C = [[1,0],[1,0]] (the small model's dropped token does not count); delta 0.1 ms.",
    );
    let reference = table_section(page, &format!("{REF} --concurrency 1..{n16}"))?;
    page.para("The same command with `--yaml --models quick,reference` gives the config table:");
    text_section(
        page,
        &format!("{REF} --concurrency 1..{n16} --yaml --models quick,reference"),
    )?;

    page.section("Prediction and simulation of one vector");
    text_section(
        page,
        &format!(
            "{REF} --concurrency 4 --thresholds 1,3 --simulate --models quick,reference{}",
            if q { " --sim-events 100000" } else { "" }
        ),
    )?;

    Ok(reference)
}

/// The local search at large N (and its checks against a cold start and
/// the exhaustive search).
fn large_n(page: &mut Page, q: bool) -> Result<()> {
    page.section("Large N (local search, exact per vector)");
    page.para(
        "Above N^M = 256 vectors `--search auto` switches to a pattern search seeded with \
         B*(N-1); each vector it visits is still solved exactly.",
    );
    let big = if q {
        "5,6"
    } else {
        "17,20,24,28,32,40,48,56,64"
    };
    table_section(page, &format!("{REF} --concurrency {big}"))?;
    if !q {
        page.para("Without a seed (coarse-grid start) at N = 64, and exhaustively at N = 32:");
        table_section(page, &format!("{REF} --concurrency 64"))?;
        table_section(page, &format!("{REF} --concurrency 32 --search exhaustive"))?;
    }

    Ok(())
}

/// ME's three models, and (not in a quick run) the local search checked
/// against the exhaustive one: the mismatch count, for the verdict.
fn three_models(page: &mut Page, q: bool) -> Result<Vec<f64>> {
    page.section("3 models (ME)");
    page.para(
        "ME modelled as choosing the writer of every token by ensemble weights 0.5, 0.3, 0.2: \
         every row of P is [0.5, 0.3, 0.2] and every token counts. The middle model's latency \
         (12.0 ms) is an assumption, not a measurement. `--search auto` is exhaustive while \
         N^M <= 64 (N <= 4), local above; the exhaustive rows after it check the local search.",
    );
    let me = table_section(
        page,
        &format!(
            "--latencies-ms 6.0,12.0,27.9 {ME} --concurrency 1..{}",
            upto(q, 8)
        ),
    )?;
    // Concurrencies where the local search's B* is not the exhaustive one
    // (none measured in a quick run: no exhaustive check).
    let mut mismatches = Vec::new();
    if !q {
        let exhaustive = table_section(
            page,
            &format!("--latencies-ms 6.0,12.0,27.9 {ME} --concurrency 5,6,7,8 --search exhaustive"),
        )?;
        let same: Vec<String> = exhaustive
            .iter()
            .map(|e| {
                let local = me.iter().find(|r| r[0] == e[0]);
                match local {
                    Some(l) if l[1] == e[1] => format!("N = {}: local {} = exhaustive", e[0], l[1]),
                    Some(l) => format!("N = {}: local {} ≠ exhaustive {}", e[0], l[1], e[1]),
                    None => format!("N = {}: no local row", e[0]),
                }
            })
            .collect();
        page.para(&format!(
            "Local against exhaustive search: {}.",
            same.join("; ")
        ));
        let differ = exhaustive
            .iter()
            .filter(|e| !me.iter().any(|l| l[0] == e[0] && l[1] == e[1]))
            .count();
        mismatches.push(differ as f64);
    }

    Ok(mismatches)
}

/// The reference table again at delta = 0.3 ms: the same B*, the same
/// throughput.
fn independent_of_delta(page: &mut Page, reference: &[Vec<String>], n16: usize) -> Result<()> {
    page.section("Results do not depend on delta");
    let d = table_section(
        page,
        &format!(
            "--latencies-ms 6.0,27.9 --transition [[0.65,0.35],[1,0]] --credit [[1,0],[1,0]] \
             --delta-ms 0.3 --concurrency 1..{n16}"
        ),
    )?;
    let max_rel = reference
        .iter()
        .zip(&d)
        .filter_map(|(a, b)| {
            let (x, y): (f64, f64) = (a[2].parse().ok()?, b[2].parse().ok()?);
            Some((x - y).abs() / x.max(1e-12))
        })
        .fold(0.0f64, f64::max);
    let same_b = reference.iter().zip(&d).all(|(a, b)| a[1] == b[1]);
    page.para(&format!(
        "Against delta = 0.1 ms: B* {} at every N, throughput equal to within {max_rel:.1e} \
         relative (at the two decimals shown).",
        if same_b { "the same" } else { "DIFFERENT" }
    ));

    Ok(())
}

/// Batch-dependent latency, non-geometric gaps, and the solver's limits.
fn latency_table_gaps_limits(page: &mut Page, q: bool, n16: usize) -> Result<()> {
    page.section("Batch-dependent latency (`--latency-table`)");
    page.para(
        "An illustrative table (not a measurement): latency grows with the batch, interpolated \
         linearly between points. Each batch size has its own step length, so more phases are \
         reachable than with constant latency.",
    );
    table_section(page, &format!("{TABLE} --concurrency 1..{n16}"))?;

    page.section("Non-geometric gaps (`--simulate --gap-samples`)");
    page.para(
        "The chain assumes a geometric number of small-model steps per visit (mean 1/0.35 = 2.86 \
         for this P). With an empirical gap distribution the simulation is the evaluator:",
    );
    text_section(
        page,
        &format!(
            "{REF} --concurrency 4 --simulate --sim-events {} --gap-samples [[1,1,2,2,3,3,4,8],null]",
            if q { 30000 } else { 300000 }
        ),
    )?;

    page.section("Limits");
    page.para(
        "The exact solver packs a state in 128 bits: at most 4 models, N <= 255, steps <= 65,535 \
         slots (clear errors otherwise); the simulation has no such limit. The local search is \
         exact per vector but returns a local optimum of the grid (checked against the exhaustive \
         search above). `--max-states` (default 4,000,000) caps a vector's chain; capped or \
         non-converged vectors are counted as skipped, never ranked. Wall times vary with the \
         machine's load (see the load average above).",
    );

    Ok(())
}
