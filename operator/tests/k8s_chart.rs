//! The Helm chart: `helm lint`, `helm template | kubernetes-validate
//! --strict`, the committed CRD, and the security properties (issue #14
//! item 7): the operator may render each resource's NetworkPolicy and is
//! told the labels and namespace its policies admit, pods run non-root on a
//! read-only root filesystem, and no RBAC rule uses a wildcard.
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod k8s_support;

use std::path::Path;
use std::process::Command;

use clap::Parser;
use serde_yaml::Value;

use k8s_support::{kit_path, kubernetes_validate, required};

/// The operator's own command line, as its binary parses it.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: operator::cli::OperatorArgs,
}

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
    let Some((_, docs)) = render(&["--set", "networkPolicy.metricsNamespaces={monitoring}"]) else {
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
    // NetworkPolicies: none in the chart (a policy covers only its own
    // namespace); the operator renders one per resource, so it may manage
    // them, and it is told who it is: the labels of its own pod and, through
    // the downward API, its namespace. Its own CLI parses what the chart passes.
    assert!(docs.iter().all(|d| kind(d) != "NetworkPolicy"));
    let role = docs.iter().find(|d| kind(d).ends_with("Role")).unwrap();
    let np_rule = role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["resources"][0] == "networkpolicies")
        .expect("an RBAC rule for networkpolicies");
    assert_eq!(np_rule["apiGroups"][0], "networking.k8s.io");
    for verb in ["create", "patch", "delete"] {
        assert!(np_rule["verbs"]
            .as_sequence()
            .unwrap()
            .contains(&Value::from(verb)));
    }
    // Secrets by name only: no list (or watch) of every Secret it may see.
    let secret_rule = role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| r["resources"][0] == "secrets")
        .expect("an RBAC rule for secrets");
    let verbs = secret_rule["verbs"].as_sequence().unwrap();
    assert!(
        !verbs.contains(&Value::from("list")) && !verbs.contains(&Value::from("watch")),
        "{verbs:?}"
    );
    let container = &pod["containers"][0];
    let env_ref = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "POD_NAMESPACE")
        .expect("POD_NAMESPACE env");
    assert_eq!(
        env_ref["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    let mut argv = vec!["tokenrouter-operator".to_string()];
    argv.extend(
        container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    argv.push("--operator-namespace=tokenrouter".into());
    let args = Cli::try_parse_from(&argv).unwrap().args;
    let access = args.network_access().expect("policies rendered by default");
    assert_eq!(access.operator_namespace, "tokenrouter");
    assert_eq!(access.metrics_namespaces, ["monitoring"]);
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    for (k, v) in &access.operator_labels {
        assert_eq!(pod_labels[k.as_str()], Value::from(v.as_str()), "{k}");
    }
    assert_eq!(
        access.operator_labels.len(),
        pod_labels.as_mapping().unwrap().len()
    );
}
