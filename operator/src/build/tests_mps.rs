//! MPS pods per provider: the node labels they select, `hostIPC`, and the
//! KV memory fraction the engine gets.

use crds::v1alpha1::MpsProvider;

use super::tests::{inputs, mps_pool, pod, sample};
use super::*;

fn mps_trd(provider: MpsProvider) -> crds::TokenRouterDeployment {
    let mut trd = sample();
    trd.spec.device = Some("cuda".into());
    let mut pool = mps_pool(4);
    if let Some(m) = pool.mps.as_mut() {
        m.provider = provider;
    }
    trd.spec.node_pool = Some(pool);
    trd
}

fn fraction(d: &Desired, model: &str) -> serde_json::Value {
    let data = d.engine_config.data.as_ref().unwrap();
    let cfg: serde_json::Value = serde_yaml::from_str(&data[&format!("{model}.yaml")]).unwrap();
    cfg["model"][model]["mem_fraction_static"].clone()
}

#[test]
fn nvidia_mps_pods_select_feature_discoverys_sharing_labels() {
    let d = desired(&mps_trd(MpsProvider::Nvidia), &inputs(1));
    for (set, _) in &d.serving {
        let p = pod(set);
        let selector = p.node_selector.as_ref().unwrap();
        assert_eq!(selector["nvidia.com/gpu.sharing-strategy"], "mps");
        assert_eq!(selector["nvidia.com/gpu.replicas"], "4");
        // The user's own labels stay.
        assert_eq!(selector["pool"], "mps");
        assert_eq!(p.host_ipc, None);
    }
    // The plugin's cap is invisible to the client: the fraction is divided.
    assert_eq!(fraction(&d, "small"), mps::DEFAULT_CUDA_FRACTION / 4.0);
}

#[test]
fn a_users_selector_wins_over_the_sharing_labels() {
    let mut trd = mps_trd(MpsProvider::Nvidia);
    let pool = trd.spec.node_pool.as_mut().unwrap();
    pool.node_selector = Some(
        [("nvidia.com/gpu.replicas".to_string(), "8".to_string())]
            .into_iter()
            .collect(),
    );
    let d = desired(&trd, &inputs(1));
    let selector = pod(&d.serving[0].0).node_selector.clone().unwrap();
    assert_eq!(selector["nvidia.com/gpu.replicas"], "8");
    assert_eq!(selector["nvidia.com/gpu.sharing-strategy"], "mps");
}

#[test]
fn gke_mps_pods_get_host_ipc_gke_labels_and_an_undivided_fraction() {
    let d = desired(&mps_trd(MpsProvider::Gke), &inputs(1));
    for (set, _) in &d.serving {
        let p = pod(set);
        let selector = p.node_selector.as_ref().unwrap();
        assert_eq!(selector["cloud.google.com/gke-gpu-sharing-strategy"], "mps");
        assert_eq!(
            selector["cloud.google.com/gke-max-shared-clients-per-gpu"],
            "4"
        );
        assert!(!selector.contains_key("nvidia.com/gpu.replicas"));
        assert_eq!(p.host_ipc, Some(true));
    }
    // GKE injects CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, which the engine reads:
    // dividing again would leave a quarter of the client's share.
    assert!(fraction(&d, "small").is_null());
    // The fit check still counts the client's share (the GPU / clients).
    let trd = mps_trd(MpsProvider::Gke);
    assert_eq!(mps::pod_share_bytes(&trd.spec), Some(80 * (1u64 << 30) / 4));
}

#[test]
fn without_mps_no_sharing_labels_or_host_ipc() {
    let mut trd = sample();
    trd.spec.node_pool = None;
    let d = desired(&trd, &inputs(1));
    for (set, _) in &d.serving {
        assert_eq!(pod(set).node_selector, None);
        assert_eq!(pod(set).host_ipc, None);
    }
}
