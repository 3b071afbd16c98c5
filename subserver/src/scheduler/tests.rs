//! Scheduler tests on the simulated backend: real threads, real clock, real
//! KV bookkeeping; only the model math is absent.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::config::LatencyModel;
use crate::engine::EngineLimits;
use crate::runner::sim::SimRunner;
use crate::sampling::{FinishReason, SamplingParams};
use crate::scheduler::batching::ExecutionMode;
use crate::scheduler::client::{RequestError, StreamEvent, SubmitOptions, Usage};
use crate::scheduler::group::{Group, GroupSettings, MemberSpec};
use policies::{build_in, LiveThreshold, Placement, PolicyEnv};

// Deadline of every wait (test-support's): only a hang reaches it.
pub(super) use test_support::HANG;

pub(super) struct Opts {
    pub(super) latencies: [f64; 2],
    pub(super) p: f64,
    pub(super) thresholds: [usize; 2],
    pub(super) mode: ExecutionMode,
    pub(super) fallback: bool,
    pub(super) peer_timeout: Duration,
    pub(super) kv_tokens: usize,
    /// Step budgets of both models.
    pub(super) limits: EngineLimits,
    /// Sim runners return random logits (the scheduler samples).
    pub(super) logits: bool,
    /// Vocabulary of the sim runners (token 0 is their EOS).
    pub(super) vocab: usize,
    /// The sim runners draw their EOS like any token.
    pub(super) emit_eos: bool,
    pub(super) target_large_share: Option<f64>,
    pub(super) max_batch_wait: Duration,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            latencies: [1.0, 3.0],
            p: 0.35,
            thresholds: [1, 1],
            mode: ExecutionMode::AsyncDelayed,
            fallback: false,
            peer_timeout: Duration::from_secs(10),
            kv_tokens: 64 * 1024,
            logits: false,
            vocab: 1000,
            emit_eos: false,
            target_large_share: None,
            max_batch_wait: Duration::from_millis(20),
            limits: EngineLimits {
                max_batched_tokens: 256,
                max_batch_size: 64,
            },
        }
    }
}

pub(super) fn group(o: &Opts) -> Group {
    let kwargs = serde_json::json!({"probability": o.p, "seed": 11, "target": 1});
    let env = PolicyEnv {
        threshold: Some(LiveThreshold::new(o.p)),
        ..PolicyEnv::default()
    };
    let members = (0..2u16)
        .map(|m| MemberSpec {
            name: ["small", "large"][m as usize].into(),
            runner: Box::new(
                SimRunner::new(
                    "sim",
                    o.vocab,
                    vec![0],
                    Box::new(LatencyModel::linear(o.latencies[m as usize], 0.0, 0.0).unwrap()),
                    o.kv_tokens,
                    16,
                    m as u64,
                )
                .unwrap()
                .with_logits(o.logits)
                .with_eos_emitted(o.emit_eos),
            ),
            policy: build_in(
                "Random",
                &kwargs,
                Placement {
                    model: m,
                    num_models: 2,
                    entry: 0,
                },
                &env,
            )
            .unwrap(),
            tokenizer: None,
            thresholds: vec![o.thresholds[m as usize]],
        })
        .collect();
    let settings = GroupSettings {
        mode: o.mode,
        fallback_on_peer_failure: o.fallback,
        peer_timeout: o.peer_timeout,
        max_batch_wait: o.max_batch_wait,
        limits: o.limits,
        target_large_share: o.target_large_share,
        ..GroupSettings::default()
    };
    Group::start(members, settings)
}

