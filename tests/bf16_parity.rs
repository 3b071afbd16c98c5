//! bf16 against f32 on the real SmolLM2-135M-Instruct, CPU: greedy answers
//! to held-out prompts (the first questions of `data/eval/math30.jsonl`,
//! never used to tune anything), all prompts in one ragged batch. Prints
//! the share of tokens each bf16 answer shares with the f32 one before
//! they first differ, the largest logit difference over those shared
//! steps, and the verdict on issue 22's target (95%).
//!
//! The target is not met, and cannot be by a bf16 model: on 2026-12-04,
//! with the residual stream and re-scored top logits in f32
//! (`subserver::model::head`), 699 of 768 tokens (91.0%) came before the
//! first divergence, max logit difference 0.70 (all-bf16 arithmetic: 69.1%
//! on the first 8 prompts, 0.80). f32 arithmetic on bf16-rounded weights,
//! with no activation rounded at all, shares 94.7% on the same prompts
//! (`tests/python/bf16_ceiling.py`): rounding the weights alone flips
//! greedy choices between near-tied tokens, and an answer follows its own
//! path from there. The assertions guard the measured level, so a
//! regression of the bf16 path (a wrong cast, a broken kernel) fails here.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;

use common::greedy::{agreement, greedy, math_prompts, Answer};
use subserver::config::DType;
use subserver::runner::tch_runner::TchRunnerOptions;

const PROMPTS: usize = 24;
const STEPS: usize = 32;
/// Issue 22's target for the share before the first divergence.
const TARGET_SHARED: f64 = 0.95;
/// What the bf16 path must keep: measured 0.910 on an AVX512-BF16 EPYC and
/// 0.775 on an AMX Xeon (2026-12-05: oneDNN's AMX kernels, 3 of 24 answers
/// differ from their first token), so the guard sits below both; a broken
/// cast or kernel shares next to nothing.
const MIN_SHARED: f64 = 0.70;
/// Largest logit difference tolerated on the shared steps (measured 0.70
/// on the EPYC, 0.62 on the Xeon).
const MAX_LOGIT_DIFF: f32 = 1.0;

/// Greedy answers of every prompt in `dtype`.
fn run(model: &Path, dtype: DType, prompts: &[Vec<u32>]) -> Vec<Answer> {
    let mut opts = TchRunnerOptions::new(model);
    opts.dtype = dtype;
    greedy(opts, prompts, STEPS).0
}

#[test]
fn bf16_greedy_answers_follow_f32() {
    let model = common::model_dir("smollm2-135m");
    let prompts = math_prompts(&model, PROMPTS);
    let f32_out = run(&model, DType::F32, &prompts);
    let bf16_out = run(&model, DType::Bf16, &prompts);
    let (shared, total, max_diff) = agreement(&f32_out, &bf16_out, STEPS);
    let share = shared as f64 / total as f64;
    println!(
        "bf16 vs f32: {shared}/{total} tokens ({:.1}%) before the first divergence; \
         max |logit difference| over those steps {max_diff:.3}; issue 22 target ({:.0}%): {}",
        100.0 * share,
        100.0 * TARGET_SHARED,
        if share >= TARGET_SHARED {
            "met"
        } else {
            "not met"
        }
    );
    assert!(
        share >= MIN_SHARED,
        "only {:.1}% of bf16 tokens before the first divergence (the bf16 path keeps >= {:.0}%)",
        100.0 * share,
        100.0 * MIN_SHARED
    );
    assert!(
        max_diff <= MAX_LOGIT_DIFF,
        "bf16 logits differ from f32 by {max_diff} (> {MAX_LOGIT_DIFF}) before any divergence"
    );
}
