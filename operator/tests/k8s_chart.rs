//! The Helm chart: `helm lint`, `helm template | kubernetes-validate
//! --strict`, the committed CRD, and the security properties (issue #14
//! item 7): the NetworkPolicy keeps the model pods' peer and admin ports
//! inside the release, pods run non-root on a read-only root filesystem, and
//! no RBAC rule uses a wildcard.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod k8s_support;

use std::path::Path;
use std::process::Command;

use serde_yaml::Value;

use k8s_support::{kit_path, kubernetes_validate, required};

fn chart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/tokenrouter")
        .display()
        .to_string()
}

/// Runs helm, or `None` (skip) when it is not installed and not required.
fn helm(args: &[&str]) -> Option<String> {
    let out = match Command::new("helm")
        .args(args)
        .env("PATH", kit_path())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                !required(),
                "helm is required (TOKENROUTER_REQUIRE_K8S=1): {e}"
            );
            eprintln!("skipped: no helm (`make test-k8s` installs the k8s test kit's)");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

fn render(extra: &[&str]) -> Option<(String, Vec<Value>)> {
    let chart = chart();
    let mut args = vec![
        "template",
        "tr",
        chart.as_str(),
        "--namespace",
        "tokenrouter",
        "--include-crds",
    ];
    args.extend_from_slice(extra);
    let text = helm(&args)?;
    let docs = text
        .split("\n---")
        .map(|d| serde_yaml::from_str::<Value>(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    Some((text, docs))
}

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or("")
}

#[test]
fn chart_lints_and_validates_strictly() {
    let chart = chart();
    let Some(_) = helm(&["lint", "--strict", &chart]) else {
        return;
    };
    for extra in [
        &[][..],
        &[
            "--set",
            "operator.watchReleaseNamespaceOnly=true",
            "--set",
            "networkPolicy.metricsNamespaces={monitoring}",
        ][..],
    ] {
        let (text, docs) = render(extra).unwrap();
        // The CRD is validated by the API server in tests/k8s_operator.rs;
        // kubernetes-validate knows only built-in kinds.
        let builtin: Vec<String> = docs
            .iter()
            .filter(|d| kind(d) != "CustomResourceDefinition")
            .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
            .collect();
        if let Err(e) = kubernetes_validate(&builtin.concat()) {
            panic!("kubernetes-validate --strict:\n{e}\n{text}");
        }
    }
}

#[test]
fn chart_ships_the_generated_crd() {
    let Some((_, docs)) = render(&[]) else { return };
    let crd = docs
        .iter()
        .find(|d| kind(d) == "CustomResourceDefinition")
        .expect("CRD in chart");
    let generated: Value = serde_yaml::from_str(&crds::crd_yaml()).unwrap();
    assert_eq!(
        crd, &generated,
        "charts/tokenrouter/crds is stale: run `make crdgen`"
    );
}

#[test]
fn chart_is_least_privilege_and_hardened() {
    let Some((_, docs)) = render(&[
        "--set",
        "networkPolicy.metricsNamespaces={monitoring}",
        "--set",
        "networkPolicy.extraNamespaces={ai}",
    ]) else {
        return;
    };
    // No wildcard verbs, resources or API groups in any rule.
    let roles: Vec<&Value> = docs.iter().filter(|d| kind(d).ends_with("Role")).collect();
    assert!(!roles.is_empty());
    for role in roles {
        for rule in role["rules"].as_sequence().unwrap() {
            for field in ["verbs", "resources", "apiGroups"] {
                for v in rule[field].as_sequence().unwrap() {
                    assert_ne!(v.as_str(), Some("*"), "wildcard {field} in {rule:?}");
                }
            }
        }
    }
    // The operator pod: non-root, read-only root filesystem, no escalation.
    let deploy = docs.iter().find(|d| kind(d) == "Deployment").unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], Value::Bool(true));
    for c in pod["containers"].as_sequence().unwrap() {
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], Value::Bool(true));
        assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false));
        assert_eq!(sc["runAsNonRoot"], Value::Bool(true));
    }
    // The NetworkPolicy: model pods' peer and admin ports open only to pods
    // of the release (operator-managed pods and the operator), plus scrapes
    // of the admin port from the named namespaces.
    // One per namespace with resources: a NetworkPolicy covers only its own.
    let policies: Vec<&Value> = docs.iter().filter(|d| kind(d) == "NetworkPolicy").collect();
    let namespaces: Vec<&str> = policies
        .iter()
        .map(|p| p["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(namespaces, vec!["tokenrouter", "ai"]);
    let mut peer_open_to = Vec::new();
    for np in policies {
        let selected: Vec<String> = np["spec"]["podSelector"]["matchExpressions"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| format!("{}={:?}", e["key"].as_str().unwrap(), e["values"]))
            .collect();
        assert!(selected
            .iter()
            .any(|s| s.starts_with("app.kubernetes.io/component=") && s.contains("model")));
        assert_eq!(np["spec"]["policyTypes"][0], Value::from("Ingress"));
        let ingress = np["spec"]["ingress"].as_sequence().unwrap();
        for rule in ingress {
            let ports: Vec<&str> = rule["ports"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|p| p["port"].as_str().unwrap())
                .collect();
            for from in rule["from"].as_sequence().unwrap() {
                assert!(from.get("ipBlock").is_none(), "no IP ranges: {from:?}");
                if ports.contains(&"peer") {
                    peer_open_to.push(from.clone());
                }
                let ns = &from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"];
                // The operator, from the release namespace: peer and admin.
                let operator = ns.as_str() == Some("tokenrouter")
                    && from["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "tr";
                if operator {
                    continue;
                }
                if from.get("namespaceSelector").is_some() {
                    assert_eq!(
                        ports,
                        vec!["admin"],
                        "other namespaces reach only the admin port"
                    );
                } else {
                    let labels = &from["podSelector"]["matchLabels"];
                    let release = labels["app.kubernetes.io/instance"] == "tr";
                    let managed = labels["app.kubernetes.io/managed-by"] == "tokenrouter-operator";
                    assert!(release || managed, "peer/admin open to {from:?}");
                }
            }
        }
    }
    assert!(!peer_open_to.is_empty());
    // Peer ports: managed pods of the namespace itself, or the release's
    // operator (by its labels, in the release namespace); no other namespace.
    assert!(peer_open_to.iter().all(|f| f.get("podSelector").is_some()
        && f.get("namespaceSelector")
            .is_none_or(|n| { n["matchLabels"]["kubernetes.io/metadata.name"] == "tokenrouter" })));
}
