//! The NetworkPolicy each resource owns: its serving pods' peer and admin
//! ports (unauthenticated TCP hand-overs; `/admin`, `/internal/generate`,
//! `/metrics`) admit only the resource's own pods and the operator, plus
//! scrapes of the admin port from named namespaces. One per resource, in
//! the resource's namespace, because a NetworkPolicy covers only its own
//! namespace: a chart-wide policy left resources elsewhere open.

use std::collections::BTreeMap;

use crds::TokenRouterDeployment;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{meta, serving};
use crate::names;

/// Label every namespace carries (1.21+): its own name.
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

/// Who besides the resource's own pods may reach the serving pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkAccess {
    /// Namespace the operator runs in (its probes and the tune loop).
    pub operator_namespace: String,
    /// Labels of the operator's pods.
    pub operator_labels: BTreeMap<String, String>,
    /// Namespaces whose pods may scrape the admin port (Prometheus).
    pub metrics_namespaces: Vec<String>,
}

/// Name of the resource's NetworkPolicy.
pub fn name(trd: &TokenRouterDeployment) -> String {
    format!("{}-model-ports", names::instance(trd))
}

fn selector(labels: BTreeMap<String, String>) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some(labels),
        ..Default::default()
    })
}

fn in_namespace(ns: &str) -> Option<LabelSelector> {
    selector(BTreeMap::from([(NAMESPACE_NAME.into(), ns.to_string())]))
}

fn tcp(port: &str) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::String(port.into())),
        ..Default::default()
    }
}

/// The policy: selects the resource's serving pods (the gateway stays
/// open); peer and admin from the resource's pods (same namespace: no
/// namespace selector) and from the operator's pods in their namespace;
/// admin alone from each metrics namespace.
pub fn network_policy(trd: &TokenRouterDeployment, access: &NetworkAccess) -> NetworkPolicy {
    let component = serving::component(trd.spec.placement);
    let own = BTreeMap::from([
        (names::INSTANCE.to_string(), names::instance(trd)),
        (
            "app.kubernetes.io/managed-by".to_string(),
            names::FIELD_MANAGER.to_string(),
        ),
    ]);
    let mut ingress = vec![NetworkPolicyIngressRule {
        from: Some(vec![
            NetworkPolicyPeer {
                pod_selector: selector(own),
                ..Default::default()
            },
            NetworkPolicyPeer {
                namespace_selector: in_namespace(&access.operator_namespace),
                pod_selector: selector(access.operator_labels.clone()),
                ..Default::default()
            },
        ]),
        ports: Some(vec![tcp("peer"), tcp("admin")]),
    }];
    if !access.metrics_namespaces.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(
                access
                    .metrics_namespaces
                    .iter()
                    .map(|ns| NetworkPolicyPeer {
                        namespace_selector: in_namespace(ns),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: Some(vec![tcp("admin")]),
        });
    }
    NetworkPolicy {
        metadata: meta(trd, &name(trd), names::common_labels(trd)),
        spec: Some(NetworkPolicySpec {
            pod_selector: selector(names::selector_labels(trd, component, None)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(ingress),
            egress: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::tests::sample;

    fn access(metrics: &[&str]) -> NetworkAccess {
        NetworkAccess {
            operator_namespace: "tokenrouter".into(),
            operator_labels: BTreeMap::from([(
                "app.kubernetes.io/name".into(),
                "tokenrouter-operator".into(),
            )]),
            metrics_namespaces: metrics.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn peers(rule: &NetworkPolicyIngressRule) -> &[NetworkPolicyPeer] {
        rule.from.as_deref().unwrap()
    }

    fn ports(rule: &NetworkPolicyIngressRule) -> Vec<String> {
        rule.ports
            .iter()
            .flatten()
            .map(|p| match p.port.as_ref().unwrap() {
                IntOrString::String(s) => s.clone(),
                IntOrString::Int(i) => i.to_string(),
            })
            .collect()
    }

    #[test]
    fn serving_ports_admit_only_the_resource_and_the_operator() {
        let trd = sample();
        let np = network_policy(&trd, &access(&[]));
        assert_eq!(np.metadata.namespace.as_deref(), Some("ai"));
        assert_eq!(np.metadata.name.as_deref(), Some("demo-model-ports"));
        assert_eq!(np.metadata.owner_references.as_ref().unwrap().len(), 1);
        let spec = np.spec.unwrap();
        // This resource's serving pods only: not the gateway, not a neighbour.
        let selected = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(selected[names::INSTANCE], "demo");
        assert_eq!(selected[names::COMPONENT], "model");
        assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
        let ingress = spec.ingress.unwrap();
        assert_eq!(ingress.len(), 1);
        assert_eq!(ports(&ingress[0]), ["peer", "admin"]);
        let from = peers(&ingress[0]);
        // Own pods: same namespace (no namespace selector), this instance.
        assert!(from[0].namespace_selector.is_none());
        let own = from[0].pod_selector.clone().unwrap().match_labels.unwrap();
        assert_eq!(own[names::INSTANCE], "demo");
        // The operator: its labels, in its namespace (both must hold).
        let ns = from[1]
            .namespace_selector
            .clone()
            .unwrap()
            .match_labels
            .unwrap();
        assert_eq!(ns[NAMESPACE_NAME], "tokenrouter");
        let op = from[1].pod_selector.clone().unwrap().match_labels.unwrap();
        assert_eq!(op["app.kubernetes.io/name"], "tokenrouter-operator");
        assert!(from.iter().all(|p| p.ip_block.is_none()));
    }

    #[test]
    fn metrics_namespaces_reach_the_admin_port_alone() {
        let trd = sample();
        let np = network_policy(&trd, &access(&["monitoring", "obs"]));
        let ingress = np.spec.unwrap().ingress.unwrap();
        assert_eq!(ingress.len(), 2);
        assert_eq!(ports(&ingress[1]), ["admin"]);
        let names: Vec<String> = peers(&ingress[1])
            .iter()
            .map(|p| {
                assert!(p.pod_selector.is_none());
                p.namespace_selector.clone().unwrap().match_labels.unwrap()[NAMESPACE_NAME].clone()
            })
            .collect();
        assert_eq!(names, ["monitoring", "obs"]);
    }
}
