//! The tune loop's part of the resource's status: `status.tuning` (the last round and
//! estimate) and, once it has pushed a table, `status.thresholds` (`source: tuned`).
//!
//! Both are written by server-side apply of the status subresource with the field manager
//! [`FIELD_MANAGER`], which owns exactly these fields: the reconciler's merge patches leave
//! them out (`crate::apply`), so neither writer undoes the other's fields.

use std::collections::BTreeMap;

use crds::v1alpha1::{
    AppliedThresholds, LatencyPoint, ModelEstimate, TuningEstimate, TuningStatus,
};
use crds::TokenRouterDeployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::Resource;
use serde_json::json;
use tuner::metrics::MetricsEstimate;
use tuner::StepLatency;

use crate::retune::Proposal;

/// The field manager of the tune loop's status writes.
pub const FIELD_MANAGER: &str = "tokenrouter-operator-tune";

/// Now, as a Kubernetes time.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The status form of an estimate and the proposal computed from it.
pub fn estimate(e: &MetricsEstimate, p: &Proposal) -> TuningEstimate {
    let models = e
        .names
        .iter()
        .enumerate()
        .map(|(m, name)| ModelEstimate {
            name: name.clone(),
            routing: e.transition[m].clone(),
            credit: e.credit[m].clone(),
            decisions: e.decisions[m],
            step_latency: match &e.latency[m] {
                StepLatency::Constant(ms) => vec![LatencyPoint {
                    batch_size: 0,
                    ms: *ms,
                }],
                StepLatency::Table(points) => points
                    .iter()
                    .map(|&(b, ms)| LatencyPoint {
                        batch_size: i64::try_from(b).unwrap_or(i64::MAX),
                        ms,
                    })
                    .collect(),
            },
            latency_samples: e.latency_samples[m],
        })
        .collect();
    let finite_gain = p.gain_percent.is_finite();
    TuningEstimate {
        time: Some(now()),
        models,
        observed_concurrency: e.concurrency.and_then(|n| i64::try_from(n).ok()),
        predicted_tokens_per_second: p.predicted_tok_s.clone(),
        gain_percent: finite_gain.then_some(p.gain_percent),
        gain_at_concurrency: finite_gain.then(|| i64::try_from(p.gain_at).ok()).flatten(),
    }
}

/// A table in model order (`table[m][n - 1]`) as the status and ConfigMap hold it.
pub fn by_model(models: &[String], table: &[Vec<usize>]) -> BTreeMap<String, Vec<i64>> {
    models
        .iter()
        .cloned()
        .zip(table.iter().map(|l| {
            l.iter()
                .map(|&b| i64::try_from(b).unwrap_or(i64::MAX))
                .collect()
        }))
        .collect()
}

/// A status or spec table in model order; `None` unless it has a non-empty list of
/// positive entries for every model.
pub fn in_model_order(
    models: &[String],
    table: &BTreeMap<String, Vec<i64>>,
) -> Option<Vec<Vec<usize>>> {
    models
        .iter()
        .map(|m| {
            let list = table.get(m).filter(|l| !l.is_empty())?;
            list.iter()
                .map(|&b| usize::try_from(b).ok().filter(|&b| b >= 1))
                .collect()
        })
        .collect()
}

/// Applies `tuning` (and `thresholds`, when the loop owns them) to the status.
pub async fn write(
    api: &Api<TokenRouterDeployment>,
    name: &str,
    tuning: &TuningStatus,
    thresholds: Option<&AppliedThresholds>,
) -> kube::Result<()> {
    let mut status = json!({ "tuning": tuning });
    if let Some(t) = thresholds {
        status["thresholds"] = json!(t);
    }
    let patch = json!({
        "apiVersion": TokenRouterDeployment::api_version(&()),
        "kind": TokenRouterDeployment::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_convert_both_ways() {
        let models = vec!["small".to_string(), "big".to_string()];
        let t = by_model(&models, &[vec![1, 1], vec![2, 3]]);
        assert_eq!(t["big"], vec![2, 3]);
        assert_eq!(
            in_model_order(&models, &t),
            Some(vec![vec![1, 1], vec![2, 3]])
        );
        let mut partial = t.clone();
        partial.remove("big");
        assert_eq!(in_model_order(&models, &partial), None);
        partial.insert("big".into(), vec![0]);
        assert_eq!(in_model_order(&models, &partial), None);
    }
}
