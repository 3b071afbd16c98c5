//! The gateway: a Deployment of `tokenrouter gateway` and its Service. It
//! reads the group list from the groups ConfigMap the operator keeps (so a
//! scale-down can stop traffic to a group before its pods go) and the
//! tokenizer from a group's entry subserver (`gateway.text_side: backend`),
//! so it mounts no model volume: a ReadWriteOnce claim is never attached to
//! a gateway's node.

use std::collections::BTreeMap;

use crds::v1alpha1::ServiceType;
use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, Lifecycle, LifecycleHandler, PodSpec,
    PodTemplateSpec, ResourceRequirements, Service, ServicePort, ServiceSpec, SleepAction, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::meta;
use super::pod::{self, container_security};
use super::serving::entry_model;
use crate::names;

/// Seconds a terminating gateway keeps serving before its drain starts.
const PRE_STOP_SLEEP_S: i64 = 5;

/// The gateway's resources where `spec.gateway.resources` is unset: it
/// tokenizes, detokenizes and relays streams (no model), so a quarter of a
/// core and 256 MiB are what it asks for, two cores and 1 GiB its bound.
pub const DEFAULT_RESOURCES: [(&str, &str, &str); 2] =
    [("cpu", "250m", "2"), ("memory", "256Mi", "1Gi")];

/// `spec.gateway.resources`, or [`DEFAULT_RESOURCES`] when unset.
fn resources(given: Option<&ResourceRequirements>) -> ResourceRequirements {
    if let Some(r) = given {
        return r.clone();
    }
    let pick = |limit: bool| {
        DEFAULT_RESOURCES
            .iter()
            .map(|&(name, request, max)| {
                let amount = if limit { max } else { request };
                (name.to_string(), Quantity(amount.to_string()))
            })
            .collect::<BTreeMap<_, _>>()
    };
    ResourceRequirements {
        requests: Some(pick(false)),
        limits: Some(pick(true)),
        ..Default::default()
    }
}

/// Component label of the gateway pods.
pub const COMPONENT: &str = "gateway";

fn groups_volume(trd: &TokenRouterDeployment) -> (Volume, VolumeMount) {
    (
        Volume {
            name: "groups".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names::groups_config(trd),
                ..Default::default()
            }),
            ..Default::default()
        },
        VolumeMount {
            name: "groups".into(),
            mount_path: names::GROUPS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
    )
}

/// The gateway Deployment.
pub fn deployment(trd: &TokenRouterDeployment, config_hash: &str) -> Deployment {
    let g = &trd.spec.gateway;
    let entry = entry_model(trd);
    let (config_vol, config_mount) = pod::config_volume(trd);
    let (tmp_vol, tmp_mount) = pod::tmp_volume();
    let (groups_vol, groups_mount) = groups_volume(trd);
    // No model volume: the tokenizer comes from a group (see the module doc).
    let volumes = vec![config_vol, tmp_vol, groups_vol];
    let mounts = vec![config_mount, tmp_mount, groups_mount];
    // Subservers put `/internal/generate` behind the admin token: without it
    // every completion is a 401 while `/health` (open) looks fine.
    let mut env = vec![pod::admin_token_env(trd)];
    if let Some(secret) = &g.api_key_secret_ref {
        env.push(pod::secret_env(
            names::API_KEYS_ENV,
            &secret.name,
            secret.key.as_deref().unwrap_or("api-keys"),
        ));
    }
    let mut container = Container {
        name: "gateway".into(),
        image: Some(
            g.image
                .clone()
                .unwrap_or_else(|| pod::model_image(trd, entry)),
        ),
        args: Some(vec![
            "gateway".into(),
            "--config".into(),
            format!("{}/{}", names::CONFIG_DIR, names::GROUP_CONFIG_KEY),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: g.port,
            ..Default::default()
        }]),
        env: Some(env),
        resources: Some(resources(g.resources.as_ref())),
        volume_mounts: Some(mounts),
        security_context: Some(container_security()),
        // Endpoints drop a terminating pod asynchronously: keep accepting
        // for a few seconds after deletion, so a connection routed here by
        // a Service that has not seen the change yet is still served.
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: PRE_STOP_SLEEP_S,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    pod::probes(&mut container, "http");
    let annotations = BTreeMap::from([
        (names::CONFIG_HASH.to_string(), config_hash.to_string()),
        ("prometheus.io/scrape".into(), "true".into()),
        ("prometheus.io/port".into(), g.port.to_string()),
        ("prometheus.io/path".into(), "/metrics".into()),
    ]);
    Deployment {
        metadata: meta(
            trd,
            &names::gateway(trd),
            names::labels(trd, COMPONENT, None),
        ),
        spec: Some(DeploymentSpec {
            replicas: Some(g.replicas),
            selector: LabelSelector {
                match_labels: Some(names::selector_labels(trd, COMPONENT, None)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names::labels(trd, COMPONENT, None)),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    image_pull_secrets: trd.spec.image_pull_secrets.clone(),
                    security_context: Some(pod::pod_security()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    // The gateway drains in-flight requests on SIGTERM.
                    termination_grace_period_seconds: Some(45),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The gateway Service (the one endpoint users call).
pub fn service(trd: &TokenRouterDeployment) -> Service {
    let g = &trd.spec.gateway;
    let service_type = match g.service_type {
        ServiceType::ClusterIP => "ClusterIP",
        ServiceType::NodePort => "NodePort",
        ServiceType::LoadBalancer => "LoadBalancer",
    };
    Service {
        metadata: meta(
            trd,
            &names::gateway(trd),
            names::labels(trd, COMPONENT, None),
        ),
        spec: Some(ServiceSpec {
            type_: Some(service_type.into()),
            selector: Some(names::selector_labels(trd, COMPONENT, None)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: g.port,
                target_port: Some(IntOrString::String("http".into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::tests::sample;

    #[test]
    fn the_gateway_pod_mounts_no_model_volume() {
        let trd = sample();
        assert!(trd.spec.models.iter().all(|m| m.source.is_some()));
        let d = deployment(&trd, "hash");
        let pod = d.spec.unwrap().template.spec.unwrap();
        let volumes: Vec<&str> = pod
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["config", "tmp", "groups"]);
        assert!(pod
            .volumes
            .iter()
            .flatten()
            .all(|v| v.persistent_volume_claim.is_none() && v.host_path.is_none()));
        let mounts: Vec<&str> = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert!(
            mounts.iter().all(|p| !p.starts_with("/models")),
            "{mounts:?}"
        );
        // ... because its config tells it to get the tokenizer from a group,
        // unless the entry has no files to serve (a sim model).
        let text_side = |trd: &TokenRouterDeployment| {
            let cfg = crate::build::engine::render(trd, "ai", None, &Default::default());
            cfg["gateway"]["text_side"].clone()
        };
        assert_eq!(text_side(&trd), "backend");
        let mut sim = trd;
        for m in &mut sim.spec.models {
            m.source = None;
        }
        assert_eq!(text_side(&sim), "local");
    }
}