/// Waits for the end of a request; returns its tokens (with writers) and outcome.
pub(super) fn collect(
    rx: &mut UnboundedReceiver<StreamEvent>,
    limit: Duration,
) -> (Vec<(u32, u16)>, Result<Usage, RequestError>) {
    // `limit` is what the caller expects; the wait itself only catches hangs.
    let limit = limit.max(HANG);
    let deadline = Instant::now() + limit;
    let mut toks = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "request did not end within {limit:?}");
        match rx.try_recv() {
            Ok(StreamEvent::Token { token, writer, .. }) => toks.push((token, writer)),
            Ok(StreamEvent::Finished { usage, reason, .. }) => {
                assert_eq!(reason, FinishReason::Length);
                return (toks, Ok(usage));
            }
            Ok(StreamEvent::Failed(e)) => return (toks, Err(e)),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Every model has freed every block once the group is idle.
pub(super) fn assert_kv_returned(g: &Group) {
    let deadline = Instant::now() + HANG;
    loop {
        let ok = (0..2).all(|m| {
            let s = g.stats(m);
            assert_eq!(s.kv_free_errors, 0, "a KV free failed at model {m}");
            s.kv_requests == 0 && s.kv_available_blocks == s.kv_blocks && s.kv_blocks > 0
        });
        if ok {
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
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `n` requests to the end; returns each model's counters.
fn run_concurrency(n: usize, o: &Opts) -> [crate::scheduler::stats::StatsSnapshot; 2] {
    let g = group(o);
    let max_tokens = 24;
    let rxs: Vec<_> = (0..n)
        .map(|i| {
            let mut params = SamplingParams::greedy(max_tokens);
            params.seed = Some(i as u64);
            g.submit(vec![1 + i as u32, 2, 3, 4, 5], params).1
        })
        .collect();
    let mut large = 0;
    for mut rx in rxs {
        let (toks, usage) = collect(&mut rx, Duration::from_secs(30));
        let usage = usage.unwrap();
        assert_eq!(toks.len(), max_tokens);
        assert_eq!(usage.completion_tokens, max_tokens);
        assert_eq!(
            usage.tokens_by_model.iter().sum::<usize>(),
            max_tokens,
            "every token has one writer"
        );
        for m in 0..2u16 {
            assert_eq!(
                usage.tokens_by_model[m as usize],
                toks.iter().filter(|t| t.1 == m).count()
            );
        }
        large += usage.tokens_by_model[1];
    }
    if o.p > 0.0 && n >= 4 {
        assert!(large > 0, "the large model never wrote");
    }
    assert_kv_returned(&g);
    assert_eq!(g.active(), 0);
    [g.stats(0), g.stats(1)]
}

/// With thresholds no larger than the concurrency and B = 1 at the entry,
/// a parked model always gets its B (the tuner's chain assumes exactly
/// that), so no step may start below B. The deadlock breaker used to fire
/// whenever the small model was between two steps, and the large model
/// started early (mean batch 4.8 instead of the chain's 5.57 at N=8).
#[test]
fn delayed_batching_never_starts_below_b_when_b_is_reachable() {
    for (n, b) in [(8, 5), (4, 3), (16, 10)] {
        let stats = run_concurrency(
            n,
            &Opts {
                thresholds: [1, b],
                max_batch_wait: HANG,
                ..Opts::default()
            },
        );
        assert!(stats[1].steps > 0);
        assert_eq!(
            [stats[0].early_starts, stats[1].early_starts],
            [0, 0],
            "N={n}, B=[1, {b}]"
        );
    }
}

#[test]
fn concurrency_1_to_64_completes_with_exact_accounting() {
    for n in [1, 2, 8, 64] {
        run_concurrency(
            n,
            &Opts {
                thresholds: [1, 2],
                ..Opts::default()
            },
        );
    }
}

#[test]
fn every_mode_completes() {
    for mode in [
        ExecutionMode::Async,
        ExecutionMode::Lockstep,
        ExecutionMode::Serial,
    ] {
        run_concurrency(
            8,
            &Opts {
                mode,
                ..Opts::default()
            },
        );
    }
}

#[test]
fn thresholds_that_would_park_every_model_never_deadlock() {
    // B = 8 at both models: with 4 requests split between them neither
    // reaches B; the group-quiet rule and the wait bound must start steps.
    run_concurrency(
        4,
        &Opts {
            thresholds: [8, 8],
            ..Opts::default()
        },
    );
    // The deadlock breaker alone (no wait bound) must start them.
    let stats = run_concurrency(
        3,
        &Opts {
            thresholds: [3, 3],
            p: 0.5,
            max_batch_wait: HANG,
            ..Opts::default()
        },
    );
    assert!(stats[0].early_starts + stats[1].early_starts > 0);
}

#[test]
fn routing_probability_zero_and_one() {
    let g = group(&Opts {
        p: 0.0,
        ..Opts::default()
    });
    let (_, u) = collect(
        &mut g.submit(vec![1, 2, 3], SamplingParams::greedy(10)).1,
        Duration::from_secs(10),
    );
    assert_eq!(u.unwrap().tokens_by_model, vec![10, 0]);
    let g = group(&Opts {
        p: 1.0,
        ..Opts::default()
    });
    let (_, u) = collect(
        &mut g.submit(vec![1, 2, 3], SamplingParams::greedy(10)).1,
        Duration::from_secs(10),
    );
    let u = u.unwrap();
    assert_eq!(u.tokens_by_model, vec![0, 10]);
    assert_eq!(u.switches, 0);
}

/// Blocks until the request streams its first token (or ends).
pub(super) fn first_token(rx: &mut UnboundedReceiver<StreamEvent>) {
    let deadline = Instant::now() + HANG;
    loop {
        assert!(Instant::now() < deadline, "no token arrived");
        match rx.try_recv() {
            Ok(StreamEvent::Token { .. }) => return,
            Ok(other) => panic!("ended before its first token: {other:?}"),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

#[test]
fn cancellation_frees_every_model() {
    let g = group(&Opts {
        p: 0.5,
        ..Opts::default()
    });
    let mut subs: Vec<_> = (0..6)
        .map(|i| g.submit(vec![i + 1, 9, 9], SamplingParams::greedy(5000)))
        .collect();
    // Cancel once every request is generating (its first token arrived).
    for (_, rx) in &mut subs {
        first_token(rx);
    }
    for (rid, _) in &subs {
        g.cancel(*rid);
    }
    for (_, mut rx) in subs {
        let (toks, out) = collect(&mut rx, HANG);
        assert!(toks.len() < 5000, "ran to the end despite the cancel");
        assert_eq!(out.unwrap_err(), RequestError::Cancelled);
    }
    assert_kv_returned(&g);
}

#[test]
fn thresholds_replaced_at_run_time_drop_nothing() {
    let g = group(&Opts {
        thresholds: [1, 4],
        ..Opts::default()
    });
    let mut rxs: Vec<_> = (0..8)
        .map(|i| g.submit(vec![i + 1], SamplingParams::greedy(40)).1)
        .collect();
    // Replaced while the requests run (the first one is generating).
    first_token(&mut rxs[0]);
    g.set_thresholds(1, vec![1, 2, 3]);
    g.set_thresholds(0, vec![2]);
    for mut rx in rxs {
        assert!(collect(&mut rx, Duration::from_secs(20)).1.is_ok());
    }
    assert_eq!(g.stats(0).threshold_table, vec![2]);
    assert_eq!(g.stats(1).threshold_table, vec![1, 2, 3]);
}

#[test]
fn a_slow_peer_fails_requests_within_the_timeout() {
    let o = Opts {
        latencies: [1.0, 2000.0],
        p: 1.0,
        peer_timeout: Duration::from_millis(150),
        ..Opts::default()
    };
    let g = group(&o);
    // Each step of the peer takes 2 s and every token goes to it: only the
    // 150 ms peer timeout can end the request before 10 steps (20 s) passed,
    // so a PeerFailed outcome is the timeout firing (no clock is read).
    let (toks, out) = collect(
        &mut g.submit(vec![1, 2], SamplingParams::greedy(10)).1,
        Duration::from_secs(5),
    );
    assert!(
        matches!(out, Err(RequestError::PeerFailed { model: 1, .. })),
        "{out:?}"
    );
    assert!(toks.len() < 10, "{toks:?}");
}

/// Blocks until model `m`'s scheduler thread has ended.
fn wait_stopped(g: &Group, m: u16) {
    let deadline = Instant::now() + HANG;
    while g.is_alive(m) {
        assert!(Instant::now() < deadline, "model {m} did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_gone_peer_fails_or_falls_back() {
    let g = group(&Opts {
        p: 0.5,
        ..Opts::default()
    });
    g.stop_model(1);
    wait_stopped(&g, 1);
    let (_, out) = collect(
        &mut g.submit(vec![1, 2], SamplingParams::greedy(50)).1,
        Duration::from_secs(5),
    );
    assert!(
        matches!(out, Err(RequestError::PeerFailed { model: 1, .. })),
        "{out:?}"
    );

    let g = group(&Opts {
        p: 0.5,
        fallback: true,
        ..Opts::default()
    });
    g.stop_model(1);
    wait_stopped(&g, 1);
    let (toks, out) = collect(
        &mut g.submit(vec![1, 2], SamplingParams::greedy(50)).1,
        Duration::from_secs(5),
    );
    let usage = out.unwrap();
    assert_eq!(toks.len(), 50);
    assert_eq!(usage.tokens_by_model, vec![50, 0]);
    // Marked: once in the request's usage, once in the home's counters.
    assert_eq!(usage.peer_fallbacks, 1);
    assert_eq!(g.stats(0).peer_fallbacks, vec![0, 1]);
}

#[test]
fn invalid_requests_fail_fast_and_hold_nothing() {
    let g = group(&Opts::default());
    let (_, out) = collect(
        &mut g.submit(vec![], SamplingParams::greedy(5)).1,
        Duration::from_secs(2),
    );
    assert_eq!(out.unwrap_err(), RequestError::EmptyPrompt);
    let (_, out) = collect(
        &mut g.submit(vec![5000], SamplingParams::greedy(5)).1,
        Duration::from_secs(2),
    );
    assert!(matches!(
        out,
        Err(RequestError::TokenOutOfVocab { token: 5000, .. })
    ));
    // A max_tokens near the integer limit fails the context check instead
    // of wrapping around it.
    for max_tokens in [usize::MAX, usize::MAX - 1] {
        let (_, out) = collect(
            &mut g.submit(vec![1, 2], SamplingParams::greedy(max_tokens)).1,
            Duration::from_secs(2),
        );
        assert!(
            matches!(&out, Err(RequestError::ContextExceeded { .. }))
                || matches!(&out, Err(RequestError::Sampling(e)) if e.field == "max_tokens"),
            "{out:?}"
        );
    }
    let mut stop = SamplingParams::greedy(5);
    stop.stop = vec!["x".into()];
    let (_, out) = collect(&mut g.submit(vec![1], stop).1, Duration::from_secs(2));
    assert_eq!(out.unwrap_err(), RequestError::StopNeedsTokenizer);
    assert_kv_returned(&g);
}

#[test]
fn memory_pressure_preempts_instead_of_failing() {
    // 32 requests x (5 prompt + 24 output) positions need two 16-token
    // blocks each, 64 in all; the pool has 512 slots, 32 blocks. Every
    // request fits in one block when admitted, so the pool fills before the
    // requests cross into their second block: some must be preempted, and
    // every one must still finish (run_concurrency checks each answer).
    let o = Opts {
        kv_tokens: 512,
        ..Opts::default()
    };
    let stats = run_concurrency(32, &o);
    let preempted: u64 = stats.iter().map(|s| s.preemptions).sum();
    assert!(preempted > 0, "no preemption under memory pressure");
    assert!(stats.iter().all(|s| s.failed == 0));
}

/// Every event of one request: (token, writer, logprobs) and the outcome.
type Events = (
    Vec<(u32, u16, Option<crate::sampling::TokenLogprobs>)>,
    Result<Usage, RequestError>,
);

fn events(rx: &mut UnboundedReceiver<StreamEvent>) -> Events {
    let mut toks = Vec::new();
    loop {
        match rx.blocking_recv().expect("stream ended without an outcome") {
            StreamEvent::Token {
                token,
                writer,
                logprobs,
                ..
            } => toks.push((token, writer, logprobs)),
            StreamEvent::Finished { usage, .. } => return (toks, Ok(usage)),
            StreamEvent::Failed(e) => return (toks, Err(e)),
        }
    }
}

#[test]
fn pinned_requests_are_written_by_one_model_and_stream_as_they_go() {
    let g = group(&Opts {
        p: 0.5,
        ..Opts::default()
    });
    for pin in [0u16, 1] {
        let (_, mut rx) = g.submit_with(
            vec![3, 4, 5],
            SamplingParams::greedy(30),
            SubmitOptions { pin: Some(pin) },
        );
        let (toks, out) = events(&mut rx);
        let usage = out.unwrap();
        assert_eq!(toks.len(), 30);
        assert!(toks.iter().all(|t| t.1 == pin), "pinned to {pin}");
        assert_eq!(usage.tokens_by_model[pin as usize], 30);
        assert_eq!(usage.switches, 0);
    }
    // The pinned guest streams progress: tokens reach the client while the
    // request is still running (its first token long before 200 steps of 3 ms).
    let (rid, mut rx) = g.submit_with(
        vec![3, 4, 5],
        SamplingParams::greedy(200),
        SubmitOptions { pin: Some(1) },
    );
    let first = rx.blocking_recv().unwrap();
    assert!(
        matches!(first, StreamEvent::Token { writer: 1, .. }),
        "{first:?}"
    );
    g.cancel(rid);
    assert_eq!(events(&mut rx).1.unwrap_err(), RequestError::Cancelled);
    assert_kv_returned(&g);
    // A pin outside the group is refused up front.
    let (_, mut rx) = g.submit_with(
        vec![3],
        SamplingParams::greedy(3),
        SubmitOptions { pin: Some(7) },
    );
    assert!(matches!(
        events(&mut rx).1,
        Err(RequestError::PinOutOfRange { model: 7, .. })
    ));
}

#[test]
fn a_pinned_request_that_ignores_eos_stays_with_its_model_to_the_end() {
    // A 4-token vocabulary that draws its EOS (0): it comes up often.
    let g = group(&Opts {
        vocab: 4,
        emit_eos: true,
        ..Opts::default()
    });
    for pin in [1u16, 0] {
        let mut params = SamplingParams::greedy(64);
        params.ignore_eos = true;
        let (_, mut rx) = g.submit_with(vec![1, 2, 3], params, SubmitOptions { pin: Some(pin) });
        let (toks, out) = events(&mut rx);
        let usage = out.unwrap();
        assert_eq!(toks.len(), 64);
        assert!(toks.iter().any(|t| t.0 == 0), "EOS was sampled and ignored");
        assert!(toks.iter().all(|t| t.1 == pin), "pinned to {pin}: {toks:?}");
        assert_eq!(usage.tokens_by_model[pin as usize], 64);
    }
    // Without ignore_eos the pinned model's EOS ends the request there.
    let (_, mut rx) = g.submit_with(
        vec![1, 2, 3],
        SamplingParams::greedy(64),
        SubmitOptions { pin: Some(1) },
    );
    let (toks, out) = events(&mut rx);
    out.unwrap();
    assert!(toks.len() < 64 && toks.iter().all(|t| t.1 == 1), "{toks:?}");
    assert_kv_returned(&g);
}

#[test]
fn logprobs_come_from_the_writer_and_match_the_token() {
    let g = group(&Opts {
        p: 0.4,
        logits: true,
        ..Opts::default()
    });
    let mut params = SamplingParams::greedy(40);
    params.logprobs = Some(3);
    let (toks, out) = events(&mut g.submit(vec![1, 2, 3], params).1);
    let usage = out.unwrap();
    assert_eq!(toks.len(), 40);
    assert!(usage.tokens_by_model[1] > 0, "the large model never wrote");
    for (token, _, lp) in &toks {
        let lp = lp.as_ref().expect("every token carries logprobs");
        assert_eq!(lp.token, *token);
        assert_eq!(lp.top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(lp.rank, 1);
        assert_eq!(lp.top[0].0, *token);
        assert!(lp.logprob <= 0.0);
    }
    // Pinned to the large model, logprobs travel home in progress messages.
    let mut params = SamplingParams::greedy(12);
    params.logprobs = Some(0);
    let (toks, _) = events(
        &mut g
            .submit_with(vec![1, 2], params, SubmitOptions { pin: Some(1) })
            .1,
    );
    assert!(toks.iter().all(|t| t.1 == 1 && t.2.is_some()));
    let mut params = SamplingParams::greedy(2);
    params.logprobs = Some(21);
    let (_, out) = events(&mut g.submit(vec![1], params).1);
    assert!(matches!(out, Err(RequestError::Sampling(e)) if e.field == "logprobs"));
}

#[test]
fn target_large_share_steers_the_threshold_to_the_target() {
    // Random routing starts at p = 0.6; the controller must bring the
    // measured share of large-model tokens to 0.2.
    let g = group(&Opts {
        latencies: [0.2, 0.4],
        p: 0.6,
        target_large_share: Some(0.2),
        ..Opts::default()
    });
    // `base` gives every run its own seeds and prompts, so the measuring
    // run is not the warm-up replayed.
    let run = |n: usize, base: usize| -> (usize, usize) {
        let rxs: Vec<_> = (0..n)
            .map(|i| {
                let mut params = SamplingParams::greedy(100);
                params.seed = Some((base + i) as u64);
                g.submit(
                    vec![1 + ((base + i) % 900) as u32, 2 + (base % 7) as u32],
                    params,
                )
                .1
            })
            .collect();
        let (mut large, mut total) = (0, 0);
        for mut rx in rxs {
            let usage = events(&mut rx).1.unwrap();
            large += usage.tokens_by_model[1];
            total += usage.completion_tokens;
        }
        (large, total)
    };
    // Warm-up: the controller moves the threshold (6,400 tokens).
    run(64, 1000);
    let (large, total) = run(64, 5000);
    let share = large as f64 / total as f64;
    eprintln!(
        "target 0.200: measured share {share:.4} over {total} tokens, threshold {:?}",
        g.stats(0).routing_threshold
    );
    assert!(
        (share - 0.2).abs() <= 0.02,
        "measured share {share:.3} after convergence, threshold {:?}",
        g.stats(0).routing_threshold
    );
}
