//! Token-level routing on real checkpoints (the SmolLM2 pair: the first 12
//! layers as the small model, all 30 as the large one), through the real
//! schedulers, pending/resume and the in-process transport.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::scheduler::client::Usage;
use subserver::scheduler::group::Group;

const SMALL: &str = "smollm2-135m-l12";
const LARGE: &str = "smollm2-135m";

fn runner(name: &str) -> TchRunner {
    let mut opts = TchRunnerOptions::new(&common::model_dir(name));
    opts.kv_budget = KvBudget::Tokens(4096);
    TchRunner::load(&opts).unwrap()
}

fn group(p: f64) -> Group {
    policy_group(
        &[SMALL, LARGE],
        "Random",
        serde_json::json!({"probability": p, "seed": 3}),
    )
}

fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![1, 9690, 198, 2683, 314, 253, 5356, 30, 2, 198, 1, 4093, 198],
        vec![504, 2013, 282, 4649, 314],
        (0..40).map(|i| 300 + (i * 37) % 4000).collect(),
    ]
}

/// Greedy generation through the routed group: (tokens, writers, usage) per prompt.
fn routed(g: &Group, n: usize) -> Vec<(Vec<u32>, Vec<u16>, Usage)> {
    common::greedy_routed(g, prompts(), n)
}

/// Greedy generation with one model alone.
fn alone(name: &str, n: usize) -> Vec<Vec<u32>> {
    common::greedy_alone(runner(name), prompts(), n)
}

#[test]
fn probability_zero_equals_small_only_and_one_equals_large_only() {
    let n = 12;
    for (p, model, writer) in [(0.0, SMALL, 0u16), (1.0, LARGE, 1u16)] {
        let g = group(p);
        let got = routed(&g, n);
        let want = alone(model, n);
        for ((toks, writers, usage), want) in got.iter().zip(&want) {
            // Token for token and the same length: a run that stops early
            // (or late) is a difference too.
            assert_eq!(toks, want, "p = {p}: differs from {model} alone");
            assert!(writers.iter().all(|&w| w == writer));
            assert_eq!(usage.tokens_by_model[writer as usize], toks.len());
        }
    }
}

#[test]
fn mixed_routing_is_deterministic_and_accounts_every_token_once() {
    let a = routed(&group(0.4), 16);
    let b = routed(&group(0.4), 16);
    for ((ta, wa, ua), (tb, wb, ub)) in a.iter().zip(&b) {
        assert_eq!(ta, tb, "greedy routed generation is not deterministic");
        assert_eq!(wa, wb);
        assert_eq!(ua, ub);
        assert_eq!(
            ua.tokens_by_model.iter().sum::<usize>(),
            ua.completion_tokens
        );
        assert_eq!(ua.completion_tokens, ta.len());
        for m in 0..2u16 {
            assert_eq!(
                ua.tokens_by_model[m as usize],
                wa.iter().filter(|&&w| w == m).count()
            );
        }
    }
    let writers: Vec<u16> = a.iter().flat_map(|r| r.1.clone()).collect();
    assert!(
        writers.contains(&0) && writers.contains(&1),
        "both models must write"
    );
}

#[test]
fn std_serving_cli_forwards_one_token_per_call() {
    let config = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/random.yaml");
    let out = std::process::Command::new(common::binary())
        .args(["std-serving", "--config"])
        .arg(&config)
        .args(["--prompt", "The capital of France is", "--max-tokens", "10"])
        .env("TOKENROUTER_CACHE", common::cache_dir())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("one call per token"))
        .expect("summary line");
    assert!(line.starts_with("10 tokens"), "{line}");
    let counts: usize = line
        .rsplit(": ")
        .next()
        .unwrap()
        .split(", ")
        .map(|kv| kv.split('=').nth(1).unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(counts, 10, "every token has one writer: {line}");
}

fn policy_group(models: &[&str], policy: &str, kwargs: serde_json::Value) -> Group {
    let runners = models.iter().map(|n| (n.to_string(), runner(n))).collect();
    common::policy_group(runners, policy, &kwargs)
}

fn check_accounting(runs: &[(Vec<u32>, Vec<u16>, Usage)]) {
    for (toks, writers, usage) in runs {
        common::check_accounting(toks, writers, usage);
    }
}

#[test]
fn r_stitch_switches_both_ways_deterministically() {
    // With R-Stitch as published, tau = 0.03 on this pair sends every token
    // to the large model and keeps it there (its entropy is rarely <= 0.03);
    // 0.1 is where both directions fire.
    let kwargs = serde_json::json!({"threshold": 0.1});
    let a = routed(
        &policy_group(&[SMALL, LARGE], "RStitch", kwargs.clone()),
        16,
    );
    let b = routed(&policy_group(&[SMALL, LARGE], "RStitch", kwargs), 16);
    check_accounting(&a);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.0, y.0, "R-Stitch greedy routing is not deterministic");
        assert_eq!(x.1, y.1);
    }
    let writers: Vec<u16> = a.iter().flat_map(|r| r.1.clone()).collect();
    assert!(
        writers.contains(&0) && writers.contains(&1),
        "R-Stitch never switched: {writers:?}"
    );
}

#[test]
fn ensemble_over_three_models_accounts_every_token() {
    let models = [SMALL, "smollm2-135m-l20", LARGE];
    let kwargs = serde_json::json!({"weights": [0.5, 0.3, 0.2], "seed": 2});
    let direct = policy_group(&models, "ME", kwargs);
    let runs = routed(&direct, 16);
    check_accounting(&runs);
    // The detour (every position drawn at the home) writes the same text
    // with the same writers: the direct route changes only who draws.
    let kwargs = serde_json::json!({"weights": [0.5, 0.3, 0.2], "seed": 2, "direct": false});
    let detour = policy_group(&models, "ME", kwargs);
    let again = routed(&detour, 16);
    for (x, y) in runs.iter().zip(&again) {
        assert_eq!(x.0, y.0, "the direct route changed the text");
        assert_eq!(x.1, y.1, "the direct route changed the writers");
    }
    let (d, t) = (direct.stats(0), detour.stats(0));
    assert!(d.passed_on > 0, "no guest -> guest hand-over");
    assert_eq!(t.passed_on, 0);
    // Request rows the home computed (steps are batched, rows are not).
    assert!(
        d.batch_sum < t.batch_sum,
        "home rows: direct {} vs detour {}",
        d.batch_sum,
        t.batch_sum
    );
    let writers: Vec<u16> = runs.iter().flat_map(|r| r.1.clone()).collect();
    assert!(
        (0..3).all(|m| writers.contains(&m)),
        "some model never wrote: {writers:?}"
    );
}
