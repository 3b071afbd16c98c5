//! Builder tests: every object from a resource, without a cluster.

use std::collections::BTreeMap;

use crds::v1alpha1::{MpsDaemon, MpsSpec, NodePoolSpec, Placement};
use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

/// A two-model R2R resource (`podPerModel`, PVC weights).
pub(crate) fn sample() -> TokenRouterDeployment {
    let yaml = r#"
apiVersion: tokenrouter.io/v1alpha1
kind: TokenRouterDeployment
metadata: {name: demo, namespace: ai, uid: "1234", generation: 2}
spec:
  image: example.com/tokenrouter:1
  models:
    - name: small
      entry: true
      source: {pvc: {claimName: weights, subPath: qwen3-0.6b}}
      resources: {limits: {nvidia.com/gpu: "1"}}
    - name: big
      source: {pvc: {claimName: weights, subPath: qwen3-32b}}
      dtype: bf16
      policyKwargs: {threshold: 0.5}
  policy: {class: R2R, kwargs: {router_path: /models/router, threshold: 0.3}, targetLargeShare: 0.2}
  executionMode: async_delayed
  delayedBatching: {mode: fixed, thresholds: {small: [1, 2], big: [1, 1]}, maxBatchWaitMs: 20}
  gateway: {servedModelName: qwen-routed, apiKeySecretRef: {name: keys}}
"#;
    serde_yaml::from_str(yaml).unwrap()
}

pub(super) fn inputs(replicas: i32) -> Inputs {
    Inputs {
        namespace: "ai".into(),
        replicas,
        listed_groups: (0..replicas).collect(),
        thresholds: spec_thresholds(&sample()),
        network: None,
    }
}

pub(super) fn pod(set: &StatefulSet) -> &PodSpec {
    set.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn main_container(set: &StatefulSet) -> &Container {
    &pod(set).containers[0]
}

#[test]
fn pod_per_model_builds_one_set_and_headless_service_per_model() {
    let d = desired(&sample(), &inputs(3));
    assert_eq!(d.serving.len(), 2);
    for ((set, svc), model) in d.serving.iter().zip(["small", "big"]) {
        assert_eq!(name_of(set), format!("demo-{model}"));
        assert_eq!(name_of(svc), format!("demo-{model}"));
        let spec = set.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3), "replicas = groups");
        assert_eq!(spec.service_name.as_deref(), Some(name_of(svc).as_str()));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        let svc_spec = svc.spec.as_ref().unwrap();
        assert_eq!(svc_spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(svc_spec.publish_not_ready_addresses, Some(true));
        assert_eq!(svc_spec.selector, spec.selector.match_labels);
        let owner = &set.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("TokenRouterDeployment", Some(true))
        );
        let c = main_container(set);
        assert_eq!(
            c.args.as_ref().unwrap(),
            &vec![
                "subserver".to_string(),
                "--config".into(),
                format!("/etc/tokenrouter/{model}.yaml"),
                "--model".into(),
                model.into(),
                "--admin".into(),
                "0.0.0.0:8080".into(),
            ]
        );
        let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref()?.http_get.as_ref()?.path.clone()
        };
        // Readiness needs the peers; liveness and startup only the process,
        // so one dead pod does not restart its whole group.
        assert_eq!(path(&c.readiness_probe).as_deref(), Some("/health"));
        assert_eq!(path(&c.liveness_probe).as_deref(), Some("/livez"));
        assert_eq!(path(&c.startup_probe).as_deref(), Some("/livez"));
        let env: Vec<&str> = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert!(env.contains(&"TOKENROUTER_GROUP") && env.contains(&"TOKENROUTER_ADMIN_TOKEN"));
        let sec = c.security_context.as_ref().unwrap();
        assert_eq!(sec.read_only_root_filesystem, Some(true));
        assert_eq!(
            pod(set).security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        let mounts = c.volume_mounts.as_ref().unwrap();
        let weights = mounts
            .iter()
            .find(|m| m.mount_path == format!("/models/{model}"))
            .unwrap();
        assert_eq!(weights.read_only, Some(true));
    }
    // The group's other models sit beside its entry pod (same ordinal).
    let big = pod(&d.serving[1].0);
    let terms = big
        .affinity
        .as_ref()
        .unwrap()
        .pod_affinity
        .as_ref()
        .unwrap();
    let term = &terms
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        term.pod_affinity_term.match_label_keys.as_ref().unwrap(),
        &vec![names::POD_INDEX.to_string()]
    );
    assert!(
        pod(&d.serving[0].0).affinity.is_none(),
        "the entry pod anchors its group"
    );
}

