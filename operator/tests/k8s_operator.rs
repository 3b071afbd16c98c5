//! The operator against a real API server (the k8s test kit, or any
//! cluster in `KUBECONFIG`): the CRD and its CEL rules, owned objects on
//! apply / edit / delete, the scale subresource, status from readiness,
//! strict validation of what the operator creates, and a crash mid-reconcile.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod k8s_support;

use std::collections::BTreeSet;

use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use k8s_support::*;

const SELECTOR: &str = "app.kubernetes.io/managed-by=tokenrouter-operator";

/// Names of every owned object in `ns`, as `kind/name`.
async fn owned(client: &Client, ns: &str) -> BTreeSet<String> {
    let lp = ListParams::default().labels(SELECTOR);
    let mut out = BTreeSet::new();
    async fn names<K>(api: Api<K>, lp: &ListParams, kind: &str, out: &mut BTreeSet<String>)
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        for o in api.list(lp).await.expect("list") {
            out.insert(format!("{kind}/{}", o.name_any()));
        }
    }
    names(
        Api::<StatefulSet>::namespaced(client.clone(), ns),
        &lp,
        "statefulset",
        &mut out,
    )
    .await;
    names(
        Api::<Service>::namespaced(client.clone(), ns),
        &lp,
        "service",
        &mut out,
    )
    .await;
    names(
        Api::<ConfigMap>::namespaced(client.clone(), ns),
        &lp,
        "configmap",
        &mut out,
    )
    .await;
    names(
        Api::<Deployment>::namespaced(client.clone(), ns),
        &lp,
        "deployment",
        &mut out,
    )
    .await;
    names(
        Api::<Secret>::namespaced(client.clone(), ns),
        &lp,
        "secret",
        &mut out,
    )
    .await;
    out
}

fn expected(name: &str, models: &[&str]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = [
        format!("configmap/{name}-engine"),
        format!("configmap/{name}-groups"),
        format!("deployment/{name}-gateway"),
        format!("service/{name}-gateway"),
        format!("secret/{name}-admin-token"),
    ]
    .into();
    for m in models {
        out.insert(format!("statefulset/{name}-{m}"));
        out.insert(format!("service/{name}-{m}"));
    }
    out
}

async fn replicas(client: &Client, ns: &str, name: &str) -> Option<i32> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    sets.get_opt(name).await.ok()??.spec?.replicas
}

/// Changes of every kind [`owned`] lists.
fn owned_changes(client: &Client, ns: &str) -> Vec<Changes> {
    vec![
        changes(&Api::<ConfigMap>::namespaced(client.clone(), ns)),
        changes(&Api::<Deployment>::namespaced(client.clone(), ns)),
        changes(&Api::<Service>::namespaced(client.clone(), ns)),
        changes(&Api::<Secret>::namespaced(client.clone(), ns)),
        changes(&Api::<StatefulSet>::namespaced(client.clone(), ns)),
    ]
}

