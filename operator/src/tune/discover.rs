//! Where a resource's serving pods are: the EndpointSlices of its headless Services
//! (selected by the `kubernetes.io/service-name` label the endpoints controller sets), read
//! as the tune loop's scrape and push targets.

use crds::v1alpha1::Placement;
use crds::TokenRouterDeployment;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use crate::names;
use crate::retune::PodTarget;

/// The label an EndpointSlice carries with its Service's name.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The name of the Service port (and container port) of `/metrics` and `/admin/*`.
pub const ADMIN_PORT_NAME: &str = "admin";

/// Headless Services of the serving pods, with the models each one's pods serve.
pub fn services(trd: &TokenRouterDeployment) -> Vec<(String, Vec<String>)> {
    match trd.spec.placement {
        Placement::PodPerModel => trd
            .spec
            .models
            .iter()
            .map(|m| (names::model_set(trd, &m.name), vec![m.name.clone()]))
            .collect(),
        Placement::PodPerGroup => vec![(
            names::group_set(trd),
            trd.spec.models.iter().map(|m| m.name.clone()).collect(),
        )],
    }
}

/// The label selector of those Services' EndpointSlices.
pub fn slice_selector(trd: &TokenRouterDeployment) -> String {
    let names: Vec<String> = services(trd).into_iter().map(|(s, _)| s).collect();
    format!("{SERVICE_NAME_LABEL} in ({})", names.join(","))
}

/// The serving pods in `slices`: one target per serving, not terminating endpoint address,
/// at the slice's `admin` port (the spec's admin port when the slice names none), sorted by
/// URL. The headless Services publish not-ready addresses (peers must resolve before they
/// are ready), which keeps `ready` true for pods still loading; `serving` is the pod's
/// readiness (`ready` is read only when a slice has no `serving`).
pub fn pods(trd: &TokenRouterDeployment, slices: &[EndpointSlice]) -> Vec<PodTarget> {
    let services = services(trd);
    let mut out: Vec<PodTarget> = Vec::new();
    for slice in slices {
        let Some(service) = slice.labels().get(SERVICE_NAME_LABEL) else {
            continue;
        };
        let Some((_, models)) = services.iter().find(|(s, _)| s == service) else {
            continue;
        };
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(ADMIN_PORT_NAME))
            .and_then(|p| p.port)
            .unwrap_or(trd.spec.ports.admin);
        for endpoint in slice.endpoints.iter().flatten() {
            let conditions = endpoint.conditions.clone().unwrap_or_default();
            let serving = conditions.serving.or(conditions.ready).unwrap_or(true);
            if !serving || conditions.terminating == Some(true) {
                continue;
            }
            let Some(address) = endpoint.addresses.first() else {
                continue;
            };
            let host = if address.contains(':') {
                format!("[{address}]")
            } else {
                address.clone()
            };
            let admin_url = format!("http://{host}:{port}");
            if !out.iter().any(|p| p.admin_url == admin_url) {
                out.push(PodTarget {
                    admin_url,
                    models: models.clone(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.admin_url.cmp(&b.admin_url));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trd(placement: &str) -> TokenRouterDeployment {
        serde_yaml::from_str(&format!(
            r#"
apiVersion: tokenrouter.io/v1alpha1
kind: TokenRouterDeployment
metadata: {{name: chat, namespace: llm}}
spec:
  backend: sim
  placement: {placement}
  models:
    - {{name: small, entry: true}}
    - {{name: big}}
  policy: {{class: Random}}
"#
        ))
        .unwrap()
    }

    fn slice(service: &str, port: Option<i32>, endpoints: serde_json::Value) -> EndpointSlice {
        let ports =
            port.map(|p| json!([{"name": "admin", "port": p}, {"name": "peer", "port": 1}]));
        serde_json::from_value(json!({
            "metadata": {"name": format!("{service}-x"), "labels": {SERVICE_NAME_LABEL: service}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn reads_ready_endpoints_of_the_models_services() {
        let t = trd("podPerModel");
        assert_eq!(
            slice_selector(&t),
            "kubernetes.io/service-name in (chat-small,chat-big)"
        );
        let slices = [
            slice(
                "chat-small",
                Some(9400),
                json!([
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                    {"addresses": ["10.0.0.4"], "conditions": {"terminating": true}},
                    // publishNotReadyAddresses: ready, but the pod still loads.
                    {"addresses": ["10.0.0.6"], "conditions": {"ready": true, "serving": false}},
                ]),
            ),
            slice("chat-big", None, json!([{"addresses": ["fd00::5"]}])),
            slice("other", Some(1), json!([{"addresses": ["10.9.9.9"]}])),
        ];
        let pods = pods(&t, &slices);
        assert_eq!(
            pods,
            vec![
                PodTarget {
                    admin_url: "http://10.0.0.2:9400".into(),
                    models: vec!["small".into()],
                },
                PodTarget {
                    admin_url: format!("http://[fd00::5]:{}", t.spec.ports.admin),
                    models: vec!["big".into()],
                },
            ]
        );
    }

    #[test]
    fn a_group_pod_serves_every_model() {
        let t = trd("podPerGroup");
        let slices = [slice(
            "chat-group",
            Some(9400),
            json!([{"addresses": ["10.0.0.7"]}]),
        )];
        let pods = pods(&t, &slices);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].models, ["small", "big"]);
    }
}
