//! CEL rules (`x-kubernetes-validations`) the API server checks on every
//! write, added to the derived schema at the path each rule guards.
//!
//! Every rule keeps to bounded lists and maps so the API server's CEL cost
//! estimate accepts it (`maxItems` / `maxProperties` are set beside them).

use serde_json::{json, Value};

/// A rule at a JSON pointer below `openAPIV3Schema`.
pub struct Rule {
    /// Where the rule sits (`""` is the root object).
    pub at: &'static str,
    /// The CEL expression (`self` is the object at `at`).
    pub rule: &'static str,
    /// What the API server answers when it fails.
    pub message: &'static str,
}

/// Every rule of `TokenRouterDeployment` v1alpha1.
pub const RULES: &[Rule] = &[
    Rule {
        at: "/properties/spec",
        rule: "self.models.filter(m, has(m.entry) && m.entry).size() == 1",
        message: "exactly one model must have entry: true",
    },
    Rule {
        at: "/properties/spec",
        rule: "self.models.all(m, self.models.filter(n, n.name == m.name).size() == 1)",
        message: "model names must be unique",
    },
    Rule {
        at: "/properties/spec",
        rule: "!has(self.delayedBatching) || !has(self.delayedBatching.thresholds) || self.delayedBatching.thresholds.all(k, self.models.exists(m, m.name == k))",
        message: "delayedBatching.thresholds: every key must be a model name",
    },
    Rule {
        at: "/properties/spec/properties/models/items",
        rule: "!(self.name in ['group', 'gateway'])",
        message: "a model may not be named group or gateway: NAME-group is the podPerGroup StatefulSet's name, NAME-gateway the gateway's Service",
    },
    Rule {
        at: "/properties/spec/properties/delayedBatching/properties/thresholds",
        rule: "self.all(k, self[k].all(b, b >= 1))",
        message: "delayed-batching thresholds must be >= 1",
    },
    Rule {
        at: "/properties/spec/properties/delayedBatching",
        rule: "!has(self.mode) || self.mode != 'fixed' || has(self.thresholds)",
        message: "mode fixed needs thresholds",
    },
    Rule {
        at: "/properties/spec/properties/delayedBatching",
        rule: "!has(self.maxBatchWaitMs) || self.maxBatchWaitMs > 0.0",
        message: "maxBatchWaitMs must be > 0",
    },
    Rule {
        at: "/properties/spec/properties/autoscaling",
        rule: "(has(self.minGroups) ? self.minGroups : 1) <= (has(self.maxGroups) ? self.maxGroups : 1)",
        message: "autoscaling.minGroups must be <= autoscaling.maxGroups",
    },
    Rule {
        at: "/properties/spec/properties/policy",
        rule: "!has(self.targetLargeShare) || (self.targetLargeShare > 0.0 && self.targetLargeShare < 1.0)",
        message: "policy.targetLargeShare must be in (0, 1)",
    },
    Rule {
        at: "/properties/spec",
        rule: "!has(self.executionMode) || self.executionMode in ['async_delayed', 'async', 'lockstep', 'serial']",
        message: "executionMode must be one of async_delayed, async, lockstep, serial",
    },
    Rule {
        at: "/properties/spec/properties/nodePool/properties/mps",
        rule: "!has(self.daemon) || self.daemon == 'devicePlugin'",
        message: "nodePool.mps.daemon: only devicePlugin is supported (the sidecar mode was removed: a sidecar gets no GPU from the device plugin); configure the NVIDIA device plugin's sharing.mps",
    },
    Rule {
        at: "/properties/spec/properties/nodePool/properties/mps",
        rule: "!has(self.replicas) || self.replicas >= 2",
        message: "nodePool.mps.replicas must be >= 2: the NVIDIA device plugin refuses sharing.mps replicas below 2 (and GKE's max-shared-clients-per-gpu starts at 2)",
    },
    Rule {
        at: "/properties/spec",
        rule: "!has(self.nodePool) || !has(self.nodePool.mps) || !has(self.nodePool.mps.enabled) || !self.nodePool.mps.enabled || self.models.all(m, !has(m.resources) || !has(m.resources.limits) || ['nvidia.com/gpu', 'nvidia.com/gpu.shared'].all(r, !(r in m.resources.limits) || string(m.resources.limits[r]) in ['0', '1']))",
        message: "nodePool.mps: each model pod is one MPS client and may request at most 1 nvidia.com/gpu (or nvidia.com/gpu.shared): the device plugin refuses larger requests for shared GPUs",
    },
    Rule {
        at: "/properties/spec/properties/nodePool",
        rule: "!has(self.gpuMemoryGiB) || self.gpuMemoryGiB > 0.0",
        message: "nodePool.gpuMemoryGiB must be > 0",
    },
    Rule {
        at: "/properties/spec/properties/generationConfig",
        rule: "!has(self.topP) || self.topP > 0.0",
        message: "generationConfig.topP must be in (0, 1]",
    },
    Rule {
        at: "/properties/spec/properties/models/items/properties/kvCache",
        rule: "has(self.tokens) != has(self.memoryFraction)",
        message: "kvCache: set exactly one of tokens and memoryFraction",
    },
    Rule {
        at: "/properties/spec/properties/models/items/properties/kvCache",
        rule: "!has(self.memoryFraction) || (self.memoryFraction > 0.0 && self.memoryFraction <= 1.0)",
        message: "kvCache.memoryFraction must be in (0, 1]",
    },
    Rule {
        at: "",
        rule: "(has(self.spec.placement) && self.spec.placement == 'podPerGroup') ? size(self.metadata.name) <= 46 : self.spec.models.all(m, size(self.metadata.name) + size(m.name) <= 51)",
        message: "name too long: NAME-MODEL (or NAME-group with podPerGroup) names a StatefulSet and must be at most 52 characters",
    },
];

/// Size bounds that keep the rules' cost estimate finite.
const BOUNDS: &[(&str, &str, u64)] = &[
    (
        "/properties/spec/properties/delayedBatching/properties/thresholds",
        "maxProperties",
        8,
    ),
    (
        "/properties/spec/properties/delayedBatching/properties/thresholds/additionalProperties",
        "maxItems",
        4096,
    ),
];

/// Adds [`RULES`] and the size bounds to `schema` (an `openAPIV3Schema`).
/// Panics when a path does not exist: the rules and the types are out of
/// step, which the crate's tests catch.
pub fn apply(schema: &mut Value) {
    for (at, key, bound) in BOUNDS {
        let node = schema
            .pointer_mut(at)
            .unwrap_or_else(|| panic!("schema has no {at}"));
        node[*key] = json!(bound);
    }
    for rule in RULES {
        let node = schema
            .pointer_mut(rule.at)
            .unwrap_or_else(|| panic!("schema has no {}", rule.at));
        let list = node
            .as_object_mut()
            .expect("schema node is an object")
            .entry("x-kubernetes-validations")
            .or_insert_with(|| json!([]));
        list.as_array_mut()
            .expect("validations are a list")
            .push(json!({"rule": rule.rule, "message": rule.message}));
    }
}
