//! The operator's tune loop on a live group, without Kubernetes (issue #12,
//! item 3): real `tokenrouter subserver` processes on the sim backend under
//! closed-loop load. The loop gathers their metrics, estimates, pushes a B
//! table to every pod's admin endpoint, keeps it while routing is unchanged
//! (hysteresis), and pushes a new one after the policy's live knob moves p
//! from 0.2 to 0.6. No request fails or stalls while B changes.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;
mod retune_support;

use std::time::{Duration, Instant};

use test_support::HANG;

use operator::retune::{
    GroupTuner, GroupView, MetricsSource, PodTarget, TuneOutcome, TuneSettings,
};
use retune_support::{wait_until, Load, SimGroup, Topology, MODELS};

const MAX_N: usize = 8;

/// Ticks until the outcome is an estimate (pushed or kept); a deadline only catches a hang.
async fn tick_until_estimated(
    tuner: &mut GroupTuner,
    client: &reqwest::Client,
    view: &GroupView<'_>,
    settings: &TuneSettings,
) -> TuneOutcome {
    // Kept a loop: an estimate needs samples that only accumulate under the
    // load; the pause paces the ticks like the operator's interval does.
    let deadline = Instant::now() + HANG;
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let outcome = tuner.tick(client, view, settings).await.unwrap();
        match outcome {
            TuneOutcome::Baseline | TuneOutcome::TooFewSamples(_) => {
                assert!(Instant::now() < deadline, "hang: no estimate: {outcome:?}")
            }
            _ => return outcome,
        }
    }
}

#[test]
fn the_loop_tunes_keeps_and_retunes_after_routing_changes_under_load() {
    let group = SimGroup::start(&common::binary(), Topology::TcpProcesses, 0.2, None);
    let load = Load::start(group.entry(), MAX_N, 128);
    let models: Vec<String> = MODELS.iter().map(|m| m.to_string()).collect();
    let pods: Vec<PodTarget> = MODELS
        .iter()
        .zip(&group.admin)
        .map(|(m, url)| PodTarget {
            admin_url: url.clone(),
            models: vec![m.to_string()],
        })
        .collect();
    let source = MetricsSource::Pods;
    let view = GroupView {
        models: &models,
        pods: &pods,
        token: None,
        max_concurrency: MAX_N,
        source: &source,
    };
    let settings = TuneSettings {
        min_decisions: 600.0,
        min_latency_samples: 30.0,
        ..TuneSettings::default()
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let mut tuner = GroupTuner::default();

    // p = 0.2: nothing applied yet, so the first estimate is pushed.
    let first = runtime.block_on(tick_until_estimated(&mut tuner, &client, &view, &settings));
    let TuneOutcome::Pushed(pushed) = &first else {
        panic!("expected a push, got {first:?}")
    };
    let table_02 = pushed.1.table.clone();
    assert!(
        (pushed.0.transition[0][1] - 0.2).abs() < 0.05,
        "{:?}",
        pushed.0
    );
    // The subservers report the table on their admin API.
    wait_until("the subservers report the p = 0.2 table", || {
        group.reported_thresholds() == table_02
    });

    // Same routing: within the hysteresis, the table is kept.
    let again = runtime.block_on(tick_until_estimated(&mut tuner, &client, &view, &settings));
    assert!(matches!(again, TuneOutcome::Kept(_)), "{again:?}");

    // p = 0.6 through the live knob: the loop notices within two estimating
    // rounds (the first window may still hold some p = 0.2 decisions).
    group.set_probability(0.6);
    let mut last_push = None;
    let mut last_estimate = None;
    for _ in 0..2 {
        match runtime.block_on(tick_until_estimated(&mut tuner, &client, &view, &settings)) {
            TuneOutcome::Pushed(p) => {
                last_estimate = Some(p.0.clone());
                last_push = Some(p.1.table.clone());
            }
            TuneOutcome::Kept(k) => last_estimate = Some(k.0.clone()),
            other => panic!("{other:?}"),
        }
    }
    let table_06 = last_push.expect("the change of p was not pushed within two rounds");
    let last_estimate = last_estimate.unwrap();
    assert!(
        (last_estimate.transition[0][1] - 0.6).abs() < 0.05,
        "{last_estimate:?}"
    );
    assert_ne!(table_06, table_02);
    wait_until("the subservers report the p = 0.6 table", || {
        group.reported_thresholds() == table_06
    });
    assert_eq!(tuner.applied(), Some(table_06.as_slice()));

    let counts = load.stop();
    assert_eq!(
        counts.failed, 0,
        "requests failed while B changed: {counts:?}"
    );
    assert!(counts.finished > 0);
}
