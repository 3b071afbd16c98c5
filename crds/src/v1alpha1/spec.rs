//! The desired state a user writes: `spec` of a `TokenRouterDeployment`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LocalObjectReference, ResourceRequirements, Toleration};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::{mps_daemon, optional_open_object, short_name};
use super::status::TokenRouterDeploymentStatus;

/// A routed group of models (one OpenAI endpoint), served on Kubernetes.
///
/// The operator turns one resource into, per model, a StatefulSet whose
/// ordinal k is group k (or one StatefulSet of whole groups with
/// `placement: podPerGroup`), a headless Service per model, a ConfigMap with
/// the rendered engine config, and a gateway Deployment + Service.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "tokenrouter.io",
    version = "v1alpha1",
    kind = "TokenRouterDeployment",
    plural = "tokenrouterdeployments",
    shortname = "trd",
    namespaced,
    status = "TokenRouterDeploymentStatus",
    scale(
        spec_replicas_path = ".spec.groups",
        status_replicas_path = ".status.groups",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Groups","type":"integer","jsonPath":".status.groups"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".status.desiredGroups"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Policy","type":"string","jsonPath":".spec.policy.class"}"#,
    printcolumn = r#"{"name":"Large share","type":"number","jsonPath":".status.largeShare"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TokenRouterDeploymentSpec {
    /// The models of one group, in index order; exactly one has `entry: true`.
    #[schemars(length(min = 1, max = 8))]
    pub models: Vec<ModelSpec>,
    /// Engine image (`tokenrouter`) for every model that does not override it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `tch` (real weights, default) or `sim` (the simulator: no weights, no GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// Default device of every model (`cpu`, `cuda`, `cuda:N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Default dtype of every model (`f32`, `bf16`, `f16`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Dtype>,
    /// The routing policy of the group.
    pub policy: PolicySpec,
    /// When a model may step (the engine's `execution_mode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_mode: Option<ExecutionMode>,
    /// Delayed batching: the thresholds B per model and concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed_batching: Option<DelayedBatchingSpec>,
    /// `podPerModel` (default): a pod per model, TCP hand-overs, a group's
    /// pods on one node. `podPerGroup`: a whole group in one pod and process.
    #[serde(default)]
    pub placement: Placement,
    /// Where the model pods run (GPU node pool, MPS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<NodePoolSpec>,
    /// The OpenAI-compatible gateway in front of the groups.
    #[serde(default)]
    pub gateway: GatewaySpec,
    /// Group count when the operator does not autoscale (`autoscaling.enabled:
    /// false`): written by users, HPA or KEDA through the scale subresource.
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub groups: i32,
    /// Autoscaling by concurrency (the operator is the single writer of the
    /// group count while `enabled`).
    #[serde(default)]
    pub autoscaling: AutoscalingSpec,
    /// Live retuning of B from routing metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<TuningSpec>,
    /// Sampling defaults of the served models: a request that leaves a
    /// field out (or sets it to null) gets this value (the engine config's
    /// `generation_config`, vLLM's `--override-generation-config`, over the
    /// entry model's `generation_config.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_config: Option<GenerationConfigSpec>,
    /// Peer (TCP hand-over) and admin ports of the model pods.
    #[serde(default)]
    pub ports: PortsSpec,
    /// Create a Prometheus-operator `ServiceMonitor` for the model pods.
    #[serde(default)]
    pub service_monitor: bool,
    /// Pull secrets of every pod the resource runs (model pods and gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

