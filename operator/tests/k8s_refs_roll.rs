//! The operator against a real API server (the k8s test kit, or any cluster
//! in `KUBECONFIG`): missing Secrets and PVCs become `Degraded` conditions
//! and Events that clear when the objects appear (a claim that exists but
//! is not Bound is shown with its Event's reason, without holding the
//! apply back, and clears once Bound), an edit rolls the
//! serving StatefulSets group by group (the test plays the StatefulSet
//! controller by writing their `status`), and the autoscaler follows the load
//! it reads from the gateway Service's EndpointSlice (the test plays the
//! endpoints controller; the `/metrics` behind it is served by the test, not
//! by a real gateway process).
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod k8s_support;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, PersistentVolumeClaim, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use k8s_support::*;

/// The autoscale period of the tests' operator ([`Operator::start`]).
const AUTOSCALE_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Watches the `auto` resource's two StatefulSets and its status for
/// `window` (several autoscale periods): at every change either goes
/// through, and at every tick between, both sets hold `want` replicas and
/// the autoscaler still wants `want` groups. The claim is that nothing
/// happens over a period, so it takes a window and many observations.
async fn holds_replicas(
    sets: &Api<StatefulSet>,
    trds: &Api<crds::TokenRouterDeployment>,
    want: i32,
    window: std::time::Duration,
) {
    let mut wake = futures::stream::select(changes(sets), changes(trds));
    let end = tokio::time::Instant::now() + window;
    let mut tick = tokio::time::interval(AUTOSCALE_PERIOD / 5);
    let mut seen = 0;
    loop {
        let replicas =
            |name: &'static str| async move { sets.get(name).await.ok()?.spec?.replicas };
        let got = (replicas("auto-small").await, replicas("auto-big").await);
        let desired = trds
            .get("auto")
            .await
            .ok()
            .and_then(|t| t.status)
            .map(|s| s.desired_groups);
        assert_eq!(
            (got, desired),
            ((Some(want), Some(want)), Some(want)),
            "left {want} groups after {seen} observations"
        );
        seen += 1;
        if tokio::time::Instant::now() >= end {
            break;
        }
        tokio::select! {
            _ = futures::StreamExt::next(&mut wake) => {}
            _ = tick.tick() => {}
            _ = tokio::time::sleep_until(end) => {}
        }
    }
    assert!(seen >= 10, "only {seen} observations in {window:?}");
}

/// (status, reason, message) of the resource's `Degraded` condition.
async fn degraded(client: &Client, ns: &str, name: &str) -> Option<(String, String, String)> {
    let s = trds(client, ns).get(name).await.ok()?.status?;
    let c = s.conditions.iter().find(|c| c.type_ == "Degraded")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_degraded(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    wait_degraded_saying(client, ns, name, reason, "").await
}

/// As [`wait_degraded`], until the message also contains `part`: the
/// operator may write the condition before everything it names (an Event
/// about a claim) exists, and looks again on its recheck period.
async fn wait_degraded_saying(
    client: &Client,
    ns: &str,
    name: &str,
    reason: &str,
    part: &str,
) -> String {
    wait_for(
        &format!("Degraded=True {reason} saying {part:?}"),
        vec![changes(&trds(client, ns))],
        || async {
            let (status, r, message) = degraded(client, ns, name).await?;
            (status == "True" && r == reason && message.contains(part)).then_some(message)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_secret_and_pvc_and_an_unbound_pvc_are_conditions_that_clear() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-refs").await;
    let _operator = Operator::start(&client, &ns);
    let mut trd = sim_resource("refs", 1);
    let mut value = serde_json::to_value(&trd).unwrap();
    value["spec"]["gateway"] = json!({"apiKeySecretRef": {"name": "keys"}});
    value["spec"]["models"][1]["source"] = json!({"pvc": {"claimName": "weights"}});
    trd = serde_json::from_value(value).unwrap();
    trds(&client, &ns)
        .create(&PostParams::default(), &trd)
        .await
        .unwrap();

    // No Secret: Degraded with its reason, an Event, and no pods that could
    // not start.
    let message = wait_degraded(&client, &ns, "refs", "SecretNotFound").await;
    assert!(message.contains("Secret keys does not exist"), "{message}");
    assert!(
        message.contains("PersistentVolumeClaim weights"),
        "{message}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    wait_for("a SecretNotFound Event", vec![changes(&events)], || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("SecretNotFound")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("refs")
            })
            .then_some(())
    })
    .await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    assert!(sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());

    // The Secret without the key, then with it.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret = |key: &str| Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("keys".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            key.to_string(),
            ByteString(b"sk-test".to_vec()),
        )])),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret("other"))
        .await
        .unwrap();
    let message = wait_degraded(&client, &ns, "refs", "SecretKeyNotFound").await;
    assert!(message.contains("has no key api-keys"), "{message}");
    secrets
        .patch(
            "keys",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"api-keys": "c2stdGVzdA=="}})),
        )
        .await
        .unwrap();
    let message = wait_degraded(&client, &ns, "refs", "PVCNotFound").await;
    assert!(
        message.contains("PersistentVolumeClaim weights (source of model big) does not exist"),
        "{message}"
    );

    // The claim appears but does not bind (the test plays the volume
    // controller, which says why in an Event): the objects are applied all
    // the same (pods may be what it waits for) and the condition names the
    // claim, its phase, its model and the Event's reason.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "weights"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let claim_events: Api<CoreEvent> = Api::namespaced(client.clone(), &ns);
    let failed: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "weights.provisioning"},
        "involvedObject": {"kind": "PersistentVolumeClaim", "name": "weights", "namespace": ns},
        "type": "Warning", "reason": "ProvisioningFailed",
        "message": "storageclass.storage.k8s.io \"fast\" not found",
        "lastTimestamp": "2026-01-01T00:00:00Z"
    }))
    .unwrap();
    claim_events
        .create(&PostParams::default(), &failed)
        .await
        .unwrap();
    let message =
        wait_degraded_saying(&client, &ns, "refs", "PVCNotBound", "ProvisioningFailed").await;
    assert_eq!(
        message,
        "PersistentVolumeClaim weights (source of model big) is Pending, not Bound \
         (ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found)"
    );
    wait_for("the serving StatefulSets", vec![changes(&sets)], || async {
        (sets.list(&ListParams::default()).await.ok()?.items.len() == 2).then_some(())
    })
    .await;

    // It binds: the condition clears.
    claims
        .patch_status(
            "weights",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await
        .unwrap();
    wait_for(
        "Degraded=False",
        vec![changes(&trds(&client, &ns))],
        || async {
            let (status, reason, _) = degraded(&client, &ns, "refs").await?;
            (status == "False" && reason == "AsExpected").then_some(())
        },
    )
    .await;
}

