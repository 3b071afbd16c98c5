//! `make bench-me`: the steps ME's direct route saves, counted on the
//! simulated backend. The same requests (greedy, one sampling seed each)
//! run through a three-model ME group twice: with every position drawn at
//! the home (`direct: false`, the detour: a guest writes one token and
//! returns, and the home steps to draw the next writer) and with the pen
//! holder drawing the next writer (`direct: true`). Step counts are exact
//! (requests run one at a time, so every step holds one request); the run
//! checks that both write the same tokens with the same writers, prints a
//! table, and writes `docs/results/me-direct.md`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use engine_bench::me_route::{run, MeRouteOptions, MeRouteRun};
use loadgen::page::Page;
use loadgen::verdict::Goal;

#[allow(dead_code)] // Each bench uses its own part of the shared support.
#[path = "support/targets.rs"]
mod targets;

#[derive(Parser)]
struct Args {
    /// Requests per run (request i of run seed s has sampling seed s << 32 | i).
    #[arg(long, default_value_t = 32)]
    requests: u64,
    /// Output tokens per request.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Run seeds; one pair of runs (detour, direct) each.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    seeds: Vec<u64>,
    /// ME weights, one per model (model 0 is the entry).
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.3,0.2")]
    weights: Vec<f64>,
    /// The page to write.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "n/a".into())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut page = Page::begin(
        "ME without a detour: steps saved (sim backend)",
        "make bench-me",
    );
    let n = args.weights.len();
    let mut rows = Vec::new();
    let mut totals = [vec![0u64; n], vec![0u64; n]];
    // Per seed: the fraction of the home's steps the direct route saves.
    let mut saved_by_seed = Vec::new();
    for &seed in &args.seeds {
        let opts = MeRouteOptions {
            weights: args.weights.clone(),
            requests: args.requests,
            max_tokens: args.max_tokens,
            run_seed: seed,
        };
        let detour = run(&opts, false).map_err(anyhow::Error::msg)?;
        let direct = run(&opts, true).map_err(anyhow::Error::msg)?;
        if direct.outputs != detour.outputs {
            bail!("run seed {seed}: the direct route changed the tokens or their writers");
        }
        for (i, r) in [&detour, &direct].into_iter().enumerate() {
            for (t, s) in totals[i].iter_mut().zip(&r.steps) {
                *t += s;
            }
        }
        saved_by_seed.push(1.0 - direct.steps[0] as f64 / detour.steps[0].max(1) as f64);
        rows.push(row(seed, "detour", &detour, &detour));
        rows.push(row(seed, "direct", &direct, &detour));
    }
    let header: Vec<String> = std::iter::once("run seed".to_string())
        .chain(["route".into()])
        .chain((0..n).map(|m| format!("steps m{m}")))
        .chain([
            "home steps saved".into(),
            "guest→guest hand-overs".into(),
            "peer messages".into(),
            "tokens by model".into(),
        ])
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let saved = 1.0 - totals[1][0] as f64 / totals[0][0].max(1) as f64;
    let all_saved =
        1.0 - totals[1].iter().sum::<u64>() as f64 / totals[0].iter().sum::<u64>().max(1) as f64;
    println!("{}", loadgen::page::markdown_table(&header, &rows));
    println!(
        "home steps: {} -> {} ({:.1}% fewer); all models: {:.1}% fewer; load average {}",
        totals[0][0],
        totals[1][0],
        saved * 100.0,
        all_saved * 100.0,
        load_average()
    );
    page.para(&format!(
        "A three-model ME group (weights {:?}, model 0 the entry) on the simulated backend \
         (seeded logits, greedy), {} requests of {} output tokens per run, one request at a \
         time in `async` mode so every step holds one request: the counts are exact, not \
         timings, and repeat run for run. *detour* is `direct: false` (the home steps to draw \
         every position and drops its token where a guest is drawn; a guest writes one token \
         and returns), *direct* the default (the pen holder draws the next writer after each \
         token it writes: a model that draws itself keeps writing, the home hands over without \
         computing a token to drop, a guest that draws another guest hands over through the \
         home's inbox without a home step, and the home catches up on skipped tokens in one \
         prefill when it next writes). Both runs of each seed wrote the same tokens with the \
         same writers (checked).",
        args.weights, args.requests, args.max_tokens
    ));
    page.table(&header, &rows);
    page.para(&format!(
        "Over all seeds: home steps {} (detour) → {} (direct), **{:.1}% fewer**; steps of all \
         models together {:.1}% fewer. Guests step once per token they write either way.",
        totals[0][0],
        totals[1][0],
        saved * 100.0,
        all_saved * 100.0
    ));
    let verdict = targets::verdict(
        "Fraction of the home's steps the direct route saves",
        "me_direct.home_steps_saved_min",
        Goal::AtLeast,
        saved_by_seed,
    )?;
    println!("{}", verdict.sentence());
    targets::section(&mut page, &[verdict]);
    if let Some(out) = &args.out {
        page.write(out)?;
        println!("wrote {}", out.display());
    }
    Ok(())
}

fn row(seed: u64, route: &str, r: &MeRouteRun, detour: &MeRouteRun) -> Vec<String> {
    let mut cells = vec![seed.to_string(), route.to_string()];
    cells.extend(r.steps.iter().map(u64::to_string));
    let saved = detour.steps[0].saturating_sub(r.steps[0]);
    cells.push(format!(
        "{saved} ({:.1}%)",
        100.0 * saved as f64 / detour.steps[0].max(1) as f64
    ));
    cells.push(r.guest_to_guest().to_string());
    cells.push(r.messages.to_string());
    cells.push(format!("{:?}", r.tokens_by_model()));
    cells
}
