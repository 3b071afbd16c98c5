//! The ConfigMaps: the rendered engine config (one key per model plus the
//! whole group's) and the gateway's group list.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use crds::v1alpha1::Placement;
use crds::TokenRouterDeployment;
use k8s_openapi::api::core::v1::ConfigMap;

use super::engine::render_yaml;
use super::meta;
use super::serving::entry_set;
use crate::names;

/// The engine ConfigMap's data: `engine.yaml` (the group) and, with
/// `podPerModel`, `MODEL.yaml` per model (its own policy kwargs merged).
pub fn engine_data(
    trd: &TokenRouterDeployment,
    namespace: &str,
    thresholds: &BTreeMap<String, Vec<i64>>,
) -> BTreeMap<String, String> {
    let mut data = BTreeMap::from([(
        names::GROUP_CONFIG_KEY.to_string(),
        render_yaml(trd, namespace, None, thresholds),
    )]);
    if trd.spec.placement == Placement::PodPerModel {
        for m in &trd.spec.models {
            data.insert(
                names::model_config_key(&m.name),
                render_yaml(trd, namespace, Some(&m.name), thresholds),
            );
        }
    }
    data
}

/// A stable hash of the config data: a pod-template annotation, so an edit
/// rolls every model's pods (and a B-table-only change can skip it).
pub fn hash(data: &BTreeMap<String, String>) -> String {
    // FNV-1a: stable across releases, unlike `DefaultHasher`.
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 ^= u64::from(*b);
                self.0 = self.0.wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    data.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The engine ConfigMap.
pub fn engine(trd: &TokenRouterDeployment, data: BTreeMap<String, String>) -> ConfigMap {
    ConfigMap {
        metadata: meta(trd, &names::engine_config(trd), names::common_labels(trd)),
        data: Some(data),
        ..Default::default()
    }
}

/// The URL of group `k`'s entry pod (its admin address).
pub fn group_url(trd: &TokenRouterDeployment, namespace: &str, k: i32) -> String {
    let set = entry_set(trd);
    format!(
        "http://{set}-{k}.{set}.{namespace}.svc:{}",
        trd.spec.ports.admin
    )
}

/// The gateway's group list: the URL of every group in `listed` that runs
/// (below `replicas`), one a line, in group order.
pub fn groups(
    trd: &TokenRouterDeployment,
    namespace: &str,
    listed: &BTreeSet<i32>,
    replicas: i32,
) -> ConfigMap {
    let mut text =
        String::from("# Written by tokenrouter-operator: the groups the gateway may use.\n");
    for &k in listed.range(0..replicas.max(0)) {
        text.push_str(&group_url(trd, namespace, k));
        text.push('\n');
    }
    ConfigMap {
        metadata: meta(trd, &names::groups_config(trd), names::common_labels(trd)),
        data: Some(BTreeMap::from([(names::GROUPS_KEY.to_string(), text)])),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::spec_thresholds;
    use crate::build::tests::sample;

    #[test]
    fn generation_config_reaches_every_rendered_engine_config() {
        let mut trd = sample();
        let plain = engine_data(&trd, "ai", &spec_thresholds(&trd));
        let group: serde_json::Value = serde_yaml::from_str(&plain["engine.yaml"]).unwrap();
        assert!(group.get("generation_config").is_none(), "unset: no key");
        trd.spec.generation_config = Some(crds::v1alpha1::GenerationConfigSpec {
            temperature: Some(0.2),
            top_p: Some(0.9),
            top_k: Some(-1),
            min_p: None,
        });
        let data = engine_data(&trd, "ai", &spec_thresholds(&trd));
        for key in ["engine.yaml", "small.yaml", "big.yaml"] {
            let cfg: serde_json::Value = serde_yaml::from_str(&data[key]).unwrap();
            assert_eq!(
                cfg["generation_config"],
                serde_json::json!({"temperature": 0.2, "top_p": 0.9, "top_k": -1}),
                "{key}"
            );
        }
        assert_ne!(hash(&plain), hash(&data), "an edit rolls the pods");
    }
}
