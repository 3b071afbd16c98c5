//! Scheduler tests on the simulated backend: real threads, real clock, real
//! KV bookkeeping; only the model math is absent.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::config::LatencyModel;
use crate::engine::EngineLimits;
use crate::policy::{build, Placement};
use crate::runner::sim::SimRunner;
use crate::sampling::{FinishReason, SamplingParams};
use crate::scheduler::batching::ExecutionMode;
use crate::scheduler::client::{RequestError, StreamEvent, Usage};
use crate::scheduler::group::{Group, GroupSettings, MemberSpec};

struct Opts {
    latencies: [f64; 2],
    p: f64,
    thresholds: [usize; 2],
    mode: ExecutionMode,
    fallback: bool,
    peer_timeout: Duration,
    kv_tokens: usize,
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
        }
    }
}

fn group(o: &Opts) -> Group {
    let kwargs = serde_json::json!({"probability": o.p, "seed": 11, "target": 1});
    let members = (0..2u16)
        .map(|m| MemberSpec {
            name: ["small", "large"][m as usize].into(),
            runner: Box::new(
                SimRunner::new(
                    "sim",
                    1000,
                    vec![0],
                    Box::new(LatencyModel::linear(o.latencies[m as usize], 0.0, 0.0).unwrap()),
                    o.kv_tokens,
                    16,
                    m as u64,
                )
                .unwrap(),
            ),
            policy: build(
                "Random",
                &kwargs,
                Placement {
                    model: m,
                    num_models: 2,
                    entry: 0,
                },
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
        max_batch_wait: Duration::from_millis(20),
        limits: EngineLimits {
            max_batched_tokens: 256,
            max_batch_size: 64,
        },
        ..GroupSettings::default()
    };
    Group::start(members, settings)
}

/// Waits for the end of a request; returns its tokens (with writers) and outcome.
fn collect(
    rx: &mut UnboundedReceiver<StreamEvent>,
    limit: Duration,
) -> (Vec<(u32, u16)>, Result<Usage, RequestError>) {
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
fn assert_kv_returned(g: &Group) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ok = (0..2).all(|m| {
            let s = g.stats(m);
            s.kv_requests == 0 && s.kv_available_blocks == s.kv_blocks && s.kv_blocks > 0
        });
        if ok {
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

fn run_concurrency(n: usize, o: &Opts) {
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
    run_concurrency(
        3,
        &Opts {
            thresholds: [3, 3],
            p: 0.5,
            ..Opts::default()
        },
    );
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

#[test]
fn cancellation_frees_every_model() {
    let g = group(&Opts {
        p: 0.5,
        ..Opts::default()
    });
    let subs: Vec<_> = (0..6)
        .map(|i| g.submit(vec![i + 1, 9, 9], SamplingParams::greedy(5000)))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    for (rid, _) in &subs {
        g.cancel(*rid);
    }
    for (_, mut rx) in subs {
        let (toks, out) = collect(&mut rx, Duration::from_secs(5));
        assert!(!toks.is_empty(), "cancelled before any token");
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
    let rxs: Vec<_> = (0..8)
        .map(|i| g.submit(vec![i + 1], SamplingParams::greedy(40)).1)
        .collect();
    std::thread::sleep(Duration::from_millis(30));
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
    let t0 = Instant::now();
    let (_, out) = collect(
        &mut g.submit(vec![1, 2], SamplingParams::greedy(10)).1,
        Duration::from_secs(5),
    );
    assert!(
        matches!(out, Err(RequestError::PeerFailed { model: 1, .. })),
        "{out:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_gone_peer_fails_or_falls_back() {
    let g = group(&Opts {
        p: 0.5,
        ..Opts::default()
    });
    g.stop_model(1);
    std::thread::sleep(Duration::from_millis(50));
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
    std::thread::sleep(Duration::from_millis(50));
    let (toks, out) = collect(
        &mut g.submit(vec![1, 2], SamplingParams::greedy(50)).1,
        Duration::from_secs(5),
    );
    let usage = out.unwrap();
    assert_eq!(toks.len(), 50);
    assert_eq!(usage.tokens_by_model, vec![50, 0]);
}

#[test]
fn invalid_requests_fail_fast_and_hold_nothing() {
    let g = group(&Opts::default());
    let (_, out) = collect(
        &mut g.submit(vec![], SamplingParams::greedy(5)).1,
        Duration::from_secs(2),
    );
    assert!(matches!(out, Err(RequestError::Invalid(ref m)) if m.contains("empty")));
    let (_, out) = collect(
        &mut g.submit(vec![5000], SamplingParams::greedy(5)).1,
        Duration::from_secs(2),
    );
    assert!(matches!(out, Err(RequestError::Invalid(ref m)) if m.contains("5000")));
    let mut stop = SamplingParams::greedy(5);
    stop.stop = vec!["x".into()];
    let (_, out) = collect(&mut g.submit(vec![1], stop).1, Duration::from_secs(2));
    assert!(matches!(out, Err(RequestError::Invalid(ref m)) if m.contains("tokenizer")));
    assert_kv_returned(&g);
}

#[test]
fn memory_pressure_preempts_instead_of_failing() {
    // 32 requests x (4 + 40) tokens need ~1400 slots; the pool has 512.
    let o = Opts {
        kv_tokens: 512,
        ..Opts::default()
    };
    run_concurrency(32, &o);
}
