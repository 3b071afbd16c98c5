//! The estimator recovers the chain's true inputs from a live group (issue
//! #12, item 2): real subserver processes on the sim backend (one process per
//! model over TCP, and the in-process group), Random routing at p in
//! {0.2, 0.35, 0.6}, 6.0 / 27.9 ms steps, closed-loop load. The estimate's P
//! is within 0.02 of [[1-p, p], [1, 0]], C equals R2R's credit structure
//! [[1, 0], [1, 0]], the step latencies are within 5%, and the B table from
//! the estimate equals the table from the true inputs (at a near-tie of the
//! true chain, within 1%, either side of the tie is accepted and printed).
//!
//! The true step latency is what a sim step really takes: on an idle
//! machine the configured 6.0 / 27.9 ms; on a loaded one the sim's waits
//! overshoot and every step is longer. The truth is measured outside the
//! code under test: a probe thread of the test times, on its own clock, the
//! very wait a sim step is made of (`sim::sleep_until` of the configured
//! time) throughout the window, under the same machine load. The estimate
//! (from the metrics' step histograms, which the scheduler times) must be
//! within 5% of that probe, is never shorter than the configured sleep (a
//! sim step never returns early), and the steps a model ran times the
//! estimate fit (within 5%) in the window as the test's clock measured it
//! (a model runs one step at a time). The true B table is built from the
//! probe's latencies; the scheduler's own mean step time (`/admin/state`)
//! is only printed, as a diagnostic.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;
mod retune_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use retune_support::{Load, SimGroup, Topology, LATENCY_MS, MODELS};
use tuner::metrics::{estimate, EstimateOptions, MetricsEstimate};
use tuner::{best_table, predict, SearchOptions, StepLatency, TunerError, TunerInputs};

/// Requests kept in flight.
const CLIENTS: usize = 16;
/// Routing decisions of the entry model the estimate waits for: the
/// binomial standard error at p = 0.35 is then 0.0048, so 0.02 is > 4 sigma.
const ENTRY_DECISIONS: f64 = 10_000.0;
/// The B table is compared for concurrency 1..=this.
const TABLE_N: usize = 8;
/// A vector within this fraction of the true optimum is a tie of the chain:
/// measurement noise may pick either side (the tuner's own table shows
/// runners-up within 0.1-0.5% of B*).
const TIE: f64 = 0.01;

