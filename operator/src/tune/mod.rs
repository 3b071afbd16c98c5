//! The tune loop's home (issue #12): retune the delayed-batching table B from live routing
//! metrics, per `TokenRouterDeployment` with `spec.tuning` and `delayedBatching.mode: auto`.
//!
//! * [`driver`]: the loop itself, a second kube `Controller` whose reconcile is one round
//!   ([`crate::retune::GroupTuner::tick`]) and which requeues after `tuning.interval`;
//! * [`discover`]: the serving pods from the EndpointSlices of the headless Services;
//! * [`settings`]: `spec.tuning` resolved (interval, hysteresis, sample floor, the table's
//!   largest concurrency, pods or Prometheus);
//! * [`status`]: `status.tuning` and `status.thresholds` (`source: tuned`), written by
//!   server-side apply with the loop's own field manager.
//!
//! # The hook in the reconciler
//! The reconciler keeps a B table in force: with `mode: fixed` (or before any tuning) the
//! spec's, `source: fixed`; once `status.thresholds.source` is `tuned` (and `mode: auto`),
//! that table, which it renders into the engine ConfigMap without rolling pods (the pods'
//! config hash covers only the spec). A tuned table in status therefore reaches the
//! ConfigMap on the reconcile that the status write wakes, and restarted pods start with it.
//! The reconciler's status patch leaves out `tuning`, and `thresholds` while they are tuned.

pub mod discover;
pub mod driver;
pub mod settings;
pub mod status;

use crds::v1alpha1::{AppliedThresholds, DelayedBatchingMode, ThresholdSource};
use crds::TokenRouterDeployment;

/// Whether the tune loop may change this resource's B table.
pub fn enabled(trd: &TokenRouterDeployment) -> bool {
    trd.spec.tuning.is_some()
        && trd
            .spec
            .delayed_batching
            .as_ref()
            .is_none_or(|d| d.mode == DelayedBatchingMode::Auto)
}

/// The status value a tune loop writes for a new table.
pub fn tuned(table: std::collections::BTreeMap<String, Vec<i64>>) -> AppliedThresholds {
    AppliedThresholds {
        table,
        source: ThresholdSource::Tuned,
        applied_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        )),
    }
}
