//! The shipped examples (`examples/k8s/*.yaml`) against a real API server:
//! each is accepted by the CRD's schema and CEL rules, the operator turns it
//! into StatefulSets (MPS env, node pool and SM shares where the example asks
//! for them; one StatefulSet per model, or one per group for `podPerGroup`),
//! and everything it creates passes `kubernetes-validate --strict`.
#![allow(clippy::unwrap_used)]

mod k8s_support;

use std::collections::BTreeMap;
use std::path::Path;

use crds::v1alpha1::Placement;
use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, Secret};
use k8s_openapi::ByteString;
use k8s_support::{
    changes, client, install_crd, kubernetes_validate, namespace, trds, wait_for, Operator,
};
use kube::api::{Api, PostParams};
use kube::Client;

/// Reads one example; its PVC and Secret names are what the test creates.
fn example(file: &str) -> TokenRouterDeployment {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/k8s")
        .join(file);
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Creates what the example refers to (its PVCs and the API-key Secret), as
/// a user would before applying it: the operator refuses missing ones.
async fn create_references(client: &Client, ns: &str, trd: &TokenRouterDeployment) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claims: std::collections::BTreeSet<String> = trd
        .spec
        .models
        .iter()
        .filter_map(|m| {
            m.source
                .as_ref()?
                .pvc
                .as_ref()
                .map(|p| p.claim_name.clone())
        })
        .collect();
    for claim in claims {
        let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "100Gi"}}}
        }))
        .unwrap();
        pvcs.create(&PostParams::default(), &pvc).await.unwrap();
    }
    if let Some(r) = trd.spec.gateway.api_key_secret_ref.as_ref() {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(r.name.clone()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                r.key.clone().unwrap_or_else(|| "api-keys".into()),
                ByteString(b"sk-example-1".to_vec()),
            )])),
            ..Default::default()
        };
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
}

/// Applies the example and returns its StatefulSets once every model has one.
async fn apply(client: &Client, prefix: &str, file: &str) -> (String, Vec<StatefulSet>) {
    let trd = example(file);
    let ns = namespace(client, prefix).await;
    create_references(client, &ns, &trd).await;
    let _operator = Operator::start(client, &ns);
    trds(client, &ns)
        .create(&PostParams::default(), &trd)
        .await
        .unwrap_or_else(|e| panic!("{file} rejected by the API server: {e}"));
    let name = trd.metadata.name.clone().unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    // podPerModel: a StatefulSet per model; podPerGroup: one for the group.
    let wanted: Vec<String> = match trd.spec.placement {
        Placement::PodPerModel => trd
            .spec
            .models
            .iter()
            .map(|m| format!("{name}-{}", m.name))
            .collect(),
        Placement::PodPerGroup => vec![format!("{name}-group")],
    };
    let found = wait_for(
        &format!("{file}: StatefulSets {wanted:?}"),
        vec![changes(&sets)],
        || async {
            let mut out = Vec::new();
            for set in &wanted {
                out.push(sets.get_opt(set).await.ok()??);
            }
            Some(out)
        },
    )
    .await;
    (ns, found)
}

/// The StatefulSets as `kubernetes-validate` reads them (no server fields).
fn validate(file: &str, sets: &[StatefulSet]) {
    let mut docs = String::new();
    for s in sets {
        let mut s = s.clone();
        s.status = None;
        s.metadata = kube::api::ObjectMeta {
            name: s.metadata.name.clone(),
            namespace: s.metadata.namespace.clone(),
            labels: s.metadata.labels.clone(),
            annotations: s.metadata.annotations.clone(),
            ..Default::default()
        };
        docs.push_str(&format!("---\n{}", serde_yaml::to_string(&s).unwrap()));
    }
    if let Err(e) = kubernetes_validate(&docs) {
        panic!("{file}: kubernetes-validate --strict rejected the StatefulSets:\n{e}");
    }
}

/// The GPU example as the API server stores it keeps NVIDIA's device-plugin
/// contract: MPS settings (pipe directory, memory and SM caps) are the
/// plugin's, so no container carries `CUDA_MPS_*` env of its own and no pod
/// mounts a host path; every serving container asks the plugin for its GPU.
#[tokio::test(flavor = "multi_thread")]
async fn the_gpu_example_keeps_the_device_plugin_contract() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let file = "r2r-qwen3-0.6b-32b.yaml";
    let (_ns, sets) = apply(&client, "ex-gpu", file).await;
    for set in &sets {
        let name = set.metadata.name.clone().unwrap();
        let pod = set.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let host_paths: Vec<_> = pod
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.host_path.is_some())
            .map(|v| v.name.clone())
            .collect();
        assert!(
            host_paths.is_empty(),
            "{name}: hostPath volumes {host_paths:?}"
        );
        for c in &pod.containers {
            let mps: Vec<_> = c
                .env
                .iter()
                .flatten()
                .filter(|e| e.name.starts_with("CUDA_MPS_"))
                .map(|e| e.name.clone())
                .collect();
            assert!(mps.is_empty(), "{name}/{}: own MPS env {mps:?}", c.name);
        }
        let gpu = |c: &&Container| {
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_some_and(|l| l.contains_key("nvidia.com/gpu"))
        };
        assert!(
            pod.containers.iter().any(|c| gpu(&c)),
            "{name}: no container requests nvidia.com/gpu"
        );
    }
    validate(file, &sets);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_shipped_example_is_accepted_and_reconciled() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    for (prefix, file) in [
        ("ex-me", "me-three-models.yaml"),
        ("ex-cpu", "smollm2-cpu.yaml"),
    ] {
        let (_ns, sets) = apply(&client, prefix, file).await;
        validate(file, &sets);
    }
}
