//! The operator's tune loop end to end (issue #12, item 4): a real API server (the k8s
//! test kit, or any cluster in `KUBECONFIG`), the operator's controllers in this process,
//! and real `tokenrouter subserver` processes on the sim backend (one per model, TCP
//! hand-overs, control endpoints behind the token of the Secret the operator created).
//! The test plays the endpoints controller: it publishes the pods' EndpointSlices; nothing
//! else is faked.
//!
//! Routing starts at p = 0.2: the operator tunes and pushes a table. The test moves p to 0.6
//! through the policy's live knob; within two intervals the operator pushes the new table,
//! the subservers report it (admin API and `/metrics`), the resource's status shows it and
//! the engine ConfigMap carries it. Then `delayedBatching.mode: fixed` turns the loop off
//! and the spec's table is back on the pods. No request fails meanwhile.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;
#[path = "../operator/tests/k8s_support/mod.rs"]
mod k8s_support;
mod retune_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::v1alpha1::ThresholdSource;
use crds::TokenRouterDeployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use operator::retune::threshold_at;
use retune_support::{wait_until, Load, SimGroup, Topology, MODELS};
use serde_json::json;

const NAME: &str = "tuned";
const MAX_N: usize = 8;

fn resource() -> TokenRouterDeployment {
    let sim = |ms: f64| {
        format!("{{latency_ms: {{base: {ms}, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}")
    };
    serde_yaml::from_str(&format!(
        r#"
apiVersion: tokenrouter.io/v1alpha1
kind: TokenRouterDeployment
metadata: {{name: {NAME}}}
spec:
  image: example.com/tokenrouter:test
  backend: sim
  models:
    - {{name: {q}, entry: true, sim: {qs}}}
    - {{name: {r}, sim: {rs}}}
  policy: {{class: Random, kwargs: {{probability: 0.2, seed: 7}}}}
  executionMode: async_delayed
  groups: 1
  delayedBatching: {{mode: auto, maxBatchWaitMs: 50}}
  tuning: {{intervalSeconds: 2, minSamples: 300, hysteresis: 0.02, maxConcurrency: {MAX_N}}}
"#,
        q = MODELS[0],
        r = MODELS[1],
        qs = sim(retune_support::LATENCY_MS[0]),
        rs = sim(retune_support::LATENCY_MS[1]),
    ))
    .unwrap()
}

/// The EndpointSlice the endpoints controller would write for model `model`'s one pod.
fn endpoint_slice(ns: &str, model: &str, admin_port: u16) -> EndpointSlice {
    let service = format!("{NAME}-{model}");
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-x7k2p"),
            "namespace": ns,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "admin", "port": admin_port, "protocol": "TCP"}],
        "endpoints": [{
            "addresses": ["127.0.0.1"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "hostname": format!("{service}-0"),
            "targetRef": {"kind": "Pod", "name": format!("{service}-0"), "namespace": ns},
        }],
    }))
    .unwrap()
}