async fn wait_owned(client: &Client, ns: &str, want: &BTreeSet<String>) {
    wait_for(
        &format!("owned objects {want:?}"),
        owned_changes(client, ns),
        || async { (owned(client, ns).await == *want).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cel_rules_reject_invalid_resources_with_their_messages() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-cel").await;
    let api = trds(&client, &ns);
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<TokenRouterDeployment>(&()),
    );
    let base = serde_json::to_value(sim_resource("bad", 1)).unwrap();
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "two entries",
            json!({"models": [{"name": "a", "entry": true}, {"name": "b", "entry": true}]}),
            "exactly one model must have entry: true",
        ),
        (
            "no entry",
            json!({"models": [{"name": "a"}, {"name": "b"}]}),
            "exactly one model must have entry: true",
        ),
        (
            "duplicate names",
            json!({"models": [{"name": "a", "entry": true}, {"name": "a"}]}),
            "model names must be unique",
        ),
        (
            "threshold 0",
            json!({"delayedBatching": {"mode": "fixed", "thresholds": {"small": [1, 0]}}}),
            "delayed-batching thresholds must be >= 1",
        ),
        (
            "threshold of an unknown model",
            json!({"delayedBatching": {"thresholds": {"nope": [1]}}}),
            "every key must be a model name",
        ),
        (
            "fixed without a table",
            json!({"delayedBatching": {"mode": "fixed", "thresholds": null}}),
            "mode fixed needs thresholds",
        ),
        (
            "min > max groups",
            json!({"autoscaling": {"minGroups": 3, "maxGroups": 2}}),
            "autoscaling.minGroups must be <= autoscaling.maxGroups",
        ),
        (
            "share above 1",
            json!({"policy": {"class": "R2R", "targetLargeShare": 1.5}}),
            "policy.targetLargeShare must be in (0, 1)",
        ),
        (
            "share below 0",
            json!({"policy": {"class": "R2R", "targetLargeShare": -0.1}}),
            "policy.targetLargeShare must be in (0, 1)",
        ),
        (
            "unknown execution mode",
            json!({"executionMode": "fastest"}),
            "executionMode",
        ),
        (
            "MPS sidecar daemon",
            json!({"nodePool": {"mps": {"enabled": true, "daemon": "sidecar"}}}),
            "only devicePlugin is supported",
        ),
        (
            "MPS with one replica",
            json!({"nodePool": {"mps": {"enabled": true, "replicas": 1}}}),
            "nodePool.mps.replicas must be >= 2",
        ),
        (
            "an MPS pod with two GPUs",
            json!({"nodePool": {"mps": {"enabled": true}}, "models": [{"name": "small", "entry": true, "resources": {"limits": {"nvidia.com/gpu": 2}}}, {"name": "big"}]}),
            "may request at most 1 nvidia.com/gpu",
        ),
        (
            "an MPS pod with two renamed shared GPUs",
            json!({"nodePool": {"mps": {"enabled": true}}, "models": [{"name": "small", "entry": true}, {"name": "big", "resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}]}),
            "may request at most 1 nvidia.com/gpu",
        ),
        (
            "a model named group",
            json!({"models": [{"name": "group", "entry": true}, {"name": "big"}]}),
            "a model may not be named group or gateway",
        ),
        (
            "kvCache with both sizes",
            json!({"models": [{"name": "small", "entry": true, "kvCache": {"tokens": 4096, "memoryFraction": 0.5}}, {"name": "big"}]}),
            "kvCache: set exactly one of tokens and memoryFraction",
        ),
        (
            "kvCache fraction above 1",
            json!({"models": [{"name": "small", "entry": true, "kvCache": {"memoryFraction": 1.5}}, {"name": "big"}]}),
            "kvCache.memoryFraction must be in (0, 1]",
        ),
        (
            // 47 characters: NAME-small is 53, over the 52 of a StatefulSet.
            "a StatefulSet name over 52 characters",
            json!({"name": "x".repeat(47)}),
            "name too long",
        ),
    ];
    for (what, patch, message) in cases {
        let mut obj = base.clone();
        let mut patch = patch;
        // `name` in a case renames the resource (not a spec field).
        if let Some(name) = patch.as_object_mut().and_then(|p| p.remove("name")) {
            obj["metadata"]["name"] = name;
        }
        json_patch_merge(&mut obj["spec"], &patch);
        // Untyped, so values the Rust types would refuse reach the server.
        let trd: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
        let err = raw
            .create(&PostParams::default(), &trd)
            .await
            .expect_err(what);
        let kube::Error::Api(status) = err else {
            panic!("{what}: not an API error: {err}")
        };
        assert_eq!(status.code, 422, "{what}: {status:?}");
        assert!(
            status.message.contains(message),
            "{what}: `{message}` not in `{}`",
            status.message
        );
    }
    // And a valid one passes.
    api.create(&PostParams::default(), &sim_resource("good", 1))
        .await
        .expect("valid resource");
    // So does MPS with one GPU (or one renamed shared GPU) per pod, and a
    // pod with two whole GPUs without MPS.
    for (name, mps, limits) in [
        ("mps-one", true, json!({"nvidia.com/gpu": 1})),
        ("mps-shared", true, json!({"nvidia.com/gpu.shared": "1"})),
        ("no-mps-two", false, json!({"nvidia.com/gpu": 2})),
    ] {
        let mut obj = base.clone();
        obj["metadata"]["name"] = json!(name);
        json_patch_merge(
            &mut obj["spec"],
            &json!({"nodePool": {"mps": {"enabled": mps, "replicas": 2}},
                    "models": [{"name": "small", "entry": true, "resources": {"limits": limits}}, {"name": "big"}]}),
        );
        let trd: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
        raw.create(&PostParams::default(), &trd)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// RFC 7386 merge of `patch` into `target`.
fn json_patch_merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_patch_merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_edit_scale_status_and_delete() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-life").await;
    let _operator = Operator::start(&client, &ns);
    let api = trds(&client, &ns);

    // Apply: every owned object appears, owned by the resource.
    api.create(&PostParams::default(), &sim_resource("demo", 1))
        .await
        .unwrap();
    wait_owned(&client, &ns, &expected("demo", &["small", "big"])).await;
    let trd = api.get("demo").await.unwrap();
    let set: StatefulSet = Api::namespaced(client.clone(), &ns)
        .get("demo-small")
        .await
        .unwrap();
    let owner = &set.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(Some(owner.uid.as_str()), trd.metadata.uid.as_deref());
    assert_eq!(set.spec.as_ref().unwrap().replicas, Some(1));
    assert!(trd
        .finalizers()
        .iter()
        .any(|f| f == "tokenrouter.io/cleanup"));

    // Everything the operator created passes strict validation.
    let mut docs = String::new();
    for name in ["demo-small", "demo-big"] {
        let mut s: StatefulSet = Api::namespaced(client.clone(), &ns)
            .get(name)
            .await
            .unwrap();
        s.metadata = strip(s.metadata);
        s.status = None;
        docs.push_str(&format!("---\n{}", serde_yaml::to_string(&s).unwrap()));
    }
    for name in ["demo-small", "demo-big", "demo-gateway"] {
        let mut s: Service = Api::namespaced(client.clone(), &ns)
            .get(name)
            .await
            .unwrap();
        s.metadata = strip(s.metadata);
        s.status = None;
        docs.push_str(&format!("---\n{}", serde_yaml::to_string(&s).unwrap()));
    }
    let mut d: Deployment = Api::namespaced(client.clone(), &ns)
        .get("demo-gateway")
        .await
        .unwrap();
    d.metadata = strip(d.metadata);
    d.status = None;
    docs.push_str(&format!("---\n{}", serde_yaml::to_string(&d).unwrap()));
    for name in ["demo-engine", "demo-groups"] {
        let mut c: ConfigMap = Api::namespaced(client.clone(), &ns)
            .get(name)
            .await
            .unwrap();
        c.metadata = strip(c.metadata);
        docs.push_str(&format!("---\n{}", serde_yaml::to_string(&c).unwrap()));
    }
    if let Err(e) = kubernetes_validate(&docs) {
        panic!("kubernetes-validate --strict rejected the operator's objects:\n{e}");
    }

    // Edit: more groups and other kwargs update the same objects.
    let hash_before = config_hash(&client, &ns, "demo-big").await;
    api.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"groups": 2, "policy": {"kwargs": {"probability": 0.5, "seed": 1}}}}),
        ),
    )
    .await
    .unwrap();
    wait_for(
        "2 replicas per model",
        vec![changes(&Api::<StatefulSet>::namespaced(
            client.clone(),
            &ns,
        ))],
        || async {
            let small = replicas(&client, &ns, "demo-small").await?;
            let big = replicas(&client, &ns, "demo-big").await?;
            (small == 2 && big == 2).then_some(())
        },
    )
    .await;
    assert_eq!(
        owned(&client, &ns).await,
        expected("demo", &["small", "big"]),
        "no duplicates"
    );
    let hash_after = config_hash(&client, &ns, "demo-big").await;
    assert_ne!(hash_before, hash_after, "an edit rolls the pods");
    assert_eq!(
        hash_after,
        config_hash(&client, &ns, "demo-small").await,
        "all models roll together"
    );

    // The scale subresource (HPA/KEDA's door) drives the StatefulSets.
    api.patch_scale(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    wait_for(
        "3 replicas per model",
        vec![changes(&Api::<StatefulSet>::namespaced(
            client.clone(),
            &ns,
        ))],
        || async {
            (replicas(&client, &ns, "demo-small").await? == 3
                && replicas(&client, &ns, "demo-big").await? == 3)
                .then_some(())
        },
    )
    .await;

    // Status follows readiness set on the StatefulSets' and gateway's status.
    for name in ["demo-small", "demo-big"] {
        set_set_status(&client, &ns, name, 3, 3).await;
    }
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deploys
        .patch_status(
            "demo-gateway",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1}})),
        )
        .await
        .unwrap();
    wait_for("Ready=True with 3 groups", vec![changes(&api)], || async {
        let t = api.get("demo").await.ok()?;
        let s = t.status?;
        (condition(&s.conditions, "Ready")? == "True" && s.groups == 3).then_some(())
    })
    .await;
    let scale = api.get_scale("demo").await.unwrap();
    assert_eq!(scale.status.as_ref().map(|s| s.replicas), Some(3));
    set_set_status(&client, &ns, "demo-big", 3, 1).await;
    let reason = wait_for("Ready=False", vec![changes(&api)], || async {
        let s = api.get("demo").await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "False").then(|| ready.reason.clone())
    })
    .await;
    assert_eq!(reason, "GroupsNotReady");
    let s = api.get("demo").await.unwrap().status.unwrap();
    assert_eq!(s.groups, 1);
    assert_eq!(
        s.observed_generation,
        api.get("demo").await.unwrap().metadata.generation
    );
    assert_eq!(s.thresholds.unwrap().table["big"], vec![1, 2]);

    // Removing a model deletes its objects (no orphans).
    api.patch(
        "demo",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "models": [{"name": "small", "entry": true, "sim": {"latency_ms": {"base": 1}}},
                       {"name": "huge", "sim": {"latency_ms": {"base": 9}}}],
            "delayedBatching": {"mode": "auto", "thresholds": null}}})),
    )
    .await
    .unwrap();
    wait_owned(&client, &ns, &expected("demo", &["small", "huge"])).await;

    // Delete: everything it owned goes, then the resource.
    api.delete("demo", &DeleteParams::default()).await.unwrap();
    wait_for("the resource gone", vec![changes(&api)], || async {
        api.get_opt("demo").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(owned(&client, &ns).await.is_empty());
}

fn strip(mut m: kube::api::ObjectMeta) -> kube::api::ObjectMeta {
    m.managed_fields = None;
    m.uid = None;
    m.resource_version = None;
    m.creation_timestamp = None;
    m.generation = None;
    m
}

fn condition(
    conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    kind: &str,
) -> Option<String> {
    conds
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.clone())
}