/// One model of the group.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// Model name: the engine config's key, part of object names.
    #[schemars(schema_with = "short_name")]
    pub name: String,
    /// The model that admits requests and streams answers (exactly one).
    #[serde(default)]
    pub entry: bool,
    /// Where the weights come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ModelSource>,
    /// Image override for this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Dtype override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Dtype>,
    /// Device override (`cpu`, `cuda`, `cuda:N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Container resources, e.g. `limits: {nvidia.com/gpu: 1}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Policy arguments merged over `policy.kwargs` in this model's pod
    /// (e.g. a router path that differs per model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_open_object")]
    pub policy_kwargs: Option<serde_json::Value>,
    /// Simulator settings (`backend: sim`): the engine's `model.<name>.sim`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_open_object")]
    pub sim: Option<serde_json::Value>,
    /// Size of this model's KV cache. Unset: 0.2 of the pod's memory limit
    /// on the CPU (of the host's available memory without a limit), 0.85 of
    /// the GPU with the weights on CUDA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache: Option<KvCacheSpec>,
    /// libtorch intra-op threads of this model's process. Unset: the pod's
    /// CPU limit (its cores without one), shared by the models of a
    /// `podPerGroup` pod. With `podPerGroup` the process takes the largest
    /// value its models set (the thread pool is per process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub threads: Option<i32>,
    /// Parameter count of the model (from its model card or
    /// `model.safetensors.index.json`): with the dtype it gives the weights'
    /// bytes, which the operator checks against a GPU pod's memory share
    /// (`nodePool.gpuMemoryGiB`). The operator cannot read the weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parameters: Option<i64>,
}

/// A KV cache size: a token count or a fraction of memory (one of the two).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvCacheSpec {
    /// Exactly this many tokens (the engine's `kv_cache_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tokens: Option<i64>,
    /// This fraction (0, 1] of the pod's memory limit on the CPU (read from
    /// its cgroup; the pool is capped to fit beside the weights), or of the
    /// GPU with the weights on CUDA (the engine's `mem_fraction_static`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_fraction: Option<f64>,
}

/// Where a model's weights live (one of the three).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSource {
    /// A PersistentVolumeClaim (mounted read-only) and the model directory in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcSource>,
    /// A directory on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// A directory baked into the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_path: Option<String>,
}

/// A model directory inside a PVC.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcSource {
    /// The claim's name.
    pub claim_name: String,
    /// The model directory inside the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
}

/// The engine's runner.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// libtorch forwards over real weights.
    Tch,
    /// The simulator.
    Sim,
}

/// Model dtype.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// float32
    F32,
    /// bfloat16
    Bf16,
    /// float16
    F16,
}

/// The routing policy.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    /// The engine's `scheduler_class` (`R2R`, `CITER`, `CoLLM`, `RStitch`, `ME`, ...).
    #[schemars(length(min = 1, max = 64))]
    pub class: String,
    /// The engine's `scheduler_kwargs`, passed as given (unknown fields kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_open_object")]
    pub kwargs: Option<serde_json::Value>,
    /// Share of output tokens the non-entry models should write, in (0, 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_large_share: Option<f64>,
}

/// The engine's execution modes.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionMode {
    /// Each model steps once B requests want it (default).
    AsyncDelayed,
    /// Each model steps as soon as one request wants it.
    Async,
    /// All models step together behind a barrier.
    Lockstep,
    /// One model at a time.
    Serial,
}

/// Delayed batching.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DelayedBatchingSpec {
    /// `fixed`: use `thresholds` as given. `auto` (default): start from
    /// `thresholds` (or none) and let the tune loop replace them.
    #[serde(default)]
    pub mode: DelayedBatchingMode,
    /// B per model, indexed by concurrency − 1 (each ≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<BTreeMap<String, Vec<i64>>>,
    /// Upper bound on any delayed-batching wait, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch_wait_ms: Option<f64>,
}

/// Who sets B.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DelayedBatchingMode {
    /// The tune loop sets B from live metrics.
    #[default]
    Auto,
    /// B stays as written.
    Fixed,
}

/// How the models of a group map to pods.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Placement {
    /// One subserver pod per model; pods of group k co-located.
    #[default]
    PodPerModel,
    /// One pod per group, every model in one process (in-process transport).
    PodPerGroup,
}

/// The node pool of the model pods.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// Node labels the model pods require.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints the model pods tolerate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// CUDA MPS: the models of a group share GPUs with bounded SM shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps: Option<MpsSpec>,
    /// Memory of one GPU of the pool in GiB (e.g. 79.6 for an 80 GB H100,
    /// as `nvidia-smi` reports it). With it and each model's `parameters`
    /// the operator refuses a spec whose weights cannot fit a pod's share
    /// (the whole GPU, or GPU / `mps.replicas` under MPS).
    #[serde(
        default,
        rename = "gpuMemoryGiB",
        skip_serializing_if = "Option::is_none"
    )]
    pub gpu_memory_gib: Option<f64>,
    /// RuntimeClass of the model pods (e.g. `nvidia` where the NVIDIA
    /// container runtime is not the node's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
}

