//! Prints every object the operator would apply for a resource, as
//! multi-document YAML: `cargo run -p operator --example render -- FILE.yaml`.
//! `make checkov` scans this output; it also helps to review a spec.

use std::collections::BTreeMap;

use anyhow::Context as _;
use crds::TokenRouterDeployment;
use operator::build::{self, network::NetworkAccess, Inputs};
use serde::Serialize;

/// One object as its kind and version plus its own fields.
fn doc<T: Serialize>(api_version: &str, kind: &str, obj: &T) -> anyhow::Result<String> {
    let mut value = serde_json::to_value(obj)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.into());
    }
    Ok(serde_yaml::to_string(&value)?)
}

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .context("usage: render FILE.yaml (a TokenRouterDeployment)")?;
    let text = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    let mut trd: TokenRouterDeployment = serde_yaml::from_str(&text)
        .with_context(|| format!("{path}: not a TokenRouterDeployment"))?;
    // Not `default`: objects belong in a namespace of their own.
    let namespace = trd
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "tokenrouter".into());
    trd.metadata.namespace = Some(namespace.clone());
    if let Some((reason, message)) = operator::validate::check(&trd) {
        anyhow::bail!("{path}: {reason}: {message}");
    }
    let groups = trd.spec.groups.max(1);
    let inputs = Inputs {
        namespace: namespace.clone(),
        replicas: groups,
        listed_groups: (0..groups).collect(),
        thresholds: build::spec_thresholds(&trd),
        network: Some(NetworkAccess {
            operator_namespace: "tokenrouter".into(),
            operator_labels: BTreeMap::from([(
                "app.kubernetes.io/name".into(),
                "tokenrouter".into(),
            )]),
            metrics_namespaces: Vec::new(),
        }),
    };
    let d = build::desired(&trd, &inputs);
    let mut docs = vec![
        doc("v1", "ConfigMap", &d.engine_config)?,
        doc("v1", "ConfigMap", &d.groups_config)?,
    ];
    for (set, svc) in &d.serving {
        docs.push(doc("apps/v1", "StatefulSet", set)?);
        docs.push(doc("v1", "Service", svc)?);
    }
    docs.push(doc("apps/v1", "Deployment", &d.gateway)?);
    docs.push(doc("v1", "Service", &d.gateway_service)?);
    docs.push(doc(
        "policy/v1",
        "PodDisruptionBudget",
        &d.disruption_budget,
    )?);
    if let Some(p) = &d.network_policy {
        docs.push(doc("networking.k8s.io/v1", "NetworkPolicy", p)?);
    }
    print!("{}", docs.join("---\n"));
    Ok(())
}
