//! CUDA MPS through the NVIDIA device plugin's MPS sharing, and the memory
//! share a GPU pod may use.
//!
//! The plugin (`sharing.mps.resources: [{name: nvidia.com/gpu, replicas:
//! N}]`) runs one control daemon per GPU and gives each container that
//! requests `nvidia.com/gpu` the daemon's `CUDA_MPS_PIPE_DIRECTORY` and its
//! pipe and `/dev/shm` mounts. It caps every client as daemon defaults
//! (`set_default_device_pinned_mem_limit <dev> <total/N>M`,
//! `set_default_active_thread_percentage 100/N`), which a client cannot see:
//! `cudaMemGetInfo` still reports the whole GPU. So the pods carry no
//! `CUDA_MPS_*` env and no host path of their own (either would fight the
//! plugin's), and the operator tells the engine its share by dividing the
//! KV memory fraction by N (see [`kv_fraction`]).
//!
//! The plugin advertises shared GPUs only where its MPS control daemon
//! runs, which its chart schedules on nodes labelled
//! `nvidia.com/mps.capable=true` by GPU feature discovery; feature discovery
//! also labels `nvidia.com/gpu.sharing-strategy=mps` and
//! `nvidia.com/gpu.replicas=N`, which the model pods select ([`node_selector`]).
//!
//! GKE's own device plugin (`provider: gke`) works differently: it injects
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` (the GPU's memory / clients) into
//! every client, which the engine reads and sizes against, so the fraction
//! is not divided a second time; its clients need `hostIPC`, and its nodes
//! carry `cloud.google.com/gke-gpu-sharing-strategy=mps` and
//! `cloud.google.com/gke-max-shared-clients-per-gpu=N`.

use std::collections::BTreeMap;

use crds::v1alpha1::{MpsProvider, MpsSpec, NodePoolSpec, TokenRouterDeploymentSpec};

/// The engine's default `mem_fraction_static` on CUDA (engine-config's
/// `DEFAULT_MEM_FRACTION_CUDA`): weights plus KV take this much of the device.
pub const DEFAULT_CUDA_FRACTION: f64 = 0.85;

/// MPS settings in force for a pod, if MPS is enabled.
pub fn enabled(spec: Option<&MpsSpec>) -> Option<&MpsSpec> {
    spec.filter(|m| m.enabled)
}

/// The MPS settings of `spec`'s node pool, if MPS is enabled.
pub fn of(spec: &TokenRouterDeploymentSpec) -> Option<&MpsSpec> {
    enabled(spec.node_pool.as_ref().and_then(|p| p.mps.as_ref()))
}

/// How many clients share one GPU (1 without MPS).
pub fn clients_per_gpu(spec: &TokenRouterDeploymentSpec) -> i32 {
    of(spec).map_or(1, |m| m.replicas.max(1))
}

/// Bytes one GPU pod may use: the GPU's memory (`nodePool.gpuMemoryGiB`)
/// divided among the MPS clients that share it; `None` when not declared.
pub fn pod_share_bytes(spec: &TokenRouterDeploymentSpec) -> Option<u64> {
    let gib = spec
        .node_pool
        .as_ref()
        .and_then(|p: &NodePoolSpec| p.gpu_memory_gib)?;
    let bytes = gib * (1u64 << 30) as f64;
    Some((bytes / f64::from(clients_per_gpu(spec))) as u64)
}

/// The `mem_fraction_static` to render for a model on CUDA: the one the
/// user asked for (or the engine's default) of the client's share, written
/// as a fraction of the whole device, since the engine sizes against the
/// device total that `cudaMemGetInfo` reports. Without MPS it is unchanged.
/// Under GKE's provider the engine reads the injected per-client limit, so
/// the fraction stays as asked.
pub fn kv_fraction(spec: &TokenRouterDeploymentSpec, asked: Option<f64>) -> Option<f64> {
    let clients = clients_per_gpu(spec);
    if clients == 1 || provider(spec) == Some(MpsProvider::Gke) {
        return asked;
    }
    Some(asked.unwrap_or(DEFAULT_CUDA_FRACTION) / f64::from(clients))
}

/// The MPS provider, if MPS is enabled.
pub fn provider(spec: &TokenRouterDeploymentSpec) -> Option<MpsProvider> {
    of(spec).map(|m| m.provider)
}

/// The node labels of GPUs shared through MPS with `replicas` clients, as
/// each provider sets them.
pub fn node_labels(mps: &MpsSpec) -> BTreeMap<String, String> {
    let (strategy, count) = match mps.provider {
        MpsProvider::Nvidia => ("nvidia.com/gpu.sharing-strategy", "nvidia.com/gpu.replicas"),
        MpsProvider::Gke => (
            "cloud.google.com/gke-gpu-sharing-strategy",
            "cloud.google.com/gke-max-shared-clients-per-gpu",
        ),
    };
    BTreeMap::from([
        (strategy.to_string(), "mps".to_string()),
        (count.to_string(), mps.replicas.to_string()),
    ])
}

/// The model pods' node selector: under MPS the provider's sharing labels
/// ([`node_labels`]), with `nodePool.nodeSelector` over them (a key the
/// user sets wins); without MPS the user's selector alone.
pub fn node_selector(spec: &TokenRouterDeploymentSpec) -> Option<BTreeMap<String, String>> {
    let user = spec
        .node_pool
        .as_ref()
        .and_then(|p| p.node_selector.clone());
    let Some(mps) = of(spec) else {
        return user;
    };
    let mut labels = node_labels(mps);
    labels.extend(user.unwrap_or_default());
    Some(labels)
}

/// `hostIPC` for the model pods: GKE's MPS clients need the host's IPC
/// namespace; NVIDIA's plugin mounts what its clients need instead.
pub fn host_ipc(spec: &TokenRouterDeploymentSpec) -> Option<bool> {
    (provider(spec) == Some(MpsProvider::Gke)).then_some(true)
}