/// CUDA Multi-Process Service settings, through the NVIDIA device plugin's
/// MPS sharing (`sharing.mps.resources: [{name: nvidia.com/gpu, replicas:
/// N}]`). The plugin runs one control daemon per GPU, gives every container
/// that requests `nvidia.com/gpu` its pipe directory (env and mount), caps
/// each client at the GPU's memory / N (`set_default_device_pinned_mem_limit`)
/// and 100 / N % of the SMs. The pods carry no `CUDA_MPS_*` env and no host
/// path of their own.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MpsSpec {
    /// Turn MPS on for the model pods.
    #[serde(default)]
    pub enabled: bool,
    /// The device plugin's `replicas` per GPU (GKE: the node pool's
    /// `max-shared-clients-per-gpu`), at least 2 as the plugin requires:
    /// each model pod (client) may use 1/replicas of a GPU's memory, and the
    /// engine plans its KV cache from that share, not from the whole device.
    /// The model pods select nodes labelled with this count.
    #[serde(default = "two")]
    #[schemars(range(min = 1, max = 64))]
    pub replicas: i32,
    /// Who runs the control daemon: only `devicePlugin` (the former
    /// `sidecar` mode could not get a GPU and is refused).
    #[serde(default)]
    #[schemars(schema_with = "mps_daemon")]
    pub daemon: MpsDaemon,
    /// Whose device plugin shares the GPUs: `nvidia` (default: NVIDIA's
    /// k8s-device-plugin with `sharing.mps` and GPU feature discovery) or
    /// `gke` (GKE's own plugin on a node pool created with
    /// `gpu-sharing-strategy=mps`).
    #[serde(default)]
    pub provider: MpsProvider,
}

/// The device plugin that runs MPS on the GPU nodes.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum MpsProvider {
    /// NVIDIA's k8s-device-plugin: caps each client as MPS daemon defaults
    /// (which a client cannot read), so the operator renders the KV memory
    /// fraction divided by `replicas`. Pods select the labels GPU feature
    /// discovery sets: `nvidia.com/gpu.sharing-strategy: mps` and
    /// `nvidia.com/gpu.replicas`.
    #[default]
    Nvidia,
    /// GKE's device plugin: injects `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` into
    /// each client, which the engine reads, so the fraction is rendered as
    /// asked; pods select `cloud.google.com/gke-gpu-sharing-strategy: mps`
    /// and `cloud.google.com/gke-max-shared-clients-per-gpu`, and run with
    /// `hostIPC: true` as GKE requires (Pod Security `privileged` level).
    Gke,
}

/// Who runs the MPS control daemon.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum MpsDaemon {
    /// The NVIDIA device plugin (`sharing.mps`).
    #[default]
    DevicePlugin,
}

fn two() -> i32 {
    2
}

/// The gateway.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// Gateway pods.
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Gateway image (default: the engine image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Service type: `ClusterIP` (default), `NodePort` or `LoadBalancer`.
    #[serde(default)]
    pub service_type: ServiceType,
    /// Service port.
    #[serde(default = "default_gateway_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Model name clients send (`served_model_name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model_name: Option<String>,
    /// A Secret whose key holds the accepted API keys (one per line or comma separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret_ref: Option<SecretKeyRef>,
    /// Requests generating at once per gateway pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_inflight: Option<i64>,
    /// Requests waiting for a slot per gateway pod (beyond: 429).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_queue: Option<i64>,
    /// Gateway container resources. Unset: requests `cpu: 250m, memory:
    /// 256Mi`, limits `cpu: "2", memory: 1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

impl Default for GatewaySpec {
    fn default() -> Self {
        Self {
            replicas: 1,
            image: None,
            service_type: ServiceType::default(),
            port: default_gateway_port(),
            served_model_name: None,
            api_key_secret_ref: None,
            max_inflight: None,
            max_queue: None,
            resources: None,
        }
    }
}

fn one() -> i32 {
    1
}

fn default_gateway_port() -> i32 {
    8000
}

/// A key of a Secret in the resource's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key in the Secret (default `api-keys`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Kubernetes Service types the gateway may use.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ServiceType {
    /// Cluster-internal.
    #[default]
    ClusterIP,
    /// A port on every node.
    NodePort,
    /// A cloud load balancer.
    LoadBalancer,
}

