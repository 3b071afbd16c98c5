//! CUDA MPS for the model pods: the pool's node selector and tolerations,
//! the shared pipe/log directory, the per-model SM share, and (optionally)
//! a control-daemon sidecar.
//!
//! Two ways to run the daemon, chosen by `nodePool.mps.daemon`:
//! * `devicePlugin` (default): the NVIDIA device plugin's MPS sharing
//!   (`sharing.mps` in its config) runs one daemon per GPU and hands out
//!   `nvidia.com/gpu` replicas; the pods only join its pipe directory.
//! * `sidecar`: each pod starts `nvidia-cuda-mps-control -f` as a native
//!   sidecar (an init container that keeps running) on the shared host
//!   directory, so the first pod of a group on a node starts the daemon and
//!   the others connect to it.

use crds::v1alpha1::{MpsDaemon, MpsSpec};
use k8s_openapi::api::core::v1::{Container, EnvVar, HostPathVolumeSource, Volume, VolumeMount};

use super::pod::{container_security, env};

/// Default host directory of the MPS pipes.
pub const DEFAULT_PIPE_DIR: &str = "/run/nvidia/mps";

/// The volume name of the shared MPS directory.
const VOLUME: &str = "mps";

/// MPS settings in force for a pod, if MPS is enabled.
pub fn enabled(spec: Option<&MpsSpec>) -> Option<&MpsSpec> {
    spec.filter(|m| m.enabled)
}

fn pipe_dir(mps: &MpsSpec) -> String {
    mps.pipe_directory
        .clone()
        .unwrap_or_else(|| DEFAULT_PIPE_DIR.into())
}

/// `CUDA_MPS_*` env of a pod serving `models` (one: its SM share applies).
pub fn env_vars(mps: &MpsSpec, models: &[&str]) -> Vec<EnvVar> {
    let dir = pipe_dir(mps);
    let mut out = vec![
        env("CUDA_MPS_PIPE_DIRECTORY", dir.clone()),
        env("CUDA_MPS_LOG_DIRECTORY", format!("{dir}/log")),
    ];
    if let [model] = models {
        if let Some(pct) = mps
            .active_thread_percentage
            .as_ref()
            .and_then(|m| m.get(*model))
        {
            out.push(env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct.to_string()));
        }
    }
    out
}

/// The shared host directory and its mount (same path inside the pod).
pub fn volume(mps: &MpsSpec) -> (Volume, VolumeMount) {
    let dir = pipe_dir(mps);
    (
        Volume {
            name: VOLUME.into(),
            host_path: Some(HostPathVolumeSource {
                path: dir.clone(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Default::default()
        },
        VolumeMount {
            name: VOLUME.into(),
            mount_path: dir,
            ..Default::default()
        },
    )
}

/// The control-daemon sidecar (`daemon: sidecar`), as a native sidecar
/// init container (`restartPolicy: Always`).
pub fn sidecar(mps: &MpsSpec, image: &str) -> Option<Container> {
    if mps.daemon != MpsDaemon::Sidecar {
        return None;
    }
    let (_, mount) = volume(mps);
    Some(Container {
        name: "mps-control".into(),
        image: Some(image.into()),
        command: Some(vec!["nvidia-cuda-mps-control".into(), "-f".into()]),
        env: Some(env_vars(mps, &[])),
        volume_mounts: Some(vec![mount]),
        restart_policy: Some("Always".into()),
        security_context: Some(container_security()),
        ..Default::default()
    })
}
