//! Pod pieces shared by the model and gateway builders: hardened security
//! contexts, probes, model volumes, env from the downward API and Secrets.

use crds::v1alpha1::ModelSpec;
use crds::TokenRouterDeployment;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, HostPathVolumeSource, ObjectFieldSelector, PersistentVolumeClaimVolumeSource,
    PodSecurityContext, Probe, SeccompProfile, SecretKeySelector, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::engine::model_mount;
use crate::names;

/// The image used when neither the model nor the resource names one.
pub const DEFAULT_IMAGE: &str = "ghcr.io/tokenrouter/tokenrouter:0.1.0";
/// UID of the images' unprivileged user.
pub const RUN_AS_USER: i64 = 65532;

/// Pod-level: non-root, default seccomp, group-writable volumes.
pub fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_USER),
        fs_group: Some(RUN_AS_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Container-level: read-only root, no privilege escalation, no capabilities.
pub fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Readiness: the process and what it needs (peers, groups) are up.
pub const READY_PATH: &str = "/health";
/// Liveness: the process alone (kube-apiserver's name); a peer or group
/// outage must not restart it.
pub const LIVE_PATH: &str = "/livez";

/// An HTTP GET probe on `path` at the named port.
pub fn http_probe(path: &str, port: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(port.into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(5),
        ..Default::default()
    }
}

/// Readiness on [`READY_PATH`] (every 5 s), liveness on [`LIVE_PATH`]
/// (every 10 s, 3 misses), and a startup probe on [`LIVE_PATH`] that allows
/// 20 minutes for loading weights (the HTTP port opens after the load).
pub fn probes(c: &mut Container, port: &str) {
    c.readiness_probe = Some(http_probe(READY_PATH, port, 5, 2));
    c.liveness_probe = Some(http_probe(LIVE_PATH, port, 10, 3));
    c.startup_probe = Some(http_probe(LIVE_PATH, port, 10, 120));
}

/// An env var from a field of the pod (downward API).
pub fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An env var from a Secret key.
pub fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A plain env var.
pub fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// Env every engine pod gets: its group (the StatefulSet ordinal, from the
/// label Kubernetes puts on the pod), its name, and the admin token.
pub fn engine_env(trd: &TokenRouterDeployment) -> Vec<EnvVar> {
    vec![
        field_env(
            names::GROUP_ENV,
            &format!("metadata.labels['{}']", names::POD_INDEX),
        ),
        field_env("POD_NAME", "metadata.name"),
        admin_token_env(trd),
    ]
}

/// The admin bearer token (from the resource's `NAME-admin-token` Secret):
/// engine pods require it on their control endpoints, the gateway sends it.
pub fn admin_token_env(trd: &TokenRouterDeployment) -> EnvVar {
    secret_env(
        names::ADMIN_TOKEN_ENV,
        &names::admin_secret(trd),
        names::ADMIN_TOKEN_KEY,
    )
}

/// The image of `model` (its own, the resource's, or the default).
pub fn model_image(trd: &TokenRouterDeployment, model: &ModelSpec) -> String {
    model
        .image
        .clone()
        .or_else(|| trd.spec.image.clone())
        .unwrap_or_else(|| DEFAULT_IMAGE.into())
}

/// Volume name of a model's weights.
pub fn model_volume_name(model: &str) -> String {
    format!("model-{model}")
}

/// The volume and mount of `model`'s weights (none for an image path or no source).
pub fn model_volume(model: &ModelSpec) -> Option<(Volume, VolumeMount)> {
    let source = model.source.as_ref()?;
    let name = model_volume_name(&model.name);
    let mut mount = VolumeMount {
        name: name.clone(),
        mount_path: model_mount(&model.name),
        read_only: Some(true),
        ..Default::default()
    };
    let volume = if let Some(pvc) = &source.pvc {
        mount.sub_path = pvc.sub_path.clone();
        Volume {
            name,
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc.claim_name.clone(),
                read_only: Some(true),
            }),
            ..Default::default()
        }
    } else if let Some(path) = &source.host_path {
        Volume {
            name,
            host_path: Some(HostPathVolumeSource {
                path: path.clone(),
                type_: Some("Directory".into()),
            }),
            ..Default::default()
        }
    } else {
        return None;
    };
    Some((volume, mount))
}

/// The engine ConfigMap volume (mounted whole, so updates reach the pod).
pub fn config_volume(trd: &TokenRouterDeployment) -> (Volume, VolumeMount) {
    (
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names::engine_config(trd),
                ..Default::default()
            }),
            ..Default::default()
        },
        VolumeMount {
            name: "config".into(),
            mount_path: names::CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
    )
}

/// A writable `/tmp` (the root filesystem is read-only).
pub fn tmp_volume() -> (Volume, VolumeMount) {
    (
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        },
    )
}
