//! Every pod the operator renders for `examples/k8s/*.yaml` meets the Pod
//! Security Standards' `restricted` level, checked rule by rule as the
//! Kubernetes documentation defines it ("Pod Security Standards",
//! kubernetes.io/docs/concepts/security/pod-security-standards/): the
//! baseline rules plus the restricted ones. No cluster needed.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::Path;

use crds::TokenRouterDeployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, SecurityContext};
use operator::build::{self, Inputs};

/// The volume types `restricted` allows.
const ALLOWED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Every pod spec of one example: the serving sets', then the gateway's.
fn rendered_pods(path: &Path) -> Vec<(String, PodSpec)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut trd: TokenRouterDeployment = serde_yaml::from_str(&text).unwrap();
    trd.metadata.namespace = Some("tokenrouter".into());
    assert_eq!(operator::validate::check(&trd), None, "{}", path.display());
    let groups = trd.spec.groups.max(1);
    let d = build::desired(
        &trd,
        &Inputs {
            namespace: "tokenrouter".into(),
            replicas: groups,
            listed_groups: (0..groups).collect(),
            thresholds: build::spec_thresholds(&trd),
            network: None,
        },
    );
    let mut pods: Vec<(String, PodSpec)> = d
        .serving
        .iter()
        .map(|(set, _)| {
            let name = set.metadata.name.clone().unwrap_or_default();
            (name, set.spec.clone().unwrap().template.spec.unwrap())
        })
        .collect();
    pods.push((
        "gateway".into(),
        d.gateway.spec.unwrap().template.spec.unwrap(),
    ));
    pods
}

/// The rules one pod breaks, each named as the standard names its control.
fn restricted_violations(pod: &PodSpec) -> Vec<String> {
    let mut broken = Vec::new();
    if pod.host_network == Some(true) || pod.host_pid == Some(true) || pod.host_ipc == Some(true) {
        broken.push("Host Namespaces".to_string());
    }
    for v in pod.volumes.iter().flatten() {
        let kind = serde_json::to_value(v).unwrap();
        let types: Vec<&String> = kind
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "name")
            .collect();
        if types.iter().any(|t| !ALLOWED_VOLUMES.contains(&t.as_str())) {
            broken.push(format!("Volume Types: {} is {types:?}", v.name));
        }
    }
    let pod_sc = pod.security_context.clone().unwrap_or_default();
    let pod_seccomp = pod_sc.seccomp_profile.as_ref().map(|s| s.type_.clone());
    let containers: Vec<&Container> = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .collect();
    for c in containers {
        let sc: SecurityContext = c.security_context.clone().unwrap_or_default();
        let mut rule = |ok: bool, control: &str| {
            if !ok {
                broken.push(format!("{control}: container {}", c.name));
            }
        };
        rule(sc.privileged != Some(true), "Privileged Containers");
        let caps = sc.capabilities.clone().unwrap_or_default();
        rule(
            caps.drop.iter().flatten().any(|d| d == "ALL"),
            "Capabilities (drop ALL)",
        );
        rule(
            caps.add.iter().flatten().all(|a| a == "NET_BIND_SERVICE"),
            "Capabilities (add only NET_BIND_SERVICE)",
        );
        rule(
            c.ports.iter().flatten().all(|p| p.host_port.is_none()),
            "Host Ports",
        );
        rule(
            sc.allow_privilege_escalation == Some(false),
            "Privilege Escalation",
        );
        let non_root = sc.run_as_non_root.or(pod_sc.run_as_non_root) == Some(true);
        rule(non_root, "Running as Non-root");
        let uid = sc.run_as_user.or(pod_sc.run_as_user);
        rule(uid != Some(0), "Running as Non-root user");
        let seccomp = sc
            .seccomp_profile
            .as_ref()
            .map(|s| s.type_.clone())
            .or(pod_seccomp.clone());
        rule(
            matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")),
            "Seccomp",
        );
        rule(
            sc.proc_mount.as_deref().is_none_or(|m| m == "Default"),
            "/proc Mount Type",
        );
    }
    broken
}

#[test]
fn every_rendered_pod_meets_the_restricted_pod_security_standard() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/k8s");
    let mut checked = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("kind: TokenRouterDeployment") {
            continue;
        }
        for (name, pod) in rendered_pods(&path) {
            let broken = restricted_violations(&pod);
            assert!(broken.is_empty(), "{} {name}: {broken:?}", path.display());
            *checked.entry(path.display().to_string()).or_insert(0) += 1;
        }
    }
    assert!(
        checked.len() >= 3,
        "the CPU, ME and GPU examples at least: {checked:?}"
    );
}

#[test]
fn the_check_catches_a_pod_that_breaks_the_standard() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/k8s/smollm2-cpu.yaml");
    let (_, mut pod) = rendered_pods(&dir).remove(0);
    assert!(restricted_violations(&pod).is_empty());
    let c = &mut pod.containers[0];
    let sc = c.security_context.get_or_insert_with(Default::default);
    sc.allow_privilege_escalation = None;
    sc.capabilities = None;
    pod.host_network = Some(true);
    let broken = restricted_violations(&pod);
    assert_eq!(broken.len(), 3, "{broken:?}");
}
