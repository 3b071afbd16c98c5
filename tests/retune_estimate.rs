//! The estimator recovers the chain's true inputs from a live group (issue
//! #12, item 2): real subserver processes on the sim backend (one process per
//! model over TCP, and the in-process group), Random routing at p in
//! {0.2, 0.35, 0.6}, 6.0 / 27.9 ms steps, closed-loop load. The estimate's P
//! is within 0.02 of [[1-p, p], [1, 0]], C equals R2R's credit structure
//! [[1, 0], [1, 0]], the step latencies are within 5%, and the B table from
//! the estimate equals the table from the true inputs.

mod common;
mod retune_support;

use std::time::{Duration, Instant};

use operator::tuner::metrics::{estimate, EstimateOptions, MetricsEstimate};
use operator::tuner::{best_table, SearchOptions, StepLatency, TunerError, TunerInputs};
use retune_support::{Load, SimGroup, Topology, LATENCY_MS, MODELS};

/// Requests kept in flight.
const CLIENTS: usize = 16;
/// Routing decisions of the entry model the estimate waits for: the
/// binomial standard error at p = 0.35 is then 0.0048, so 0.02 is > 4 sigma.
const ENTRY_DECISIONS: f64 = 10_000.0;
/// The B table is compared for concurrency 1..=this.
const TABLE_N: usize = 8;

fn true_inputs(p: f64) -> TunerInputs {
    TunerInputs::new(
        LATENCY_MS
            .iter()
            .map(|&ms| StepLatency::Constant(ms))
            .collect(),
        vec![vec![1.0 - p, p], vec![1.0, 0.0]],
        vec![vec![1.0, 0.0], vec![1.0, 0.0]],
        0.1,
        1,
    )
    .unwrap()
}

fn b_table(inputs: &TunerInputs) -> Vec<(Vec<usize>, f64)> {
    let options = SearchOptions {
        threads: 1,
        ..SearchOptions::default()
    };
    best_table(inputs, &(1..=TABLE_N).collect::<Vec<_>>(), &options)
        .unwrap()
        .into_iter()
        .map(|r| (r.best.thresholds, r.best.throughput_tok_s))
        .collect()
}

/// Runs the pair under load until the window since the first scrape holds
/// enough decisions, and returns the estimate of that window.
fn estimate_live(topology: Topology, p: f64) -> MetricsEstimate {
    let group = SimGroup::start(&common::binary(), topology, p, None);
    let load = Load::start(group.entry(), CLIENTS, 128);
    let baseline = group.scrape();
    let options = EstimateOptions {
        models: MODELS.iter().map(|m| m.to_string()).collect(),
        min_decisions: 1_000.0,
        min_latency_samples: 50.0,
    };
    // The deadline only catches a hang; the loop waits on the counters.
    let deadline = Instant::now() + Duration::from_secs(600);
    let estimate = loop {
        std::thread::sleep(Duration::from_millis(500));
        match estimate(&group.scrape().increase_since(&baseline), &options) {
            Ok(e) if e.decisions[0] >= ENTRY_DECISIONS => break e,
            Ok(_) | Err(TunerError::TooFewSamples { .. }) => {
                assert!(Instant::now() < deadline, "too few decisions after 600 s")
            }
            Err(other) => panic!("{other}"),
        }
    };
    let counts = load.stop();
    assert_eq!(counts.failed, 0, "requests failed: {counts:?}");
    assert!(counts.finished > 0);
    estimate
}

fn check(topology: Topology, p: f64) {
    let e = estimate_live(topology, p);
    let truth = [[1.0 - p, p], [1.0, 0.0]];
    for (m, row) in truth.iter().enumerate() {
        for (j, &want) in row.iter().enumerate() {
            let got = e.transition[m][j];
            assert!(
                (got - want).abs() <= 0.02,
                "{topology:?} p={p}: P[{m}][{j}] = {got:.4}, true {want} ({e:?})"
            );
        }
    }
    // Credits are exact: a kept token counts 1, a dropped one 0; the large
    // model never keeps the pen under Random, so its "stay" entry has no sample.
    assert_eq!(
        e.credit,
        vec![vec![1.0, 0.0], vec![1.0, 0.0]],
        "{topology:?} p={p}"
    );
    for (m, latency) in e.latency.iter().enumerate() {
        let points = match latency {
            StepLatency::Constant(ms) => vec![(0, *ms)],
            StepLatency::Table(points) => points.clone(),
        };
        for (batch, ms) in points {
            let error = (ms - LATENCY_MS[m]).abs() / LATENCY_MS[m];
            assert!(
                error <= 0.05,
                "{topology:?} p={p}: L_{m}({batch}) = {ms:.3} ms, true {} ms",
                LATENCY_MS[m]
            );
        }
    }
    let estimated = e.to_inputs(None, 0.1, Some(1)).unwrap();
    let (from_estimate, from_truth) = (b_table(&estimated), b_table(&true_inputs(p)));
    let b = |t: &[(Vec<usize>, f64)]| t.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        b(&from_estimate),
        b(&from_truth),
        "{topology:?} p={p}: B table from the estimate (left) differs from the true one\n\
         estimate {e:?}\nestimated {from_estimate:?}\ntrue {from_truth:?}"
    );
    eprintln!(
        "{topology:?} p={p}: P={:?} L={:?} decisions={:?} B*={:?}",
        e.transition,
        e.latency,
        e.decisions,
        b(&from_truth)
    );
}

#[test]
fn estimator_recovers_random_routing_over_tcp_processes() {
    for p in [0.2, 0.35, 0.6] {
        check(Topology::TcpProcesses, p);
    }
}

#[test]
fn estimator_recovers_random_routing_in_process() {
    for p in [0.2, 0.35, 0.6] {
        check(Topology::InProcess, p);
    }
}