/// Autoscaling by concurrency.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingSpec {
    /// The operator sets the group count from the gateway's load. Off: the
    /// count is `spec.groups` (the scale subresource; HPA or KEDA may own it).
    #[serde(default)]
    pub enabled: bool,
    /// Fewest groups.
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub min_groups: i32,
    /// Most groups.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub max_groups: i32,
    /// Running + waiting requests one group should carry.
    #[serde(default = "default_target_concurrency")]
    #[schemars(range(min = 1))]
    pub target_concurrency_per_group: i32,
    /// A scale-up waits until the higher count has been wanted this long.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub scale_up_stabilization_seconds: i32,
    /// A scale-down uses the highest count wanted in this window.
    #[serde(default = "default_scale_down_window")]
    #[schemars(range(min = 0))]
    pub scale_down_stabilization_seconds: i32,
}

impl Default for AutoscalingSpec {
    fn default() -> Self {
        Self {
            enabled: false,
            min_groups: 1,
            max_groups: 1,
            target_concurrency_per_group: default_target_concurrency(),
            scale_up_stabilization_seconds: 0,
            scale_down_stabilization_seconds: default_scale_down_window(),
        }
    }
}

fn default_target_concurrency() -> i32 {
    16
}

fn default_scale_down_window() -> i32 {
    300
}

/// Live retuning of B (used by the tune loop).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TuningSpec {
    /// Seconds between two tuning rounds.
    #[serde(default = "default_tuning_interval")]
    #[schemars(range(min = 1))]
    pub interval_seconds: i32,
    /// Fewest routed steps a round needs before it may change B.
    #[serde(default = "default_min_samples")]
    #[schemars(range(min = 1))]
    pub min_samples: i64,
    /// Relative throughput gain a new table must promise to replace the old one.
    #[serde(default = "default_hysteresis")]
    pub hysteresis: f64,
    /// Read metrics from this Prometheus instead of the pods' `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus_url: Option<String>,
    /// Largest concurrency the tuned table covers (default: the gateway's
    /// `maxInflight` × replicas shared by the groups, else the autoscaler's
    /// `targetConcurrencyPerGroup`; at most 64). Beyond it the last entry holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub max_concurrency: Option<i32>,
}

fn default_tuning_interval() -> i32 {
    300
}

fn default_min_samples() -> i64 {
    1000
}

fn default_hysteresis() -> f64 {
    0.02
}

/// Ports of the model pods.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortsSpec {
    /// TCP hand-overs between the models of a group.
    #[serde(default = "default_peer_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub peer: i32,
    /// `/metrics`, `/health`, `/admin/*` and the entry's `/internal/generate`.
    #[serde(default = "default_admin_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub admin: i32,
}

impl Default for PortsSpec {
    fn default() -> Self {
        Self {
            peer: default_peer_port(),
            admin: default_admin_port(),
        }
    }
}

fn default_peer_port() -> i32 {
    7000
}

fn default_admin_port() -> i32 {
    8080
}

/// Sampling defaults (`spec.generationConfig`); each field is optional and
/// range-checked as the engine checks a request's value.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct GenerationConfigSpec {
    /// Default temperature, in [0, 100]; 0 is greedy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub temperature: Option<f64>,
    /// Default top-p, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1.0))]
    pub top_p: Option<f64>,
    /// Default top-k: -1 or 0 off, k > 0 keeps the k most likely tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub top_k: Option<i64>,
    /// Default min-p, in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_p: Option<f64>,
}
