//! Pure builders of every object a `TokenRouterDeployment` owns. They take
//! the resource and a few decided numbers and return typed objects; unit
//! tests call them without a cluster, the reconciler applies their output.

pub mod config;
pub mod disruption;
pub mod engine;
pub mod gateway;
pub mod mps;
pub mod network;
pub mod pod;
pub mod serving;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_mps;

use std::collections::{BTreeMap, BTreeSet};

use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::names;

/// Metadata of an owned object: name, namespace, labels, controller owner ref.
pub fn meta(
    trd: &TokenRouterDeployment,
    name: &str,
    labels: BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: trd.namespace(),
        labels: Some(labels),
        owner_references: trd.controller_owner_ref(&()).map(|r| vec![r]),
        ..Default::default()
    }
}

/// The numbers the reconciler decided before building.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Namespace of the resource.
    pub namespace: String,
    /// StatefulSet replicas (groups running, including draining ones).
    pub replicas: i32,
    /// Groups listed to the gateway (those below `replicas` are written).
    pub listed_groups: BTreeSet<i32>,
    /// The B table in force.
    pub thresholds: BTreeMap<String, Vec<i64>>,
    /// Who may reach the serving pods; `None`: no NetworkPolicy.
    pub network: Option<network::NetworkAccess>,
}

/// Everything the resource owns, built.
#[derive(Debug, Clone)]
pub struct Desired {
    /// The rendered engine config.
    pub engine_config: ConfigMap,
    /// The gateway's group list.
    pub groups_config: ConfigMap,
    /// Serving StatefulSets with their headless Services.
    pub serving: Vec<(StatefulSet, Service)>,
    /// Gateway Deployment.
    pub gateway: Deployment,
    /// Gateway Service.
    pub gateway_service: Service,
    /// A Prometheus-operator ServiceMonitor, when asked for.
    pub service_monitor: Option<DynamicObject>,
    /// The serving pods' NetworkPolicy, when the operator renders one.
    pub network_policy: Option<NetworkPolicy>,
    /// The serving pods' PodDisruptionBudget.
    pub disruption_budget: PodDisruptionBudget,
}

/// The B table written in the spec (empty: no delayed batching).
pub fn spec_thresholds(trd: &TokenRouterDeployment) -> BTreeMap<String, Vec<i64>> {
    trd.spec
        .delayed_batching
        .as_ref()
        .and_then(|d| d.thresholds.clone())
        .unwrap_or_default()
}

/// Builds every owned object. The pods' config hash covers the spec's
/// config, not a tuned B table, so retuning never rolls pods.
pub fn desired(trd: &TokenRouterDeployment, inputs: &Inputs) -> Desired {
    let ns = &inputs.namespace;
    let hash = config::hash(&config::engine_data(trd, ns, &spec_thresholds(trd)));
    let data = config::engine_data(trd, ns, &inputs.thresholds);
    Desired {
        engine_config: config::engine(trd, data),
        groups_config: config::groups(trd, ns, &inputs.listed_groups, inputs.replicas),
        serving: serving::serving(trd, inputs.replicas, &hash),
        gateway: gateway::deployment(trd, &hash),
        gateway_service: gateway::service(trd),
        service_monitor: trd.spec.service_monitor.then(|| service_monitor(trd)),
        network_policy: inputs
            .network
            .as_ref()
            .map(|a| network::network_policy(trd, a)),
        disruption_budget: disruption::budget(trd),
    }
}

/// The `monitoring.coreos.com/v1` ServiceMonitor kind.
pub fn service_monitor_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "monitoring.coreos.com",
        "v1",
        "ServiceMonitor",
    ))
}

/// Scrapes `/metrics` of every serving pod through their headless Services.
fn service_monitor(trd: &TokenRouterDeployment) -> DynamicObject {
    let component = serving::component(trd.spec.placement);
    let mut obj = DynamicObject::new(&names::instance(trd), &service_monitor_resource());
    obj.metadata = meta(trd, &names::instance(trd), names::common_labels(trd));
    obj.data = json!({
        "spec": {
            "selector": {"matchLabels": names::selector_labels(trd, component, None)},
            "endpoints": [{"port": "admin", "path": "/metrics", "interval": "15s"}],
        }
    });
    obj
}

/// The admin token Secret (created once; never overwritten, so pods keep
/// the token they started with).
pub fn admin_secret(trd: &TokenRouterDeployment, token: &str) -> Secret {
    Secret {
        metadata: meta(trd, &names::admin_secret(trd), names::common_labels(trd)),
        string_data: Some(BTreeMap::from([(
            names::ADMIN_TOKEN_KEY.to_string(),
            token.to_string(),
        )])),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// Name of a built object (builders always set it).
pub fn name_of<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}
