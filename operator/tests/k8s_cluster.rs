//! What a real cluster reports and the kit does not produce on its own: the
//! test plays the scheduler (a pod's `PodScheduled=False`), the StatefulSet
//! controller (its status and its `FailedCreate` Event) and the volume
//! controller (a bound ReadWriteOnce claim), and checks that the operator's
//! `Degraded` condition names each, then clears.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod k8s_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use k8s_support::*;

/// (status, reason, message) of the resource's `Degraded` condition.
async fn degraded(client: &Client, ns: &str, name: &str) -> Option<(String, String, String)> {
    let s = trds(client, ns).get(name).await.ok()?.status?;
    let c = s.conditions.iter().find(|c| c.type_ == "Degraded")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until `Degraded` is True and its message contains every one of `parts`.
async fn wait_degraded_with(client: &Client, ns: &str, name: &str, parts: &[&str]) -> String {
    wait_for(
        &format!("Degraded naming {parts:?}"),
        vec![changes(&trds(client, ns))],
        || async {
            let (status, _, message) = degraded(client, ns, name).await?;
            (status == "True" && parts.iter().all(|p| message.contains(p))).then_some(message)
        },
    )
    .await
}

const NO_GPU: &str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";
const NO_CLASS: &str = "create Pod sched-big-0 in StatefulSet sched-big failed error: \
    pods \"sched-big-0\" is forbidden: pod rejected: RuntimeClass \"nvidia\" not found";

#[tokio::test(flavor = "multi_thread")]
async fn unschedulable_pods_and_failed_creates_are_named_then_clear() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-sched").await;
    let _operator = Operator::start(&client, &ns);
    trds(&client, &ns)
        .create(&PostParams::default(), &sim_resource("sched", 1))
        .await
        .unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    wait_for("both serving sets", vec![changes(&sets)], || async {
        let a = sets.get_opt("sched-small").await.ok()??;
        let b = sets.get_opt("sched-big").await.ok()??;
        Some((a, b))
    })
    .await;

    // The scheduler leaves the small model's pod Pending.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sched-small-0", "labels": {
            operator::names::INSTANCE: "sched", operator::names::COMPONENT: "model"}},
        "spec": {"containers": [{"name": "subserver", "image": "example.com/tokenrouter:test"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let scheduled = |status: &str, message: &str| {
        json!({"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": status, "reason": "Unschedulable",
            "message": message}]}})
    };
    pods.patch_status(
        "sched-small-0",
        &PatchParams::default(),
        &Patch::Merge(scheduled("False", NO_GPU)),
    )
    .await
    .unwrap();
    // The StatefulSet controller cannot create the big model's pod: its
    // status counts none, and it says why in an Event on the set.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "sched-big.failed"},
        "involvedObject": {"kind": "StatefulSet", "name": "sched-big", "namespace": ns},
        "type": "Warning", "reason": "FailedCreate", "message": NO_CLASS,
        "lastTimestamp": now
    }))
    .unwrap();
    Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await
        .unwrap();
    let message = wait_degraded_with(
        &client,
        &ns,
        "sched",
        &["sched-small-0 cannot be scheduled", "StatefulSet sched-big"],
    )
    .await;
    assert_eq!(
        message,
        format!(
            "pods sched-small-0 cannot be scheduled: {NO_GPU}; \
             StatefulSet sched-big cannot create 1 of its pods: {NO_CLASS}"
        )
    );
    let (_, reason, _) = degraded(&client, &ns, "sched").await.unwrap();
    assert_eq!(reason, "Unschedulable");

    // A node appears and the RuntimeClass is made: the pod is scheduled and
    // the set has its pod (the old Event stays, as it does for an hour).
    pods.patch_status(
        "sched-small-0",
        &PatchParams::default(),
        &Patch::Merge(scheduled("True", "")),
    )
    .await
    .unwrap();
    sets.patch_status(
        "sched-big",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 0}})),
    )
    .await
    .unwrap();
    wait_for(
        "Degraded=False",
        vec![changes(&trds(&client, &ns))],
        || async {
            let (status, reason, _) = degraded(&client, &ns, "sched").await?;
            (status == "False" && reason == "AsExpected").then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_write_once_claim_requires_co_location_and_one_group() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-rwo").await;
    let _operator = Operator::start(&client, &ns);
    // The claim, bound (the test plays the volume controller) to a
    // ReadWriteOnce volume.
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &ns);
    let claim = serde_json::from_value(json!({
        "metadata": {"name": "weights"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    claims
        .patch_status(
            "weights",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"]}})),
        )
        .await
        .unwrap();
    let trd: crds::TokenRouterDeployment = serde_yaml::from_str(
        "apiVersion: tokenrouter.io/v1alpha1\nkind: TokenRouterDeployment\n\
         metadata: {name: rwo}\nspec:\n  image: example.com/tokenrouter-cpu:test\n  device: cpu\n\
         \x20 policy: {class: R2R}\n  groups: 2\n  models:\n\
         \x20 - {name: quick, entry: true, source: {pvc: {claimName: weights, subPath: q}}}\n\
         \x20 - {name: reference, source: {pvc: {claimName: weights, subPath: r}}}\n",
    )
    .unwrap();
    trds(&client, &ns)
        .create(&PostParams::default(), &trd)
        .await
        .unwrap();
    let message = wait_degraded_with(&client, &ns, "rwo", &["ReadWriteOnce", "groups is 2"]).await;
    assert!(
        message.starts_with("PersistentVolumeClaim weights is ReadWriteOnce"),
        "{message}"
    );
    // The objects are applied all the same, and the partner pod must share
    // its entry pod's node.
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let affinity = wait_for("the reference set", vec![changes(&sets)], || async {
        let set = sets.get_opt("rwo-reference").await.ok()??;
        set.spec?.template.spec?.affinity?.pod_affinity
    })
    .await;
    assert!(affinity
        .preferred_during_scheduling_ignored_during_execution
        .is_none());
    let required = affinity
        .required_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(required[0].topology_key, "kubernetes.io/hostname");

    // One group fits the claim: the condition clears.
    trds(&client, &ns)
        .patch(
            "rwo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"groups": 1}})),
        )
        .await
        .unwrap();
    wait_for(
        "Degraded=False",
        vec![changes(&trds(&client, &ns))],
        || async {
            let (status, _, _) = degraded(&client, &ns, "rwo").await?;
            (status == "False").then_some(())
        },
    )
    .await;
}

/// Under steady traffic whose live load changes at every scrape, the
/// operator runs about once per autoscale period: the status it writes is
/// no trigger of its own. Bound over a 10 s window at a 1 s period: at most
/// 10 / 1 + 4 reconciles (a requeue per period, and a few from the watch's
/// own events), and at most one status write. Before, every pass wrote the
/// new load, which started the next pass at once: hundreds in the window.
#[tokio::test(flavor = "multi_thread")]
async fn steady_traffic_reconciles_once_per_period() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use warp::Filter;

    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-churn").await;
    // The gateway's exposition: 3 to 7 requests, a new value every scrape
    // (target 16 per group: always one group).
    let scrapes = Arc::new(AtomicU64::new(0));
    let served = scrapes.clone();
    let metrics = warp::path!("metrics").map(move || {
        let load = 3 + served.fetch_add(1, Ordering::SeqCst) % 5;
        format!(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} {load}\n\
             # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"m\"}} 0\n"
        )
    });
    let (addr, server) = warp::serve(metrics).bind_ephemeral(([127, 0, 0, 1], 0));
    let server = tokio::spawn(server);
    let operator = Operator::start(&client, &ns);
    let mut value = serde_json::to_value(sim_resource("churn", 1)).unwrap();
    value["spec"]["autoscaling"] = json!({"enabled": true, "minGroups": 1, "maxGroups": 2,
        "targetConcurrencyPerGroup": 16});
    let trd: crds::TokenRouterDeployment = serde_json::from_value(value).unwrap();
    let api = trds(&client, &ns);
    api.create(&PostParams::default(), &trd).await.unwrap();
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), &ns);
    let slice = serde_json::from_value(json!({
        "metadata": {"name": "churn-gateway-x1", "labels": {"kubernetes.io/service-name": "churn-gateway"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": addr.port(), "protocol": "TCP"}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    // Steady: the load is seen and one group is wanted.
    let version = wait_for("the load in the status", vec![changes(&api)], || async {
        let t = api.get("churn").await.ok()?;
        let s = t.status.as_ref()?;
        (s.observed_concurrency.is_some() && s.desired_groups == 1)
            .then(|| t.metadata.resource_version.clone())
    })
    .await;
    let before = operator.reconciles.get();
    let scrapes_before = scrapes.load(Ordering::SeqCst);
    let window = std::time::Duration::from_secs(10);
    let mut writes = 0;
    let mut last = version;
    let mut wake = changes(&api);
    let end = tokio::time::Instant::now() + window;
    loop {
        tokio::select! {
            _ = futures::StreamExt::next(&mut wake) => {
                let now = api.get("churn").await.unwrap().metadata.resource_version;
                if now != last {
                    writes += 1;
                    last = now;
                }
            }
            _ = tokio::time::sleep_until(end) => break,
        }
    }
    let reconciles = operator.reconciles.get() - before;
    let scraped = scrapes.load(Ordering::SeqCst) - scrapes_before;
    server.abort();
    // The load did change under the operator all along.
    assert!(scraped >= 5, "only {scraped} scrapes in {window:?}");
    assert!(
        reconciles <= 14,
        "{reconciles} reconciles in {window:?} at a 1 s period"
    );
    assert!(writes <= 1, "{writes} writes of the resource in {window:?}");
}

/// Without `--cleanup-finalizer` (the chart's default) a resource carries no
/// finalizer, one an earlier operator left is taken off, and a delete is not
/// held by the operator (garbage collection removes the owned objects on a
/// real cluster; the kit has none, so only the resource's own going is checked).
#[tokio::test(flavor = "multi_thread")]
async fn without_the_finalizer_option_nothing_holds_a_delete() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-nofin").await;
    let mut trd = sim_resource("nofin", 1);
    trd.metadata.finalizers = Some(vec![
        operator::names::FINALIZER.to_string(),
        "example.com/keep".to_string(),
    ]);
    let api = trds(&client, &ns);
    api.create(&PostParams::default(), &trd).await.unwrap();
    let _operator = Operator::start_with(&client, &ns, false);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let finalizers = wait_for(
        "our finalizer gone and the sets applied",
        vec![changes(&api), changes(&sets)],
        || async {
            let t = api.get("nofin").await.ok()?;
            let fins = t.metadata.finalizers.clone().unwrap_or_default();
            sets.get_opt("nofin-small").await.ok()??;
            (!fins.contains(&operator::names::FINALIZER.to_string())).then_some(fins)
        },
    )
    .await;
    // Another controller's finalizer stays.
    assert_eq!(finalizers, ["example.com/keep"]);
    // Its owner takes the other finalizer off; the delete then completes at
    // once, with the operator running.
    api.patch(
        "nofin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    api.delete("nofin", &Default::default()).await.unwrap();
    wait_for("the resource gone", vec![changes(&api)], || async {
        api.get_opt("nofin").await.ok()?.is_none().then_some(())
    })
    .await;
}