fn true_inputs(p: f64, latency_ms: &[f64]) -> TunerInputs {
    TunerInputs::new(
        latency_ms
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

/// A live window: the estimate, each model's mean step time (ms) as its
/// scheduler measured it (a diagnostic), the probe's step time per model
/// (ms, the truth), its step count, and the window's length on the test's
/// own clock (s).
struct Window {
    estimate: MetricsEstimate,
    measured_ms: Vec<f64>,
    probe_ms: Vec<f64>,
    steps: Vec<f64>,
    wall_s: f64,
}

/// Times, on the test's own clock, the wait a sim step of each configured
/// latency is made of, over and over until `stop`; returns the mean (ms)
/// per model. Between two waits it idles as long as it waited, so the probe
/// samples the machine's load without adding much to it.
fn probe_step_ms(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<f64>> {
    std::thread::spawn(move || {
        let mut sums = [(0.0f64, 0u32); 2];
        while !stop.load(Ordering::SeqCst) {
            for (m, &ms) in LATENCY_MS.iter().enumerate() {
                let t0 = Instant::now();
                subserver::runner::sim::sleep_until(t0 + Duration::from_secs_f64(ms / 1e3));
                let took = t0.elapsed();
                sums[m].0 += took.as_secs_f64() * 1e3;
                sums[m].1 += 1;
                // Pacing only: no outcome rides on its length.
                std::thread::sleep(took);
            }
        }
        sums.iter().map(|&(sum, n)| sum / f64::from(n)).collect()
    })
}

/// Runs the pair under load until the window since the first scrape holds
/// enough decisions, and returns that window.
fn estimate_live(topology: Topology, p: f64) -> Window {
    let group = SimGroup::start(&common::binary(), topology, p, None);
    let load = Load::start(group.entry(), CLIENTS, 128);
    // The test's clock brackets the step counts: the window it measures is
    // at least as long as the one the counts cover.
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let probe = probe_step_ms(stop.clone());
    let steps_before = group.step_stats();
    let baseline = group.scrape();
    let options = EstimateOptions {
        models: MODELS.iter().map(|m| m.to_string()).collect(),
        min_decisions: 1_000.0,
        // A latency point averages at least this many steps, so that one
        // burst of machine load does not decide it.
        min_latency_samples: 200.0,
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
    let steps_after = group.step_stats();
    let wall_s = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let probe_ms = probe.join().unwrap();
    let counts = load.stop();
    assert_eq!(counts.failed, 0, "requests failed: {counts:?}");
    assert!(counts.finished > 0);
    let pairs = steps_before.iter().zip(&steps_after);
    Window {
        estimate,
        measured_ms: pairs
            .clone()
            .map(|(b, a)| 1000.0 * (a.1 - b.1) / (a.0 - b.0))
            .collect(),
        steps: pairs.map(|(b, a)| a.0 - b.0).collect(),
        probe_ms,
        wall_s,
    }
}

fn check(topology: Topology, p: f64) {
    let w = estimate_live(topology, p);
    let (e, measured_ms, probe_ms) = (&w.estimate, &w.measured_ms, &w.probe_ms);
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
            // Bounds from outside the scheduler's timer: the configured
            // sleep below, the test's wall clock above.
            assert!(
                ms >= 0.99 * LATENCY_MS[m],
                "{topology:?} p={p}: L_{m}({batch}) = {ms:.3} ms, below its {} ms sleep",
                LATENCY_MS[m]
            );
            // A busy model fills the window, so allow the same 5% as below.
            let busy_s = w.steps[m] * ms / 1000.0;
            assert!(
                busy_s <= 1.05 * w.wall_s,
                "{topology:?} p={p}: {} steps of L_{m}({batch}) = {ms:.3} ms take {busy_s:.2} s, \
                 longer than the {:.2} s window",
                w.steps[m],
                w.wall_s
            );
            // The truth from the test's own clock, not the scheduler's.
            let error = (ms - probe_ms[m]).abs() / probe_ms[m];
            assert!(
                error <= 0.05,
                "{topology:?} p={p}: L_{m}({batch}) = {ms:.3} ms, true {:.3} ms (probe)",
                probe_ms[m]
            );
        }
    }
    let estimated = e.to_inputs(None, 0.1, Some(1)).unwrap();
    let truth = true_inputs(p, probe_ms);
    let (from_estimate, from_truth) = (b_table(&estimated), b_table(&truth));
    let b = |t: &[(Vec<usize>, f64)]| t.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
    // Equal, except where the true chain has a near-tie: there the estimate's
    // vector must be worth, under the true inputs, within TIE of the optimum.
    let mut ties = Vec::new();
    for (i, (est, tru)) in from_estimate.iter().zip(&from_truth).enumerate() {
        if est.0 == tru.0 {
            continue;
        }
        let n = i + 1;
        let worth = predict(&truth.with_concurrency(n).unwrap(), &est.0)
            .map(|r| r.throughput_tok_s)
            .unwrap_or(0.0);
        assert!(
            worth >= (1.0 - TIE) * tru.1,
            "{topology:?} p={p}: at N={n} the estimate picks {:?} ({worth:.2} tok/s under the true \
             inputs), the true B* is {:?} ({:.2} tok/s)\nestimate {e:?}\nestimated {from_estimate:?}\n\
             true {from_truth:?}",
            est.0,
            tru.0,
            tru.1
        );
        ties.push((
            n,
            est.0.clone(),
            tru.0.clone(),
            100.0 * (1.0 - worth / tru.1),
        ));
    }
    eprintln!(
        "{topology:?} p={p}: P={:?} L={:?} (probe {probe_ms:?} ms, scheduler's timer {measured_ms:?} ms, configured {LATENCY_MS:?}; load {}) decisions={:?} B*={:?} near-ties (N, estimate, true, % lost)={ties:?}",
        e.transition,
        e.latency,
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
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
