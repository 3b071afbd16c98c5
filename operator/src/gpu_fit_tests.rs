//! The shipped examples against the NVIDIA device plugin's contract and
//! the GPUs they name: no `CUDA_MPS_*` env or host path of our own, a GPU
//! request on every GPU pod, and weights plus a useful KV cache under each
//! pod's share. Also the share arithmetic for MPS specs.

use std::path::Path;

use crds::TokenRouterDeployment;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::build::*;
use crate::{gpu_fit, validate};

/// Least KV cache a GPU example must leave (a few thousand tokens of a 32B model).
const MIN_KV_GIB: f64 = 4.0;

fn examples() -> Vec<(String, TokenRouterDeployment)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/k8s");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut trd: TokenRouterDeployment = serde_yaml::from_str(&text).unwrap();
            trd.metadata.namespace = Some("ai".into());
            out.push((path.display().to_string(), trd));
        }
    }
    assert!(out.len() >= 3, "{out:?}");
    out
}

fn inputs(trd: &TokenRouterDeployment) -> Inputs {
    Inputs {
        namespace: "ai".into(),
        replicas: 2,
        listed_groups: (0..2).collect(),
        thresholds: spec_thresholds(trd),
        network: None,
    }
}

#[test]
fn every_example_keeps_to_the_device_plugins_contract_and_fits_its_gpus() {
    for (path, trd) in examples() {
        assert_eq!(validate::check(&trd), None, "{path}");
        let gpu = trd
            .spec
            .device
            .as_deref()
            .is_some_and(|d| d.starts_with("cuda"))
            || trd
                .spec
                .models
                .iter()
                .any(|m| m.device.as_deref().is_some_and(|d| d.starts_with("cuda")));
        let d = desired(&trd, &inputs(&trd));
        for (set, _) in &d.serving {
            let pod = set.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
            assert!(
                pod.volumes.iter().flatten().all(|v| v.host_path.is_none()),
                "{path}: a hostPath volume"
            );
            let c = &pod.containers[0];
            assert!(
                c.env
                    .iter()
                    .flatten()
                    .all(|e| !e.name.starts_with("CUDA_MPS_")),
                "{path}: CUDA_MPS_* env"
            );
            let limits = c.resources.as_ref().and_then(|r| r.limits.clone());
            let gpus = limits.as_ref().and_then(|l| l.get("nvidia.com/gpu"));
            if gpu {
                assert!(
                    gpus.is_some_and(|q| q != &Quantity("0".into())),
                    "{path}: {} requests no nvidia.com/gpu",
                    name_of(set)
                );
            }
        }
        let fits = gpu_fit::pod_fits(&trd);
        assert_eq!(gpu, !fits.is_empty(), "{path}: GPU figures declared");
        for fit in fits {
            let kv_gib = fit.kv_bytes() as f64 / (1u64 << 30) as f64;
            assert!(kv_gib >= MIN_KV_GIB, "{path}: {}", fit.describe());
        }
    }
}

fn spec_with(extra: &str, params: u64) -> TokenRouterDeployment {
    let text = format!(
        r#"
apiVersion: tokenrouter.io/v1alpha1
kind: TokenRouterDeployment
metadata: {{name: t, namespace: ai}}
spec:
  device: cuda
  dtype: bf16
  policy: {{class: R2R}}
  models:
    - {{name: quick, entry: true, parameters: 751632384, source: {{imagePath: /m/q}}, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}
    - {{name: reference, parameters: PARAMS, source: {{imagePath: /m/r}}, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}
{extra}"#
    );
    serde_yaml::from_str(&text.replace("PARAMS", &params.to_string())).unwrap()
}

fn mps_spec(params: u64) -> TokenRouterDeployment {
    spec_with(
        "  nodePool: {gpuMemoryGiB: 79.6, mps: {enabled: true, replicas: 2}}",
        params,
    )
}

#[test]
fn an_8b_model_fits_an_mps_half_of_an_80_gb_gpu_and_a_32b_does_not() {
    // Qwen3-8B: 15.3 GiB of bf16 weights in 0.85 x 39.8 GiB = 33.8 GiB.
    let trd = mps_spec(8_190_735_360);
    assert_eq!(validate::check(&trd), None);
    let fits = gpu_fit::pod_fits(&trd);
    assert_eq!(fits.len(), 2, "one plan per model pod");
    let big = &fits[1];
    assert_eq!(big.share_bytes, (79.6 * (1u64 << 30) as f64 / 2.0) as u64);
    let kv = big.kv_bytes() as f64 / (1u64 << 30) as f64;
    assert!((kv - (0.85 * 39.8 - 15.26)).abs() < 0.05, "{kv}");
    // Qwen3-32B: 61.0 GiB of weights; refused with the figures.
    let (reason, message) = validate::check(&mps_spec(32_762_123_264)).unwrap();
    assert_eq!(reason, "ModelExceedsGpuShare");
    for figure in [
        "61.0 GiB of weights",
        "39.8 GiB MPS share",
        "2 device-plugin replicas",
        "-27.2 GiB",
    ] {
        assert!(message.contains(figure), "{figure}: {message}");
    }
}
