//! What the operator observed and did: `status` of a `TokenRouterDeployment`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition types the operator sets.
pub mod condition {
    /// Every model of every desired group is ready, and the gateway is.
    pub const READY: &str = "Ready";
    /// Objects are being created, rolled or scaled.
    pub const PROGRESSING: &str = "Progressing";
    /// The resource cannot be served as written, or an apply failed.
    pub const DEGRADED: &str = "Degraded";
}

/// The observed state.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenRouterDeploymentStatus {
    /// `Ready`, `Progressing`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Groups whose every model is ready (the scale subresource's replicas).
    #[serde(default)]
    pub groups: i32,
    /// Groups the operator (or `spec.groups`) asks for.
    #[serde(default)]
    pub desired_groups: i32,
    /// Label selector of the model pods (the scale subresource's selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Per model: ready and desired replicas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelStatus>,
    /// The delayed-batching table in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<AppliedThresholds>,
    /// Measured share of tokens written by the non-entry models (tune loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub large_share: Option<f64>,
    /// Running + waiting requests the autoscaler last saw (none: no metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_concurrency: Option<i64>,
    /// When the group count last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// The tune loop's last round and estimate (written only by the tune loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<TuningStatus>,
}

/// One model's replicas.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// Model name.
    pub name: String,
    /// Ready pods.
    pub ready_replicas: i32,
    /// Desired pods (= groups).
    pub replicas: i32,
}

/// The B table in force, where it came from and since when.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedThresholds {
    /// B per model, indexed by concurrency − 1 (empty: no delayed batching).
    pub table: BTreeMap<String, Vec<i64>>,
    /// `fixed` (from the spec) or `tuned` (from the tune loop).
    pub source: ThresholdSource,
    /// When this table was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<Time>,
}

/// Origin of the B table.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdSource {
    /// Written in `spec.delayedBatching.thresholds` (or none).
    Fixed,
    /// Chosen by the tune loop from live metrics.
    Tuned,
}

/// What the tune loop did last, and the estimate behind the table in force.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TuningStatus {
    /// Result of the last round: `pushed`, `kept`, `too_few_samples`, `baseline`,
    /// `no_pods`, `disabled`, or an error type (`pod_error`, `prometheus_error`,
    /// `tuner_error`, `kube_error`).
    pub last_result: String,
    /// Why (the too-few-samples reason, the error) or what (the predicted gain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the last round ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_round_time: Option<Time>,
    /// Pods the last round read (and pushed to).
    #[serde(default)]
    pub pods: i32,
    /// The last estimate (from the last round that produced one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<TuningEstimate>,
}

/// One estimate of the delayed-batching chain's inputs and the tuner's prediction.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TuningEstimate {
    /// When it was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// Per model (entry model first): routing, credit, latency and samples.
    pub models: Vec<ModelEstimate>,
    /// Largest active concurrency seen in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_concurrency: Option<i64>,
    /// Predicted output tokens/s of the proposed table at concurrency 1, 2, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predicted_tokens_per_second: Vec<f64>,
    /// Largest predicted gain of the proposed table over the applied one, percent
    /// (absent when nothing comparable was applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gain_percent: Option<f64>,
    /// The concurrency of that gain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gain_at_concurrency: Option<i64>,
}

/// One model's row of the estimate.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelEstimate {
    /// Model name.
    pub name: String,
    /// Row of the routing matrix P: where a request goes after a step on this model,
    /// in the order of `models`.
    pub routing: Vec<f64>,
    /// Row of the credit matrix C: output tokens each move credits.
    pub credit: Vec<f64>,
    /// Routing decisions behind the row (samples).
    pub decisions: f64,
    /// Measured step latency by batch size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_latency: Vec<LatencyPoint>,
    /// Steps behind the latency points.
    pub latency_samples: f64,
}

/// Step latency at one batch size.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LatencyPoint {
    /// Requests in the step (0: the same at every batch size).
    pub batch_size: i64,
    /// Mean step time, ms.
    pub ms: f64,
}
