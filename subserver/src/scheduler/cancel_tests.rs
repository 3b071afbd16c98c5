//! A client's cancel at every stage of a routed request: still waiting for
//! admission, mid chunked prefill, pending at a peer, and after it finished.
//! Each must free the request's KV at home and at the peer (the pool whole
//! again, no failed free), and fail only the cancelled request.

use std::time::{Duration, Instant};

use crate::engine::EngineLimits;
use crate::sampling::SamplingParams;
use crate::scheduler::client::RequestError;
use crate::scheduler::group::Group;
use crate::scheduler::stats::StatsSnapshot;

use super::tests::{assert_kv_returned, collect, first_token, group, Opts, HANG};

/// Blocks until `cond` holds for model `m`'s published counters.
fn wait_stats(g: &Group, m: u16, what: &str, cond: impl Fn(&StatsSnapshot) -> bool) {
    let deadline = Instant::now() + HANG;
    loop {
        let s = g.stats(m);
        if cond(&s) {
            return;
        }
        assert!(Instant::now() < deadline, "model {m}: never {what}: {s:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn cancel_while_waiting_for_admission_frees_nothing_it_did_not_hold() {
    // One request per step and every token at the entry: the second request
    // waits (never admitted) while the first generates.
    let g = group(&Opts {
        p: 0.0,
        limits: EngineLimits {
            max_batched_tokens: 256,
            max_batch_size: 1,
        },
        ..Opts::default()
    });
    let (first, mut first_rx) = g.submit(vec![1, 2, 3], SamplingParams::greedy(5000));
    first_token(&mut first_rx);
    let (waiting, mut rx) = g.submit(vec![4, 5, 6], SamplingParams::greedy(10));
    wait_stats(&g, 0, "queued the second request", |s| {
        s.waiting == 1 && s.kv_requests == 1
    });
    g.cancel(waiting);
    let (toks, out) = collect(&mut rx, HANG);
    assert!(toks.is_empty(), "a waiting request wrote {toks:?}");
    assert_eq!(out.unwrap_err(), RequestError::Cancelled);
    wait_stats(&g, 0, "dropped the waiting request", |s| s.waiting == 0);
    // The running request keeps its KV; nothing else was freed or failed.
    let s = g.stats(0);
    assert_eq!((s.kv_requests, s.kv_free_errors, s.failed), (1, 0, 1));
    g.check_invariants(0, HANG).unwrap();
    g.cancel(first);
    assert_eq!(collect(&mut first_rx, HANG).1, Err(RequestError::Cancelled));
    assert_kv_returned(&g);
}

#[test]
fn cancel_mid_chunked_prefill_frees_the_partial_prefill() {
    // 480 prompt tokens in 16-token chunks of 10 ms: 30 steps before the
    // first token, so the cancel lands while the prompt is half computed.
    let g = group(&Opts {
        p: 0.0,
        latencies: [10.0, 3.0],
        limits: EngineLimits {
            max_batched_tokens: 16,
            max_batch_size: 64,
        },
        ..Opts::default()
    });
    let prompt: Vec<u32> = (0..480).map(|i| 1 + i % 900).collect();
    let (rid, mut rx) = g.submit(prompt, SamplingParams::greedy(10));
    wait_stats(&g, 0, "started the prefill", |s| {
        s.steps >= 1 && s.kv_requests == 1 && s.kv_available_blocks < s.kv_blocks
    });
    g.cancel(rid);
    let (toks, out) = collect(&mut rx, HANG);
    assert!(toks.is_empty(), "cancelled mid-prefill, yet wrote {toks:?}");
    assert_eq!(out.unwrap_err(), RequestError::Cancelled);
    assert!(g.stats(0).steps < 30, "the prefill ran to the end");
    assert_kv_returned(&g);
}

#[test]
fn cancel_while_pending_at_a_peer_frees_the_peer_too() {
    // Every token goes to the large model, whose steps take 300 ms: the
    // request sits pending at home while the peer holds it in its KV.
    let g = group(&Opts {
        p: 1.0,
        latencies: [1.0, 300.0],
        peer_timeout: HANG,
        ..Opts::default()
    });
    let (rid, mut rx) = g.submit(vec![1, 2, 3, 4], SamplingParams::greedy(50));
    wait_stats(&g, 0, "handed the request over", |s| s.pending == 1);
    wait_stats(&g, 1, "admitted the request", |s| s.kv_requests == 1);
    g.cancel(rid);
    let (toks, out) = collect(&mut rx, HANG);
    assert!(toks.len() < 50, "ran to the end despite the cancel");
    assert_eq!(out.unwrap_err(), RequestError::Cancelled);
    // Both models: no request, every block back, no failed free.
    assert_kv_returned(&g);
}

#[test]
fn cancel_after_finish_changes_nothing() {
    let g = group(&Opts {
        p: 0.5,
        ..Opts::default()
    });
    let (rid, mut rx) = g.submit(vec![1, 2, 3], SamplingParams::greedy(20));
    collect(&mut rx, HANG).1.unwrap();
    assert_kv_returned(&g);
    g.cancel(rid);
    // The entry handles its inbox in order: once this later request ends,
    // the cancel has been handled.
    let (_, mut rx) = g.submit(vec![4, 5, 6], SamplingParams::greedy(20));
    collect(&mut rx, HANG).1.unwrap();
    assert_kv_returned(&g);
    let s = g.stats(0);
    assert_eq!((s.finished, s.failed), (2, 0), "{s:?}");
    assert_eq!(g.active(), 0);
}
