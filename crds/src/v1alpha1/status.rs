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