#[test]
fn engine_config_renders_per_model_addresses_and_kwargs() {
    let trd = sample();
    let data = config::engine_data(&trd, "ai", &spec_thresholds(&trd));
    assert_eq!(data.len(), 3, "engine.yaml + one per model");
    let big: serde_json::Value = serde_yaml::from_str(&data["big.yaml"]).unwrap();
    assert_eq!(
        big["scheduler_kwargs"]["threshold"], 0.5,
        "the model's override wins"
    );
    assert_eq!(big["scheduler_kwargs"]["router_path"], "/models/router");
    assert_eq!(
        big["transport"]["addresses"]["big"],
        "demo-big-${TOKENROUTER_GROUP:-0}.demo-big.ai.svc:7000"
    );
    assert_eq!(big["model"]["big"]["path"], "/models/big");
    assert_eq!(big["model"]["big"]["dtype"], "bf16");
    assert_eq!(big["system"]["entry_model"], "small");
    assert_eq!(
        big["delayed_batching_threshold"]["small"],
        serde_json::json!([1, 2])
    );
    assert_eq!(big["gateway"]["served_model_name"], "qwen-routed");
    assert_eq!(big["gateway"]["api_keys_env"], names::API_KEYS_ENV);
    let group: serde_json::Value = serde_yaml::from_str(&data["engine.yaml"]).unwrap();
    assert_eq!(group["scheduler_kwargs"]["threshold"], 0.3);
}

#[test]
fn kv_cache_and_threads_per_model_reach_the_engine_config() {
    let mut trd = sample();
    trd.spec.models[0].kv_cache = Some(crds::v1alpha1::KvCacheSpec {
        tokens: Some(8192),
        memory_fraction: None,
    });
    trd.spec.models[0].threads = Some(2);
    trd.spec.models[1].kv_cache = Some(crds::v1alpha1::KvCacheSpec {
        tokens: None,
        memory_fraction: Some(0.3),
    });
    trd.spec.models[1].threads = Some(6);
    let data = config::engine_data(&trd, "ai", &spec_thresholds(&trd));
    let yaml = |key: &str| -> serde_json::Value { serde_yaml::from_str(&data[key]).unwrap() };
    for key in ["small.yaml", "big.yaml", "engine.yaml"] {
        let cfg = yaml(key);
        assert_eq!(cfg["model"]["small"]["kv_cache_tokens"], 8192, "{key}");
        assert_eq!(cfg["model"]["big"]["mem_fraction_static"], 0.3, "{key}");
    }
    // A pod per model: each process its own threads; one process: the largest.
    assert_eq!(yaml("small.yaml")["system"]["threads"], 2);
    assert_eq!(yaml("big.yaml")["system"]["threads"], 6);
    assert_eq!(yaml("engine.yaml")["system"]["threads"], 6);
    // Unset: no key (the engine uses the pod's CPU limit).
    let plain = config::engine_data(&sample(), "ai", &spec_thresholds(&trd));
    let small: serde_json::Value = serde_yaml::from_str(&plain["small.yaml"]).unwrap();
    assert!(small["system"].get("threads").is_none());
    assert!(small["model"]["small"].get("kv_cache_tokens").is_none());
}

#[test]
fn edits_change_the_config_hash_and_tuned_tables_do_not() {
    let trd = sample();
    let base = desired(&trd, &inputs(1));
    let hash = |d: &Desired| {
        d.serving[0]
            .0
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[names::CONFIG_HASH]
            .clone()
    };
    let mut tuned = inputs(1);
    tuned.thresholds = BTreeMap::from([("small".into(), vec![4, 4])]);
    let retuned = desired(&trd, &tuned);
    assert_eq!(hash(&base), hash(&retuned));
    assert_ne!(base.engine_config.data, retuned.engine_config.data);
    let mut edited = trd.clone();
    edited.spec.policy.kwargs = Some(serde_json::json!({"threshold": 0.9}));
    let edited = desired(&edited, &inputs(1));
    assert_ne!(hash(&base), hash(&edited));
    // Every model's pods roll together: they share the hash.
    assert_eq!(hash(&edited), {
        let d = &edited;
        d.serving[1]
            .0
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[names::CONFIG_HASH]
            .clone()
    });
}

