//! The serving pods: per model a StatefulSet (ordinal k = group k) and a
//! headless Service (`podPerModel`), or one StatefulSet of whole groups
//! (`podPerGroup`).

use std::collections::BTreeMap;

use crds::v1alpha1::{ModelSpec, Placement};
use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec,
    PodTemplateSpec, Service, ServicePort, ServiceSpec, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{self, container_security};
use super::{meta, mps};
use crate::names;

/// Component label of `podPerModel` pods.
pub const MODEL_COMPONENT: &str = "model";
/// Component label of `podPerGroup` pods.
pub const GROUP_COMPONENT: &str = "group";

/// The component label of the serving pods under `placement`.
pub fn component(placement: Placement) -> &'static str {
    match placement {
        Placement::PodPerModel => MODEL_COMPONENT,
        Placement::PodPerGroup => GROUP_COMPONENT,
    }
}

/// The entry model (CEL guarantees exactly one; the first model otherwise).
pub fn entry_model(trd: &TokenRouterDeployment) -> &ModelSpec {
    trd.spec
        .models
        .iter()
        .find(|m| m.entry)
        .unwrap_or(&trd.spec.models[0])
}

/// Name of the StatefulSet (= headless Service) behind the gateway's groups.
pub fn entry_set(trd: &TokenRouterDeployment) -> String {
    match trd.spec.placement {
        Placement::PodPerModel => names::model_set(trd, &entry_model(trd).name),
        Placement::PodPerGroup => names::group_set(trd),
    }
}

fn ports(trd: &TokenRouterDeployment, peer: bool) -> Vec<ContainerPort> {
    let mut out = vec![ContainerPort {
        name: Some("admin".into()),
        container_port: trd.spec.ports.admin,
        ..Default::default()
    }];
    if peer {
        out.push(ContainerPort {
            name: Some("peer".into()),
            container_port: trd.spec.ports.peer,
            ..Default::default()
        });
    }
    out
}

/// Pods of group k of a non-entry model want to sit beside group k's entry
/// pod: required when they share GPUs through MPS, preferred otherwise.
/// `matchLabelKeys` takes the pod's own ordinal label into the selector.
///
/// Under MPS the entry pods also keep apart: a required anti-affinity among
/// the entry pods puts at most one group on a node. Without it the entry
/// pods of several groups could take every GPU replica of one node, and
/// their partners, bound to that node by the required affinity, would stay
/// Pending for good. A spread constraint cannot prevent that (it balances
/// counts, it does not reserve room for a group's other pods), and refusing
/// the spec would need the nodes' free replicas, which change at run time.
/// The price: one group per node, so size the GPUs per node (× the device
/// plugin's replicas) to a group's model count.
fn group_affinity(trd: &TokenRouterDeployment, model: &ModelSpec) -> Option<Affinity> {
    let entry_selector = LabelSelector {
        match_labels: Some(names::selector_labels(
            trd,
            MODEL_COMPONENT,
            Some(&entry_model(trd).name),
        )),
        ..Default::default()
    };
    if model.entry {
        return shares_gpu(trd).then(|| Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(entry_selector),
                    topology_key: HOSTNAME.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let term = PodAffinityTerm {
        label_selector: Some(entry_selector),
        match_label_keys: Some(vec![names::POD_INDEX.into()]),
        topology_key: HOSTNAME.into(),
        ..Default::default()
    };
    let affinity = if shares_gpu(trd) {
        PodAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..Default::default()
        }
    } else {
        PodAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: term,
                },
            ]),
            ..Default::default()
        }
    };
    Some(Affinity {
        pod_affinity: Some(affinity),
        ..Default::default()
    })
}

/// The node label that names one node.
const HOSTNAME: &str = "kubernetes.io/hostname";

/// Under MPS a group's model pods share one GPU (pod affinity makes it required).
fn shares_gpu(trd: &TokenRouterDeployment) -> bool {
    mps::of(&trd.spec).is_some()
}

/// The models whose weights model `m`'s pod mounts: its own, and the
/// entry's (tokenizer and router files live there). Under MPS each pod is
/// its own client with its own memory cap, so the other models' weights are
/// not its concern.
fn model_pod_mounts<'a>(trd: &'a TokenRouterDeployment, m: &'a ModelSpec) -> Vec<&'a ModelSpec> {
    let entry = entry_model(trd);
    let mut mounts = vec![m];
    if entry.name != m.name {
        mounts.push(entry);
    }
    mounts
}

/// What differs between the two placements' pods.
struct PodPlan<'a> {
    set: String,
    model: Option<&'a ModelSpec>,
    /// Models whose weights the pod mounts (a non-entry model's pod also
    /// mounts the entry's directory: tokenizer and router files live there).
    mounts: Vec<&'a ModelSpec>,
    args: Vec<String>,
    image: String,
}

