//! The real SmolLM2-135M-Instruct Q4_1 GGUF served on its blocks (CPU,
//! `dtype: auto`: `kernels::quant`) against the same file dequantized to
//! bf16: greedy answers to held-out prompts (the first questions of
//! `data/eval/math30.jsonl`), all prompts in one ragged batch, and the
//! logits while both answers agree.
//!
//! Both runs use the same weights (the file's); they differ in how a
//! projection is computed: int8 activations per block of 32 against the
//! blocks (llama.cpp's Q8_0/Q8_1 activations for these types: an error of
//! up to `max|x_b| / 254` per activation, large next to bf16's `2^-9`
//! relative for the small values of a block that holds one of SmolLM2's
//! outlier activations) against bf16 weights and f32 sums. So the answers
//! part sooner than bf16 and f32 do (`tests/bf16_parity.rs`: 91%, 0.70).
//! Measured on 2026-12-07 (AVX-512 VNNI EPYC): 275 of 384 tokens (71.6%)
//! before the first divergence, max logit difference 1.50 over those
//! steps. The guards sit below that; a wrong block layout, row order or
//! scale shares next to nothing and moves logits by far more.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;

use common::greedy::{agreement, greedy, math_prompts, Answer};
use subserver::assets::gguf::{import_gguf, ImportOptions};
use subserver::config::DType;
use subserver::runner::tch_runner::TchRunnerOptions;

const PROMPTS: usize = 12;
const STEPS: usize = 32;
/// The share of tokens before the first divergence the quantized path
/// must keep (measured 0.716, see above).
const MIN_SHARED: f64 = 0.60;
/// Largest logit difference tolerated on the shared steps (measured 1.50).
const MAX_LOGIT_DIFF: f32 = 2.0;

/// Greedy answers of every prompt in bf16, projections on the GGUF's
/// blocks or dequantized, and the runner's precision.
fn run(model: &Path, quantized: bool, prompts: &[Vec<u32>]) -> (Vec<Answer>, String) {
    let mut opts = TchRunnerOptions::new(model);
    opts.dtype = DType::Bf16;
    opts.keep_quantized = quantized;
    greedy(opts, prompts, STEPS)
}

#[test]
fn smollm2_on_its_q4_1_blocks_follows_the_dequantized_model() {
    let gguf = common::assets::asset("assets/SmolLM2-135M-Instruct.Q4_1.gguf");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("smollm2-q4_1");
    let opts = ImportOptions {
        link: true,
        ..ImportOptions::default()
    };
    import_gguf(&gguf, &dir, &opts).unwrap();
    let prompts = math_prompts(&dir, PROMPTS);
    let (deq, p_deq) = run(&dir, false, &prompts);
    let (quant, p_quant) = run(&dir, true, &prompts);
    assert_eq!(p_deq, "bf16");
    // 30 layers of q, k, v, o, gate, up, down in Q4_1; the tied head
    // (token_embd) in Q8_0.
    assert_eq!(p_quant, "Q4_1 (210), Q8_0 (1); rest bf16");
    let (shared, total, max_diff) = agreement(&deq, &quant, STEPS);
    let share = shared as f64 / total as f64;
    println!(
        "quantized vs dequantized bf16: {shared}/{total} tokens ({:.1}%) before the first \
         divergence; max |logit difference| over those steps {max_diff:.3}",
        100.0 * share
    );
    assert!(
        share >= MIN_SHARED,
        "only {:.1}% of tokens before the first divergence (>= {:.0}% expected)",
        100.0 * share,
        100.0 * MIN_SHARED
    );
    assert!(
        max_diff <= MAX_LOGIT_DIFF,
        "logits differ by {max_diff} (> {MAX_LOGIT_DIFF}) before any divergence"
    );
}