#[test]
fn pod_per_group_runs_every_model_in_one_pod() {
    let mut trd = sample();
    trd.spec.placement = Placement::PodPerGroup;
    let d = desired(&trd, &inputs(2));
    assert_eq!(d.serving.len(), 1);
    let (set, svc) = &d.serving[0];
    assert_eq!(name_of(set), "demo-group");
    assert_eq!(name_of(svc), "demo-group");
    let c = main_container(set);
    let args = c.args.as_ref().unwrap();
    assert!(args.contains(&"--all-models".to_string()));
    assert!(args.contains(&"/etc/tokenrouter/engine.yaml".to_string()));
    let mounts: Vec<&str> = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert!(mounts.contains(&"/models/small") && mounts.contains(&"/models/big"));
    let cfg: serde_json::Value =
        serde_yaml::from_str(&d.engine_config.data.as_ref().unwrap()["engine.yaml"]).unwrap();
    assert_eq!(cfg["transport"]["kind"], "inproc");
    let groups = &d.groups_config.data.as_ref().unwrap()[names::GROUPS_KEY];
    assert!(groups.contains("http://demo-group-1.demo-group.ai.svc:8080"));
}

fn model_mounts(set: &StatefulSet) -> Vec<&str> {
    main_container(set)
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.mount_path.as_str())
        .filter(|p| p.starts_with("/models/"))
        .collect()
}

pub(super) fn mps_pool(replicas: i32) -> NodePoolSpec {
    NodePoolSpec {
        node_selector: Some(BTreeMap::from([("pool".into(), "mps".into())])),
        tolerations: None,
        mps: Some(MpsSpec {
            enabled: true,
            replicas,
            daemon: MpsDaemon::DevicePlugin,
            provider: crds::v1alpha1::MpsProvider::Nvidia,
        }),
        gpu_memory_gib: Some(80.0),
        runtime_class_name: Some("nvidia".into()),
    }
}

#[test]
fn model_pods_mount_their_own_weights_and_the_entrys() {
    // The entry sees its own weights, the other model its own and the
    // entry's (tokenizer, router), with or without MPS: under MPS each pod
    // is its own client with its own memory cap.
    let mut trd = sample();
    for pool in [None, Some(mps_pool(2))] {
        trd.spec.node_pool = pool;
        let d = desired(&trd, &inputs(1));
        assert_eq!(model_mounts(&d.serving[0].0), ["/models/small"]);
        assert_eq!(
            model_mounts(&d.serving[1].0),
            ["/models/big", "/models/small"]
        );
    }
}

#[test]
fn mps_pods_keep_to_the_device_plugins_contract() {
    let mut trd = sample();
    trd.spec.node_pool = Some(mps_pool(2));
    let d = desired(&trd, &inputs(1));
    for (set, _) in &d.serving {
        let c = main_container(set);
        // The plugin sets the pipe directory and mounts it; ours would fight it.
        assert!(
            c.env
                .iter()
                .flatten()
                .all(|e| !e.name.starts_with("CUDA_MPS_")),
            "{:?}",
            c.env
        );
        let p = pod(set);
        assert!(p.volumes.iter().flatten().all(|v| v.host_path.is_none()));
        assert!(p.init_containers.is_none());
        assert_eq!(p.node_selector.as_ref().unwrap()["pool"], "mps");
        assert_eq!(p.runtime_class_name.as_deref(), Some("nvidia"));
    }
    // The partner is bound to its entry's node; the entries keep apart, so
    // a node's GPU replicas are never all taken by entries.
    let big = pod(&d.serving[1].0).affinity.as_ref().unwrap();
    assert!(big
        .pod_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .is_some());
    let entry = pod(&d.serving[0].0).affinity.as_ref().unwrap();
    let apart = &entry
        .pod_anti_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()[0];
    assert_eq!(apart.topology_key, "kubernetes.io/hostname");
    assert_eq!(
        apart
            .label_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()[names::MODEL],
        "small"
    );
}

#[test]
fn mps_divides_the_kv_fraction_by_the_clients_per_gpu() {
    let mut trd = sample();
    trd.spec.device = Some("cuda".into());
    trd.spec.node_pool = Some(mps_pool(4));
    trd.spec.models[1].kv_cache = Some(crds::v1alpha1::KvCacheSpec {
        tokens: None,
        memory_fraction: Some(0.8),
    });
    let d = desired(&trd, &inputs(1));
    let data = d.engine_config.data.as_ref().unwrap();
    let cfg: serde_json::Value = serde_yaml::from_str(&data["big.yaml"]).unwrap();
    // The engine sizes against the whole device (cudaMemGetInfo does not
    // see the plugin's cap): 0.8 of a quarter is 0.2 of the GPU.
    assert_eq!(cfg["model"]["big"]["mem_fraction_static"], 0.2);
    assert_eq!(
        cfg["model"]["small"]["mem_fraction_static"],
        mps::DEFAULT_CUDA_FRACTION / 4.0
    );
    // Without MPS the fraction is the user's (or the engine's default).
    trd.spec.node_pool = None;
    let d = desired(&trd, &inputs(1));
    let cfg: serde_json::Value =
        serde_yaml::from_str(&d.engine_config.data.as_ref().unwrap()["big.yaml"]).unwrap();
    assert_eq!(cfg["model"]["big"]["mem_fraction_static"], 0.8);
    assert!(cfg["model"]["small"].get("mem_fraction_static").is_none());
}

