//! Whether each GPU pod's models fit the GPU memory it may use: the whole
//! GPU, or under MPS the device plugin's per-client cap (GPU / replicas).
//!
//! The operator cannot read the weights, so it counts what the spec
//! declares: `nodePool.gpuMemoryGiB` and each model's `parameters` (times
//! its dtype's bytes). A pod whose figures are not all declared is not
//! checked. The arithmetic is the engine's (`plan_kv_tokens`): weights and
//! KV take `mem_fraction_static` of the memory; the KV cache gets the rest.

use crds::v1alpha1::{Dtype, ModelSpec, Placement};
use crds::TokenRouterDeployment;

use crate::build::engine::on_cuda;
use crate::build::mps;

const GIB: f64 = (1u64 << 30) as f64;

/// The memory plan of one GPU pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodFit {
    /// The models the pod's process loads.
    pub models: Vec<String>,
    /// Bytes of their weights.
    pub weight_bytes: u64,
    /// Bytes the pod may use (its share of the GPU).
    pub share_bytes: u64,
    /// The memory fraction weights plus KV may take of the share.
    pub fraction: f64,
    /// MPS clients per GPU (1 without MPS).
    pub clients: i32,
}

impl PodFit {
    /// Bytes left for the KV cache (negative: the weights do not fit).
    pub fn kv_bytes(&self) -> i64 {
        (self.share_bytes as f64 * self.fraction) as i64 - self.weight_bytes as i64
    }

    /// The figures, for a status message.
    pub fn describe(&self) -> String {
        let share = if self.clients > 1 {
            format!(
                "a {:.1} GiB MPS share (the GPU / {} device-plugin replicas)",
                self.share_bytes as f64 / GIB,
                self.clients
            )
        } else {
            format!("a {:.1} GiB GPU", self.share_bytes as f64 / GIB)
        };
        format!(
            "{} need {:.1} GiB of weights in {share}; at mem fraction {} that leaves {:.1} GiB for the KV cache",
            self.models.join(" + "),
            self.weight_bytes as f64 / GIB,
            self.fraction,
            self.kv_bytes() as f64 / GIB
        )
    }
}

fn dtype_bytes(dtype: Option<Dtype>) -> u64 {
    match dtype {
        Some(Dtype::F32) => 4,
        // bf16 is what `dtype: auto` picks on a GPU.
        Some(Dtype::Bf16 | Dtype::F16) | None => 2,
    }
}

/// The plan of a pod loading `models`; `None` when one is not on a GPU or
/// lacks `parameters`, or the GPU's memory is not declared.
fn pod_fit(trd: &TokenRouterDeployment, models: &[&ModelSpec]) -> Option<PodFit> {
    let share_bytes = mps::pod_share_bytes(&trd.spec)?;
    let mut weight_bytes = 0;
    let mut fraction: f64 = 1.0;
    for m in models {
        if !on_cuda(&trd.spec, m) {
            return None;
        }
        let params = u64::try_from(m.parameters?).ok()?;
        weight_bytes += params * dtype_bytes(m.dtype.or(trd.spec.dtype));
        // In one process each model plans with its own fraction (or the
        // engine's default): the smallest bounds the group.
        let asked = m.kv_cache.as_ref().and_then(|kv| kv.memory_fraction);
        fraction = fraction.min(asked.unwrap_or(mps::DEFAULT_CUDA_FRACTION));
    }
    Some(PodFit {
        models: models.iter().map(|m| m.name.clone()).collect(),
        weight_bytes,
        share_bytes,
        fraction,
        clients: mps::clients_per_gpu(&trd.spec),
    })
}

/// The plan of every GPU a pod of `trd` uses whose figures are declared:
/// one per model (`podPerModel`), or per device of the group's pod
/// (`podPerGroup`: the models on one device share its memory).
pub fn pod_fits(trd: &TokenRouterDeployment) -> Vec<PodFit> {
    match trd.spec.placement {
        Placement::PodPerModel => trd
            .spec
            .models
            .iter()
            .filter_map(|m| pod_fit(trd, &[m]))
            .collect(),
        Placement::PodPerGroup => {
            // One process; the models that share a device share its memory.
            let mut by_device: std::collections::BTreeMap<String, Vec<&ModelSpec>> =
                Default::default();
            for m in &trd.spec.models {
                let device = m.device.as_deref().or(trd.spec.device.as_deref());
                let device = match device.unwrap_or("cpu") {
                    "cuda" => "cuda:0",
                    d => d,
                };
                by_device.entry(device.to_string()).or_default().push(m);
            }
            by_device
                .values()
                .filter_map(|models| pod_fit(trd, models))
                .collect()
        }
    }
}

/// The first pod whose weights leave no room for a KV cache, as (reason,
/// message).
pub fn problem(trd: &TokenRouterDeployment) -> Option<(String, String)> {
    let fit = pod_fits(trd).into_iter().find(|f| f.kv_bytes() <= 0)?;
    Some((
        "ModelExceedsGpuShare".into(),
        format!(
            "{}: pick a smaller model or dtype, fewer MPS replicas, a larger GPU, or placement podPerGroup",
            fit.describe()
        ),
    ))
}
