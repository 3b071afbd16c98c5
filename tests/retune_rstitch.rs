//! The estimator on R-Stitch, two-way switching, on the real SmolLM2 pair
//! (issue #12, item 2): the test keeps its own count of every routing
//! decision by watching what the policy returns and applying the documented
//! hand-over rules (a guest keeps the token of its first turn step and returns
//! at EOS or at the request's budget), then checks that the estimate from the
//! group's Prometheus text gives exactly those counts: P and C.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::{Arc, Mutex};

use subserver::metrics::{encode_text, SubserverMetrics};
use subserver::policy::{build, Placement};
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::ModelRunner;
use subserver::scheduler::group::{Group, GroupSettings, MemberSpec};
use subserver::scheduler::policy::{Dest, RoutingPolicy, StepView};
use tuner::metrics::{estimate_from_metrics, EstimateOptions, MetricsText};

const MODELS: [&str; 2] = ["smollm2-135m-l12", "smollm2-135m"];
const PROMPT_LEN: usize = 12;
const MAX_TOKENS: usize = 40;

/// `[from][to]` decisions and credited tokens, as the test sees them.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Counts {
    decisions: [[u64; 2]; 2],
    credited: [[u64; 2]; 2],
}

/// R-Stitch, with every decision counted on the side.
struct Counting {
    inner: Box<dyn RoutingPolicy>,
    eos: Vec<u32>,
    counts: Arc<Mutex<Counts>>,
}

impl RoutingPolicy for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        let dests = self.inner.route(view);
        let mut c = self.counts.lock().unwrap();
        for (item, dest) in view.items.iter().zip(&dests) {
            let me = view.model as usize;
            let (to, credit) = if me == 0 {
                match *dest {
                    Dest::Stay => (0, true),
                    Dest::Peer { to, keep_token } => (to as usize, keep_token),
                    Dest::Delegate { to } => (to as usize, false),
                }
            } else {
                // The guest: its first token of a turn is always kept; it
                // returns at EOS and when the request's budget is used up.
                let generated = item.position + 1 - PROMPT_LEN;
                let last = self.eos.contains(&item.token) || generated >= MAX_TOKENS;
                match *dest {
                    Dest::Stay if !last => (1, true),
                    Dest::Stay => (0, true),
                    Dest::Peer { keep_token, .. } => (0, keep_token || item.written_this_turn == 0),
                    Dest::Delegate { .. } => (0, item.written_this_turn == 0),
                }
            };
            c.decisions[me][to] += 1;
            c.credited[me][to] += u64::from(credit);
        }
        dests
    }

    fn send(
        &mut self,
        rid: subserver::peer::message::Rid,
        sequence: &[u32],
        peer_holds: usize,
    ) -> (usize, Vec<u32>) {
        self.inner.send(rid, sequence, peer_holds)
    }

    fn receive(&mut self, rid: subserver::peer::message::Rid, tokens: &[u32]) -> usize {
        self.inner.receive(rid, tokens)
    }

    fn release(&mut self, rid: subserver::peer::message::Rid) {
        self.inner.release(rid)
    }

    fn knob(&self) -> Option<subserver::policy::ThresholdKnob> {
        self.inner.knob()
    }
}

fn prompts() -> Vec<Vec<u32>> {
    (0..6)
        .map(|k| {
            (0..PROMPT_LEN)
                .map(|i| 200 + ((i * 37 + k * 101) % 3000) as u32)
                .collect()
        })
        .collect()
}

#[test]
fn estimate_equals_the_tests_own_counts_of_r_stitch_decisions() {
    let registry = prometheus::Registry::new();
    let metrics = SubserverMetrics::new(&registry).unwrap();
    let counts = Arc::new(Mutex::new(Counts::default()));
    let kwargs = serde_json::json!({"threshold": 0.1});
    let members = MODELS
        .iter()
        .enumerate()
        .map(|(m, name)| {
            let mut opts = TchRunnerOptions::new(&common::model_dir(name));
            opts.kv_budget = KvBudget::Tokens(8192);
            let runner = TchRunner::load(&opts).unwrap();
            let eos = runner.info().eos_ids.clone();
            let inner = build(
                "RStitch",
                &kwargs,
                Placement {
                    model: m as u16,
                    num_models: 2,
                    entry: 0,
                },
            )
            .unwrap();
            MemberSpec {
                name: name.to_string(),
                runner: Box::new(runner),
                policy: Box::new(Counting {
                    inner,
                    eos,
                    counts: counts.clone(),
                }),
                tokenizer: None,
                thresholds: vec![1],
            }
        })
        .collect();
    let group = Group::start_with_metrics(
        members,
        GroupSettings {
            peer_timeout: std::time::Duration::from_secs(120),
            ..GroupSettings::default()
        },
        Some(&metrics),
    );
    let outputs = common::greedy_routed(&group, prompts(), MAX_TOKENS);
    let (mut small, mut large) = (0u64, 0u64);
    for (toks, writers, usage) in &outputs {
        common::check_accounting(toks, writers, usage);
        small += writers.iter().filter(|&&w| w == 0).count() as u64;
        large += writers.iter().filter(|&&w| w == 1).count() as u64;
    }
    drop(group);
    let c = *counts.lock().unwrap();
    eprintln!("R-Stitch counts {c:?}; tokens small {small}, large {large}");
    // Two-way switching happened: hand-overs, returns, and large-model stays.
    assert!(
        c.decisions[0][1] > 0 && c.decisions[1][0] > 0 && c.decisions[1][1] > 0,
        "{c:?}"
    );
    // Every committed token was credited by exactly one decision.
    assert_eq!(
        c.credited[0][0] + c.credited[1][0] + c.credited[1][1],
        small + large
    );

    let text = MetricsText {
        source: "registry".into(),
        text: encode_text(&registry).unwrap(),
    };
    let options = EstimateOptions {
        models: MODELS.iter().map(|m| m.to_string()).collect(),
        min_decisions: 1.0,
        min_latency_samples: 1.0,
    };
    let e = estimate_from_metrics(&[text], &options).unwrap();
    for m in 0..2 {
        let total: u64 = c.decisions[m].iter().sum();
        assert_eq!(e.decisions[m], total as f64, "decisions of model {m}");
        for j in 0..2 {
            let want_p = c.decisions[m][j] as f64 / total as f64;
            assert!(
                (e.transition[m][j] - want_p).abs() < 1e-12,
                "P[{m}][{j}] = {}, counted {want_p}",
                e.transition[m][j]
            );
            let want_c = if c.decisions[m][j] > 0 {
                c.credited[m][j] as f64 / c.decisions[m][j] as f64
            } else {
                0.0
            };
            assert!(
                (e.credit[m][j] - want_c).abs() < 1e-12,
                "C[{m}][{j}] = {}, counted {want_c}",
                e.credit[m][j]
            );
        }
    }
    eprintln!("estimate: P = {:?}, C = {:?}", e.transition, e.credit);
}