async fn config_hash(client: &Client, ns: &str, set: &str) -> String {
    let s: StatefulSet = Api::namespaced(client.clone(), ns).get(set).await.unwrap();
    s.spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap()["tokenrouter.io/config-hash"]
        .clone()
}

async fn set_set_status(client: &Client, ns: &str, name: &str, replicas: i32, ready: i32) {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    sets.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "replicas": replicas, "readyReplicas": ready, "updatedReplicas": replicas,
            "availableReplicas": ready}})),
    )
    .await
    .unwrap();
}

/// The operator died from its armed fault (SIGABRT), not from anything else
/// (an argument error or a failed start would also be "not success").
fn assert_aborted(status: std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(6),
        "the operator was meant to abort mid-reconcile, it ended with {status}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_killed_mid_reconcile_converges_without_duplicates_or_orphans() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-chaos").await;
    let api = trds(&client, &ns);
    api.create(&PostParams::default(), &sim_resource("chaos", 1))
        .await
        .unwrap();
    let bin = env!("CARGO_BIN_EXE_tokenrouter-operator");
    let kubeconfig = std::env::var("KUBECONFIG").unwrap();
    let spawn = |crash: Option<usize>| {
        let mut cmd = std::process::Command::new(bin);
        // The binary's flags directly: `operator` is a subcommand of
        // `tokenrouter` only, and an argument error must not pass for a crash.
        cmd.args(["--namespace", &ns, "--metrics-addr", "127.0.0.1:0"])
            .args([
                "--drain-settle-seconds",
                "0",
                "--drain-timeout-seconds",
                "0",
            ])
            // The kit has no garbage collector: the operator cleans up.
            .args(["--cleanup-finalizer", "true"])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null());
        if let Some(n) = crash {
            cmd.env(operator::apply_fault::CRASH_ENV, n.to_string());
        }
        cmd.spawn().expect("start the operator")
    };
    // Dies before its 7th apply: the ConfigMaps and both models' objects
    // exist, the gateway's do not.
    let mut first = spawn(Some(6));
    let status = tokio::task::spawn_blocking(move || first.wait())
        .await
        .unwrap()
        .unwrap();
    assert_aborted(status);
    let partial = owned(&client, &ns).await;
    assert!(partial.contains("configmap/chaos-engine"), "{partial:?}");
    assert!(partial.contains("statefulset/chaos-big"), "{partial:?}");
    assert!(!partial.contains("deployment/chaos-gateway"), "{partial:?}");
    // While it is down the user edits: one model is replaced.
    api.patch(
        "chaos",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "models": [{"name": "small", "entry": true, "sim": {"latency_ms": {"base": 1}}},
                       {"name": "other", "sim": {"latency_ms": {"base": 3}}}],
            "delayedBatching": null}})),
    )
    .await
    .unwrap();
    // A second crash before the new model's StatefulSet (and before stale
    // objects are removed), then a healthy operator, which must delete the
    // replaced model's objects.
    let mut second = spawn(Some(5));
    let status = tokio::task::spawn_blocking(move || second.wait())
        .await
        .unwrap()
        .unwrap();
    assert_aborted(status);
    let mut healthy = spawn(None);
    wait_owned(&client, &ns, &expected("chaos", &["small", "other"])).await;
    let generation = api.get("chaos").await.unwrap().metadata.generation;
    wait_for(
        "status of the last generation",
        vec![changes(&api)],
        || async {
            let s = api.get("chaos").await.ok()?.status?;
            (s.observed_generation == generation).then_some(())
        },
    )
    .await;
    // Converged: still exactly one of each, owned by the resource.
    assert_eq!(
        owned(&client, &ns).await,
        expected("chaos", &["small", "other"])
    );
    api.delete("chaos", &DeleteParams::default()).await.unwrap();
    wait_for(
        "cleanup",
        owned_changes(&client, &ns)
            .into_iter()
            .chain([changes(&api)])
            .collect(),
        || async {
            (api.get_opt("chaos").await.ok()?.is_none() && owned(&client, &ns).await.is_empty())
                .then_some(())
        },
    )
    .await;
    healthy.kill().unwrap();
    healthy.wait().unwrap();
}
