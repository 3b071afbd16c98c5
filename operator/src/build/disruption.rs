//! The serving pods' PodDisruptionBudget.
//!
//! One budget over every serving pod of the resource with `maxUnavailable:
//! 1`: a node drain evicts one model pod at a time, so at most one group is
//! down at once while the others keep serving, and the evicted pod is back
//! (a StatefulSet recreates it by ordinal elsewhere) before the next goes.
//! A budget per model would let a drain take one pod of every model at once,
//! each from a different group, and stop as many groups; `minAvailable` by
//! groups would block a drain of a one-group resource for good, which cluster
//! upgrades cannot wait out.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crds::TokenRouterDeployment;

use super::{meta, serving};
use crate::names;

/// The budget's name (the resource's own: one budget per resource).
pub fn name(trd: &TokenRouterDeployment) -> String {
    names::instance(trd)
}

/// The budget over every serving pod of `trd`.
pub fn budget(trd: &TokenRouterDeployment) -> PodDisruptionBudget {
    let component = serving::component(trd.spec.placement);
    PodDisruptionBudget {
        metadata: meta(trd, &name(trd), names::common_labels(trd)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(names::selector_labels(trd, component, None)),
                ..Default::default()
            }),
            // A pod that never became ready (weights still loading, a bad
            // node) may go: keeping it protects no traffic.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..Default::default()
        }),
        status: None,
    }
}