/// The shared partition and template hash of a set.
async fn roll_state(sets: &Api<StatefulSet>, name: &str) -> Option<(i32, String, i64)> {
    let s = sets.get(name).await.ok()?;
    let hash = s.metadata.annotations.as_ref()?["tokenrouter.io/template-hash"].clone();
    let p = s.spec?.update_strategy?.rolling_update?.partition?;
    Some((p, hash, s.metadata.generation.unwrap_or(0)))
}

/// The group URLs in the `roll` resource's groups ConfigMap.
async fn listed_urls(client: &Client, ns: &str) -> Vec<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let map = maps.get("roll-groups").await.unwrap();
    map.data.unwrap()[operator::names::GROUPS_KEY]
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Plays the StatefulSet controller: `updated` pods on the new revision,
/// `ready` pods ready, for the generation the set has now.
async fn play(sets: &Api<StatefulSet>, name: &str, replicas: i32, updated: i32, ready: i32) {
    let generation = sets.get(name).await.unwrap().metadata.generation;
    sets.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "observedGeneration": generation, "replicas": replicas,
            "readyReplicas": ready, "availableReplicas": ready, "updatedReplicas": updated,
            "currentRevision": format!("{name}-old"),
            "updateRevision": format!("{name}-new")}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edit_rolls_every_model_of_one_group_at_a_time() {
    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-roll").await;
    let _operator = Operator::start(&client, &ns);
    let api = trds(&client, &ns);
    api.create(&PostParams::default(), &sim_resource("roll", 3))
        .await
        .unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let models = ["roll-small", "roll-big"];
    // Fresh sets: no partition; every pod ready on the first revision.
    let first = wait_for("both sets, partition 0", vec![changes(&sets)], || async {
        let a = roll_state(&sets, models[0]).await?;
        let b = roll_state(&sets, models[1]).await?;
        (a.0 == 0 && b.0 == 0).then_some([a.1, b.1])
    })
    .await;
    for m in models {
        play(&sets, m, 3, 3, 3).await;
    }

    // Edit: both templates change, and the roll holds every group first.
    api.patch(
        "roll",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"policy": {"kwargs": {"probability": 0.7, "seed": 2}}}})),
    )
    .await
    .unwrap();
    let mut hashes = Vec::new();
    for p in (0..=3).rev() {
        let (states, hash) = wait_for(
            &format!("partition {p} on both sets"),
            vec![changes(&sets)],
            || async {
                let a = roll_state(&sets, models[0]).await?;
                let b = roll_state(&sets, models[1]).await?;
                // Both sets carry the edited template (they are applied one
                // after the other).
                let edited = a.1 != first[0] && b.1 != first[1];
                (edited && a.0 <= p && b.0 <= p).then_some(([a.0, b.0], [a.1, b.1]))
            },
        )
        .await;
        assert_eq!(
            states,
            [p, p],
            "every model's set steps together, one group at a time"
        );
        hashes.push(hash);
        // The group whose pods go under this partition left the gateways'
        // list before the partition reached it (drain first, crate::roll).
        let listed = listed_urls(&client, &ns).await;
        if p < 3 {
            assert!(
                !listed.iter().any(|u| u.contains(&format!("-{p}."))),
                "group {p} listed while replaced: {listed:?}"
            );
            assert_eq!(listed.len(), 2, "the other groups stay listed: {listed:?}");
        }
        if p == 0 {
            break;
        }
        // Ordinals >= p run the new template (p = 3: none yet, the
        // controller only reports that it saw it). A set whose pods are not
        // all ready holds the roll.
        let updated = 3 - p;
        play(&sets, models[0], 3, updated, 3).await;
        play(&sets, models[1], 3, updated, 2).await;
        let (held, _, _) = roll_state(&sets, models[1]).await.unwrap();
        assert_eq!(held, p, "moved on before group {} was ready", p - 1);
        play(&sets, models[1], 3, updated, 3).await;
    }
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:?}");
    for m in models {
        play(&sets, m, 3, 3, 3).await;
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "every group listed after the roll",
        vec![changes(&maps)],
        || async { (listed_urls(&client, &ns).await.len() == 3).then_some(()) },
    )
    .await;
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns)
        .patch_status(
            "roll-gateway",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1}})),
        )
        .await
        .unwrap();
    wait_for("Ready after the roll", vec![changes(&api)], || async {
        let s = api.get("roll").await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "True").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn autoscaler_reads_the_gateway_through_its_endpointslice() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use warp::Filter;

    let Some(client) = client().await else { return };
    install_crd(&client).await;
    let ns = namespace(&client, "trd-auto").await;
    // The gateway's exposition, vLLM's names; the load is running + waiting.
    let load = Arc::new(AtomicU64::new(0));
    let served = load.clone();
    let metrics = warp::path!("metrics").map(move || {
        let total = served.load(Ordering::SeqCst);
        format!(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} {}\n\
             # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"m\"}} {}\n",
            total / 2,
            total - total / 2
        )
    });
    let (addr, server) = warp::serve(metrics).bind_ephemeral(([127, 0, 0, 1], 0));
    let server = tokio::spawn(server);

    let _operator = Operator::start(&client, &ns);
    let mut value = serde_json::to_value(sim_resource("auto", 1)).unwrap();
    value["spec"]["autoscaling"] = json!({"enabled": true, "minGroups": 1, "maxGroups": 4,
        "targetConcurrencyPerGroup": 2, "scaleDownStabilizationSeconds": 0});
    let trd: crds::TokenRouterDeployment = serde_json::from_value(value).unwrap();
    let api = trds(&client, &ns);
    api.create(&PostParams::default(), &trd).await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let replicas = |want: i32| {
        let sets = sets.clone();
        async move {
            wait_for(&format!("{want} groups"), vec![changes(&sets)], || async {
                let a = sets.get("auto-small").await.ok()?.spec?.replicas?;
                let b = sets.get("auto-big").await.ok()?.spec?.replicas?;
                (a == want && b == want).then_some(())
            })
            .await
        }
    };
    // No endpoints yet: metrics missing, the count holds at minGroups, and
    // keeps holding over several autoscale periods (not one lucky sample).
    replicas(1).await;
    // The sets are applied before the status is written in the same pass.
    wait_for(
        "desiredGroups 1 in the status",
        vec![changes(&api)],
        || async { (api.get("auto").await.ok()?.status?.desired_groups == 1).then_some(()) },
    )
    .await;
    holds_replicas(&sets, &api, 1, AUTOSCALE_PERIOD * 5).await;

    // The endpoints controller's part: one ready gateway endpoint.
    load.store(7, Ordering::SeqCst);
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), &ns);
    let slice = serde_json::from_value(json!({
        "metadata": {"name": "auto-gateway-x1", "labels": {"kubernetes.io/service-name": "auto-gateway"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": addr.port(), "protocol": "TCP"}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    // ceil(7 / 2) = 4 groups, every model together.
    replicas(4).await;
    wait_for("observedConcurrency 7", vec![changes(&api)], || async {
        (api.get("auto").await.ok()?.status?.observed_concurrency? == 7).then_some(())
    })
    .await;
    // Load falls: ceil(3 / 2) = 2 (no drain wait configured in the tests).
    load.store(3, Ordering::SeqCst);
    replicas(2).await;
    server.abort();
}
