//! The CPU pair under R2R (config/smollm2-r2r.yaml): the healed SmolLM2
//! exit with the divergence router make trains on the full model's answers
//! (tools/heal/r2r_router.py), loaded in the published R2R layout.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::router_eval;

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

/// How far our held-out AUC may sit from training.json's. The trainer read
/// its features from transformers in bf16 (`feature_dtype`) and we serve
/// the exit in f32 (config/smollm2-r2r.yaml): the hidden states and logits
/// the router reads shift by bf16 rounding, and some exit top-1s (labels)
/// flip on near ties. r2r_router.py measured a router trained on bf16 and
/// one on f32 features 0.001 apart; 0.03 leaves room for the shift while
/// still failing on a feature or label that means something else.
const AUC_TOLERANCE: f64 = 0.03;

/// training.json, r2r_router.py's record of its settings and numbers.
fn training() -> serde_json::Value {
    let path = common::cache_dir().join(ROUTER).join("training.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_router_predicts_divergence_on_held_out_answers() {
    // Recomputed on the router's test half (held-out prompts neither the
    // heal nor the router trained on, nor its threshold calibrated on) with
    // our engine, the policy this config builds, and our own scoring.
    let split = common::heldout::split();
    let (calibration, test) = split.router_halves();
    let r = training();
    let positions = |xs: &[common::heldout::Item]| xs.iter().map(|x| x.n).sum::<usize>();
    // The halves must be the trainer's (same prompts, same positions).
    assert_eq!(
        (positions(calibration), positions(test)),
        (
            r["calibration_positions"].as_u64().unwrap() as usize,
            r["test_positions"].as_u64().unwrap() as usize
        ),
        "our halves of the held-out answers are not r2r_router.py's"
    );
    let s = router_eval::score_r2r(&config(), test);
    let auc = router_eval::auc(&s.probability, &s.diverges).expect("both classes");
    let base = router_eval::base_rate(&s.diverges);
    let at = router_eval::at_threshold(&s.flagged, &s.diverges);
    eprintln!(
        "held-out test half: {} positions, AUC {auc:.4}, base {base:.4}, threshold {:.4}: \
         share {:.4}, precision {:.4}, recall {:.4}",
        s.diverges.len(),
        s.threshold,
        at.share,
        at.precision,
        at.recall
    );
    assert!(auc >= 0.7, "held-out AUC {auc:.3}");
    assert!(
        at.precision > base + 0.1,
        "flagged tokens diverge at {:.3}, all tokens at {base:.3}: no better than chance",
        at.precision
    );
    // The target share is a setting of the trainer, not a measurement.
    let target = r["target_share"].as_f64().unwrap();
    assert!(
        (at.share - target).abs() < 0.1,
        "the calibrated threshold flags {:.3} of held-out positions, target {target}",
        at.share
    );
    let theirs = r["held_out_auc"].as_f64().unwrap();
    assert!(
        (auc - theirs).abs() <= AUC_TOLERANCE,
        "held-out AUC: ours {auc:.4}, training.json {theirs:.4}"
    );
}

#[test]
fn auc_is_the_rank_statistic_with_ties_counted_half() {
    let auc = |s: &[f32], l: &[bool]| router_eval::auc(s, l).unwrap();
    assert_eq!(auc(&[0.1, 0.9], &[false, true]), 1.0);
    assert_eq!(auc(&[0.9, 0.1], &[false, true]), 0.0);
    assert_eq!(auc(&[0.5, 0.5], &[false, true]), 0.5);
    // The positive 0.5 beats 0.2 and ties 0.5: (1 + 0.5) / 2.
    assert_eq!(auc(&[0.2, 0.5, 0.5], &[false, false, true]), 0.75);
    assert!(router_eval::auc(&[0.3], &[true]).is_none());
    let at = router_eval::at_threshold(&[true, true, false, false], &[true, false, true, false]);
    assert_eq!((at.share, at.precision, at.recall), (0.5, 0.5, 0.5));
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
    let (_, test) = split.router_halves();
    let agrees = common::heldout::top1_agrees(&common::model_dir(HEALED), test);
    let ours = 1.0 - common::heldout::rate(&agrees);
    let theirs = training()["test_divergence_rate"].as_f64().unwrap();
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
