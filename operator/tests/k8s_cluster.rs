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
