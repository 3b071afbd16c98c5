//! The pair `make run` serves (config/default.yaml, built in): the healed
//! 12-layer SmolLM2 exit and the full model under R-Stitch at τ = 0.1. Before healing
//! the exit wrote near-nonsense and the default threshold handed every
//! token to the large model; these tests hold the fix to what a user sees.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use subserver::config::EngineConfig;
use subserver::service::Service;

const HEALED: &str = "smollm2-135m-l12-healed";

/// What the heal must reach on held-out answers (issue 22): below it the
/// exit is wrong too often for any router to keep the large share low.
const MIN_AGREEMENT: f64 = 0.38;

/// Questions in the style users ask, none from the benchmark set.
const QUESTIONS: [&str; 4] = [
    "What is 7 times 8?",
    "Give me two tips to sleep better.",
    "Explain what a noun is in one sentence.",
    "A bag has 12 red and 9 blue marbles. How many marbles are in the bag?",
];

#[test]
fn the_default_pair_is_the_healed_exit_and_the_full_model() {
    let cfg = EngineConfig::embedded_default().unwrap();
    let paths: Vec<_> = cfg
        .models()
        .iter()
        .map(|m| m.path.clone().unwrap())
        .collect();
    assert!(
        paths[0].ends_with(HEALED),
        "quick model: {}",
        paths[0].display()
    );
    assert!(paths[1].ends_with("smollm2-135m"));
    // R-Stitch's entropy switch at a fixed threshold: a live one (steered
    // by target_large_share) would make a seeded request's answer drift.
    assert_eq!(cfg.policy().name.to_string(), "RStitch");
    assert_eq!(cfg.policy().kwargs["threshold"], 0.1);
    assert_eq!(cfg.target_large_share(), None);
}

#[test]
fn healing_raised_the_exits_agreement_with_the_full_model() {
    // heal.json is what the distillation measured on held-out answers.
    let text = std::fs::read_to_string(common::model_dir(HEALED).join("heal.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let agreement = |at: &str| report[at]["top1_agreement"].as_f64().unwrap();
    let (before, after) = (agreement("held_out_before"), agreement("held_out_after"));
    assert!(
        after > before + 0.1,
        "healing did not help: top-1 agreement {before:.3} -> {after:.3}"
    );
    assert!(
        after >= MIN_AGREEMENT,
        "the healed exit agrees with the full model on {after:.3} of held-out tokens, \
         below {MIN_AGREEMENT}"
    );
}

/// How far our engine's held-out agreement may sit from heal.json's: the
/// heal scores with transformers in its training dtype against the
/// teacher's top-1 of its own forward, we score in f32 against the answer
/// tokens our engine wrote, so near-ties may fall either way.
const AGREEMENT_TOLERANCE: f64 = 0.05;

#[test]
fn our_engine_reproduces_the_heals_held_out_agreement() {
    // Recomputed, not read: every held-out answer (48 prompts, one batch),
    // our engine's greedy top-1 of the healed exit against the teacher's
    // token at each answer position. The split is checked for leaks.
    let split = common::heldout::split();
    let agrees = common::heldout::top1_agrees(&common::model_dir(HEALED), &split.holdout);
    let ours = common::heldout::rate(&agrees);
    let text = std::fs::read_to_string(common::model_dir(HEALED).join("heal.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let theirs = report["held_out_after"]["top1_agreement"].as_f64().unwrap();
    assert!(
        (ours - theirs).abs() <= AGREEMENT_TOLERANCE,
        "held-out top-1 agreement: ours {ours:.3}, heal.json {theirs:.3}"
    );
    assert!(
        ours >= MIN_AGREEMENT,
        "the healed exit agrees with the full model on {ours:.3} of held-out tokens (our \
         engine), below {MIN_AGREEMENT}"
    );
}

#[test]
fn the_default_group_routes_between_both_models() {
    common::model_dir(HEALED);
    let cfg = EngineConfig::embedded_default().unwrap();
    let service = Service::start(&cfg, None).unwrap();
    let runs = common::greedy_routed(
        service.group(),
        common::chat_prompts(HEALED, &QUESTIONS),
        48,
    );
    let mut by_model = [0usize; 2];
    for (toks, writers, usage) in &runs {
        common::check_accounting(toks, writers, usage);
        for (total, n) in by_model.iter_mut().zip(&usage.tokens_by_model) {
            *total += n;
        }
    }
    // Both models write: the small one is trusted where it is sure and the
    // large one takes the positions where it is not.
    assert!(
        by_model[0] > 0,
        "the healed exit wrote nothing: {by_model:?}"
    );
    assert!(
        by_model[1] > 0,
        "the full model wrote nothing: {by_model:?}"
    );
}
