//! Preemption under KV pressure on the real SmolLM2 pair (the first 12
//! layers as `quick`, all 30 as `reference`), built from YAML as `serve`
//! builds it. The pools are sized in the config so that the pressure follows
//! from counting blocks, not from timing: the requests cannot all hold their
//! KV at once, so the schedulers must preempt (the Prometheus counter
//! `tokenrouter_num_preemptions_total` moves), recompute, and still produce
//! exactly the greedy output an unpressured group produces: the same tokens,
//! the same writers, the same length.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use subserver::config::EngineConfig;
use subserver::sampling::SamplingParams;
use subserver::scheduler::client::Usage;
use subserver::service::Service;
use test_support::HANG;

/// Token slots per KV block (the config's `block_size`).
const BLOCK: usize = 16;
/// A pool that never runs short for these requests.
const ROOMY: usize = 4096;

/// The pair under `Random` routing with probability `p` of the large model,
/// every model with a pool of `kv_tokens` tokens.
fn service(kv_tokens: usize, p: f64) -> Service {
    let yaml = format!(
        "model:\n  quick: {{path: {}}}\n  reference: {{path: {}}}\n\
         system: {{entry_model: quick, kv_cache_tokens: {kv_tokens}, block_size: {BLOCK}}}\n\
         scheduler_class: Random\nscheduler_kwargs: {{probability: {p}, seed: 5}}\n\
         backend: tch\ndevice: cpu\ndtype: f32\n",
        common::model_dir("smollm2-135m-l12").display(),
        common::model_dir("smollm2-135m").display(),
    );
    let cfg = EngineConfig::from_yaml_str(&yaml, Path::new(".")).unwrap();
    Service::start(&cfg, None).unwrap()
}

/// `tokenrouter_num_preemptions_total{model}` as the service exports it.
fn preemptions(svc: &Service, model: &str) -> u64 {
    let name = subserver::metrics::names::NUM_PREEMPTIONS_TOTAL;
    svc.registry()
        .gather()
        .iter()
        .filter(|f| f.name() == name)
        .flat_map(|f| f.get_metric())
        .filter(|m| {
            m.get_label()
                .iter()
                .any(|l| l.name() == "model" && l.value() == model)
        })
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

/// Distinct prompts of `len` tokens (no shared prefix, so the prefix cache
/// cannot hide a recomputation).
fn prompts(count: usize, len: usize) -> Vec<Vec<u32>> {
    (0..count)
        .map(|k| {
            (0..len)
                .map(|i| ((i * 7919 + k * 104_729 + 17) % 40_000) as u32 + 100)
                .collect()
        })
        .collect()
}

/// Submits every prompt at once (greedy, `n` tokens, a fixed seed per
/// request so routing draws do not depend on request ids) and collects
/// (tokens, writers, usage) of each.
fn run(svc: &Service, prompts: &[Vec<u32>], n: usize) -> Vec<(Vec<u32>, Vec<u16>, Usage)> {
    let rxs: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let mut params = SamplingParams::greedy(n);
            params.ignore_eos = true;
            params.seed = Some(1000 + k as u64);
            svc.group().submit(p.clone(), params).1
        })
        .collect();
    rxs.into_iter()
        .map(|mut rx| common::collect_stream(&mut rx))
        .collect()
}

/// Waits until every model holds no request and every block is free again.
fn assert_all_blocks_free(svc: &Service) {
    let g = svc.group();
    let deadline = Instant::now() + HANG;
    loop {
        let idle = (0..2).all(|m| {
            let s = g.stats(m);
            s.kv_requests == 0
                && s.kv_blocks > 0
                && s.kv_available_blocks == s.kv_blocks
                && s.running + s.waiting + s.pending == 0
        });
        if idle {
            for m in 0..2 {
                g.check_invariants(m, HANG).unwrap();
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "KV not returned: {:?} / {:?}",
            g.stats(0),
            g.stats(1)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `prompts` on a roomy group and on a pressured one; the outputs must
/// be identical, the roomy group must never preempt. Returns the pressured
/// group's preemptions by model (`quick`, `reference`).
fn compare(kv_tokens: usize, p: f64, prompts: &[Vec<u32>], n: usize) -> (u64, u64) {
    let roomy = service(ROOMY, p);
    let want = run(&roomy, prompts, n);
    assert_eq!(
        preemptions(&roomy, "quick") + preemptions(&roomy, "reference"),
        0
    );
    drop(roomy);

    let tight = service(kv_tokens, p);
    let got = run(&tight, prompts, n);
    for (k, ((toks, writers, usage), (want_toks, want_writers, want_usage))) in
        got.iter().zip(&want).enumerate()
    {
        common::check_accounting(toks, writers, usage);
        assert_eq!(toks.len(), n, "request {k} stopped early");
        assert_eq!(
            toks, want_toks,
            "request {k}: tokens differ under KV pressure"
        );
        assert_eq!(
            writers, want_writers,
            "request {k}: writers differ under KV pressure"
        );
        assert_eq!(usage.tokens_by_model, want_usage.tokens_by_model);
    }
    assert_all_blocks_free(&tight);
    let counts = (
        preemptions(&tight, "quick"),
        preemptions(&tight, "reference"),
    );
    let writers: Vec<usize> = (0..2)
        .map(|m| got.iter().map(|r| r.2.tokens_by_model[m]).sum())
        .collect();
    eprintln!(
        "pool {kv_tokens} tokens, p = {p}: preemptions quick {} reference {}; tokens by model {writers:?}",
        counts.0, counts.1
    );
    counts
}

#[test]
fn running_requests_are_preempted_and_resume_with_the_same_greedy_output() {
    // Every token on `quick` (p = 0), so nothing is ever pending: each
    // preemption is of a running request. 4 requests grow from 8 to 8 + 40
    // tokens (1 block to 3 blocks each, 12 blocks together); the pool holds
    // 6 blocks, so they outgrow it while all of them are decoding.
    let (n, len) = (40, 8);
    let (quick, reference) = compare(6 * BLOCK, 0.0, &prompts(4, len), n);
    assert!(quick > 0, "no running request was preempted");
    assert_eq!(reference, 0, "the large model never ran");
}

#[test]
fn pending_requests_are_preempted_at_home_and_resume_with_the_same_greedy_output() {
    // Two requests of 40 prompt tokens (3 blocks each) and a pool of 4
    // blocks per model: only one of them can hold its KV on a model at a
    // time. The younger waits at home until the older is handed to
    // `reference`; then the only KV to take is the older one's, kept while
    // it is pending at home, and it is preempted (the victim rule takes
    // running requests first, but the other request is the one being
    // planned). It resumes by recomputing when the pen comes back. The same
    // happens on `reference` to the guest whose pen went home.
    let (n, len) = (20, 40);
    assert!(len + n <= 4 * BLOCK && 2 * len.div_ceil(BLOCK) > 4);
    let (quick, reference) = compare(4 * BLOCK, 0.5, &prompts(2, len), n);
    assert!(quick > 0, "no pending request was preempted at home");
    assert!(
        reference > 0,
        "no pending guest was preempted on the large model"
    );
}
