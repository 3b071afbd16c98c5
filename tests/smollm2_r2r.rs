//! The CPU pair under R2R (config/smollm2-r2r.yaml): the healed SmolLM2
//! exit with the divergence router make trains on the full model's answers
//! (tools/heal/r2r_router.py), loaded in the published R2R layout.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;

use subserver::config::EngineConfig;
use subserver::service::Service;

const HEALED: &str = "smollm2-135m-l12-healed";
const ROUTER: &str = "routers/smollm2-135m-l12-healed-r2r";

/// Questions in the style users ask, none from an evaluation set.
const QUESTIONS: [&str; 4] = [
    "What is 9 plus 6?",
    "Name three animals that live in the sea.",
    "Explain what a verb is in one sentence.",
    "Tom has 14 pencils and gives away 5. How many pencils does he have left?",
];

fn config() -> EngineConfig {
    common::model_dir(HEALED);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/smollm2-r2r.yaml");
    EngineConfig::from_file(&path).unwrap()
}

#[test]
fn the_config_names_the_router_make_trains() {
    let cfg = config();
    let path = cfg.policy().kwargs["router_path"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        Path::new(&path).ends_with(format!("{ROUTER}/router.pt")),
        "{path}"
    );
    assert!(
        common::cache_dir().join(ROUTER).join("router.pt").is_file(),
        "the router is missing: run `make assets`"
    );
}

#[test]
fn the_router_predicts_divergence_on_held_out_answers() {
    // training.json is what r2r_router.py measured on prompts neither the
    // heal nor the router saw, at the threshold calibrated on others.
    let text =
        std::fs::read_to_string(common::cache_dir().join(ROUTER).join("training.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let auc = r["held_out_auc"].as_f64().unwrap();
    let base = r["test_divergence_rate"].as_f64().unwrap();
    let at = &r["held_out"];
    let (precision, share) = (
        at["precision"].as_f64().unwrap(),
        at["large_share"].as_f64().unwrap(),
    );
    assert!(auc >= 0.7, "held-out AUC {auc:.3}");
    assert!(
        precision > base + 0.1,
        "flagged tokens diverge at {precision:.3}, all tokens at {base:.3}: no better than chance"
    );
    let target = r["target_share"].as_f64().unwrap();
    assert!(
        (share - target).abs() < 0.1,
        "the calibrated threshold flags {share:.3} of held-out positions, target {target}"
    );
}

/// How far our engine's divergence rate on the router's test half may sit
/// from training.json's (transformers in the router's feature dtype against
/// the teacher's own top-1, we in f32 against the answer tokens).
const DIVERGENCE_TOLERANCE: f64 = 0.05;

#[test]
fn our_engine_reproduces_the_routers_held_out_divergence_rate() {
    // r2r_router.py calibrates on the first half of the held-out prompts
    // and tests on the second; the router's labels there are the exit's
    // top-1 against the teacher's. Recomputed with our engine: a wrong
    // split or label would move it.
    let split = common::heldout::split();
    let test = &split.holdout[split.holdout.len() / 2..];
    let agrees = common::heldout::top1_agrees(&common::model_dir(HEALED), test);
    let ours = 1.0 - common::heldout::rate(&agrees);
    let text =
        std::fs::read_to_string(common::cache_dir().join(ROUTER).join("training.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let theirs = r["test_divergence_rate"].as_f64().unwrap();
    assert!(
        (ours - theirs).abs() <= DIVERGENCE_TOLERANCE,
        "divergence rate on the router's test half: ours {ours:.3}, training.json {theirs:.3}"
    );
}

#[test]
fn the_r2r_pair_routes_both_ways_on_real_prompts() {
    let service = Service::start(&config(), None).unwrap();
    let prompts = common::chat_prompts(HEALED, &QUESTIONS);
    let runs = common::greedy_routed(service.group(), prompts, 48);
    let mut by_model = [0usize; 2];
    for (toks, writers, usage) in &runs {
        common::check_accounting(toks, writers, usage);
        for (total, n) in by_model.iter_mut().zip(&usage.tokens_by_model) {
            *total += n;
        }
    }
    let share = by_model[1] as f64 / (by_model[0] + by_model[1]) as f64;
    assert!(by_model[0] > 0, "the exit wrote nothing: {by_model:?}");
    assert!(
        by_model[1] > 0,
        "the router never handed over: {by_model:?}"
    );
    // Calibrated to flag about 30% of positions: far from all of them.
    assert!(share < 0.7, "large share {share:.2}: {by_model:?}");
}
