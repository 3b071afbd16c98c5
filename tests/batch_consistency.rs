//! Greedy decoding is the same batched or alone: requests of different
//! lengths, arriving at different steps, chunked prefill, on real checkpoints.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use subserver::engine::{BatchEngine, EngineLimits};
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::ModelRunner;
use subserver::sampling::SamplingParams;

fn engine(model: &str, limits: EngineLimits) -> BatchEngine<TchRunner> {
    let mut opts = TchRunnerOptions::new(&common::model_dir(model));
    opts.kv_budget = KvBudget::Tokens(4096);
    BatchEngine::new(TchRunner::load(&opts).unwrap(), limits)
}

fn prompts(vocab: u32) -> Vec<Vec<u32>> {
    // Deterministic, distinct prompts of lengths 5..60 (no shared prefix).
    [5usize, 23, 60, 11, 37]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n)
                .map(|i| ((i * 7919 + k * 104_729) as u32) % (vocab - 200) + 100)
                .collect()
        })
        .collect()
}

fn check(model: &str) {
    let params = SamplingParams::greedy(16);
    let vocab = {
        let e = engine(model, EngineLimits::default());
        e.runner().info().vocab_size as u32
    };
    let ps = prompts(vocab);
    let alone: Vec<Vec<u32>> = ps
        .iter()
        .map(|p| {
            let mut e = engine(model, EngineLimits::default());
            e.add(0, p.clone(), &params).unwrap();
            e.run_to_completion().unwrap().remove(0).tokens
        })
        .collect();

    // Small token budget: long prompts prefill in chunks beside running decodes.
    let mut e = engine(
        model,
        EngineLimits {
            max_batched_tokens: 24,
            max_batch_size: 8,
        },
    );
    let mut added = 0;
    let mut step = 0;
    while added < ps.len() || !e.is_idle() {
        if added < ps.len() && step % 3 == 0 {
            e.add(added as u64, ps[added].clone(), &params).unwrap();
            added += 1;
        }
        e.step().unwrap();
        step += 1;
    }
    let mut batched = e.take_finished();
    batched.sort_by_key(|c| c.id);
    for (c, want) in batched.iter().zip(&alone) {
        assert_eq!(
            &c.tokens, want,
            "{model}: request {} differs when batched",
            c.id
        );
    }
    assert_eq!(batched.len(), ps.len());
    let kv = e.runner().kv_ref();
    assert_eq!(kv.num_requests(), 0, "requests left in the KV cache");
    assert_eq!(
        kv.num_available_blocks(),
        kv.num_blocks(),
        "KV blocks leaked"
    );
}

#[test]
fn qwen3_tiny_batched_equals_alone() {
    check("qwen3-tiny");
}

#[test]
fn smollm2_partner_batched_equals_alone() {
    check("smollm2-135m-l12");
}
