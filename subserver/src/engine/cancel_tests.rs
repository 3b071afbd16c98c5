//! `BatchEngine::cancel` at every stage of a request: still queued, mid
//! chunked prefill, decoding, and after it finished. Each must leave the KV
//! pool whole (every block free or cached, no request registered) and no
//! failed free behind.

use super::{BatchEngine, EngineLimits};
use crate::config::LatencyModel;
use crate::runner::sim::SimRunner;
use crate::runner::ModelRunner;
use crate::sampling::SamplingParams;

/// An engine over the sim backend: 64 blocks of 16 slots, no step time.
fn engine(limits: EngineLimits) -> BatchEngine<SimRunner> {
    let runner = SimRunner::new(
        "sim",
        1000,
        vec![0],
        Box::new(LatencyModel::linear(0.0, 0.0, 0.0).unwrap()),
        1024,
        16,
        7,
    )
    .unwrap()
    .with_logits(true);
    BatchEngine::new(runner, limits)
}

/// (registered requests, available blocks, failed frees) of the pool.
fn kv(e: &BatchEngine<SimRunner>) -> (usize, usize, u64) {
    let kv = e.runner().kv_ref();
    (
        kv.num_requests(),
        kv.num_available_blocks(),
        kv.free_errors(),
    )
}

/// The pool holds nothing: every block is free or cached, no request
/// is registered, and no free failed.
fn assert_pool_whole(e: &BatchEngine<SimRunner>) {
    let kv_ref = e.runner().kv_ref();
    kv_ref.check_consistency().unwrap();
    assert_eq!(kv(e), (0, kv_ref.num_blocks(), 0));
}

fn prompt(n: usize, first: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 1 + (first + i) % 900).collect()
}

#[test]
fn cancel_while_waiting_drops_the_request_and_holds_no_kv() {
    // One request per step: the second waits while the first runs.
    let mut e = engine(EngineLimits {
        max_batched_tokens: 256,
        max_batch_size: 1,
    });
    e.add(1, prompt(20, 0), &SamplingParams::greedy(8)).unwrap();
    e.add(2, prompt(20, 500), &SamplingParams::greedy(8))
        .unwrap();
    e.step().unwrap();
    assert_eq!(e.waiting.len(), 1, "request 2 must still be queued");
    let before = kv(&e);
    assert_eq!(before.0, 1, "only request 1 holds KV");
    assert!(e.cancel(2));
    // Cancelling a queued request touches no KV.
    assert_eq!(kv(&e), before);
    assert!(!e.cancel(2), "a cancelled request is gone");
    let done = e.run_to_completion().unwrap();
    assert_eq!(done.iter().map(|c| c.id).collect::<Vec<_>>(), vec![1]);
    assert_pool_whole(&e);
}

#[test]
fn cancel_mid_chunked_prefill_frees_its_blocks() {
    // A 200-token prompt in 16-token chunks: many steps before its first token.
    let mut e = engine(EngineLimits {
        max_batched_tokens: 16,
        max_batch_size: 8,
    });
    e.add(1, prompt(200, 3), &SamplingParams::greedy(8))
        .unwrap();
    for _ in 0..3 {
        assert!(e.step().unwrap().is_empty(), "no token mid-prefill");
    }
    let (requests, available, _) = kv(&e);
    assert_eq!(requests, 1);
    assert!(
        available < e.runner().kv_ref().num_blocks(),
        "the prefill holds blocks"
    );
    assert!(e.cancel(1));
    assert_pool_whole(&e);
    assert!(e.is_idle());
    assert!(e.take_finished().is_empty());
}

#[test]
fn cancel_while_decoding_frees_only_that_request() {
    let mut e = engine(EngineLimits::default());
    e.add(1, prompt(40, 0), &SamplingParams::greedy(50))
        .unwrap();
    e.add(2, prompt(40, 300), &SamplingParams::greedy(50))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(e.step().unwrap().len(), 2);
    }
    assert!(e.cancel(1));
    assert_eq!(kv(&e).0, 1, "request 2 keeps its KV");
    let done = e.run_to_completion().unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].id, done[0].tokens.len()), (2, 50));
    assert_pool_whole(&e);
}

#[test]
fn cancel_after_finish_is_a_no_op() {
    let mut e = engine(EngineLimits::default());
    e.add(1, prompt(30, 0), &SamplingParams::greedy(4)).unwrap();
    let done = e.run_to_completion().unwrap();
    assert_eq!(done.len(), 1);
    let before = kv(&e);
    // Finished: its blocks went to the prefix cache; a cancel must not
    // free them again (that would be a double free, counted).
    assert!(!e.cancel(1));
    assert_eq!(kv(&e), before);
    assert_pool_whole(&e);
}
