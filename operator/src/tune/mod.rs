//! The tune loop's home (issue #12): retune the delayed-batching table B
//! from live routing metrics.
//!
//! # The hook
//! The reconciler already keeps a B table in force and shows it in
//! `status.thresholds` (`table`, `source: fixed | tuned`, `appliedAt`):
//! * with `spec.delayedBatching.mode: fixed`, or before any tuning, it is the
//!   spec's table, `source: fixed`;
//! * with `mode: auto`, once `status.thresholds.source` is `tuned`, the
//!   reconciler renders *that* table into the engine ConfigMap (without
//!   rolling pods: the pods' config hash covers only the spec).
//!
//! So a tune loop needs only to (1) read the pods' `/metrics` (the entry
//! pods are `config::group_url(trd, ns, k)`, token in the admin Secret) or
//! `spec.tuning.prometheusUrl`, (2) run [`tuner`] on them, (3) `PUT
//! /admin/thresholds` on every serving pod, and (4) write the new table to
//! `status.thresholds` with `source: tuned` (a status patch with field
//! manager [`FIELD_MANAGER`]); the next reconcile keeps the ConfigMap in
//! step, so restarted pods come back with the tuned table.
//!
//! [`config::group_url`]: crate::build::config::group_url
//! [`FIELD_MANAGER`]: crate::names::FIELD_MANAGER

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
