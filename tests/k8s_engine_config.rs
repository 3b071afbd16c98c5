//! The engine config the operator renders into its ConfigMap loads with the
//! engine's own loader (`subserver::config::EngineConfig`), for every
//! example resource and both placements, and means what the resource says.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use crds::TokenRouterDeployment;
use operator::build::{self, Inputs};
use subserver::config::{EngineConfig, KvBudget, TransportConfig};

/// A two-model sim resource (no weights), as the k8s tests use.
const SIM: &str = r#"
apiVersion: tokenrouter.io/v1alpha1
kind: TokenRouterDeployment
metadata: {name: sim}
spec:
  backend: sim
  models:
    - {name: small, entry: true, sim: {latency_ms: {base: 1}}}
    - {name: big, sim: {latency_ms: {base: 5}}}
  policy: {class: Random, kwargs: {probability: 0.2, seed: 1}}
  groups: 2
  delayedBatching: {mode: fixed, thresholds: {small: [1], big: [1, 2]}}
"#;

fn examples() -> Vec<(String, TokenRouterDeployment)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/k8s");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("examples/k8s") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut trd: TokenRouterDeployment =
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            trd.metadata.namespace = Some("prod".into());
            out.push((path.display().to_string(), trd));
        }
    }
    assert!(out.len() >= 3, "the three examples");
    out.push(("sim".into(), {
        let mut t: TokenRouterDeployment = serde_yaml::from_str(SIM).unwrap();
        t.metadata.namespace = Some("prod".into());
        t
    }));
    out
}

/// Writes every key of the engine ConfigMap and loads it.
fn load_all(trd: &TokenRouterDeployment) -> BTreeMap<String, EngineConfig> {
    let desired = build::desired(
        trd,
        &Inputs {
            namespace: "prod".into(),
            replicas: 2,
            listed_groups: (0..2).collect(),
            thresholds: build::spec_thresholds(trd),
            network: None,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let mut out = BTreeMap::new();
    for (key, text) in desired.engine_config.data.unwrap() {
        let file = dir.path().join(&key);
        std::fs::write(&file, &text).unwrap();
        let cfg = EngineConfig::from_file(&file)
            .unwrap_or_else(|e| panic!("{key} does not load: {e}\n{text}"));
        out.insert(key, cfg);
    }
    out
}

#[test]
fn every_example_renders_a_config_the_engine_loads() {
    for (what, trd) in examples() {
        let configs = load_all(&trd);
        let group = &configs["engine.yaml"];
        let names: Vec<&str> = trd.spec.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(group.model_names(), names, "{what}");
        let entry = trd.spec.models.iter().find(|m| m.entry).unwrap();
        assert_eq!(
            group.model_names()[group.entry_index()],
            entry.name,
            "{what}"
        );
        for (key, cfg) in &configs {
            match (trd.spec.placement, cfg.transport()) {
                (crds::v1alpha1::Placement::PodPerModel, TransportConfig::Tcp(tcp)) => {
                    // Group 0 without the pod's env; the pod sets TOKENROUTER_GROUP.
                    let first =
                        format!("{}-{}-0.", trd.metadata.name.as_deref().unwrap(), names[0]);
                    assert!(
                        tcp.addresses[0].starts_with(&first),
                        "{what} {key}: {:?}",
                        tcp.addresses
                    );
                }
                (crds::v1alpha1::Placement::PodPerGroup, TransportConfig::InProc) => {}
                (p, t) => panic!("{what} {key}: {p:?} rendered {:?}", t.kind()),
            }
        }
        // A model's kvCache reaches its engine budget in every config.
        for (i, m) in trd.spec.models.iter().enumerate() {
            let Some(kv) = &m.kv_cache else { continue };
            let want = match (kv.tokens, kv.memory_fraction) {
                (Some(t), _) => KvBudget::Tokens(t as usize),
                (None, Some(f)) => KvBudget::Fraction(f),
                (None, None) => panic!("{what}: empty kvCache"),
            };
            for (key, cfg) in &configs {
                assert_eq!(cfg.kv_budget(i), Some(want), "{what} {key} {}", m.name);
            }
        }
        if let Some(share) = trd.spec.policy.target_large_share {
            assert_eq!(group.target_large_share(), Some(share), "{what}");
        }
    }
}