#[test]
fn pull_secrets_reach_every_pod_and_a_budget_covers_the_serving_pods() {
    let mut trd = sample();
    trd.spec.image_pull_secrets = Some(vec![k8s_openapi::api::core::v1::LocalObjectReference {
        name: "regcred".into(),
    }]);
    let d = desired(&trd, &inputs(2));
    let gateway = d
        .gateway
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let pods = d.serving.iter().map(|(s, _)| pod(s)).chain([gateway]);
    for p in pods {
        assert_eq!(p.image_pull_secrets.as_ref().unwrap()[0].name, "regcred");
    }
    let pdb = d.disruption_budget.spec.as_ref().unwrap();
    assert_eq!(
        pdb.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    let selector = pdb
        .selector
        .as_ref()
        .unwrap()
        .match_labels
        .as_ref()
        .unwrap();
    for (set, _) in &d.serving {
        let labels = set
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap();
        let labels = labels.labels.as_ref().unwrap();
        assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
    }
    assert!(d.disruption_budget.metadata.owner_references.is_some());
}

#[test]
fn gateway_keeps_the_resources_the_spec_gives() {
    let mut trd = sample();
    let given = ResourceRequirements {
        limits: Some(BTreeMap::from([("memory".into(), Quantity("3Gi".into()))])),
        ..Default::default()
    };
    trd.spec.gateway.resources = Some(given.clone());
    let d = desired(&trd, &inputs(1));
    let pod = d.gateway.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.containers[0].resources, Some(given));
}

#[test]
fn gateway_fronts_the_listed_groups_with_keys_from_the_secret() {
    let mut i = inputs(3);
    i.listed_groups = [0, 2, 3].into(); // 3 does not run: not written
    let d = desired(&sample(), &i);
    let groups = &d.groups_config.data.as_ref().unwrap()[names::GROUPS_KEY];
    let urls: Vec<&str> = groups.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        urls,
        vec![
            "http://demo-small-0.demo-small.ai.svc:8080",
            "http://demo-small-2.demo-small.ai.svc:8080"
        ],
        "a set of running groups (1 left out, 3 not running), one URL a line"
    );
    let spec = d.gateway.spec.as_ref().unwrap();
    let c = &spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.args.as_ref().unwrap()[0], "gateway");
    let r = c.resources.as_ref().unwrap();
    let amount = |m: &Option<BTreeMap<String, Quantity>>, k: &str| m.as_ref().unwrap()[k].0.clone();
    assert_eq!(
        (amount(&r.requests, "cpu"), amount(&r.requests, "memory")),
        ("250m".to_string(), "256Mi".to_string()),
        "unset spec.gateway.resources: the defaults, requests and limits"
    );
    assert_eq!(
        (amount(&r.limits, "cpu"), amount(&r.limits, "memory")),
        ("2".to_string(), "1Gi".to_string())
    );
    let live = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(
        live.path.as_deref(),
        Some("/livez"),
        "an outage must not restart it"
    );
    let keys = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == names::API_KEYS_ENV)
        .unwrap();
    let secret = keys
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (secret.name.as_str(), secret.key.as_str()),
        ("keys", "api-keys")
    );
    // The gateway carries the admin token the subservers require on
    // `/internal/generate` (from the Secret the model pods read).
    let token = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == names::ADMIN_TOKEN_ENV)
        .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
        .unwrap();
    assert_eq!(
        (token.name.as_str(), token.key.as_str()),
        ("demo-admin-token", names::ADMIN_TOKEN_KEY)
    );
    let svc = d.gateway_service.spec.as_ref().unwrap();
    assert_eq!(svc.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(svc.ports.as_ref().unwrap()[0].port, 8000);
    assert!(d.service_monitor.is_none());
}

#[test]
fn service_monitor_when_asked() {
    let mut trd = sample();
    trd.spec.service_monitor = true;
    let d = desired(&trd, &inputs(1));
    let m = d.service_monitor.unwrap();
    assert_eq!(m.types.as_ref().unwrap().kind, "ServiceMonitor");
    assert_eq!(m.data["spec"]["endpoints"][0]["port"], "admin");
}