/// `tokenrouter_operator_tune_total{result}` summed over `results`.
fn rounds(ctx: &operator::Context, results: &[&str]) -> u64 {
    let text = ctx.metrics.render();
    results
        .iter()
        .map(|r| {
            let prefix = format!("tokenrouter_operator_tune_total{{result=\"{r}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map_or(0, |v| v.trim().parse::<u64>().unwrap())
        })
        .sum()
}

/// The status table in model order.
fn in_order(table: &BTreeMap<String, Vec<i64>>) -> Vec<Vec<usize>> {
    MODELS
        .iter()
        .map(|m| table[*m].iter().map(|&b| b as usize).collect())
        .collect()
}

/// Whether every subserver's `/metrics` shows B of `table` at its current concurrency.
fn metrics_show(group: &SimGroup, table: &[Vec<usize>]) -> bool {
    let series = group.scrape();
    let gauge = |name: &str, model: &str| {
        series
            .named(name)
            .find(|(labels, _)| labels.iter().any(|(k, v)| k == "model" && v == model))
            .map(|(_, v)| v as usize)
    };
    MODELS.iter().enumerate().all(|(m, model)| {
        let b = gauge("tokenrouter_delayed_batching_threshold", model);
        let n = gauge("tokenrouter_active_concurrency", model);
        matches!((b, n), (Some(b), Some(n)) if n >= 1 && b == threshold_at(table, m, n))
    })
}

struct Aborted(tokio::task::JoinHandle<()>);

impl Drop for Aborted {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[test]
fn the_operator_retunes_live_subservers_after_routing_changes() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(client) = rt.block_on(k8s_support::client()) else {
        return;
    };
    rt.block_on(k8s_support::install_crd(&client));
    let ns = rt.block_on(k8s_support::namespace(&client, "retune"));
    let trds = k8s_support::trds(&client, &ns);

    let ctx = Arc::new(operator::Context::new(
        client.clone(),
        operator::metrics::Metrics::new().unwrap(),
        operator::Settings::default(),
    ));
    let _operator = Aborted(rt.spawn(operator::run(ctx.clone(), Some(ns.clone()))));
    rt.block_on(trds.create(&PostParams::default(), &resource()))
        .unwrap();

    // The subservers start with the token of the Secret the operator created.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let token = rt.block_on(k8s_support::wait_for(
        "the admin token Secret",
        vec![k8s_support::changes(&secrets)],
        || async {
            let s = secrets
                .get_opt(&format!("{NAME}-admin-token"))
                .await
                .unwrap()?;
            // The kit keeps the Secret as the operator sent it (`stringData`).
            let from_data = s
                .data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|b| b.0.clone());
            match from_data {
                Some(bytes) => Some(String::from_utf8(bytes).unwrap()),
                None => s.string_data?.get("token").cloned(),
            }
        },
    ));
    let group = SimGroup::start_with_token(
        &common::binary(),
        Topology::TcpProcesses,
        0.2,
        None,
        Some(&token),
    );
    let load = Load::start_with_token(group.entry(), MAX_N, 128, Some(&token));
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    for (model, url) in MODELS.iter().zip(&group.admin) {
        let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
        rt.block_on(slices.create(&PostParams::default(), &endpoint_slice(&ns, model, port)))
            .unwrap();
    }

    // p = 0.2: the first estimate is pushed (nothing tuned was applied).
    let status = |trds: &Api<TokenRouterDeployment>| {
        rt.block_on(trds.get_status(NAME))
            .unwrap()
            .status
            .unwrap_or_default()
    };
    let first = rt.block_on(k8s_support::wait_for(
        "the first tuned table",
        vec![k8s_support::changes(&trds)],
        || async {
            let s = trds.get_status(NAME).await.unwrap().status?;
            s.thresholds
                .clone()
                .filter(|t| t.source == ThresholdSource::Tuned)
                .map(|_| s)
        },
    ));
    let p = first
        .tuning
        .as_ref()
        .unwrap()
        .estimate
        .as_ref()
        .unwrap()
        .models[0]
        .routing[1];
    assert!(
        (p - 0.2).abs() < 0.05,
        "estimated p {p}: {:?}",
        first.tuning
    );
    let table_02 = in_order(&first.thresholds.unwrap().table);
    wait_until("the subservers apply the p = 0.2 table", || {
        group.reported_thresholds() == table_02
    });

    // p = 0.6 through the live knob. Rounds that end from now: one may have scraped before
    // the change, the next may mix both regimes, the one after sees only p = 0.6.
    let before = rounds(&ctx, &["pushed", "kept"]);
    group.set_probability(0.6);
    let retuned = rt.block_on(k8s_support::wait_for(
        "a table tuned for p = 0.6",
        vec![k8s_support::changes(&trds)],
        || async {
            let s = trds.get_status(NAME).await.unwrap().status?;
            let table = in_order(&s.thresholds.as_ref()?.table);
            let p = s.tuning.as_ref()?.estimate.as_ref()?.models[0].routing[1];
            ((p - 0.6).abs() < 0.05 && table != table_02).then_some(s)
        },
    ));
    let after = rounds(&ctx, &["pushed", "kept"]);
    assert!(
        after - before <= 3,
        "the change took {} estimating rounds (a round in flight + two intervals allowed)",
        after - before
    );
    let thresholds = retuned.thresholds.clone().unwrap();
    assert_eq!(thresholds.source, ThresholdSource::Tuned);
    assert!(thresholds.applied_at.is_some());
    let table_06 = in_order(&thresholds.table);
    let tuning = retuned.tuning.clone().unwrap();
    let estimate = tuning.estimate.clone().unwrap();
    assert_eq!(estimate.models[0].name, MODELS[0]);
    assert_eq!(estimate.predicted_tokens_per_second.len(), MAX_N);
    assert!(estimate
        .models
        .iter()
        .all(|m| m.decisions >= 300.0 && !m.step_latency.is_empty()));
    assert!(
        tuning.pods == 2 && tuning.last_round_time.is_some(),
        "{tuning:?}"
    );

    // The subservers run it and report it, on the admin API and /metrics.
    wait_until("the subservers apply the p = 0.6 table", || {
        group.reported_thresholds() == table_06
    });
    wait_until("/metrics shows the p = 0.6 table", || {
        metrics_show(&group, &table_06)
    });
    // The reconciler keeps the engine ConfigMap in step (restarted pods start with it).
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    rt.block_on(k8s_support::wait_for(
        "the ConfigMap carries the tuned table",
        vec![k8s_support::changes(&maps)],
        || async {
            let map = maps.get(&format!("{NAME}-engine")).await.ok()?;
            let yaml = map.data?.get(&format!("{}.yaml", MODELS[1]))?.clone();
            let cfg: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
            let t: BTreeMap<String, Vec<i64>> =
                serde_yaml::from_value(cfg["delayed_batching_threshold"].clone()).ok()?;
            (in_order(&t) == table_06).then_some(())
        },
    ));
    // An Event says what was pushed; the loop's metrics count it.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    rt.block_on(k8s_support::wait_for(
        "a Retuned event",
        vec![k8s_support::changes(&events)],
        || async {
            let list = events.list(&Default::default()).await.unwrap();
            list.items
                .iter()
                .find(|e| e.reason.as_deref() == Some("Retuned"))
                .map(|_| ())
        },
    ));
    assert!(rounds(&ctx, &["pushed"]) >= 2);
    assert!(ctx
        .metrics
        .render()
        .contains("tokenrouter_operator_last_tune_timestamp_seconds"));

    // `mode: fixed` turns the loop off and puts the spec's table back on the pods.
    let fixed = json!({"spec": {"delayedBatching": {"mode": "fixed", "thresholds": {MODELS[0]: [1], MODELS[1]: [1, 2]}}}});
    rt.block_on(trds.patch(NAME, &PatchParams::default(), &Patch::Merge(&fixed)))
        .unwrap();
    let spec_table = vec![vec![1], vec![1, 2]];
    wait_until("the spec's table back on the subservers", || {
        group.reported_thresholds() == spec_table
    });
    rt.block_on(k8s_support::wait_for(
        "status: tuning disabled, fixed table",
        vec![k8s_support::changes(&trds)],
        || async {
            let s = trds.get_status(NAME).await.unwrap().status?;
            let fixed = s.thresholds.as_ref()?.source == ThresholdSource::Fixed;
            (fixed && s.tuning.as_ref()?.last_result == "disabled").then_some(())
        },
    ));
    let s = status(&trds);
    assert_eq!(in_order(&s.thresholds.unwrap().table), spec_table);

    let counts = load.stop();
    assert_eq!(
        counts.failed, 0,
        "requests failed while B changed: {counts:?}"
    );
    assert!(counts.finished > 0);
}