fn pod_template(trd: &TokenRouterDeployment, plan: &PodPlan, config_hash: &str) -> PodTemplateSpec {
    let placement = trd.spec.placement;
    let model_name = plan.model.map(|m| m.name.as_str());
    let node_pool = trd.spec.node_pool.clone().unwrap_or_default();
    let (config_vol, config_mount) = pod::config_volume(trd);
    let (tmp_vol, tmp_mount) = pod::tmp_volume();
    let mut volumes = vec![config_vol, tmp_vol];
    let mut mounts = vec![config_mount, tmp_mount];
    for m in &plan.mounts {
        if let Some((v, mount)) = pod::model_volume(m) {
            volumes.push(v);
            mounts.push(mount);
        }
    }
    let env = pod::engine_env(trd);
    // podPerGroup pods take the entry model's resources (the whole group's GPU).
    let resources = plan.model.unwrap_or(entry_model(trd)).resources.clone();
    let mut container = Container {
        name: "subserver".into(),
        image: Some(plan.image.clone()),
        args: Some(plan.args.clone()),
        ports: Some(ports(trd, placement == Placement::PodPerModel)),
        env: Some(env),
        resources,
        volume_mounts: Some(mounts),
        security_context: Some(container_security()),
        ..Default::default()
    };
    pod::probes(&mut container, "admin");
    let mut annotations = BTreeMap::from([
        (names::CONFIG_HASH.to_string(), config_hash.to_string()),
        ("prometheus.io/scrape".into(), "true".into()),
        (
            "prometheus.io/port".into(),
            trd.spec.ports.admin.to_string(),
        ),
        ("prometheus.io/path".into(), "/metrics".into()),
    ]);
    annotations.insert(
        "kubectl.kubernetes.io/default-container".into(),
        "subserver".into(),
    );
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(names::labels(trd, component(placement), model_name)),
            annotations: Some(annotations),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container],
            image_pull_secrets: trd.spec.image_pull_secrets.clone(),
            runtime_class_name: node_pool.runtime_class_name.clone(),
            volumes: Some(volumes),
            node_selector: mps::node_selector(&trd.spec),
            host_ipc: mps::host_ipc(&trd.spec),
            tolerations: node_pool.tolerations.clone(),
            affinity: plan.model.and_then(|m| group_affinity(trd, m)),
            security_context: Some(pod::pod_security()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(60),
            ..Default::default()
        }),
    }
}

fn stateful_set(
    trd: &TokenRouterDeployment,
    plan: &PodPlan,
    replicas: i32,
    config_hash: &str,
) -> StatefulSet {
    let placement = trd.spec.placement;
    let model_name = plan.model.map(|m| m.name.as_str());
    StatefulSet {
        metadata: meta(
            trd,
            &plan.set,
            names::labels(trd, component(placement), model_name),
        ),
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(plan.set.clone()),
            // Groups are independent: start and stop them in parallel.
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector {
                match_labels: Some(names::selector_labels(
                    trd,
                    component(placement),
                    model_name,
                )),
                ..Default::default()
            },
            template: pod_template(trd, plan, config_hash),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                ..Default::default()
            }),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Delete".into()),
                    when_scaled: Some("Delete".into()),
                },
            ),
            revision_history_limit: Some(5),
            ..Default::default()
        }),
        status: None,
    }
}

/// The headless Service giving each pod of `set` a stable DNS name (also
/// before it is ready: peers must find each other to become ready).
fn headless_service(trd: &TokenRouterDeployment, set: &str, model: Option<&str>) -> Service {
    let placement = trd.spec.placement;
    let mut ports = vec![ServicePort {
        name: Some("admin".into()),
        port: trd.spec.ports.admin,
        target_port: Some(IntOrString::String("admin".into())),
        ..Default::default()
    }];
    if placement == Placement::PodPerModel {
        ports.push(ServicePort {
            name: Some("peer".into()),
            port: trd.spec.ports.peer,
            target_port: Some(IntOrString::String("peer".into())),
            ..Default::default()
        });
    }
    Service {
        metadata: meta(trd, set, names::labels(trd, component(placement), model)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(names::selector_labels(trd, component(placement), model)),
            ports: Some(ports),
            ..Default::default()
        }),
        status: None,
    }
}

/// Every serving StatefulSet and headless Service, with `replicas` groups.
pub fn serving(
    trd: &TokenRouterDeployment,
    replicas: i32,
    config_hash: &str,
) -> Vec<(StatefulSet, Service)> {
    let admin = format!("0.0.0.0:{}", trd.spec.ports.admin);
    match trd.spec.placement {
        Placement::PodPerModel => trd
            .spec
            .models
            .iter()
            .map(|m| {
                let plan = PodPlan {
                    set: names::model_set(trd, &m.name),
                    model: Some(m),
                    mounts: model_pod_mounts(trd, m),
                    args: vec![
                        "subserver".into(),
                        "--config".into(),
                        format!("{}/{}", names::CONFIG_DIR, names::model_config_key(&m.name)),
                        "--model".into(),
                        m.name.clone(),
                        "--admin".into(),
                        admin.clone(),
                    ],
                    image: pod::model_image(trd, m),
                };
                (
                    stateful_set(trd, &plan, replicas, config_hash),
                    headless_service(trd, &plan.set, Some(&m.name)),
                )
            })
            .collect(),
        Placement::PodPerGroup => {
            let plan = PodPlan {
                set: names::group_set(trd),
                model: None,
                mounts: trd.spec.models.iter().collect(),
                args: vec![
                    "subserver".into(),
                    "--config".into(),
                    format!("{}/{}", names::CONFIG_DIR, names::GROUP_CONFIG_KEY),
                    "--all-models".into(),
                    "--admin".into(),
                    admin,
                ],
                image: pod::model_image(trd, entry_model(trd)),
            };
            vec![(
                stateful_set(trd, &plan, replicas, config_hash),
                headless_service(trd, &plan.set, None),
            )]
        }
    }
}
