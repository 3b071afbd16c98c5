//! Helpers of the tests that need a Kubernetes API server (the k8s test
//! kit that `make test-k8s` starts, or any cluster named by `KUBECONFIG`).
#![allow(dead_code)]

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crds::TokenRouterDeployment;
use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde::de::DeserializeOwned;

/// Only catches hangs: every wait ends on an observed event long before
/// (the workspace's one bound, from `test-support`).
pub use test_support::HANG;

/// `make test-k8s` sets this: a missing cluster is then a failure, not a skip.
pub fn required() -> bool {
    std::env::var("TOKENROUTER_REQUIRE_K8S").is_ok_and(|v| v == "1")
}

/// A client for the cluster in `KUBECONFIG`, or `None` (the test skips)
/// when there is none and the run does not require one.
pub async fn client() -> Option<Client> {
    if std::env::var_os("KUBECONFIG").is_none() {
        assert!(
            !required(),
            "TOKENROUTER_REQUIRE_K8S=1 but KUBECONFIG is unset: start the k8s test kit"
        );
        eprintln!("skipped: KUBECONFIG is unset (`make test-k8s` starts a cluster and runs this)");
        return None;
    }
    Some(
        Client::try_default()
            .await
            .expect("a client for KUBECONFIG"),
    )
}

/// Installs (server-side applies) the CRD and waits until it is served.
pub async fn install_crd(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds::crd();
    let name = crd.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("tokenrouter-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply the CRD");
    tokio::time::timeout(
        HANG,
        await_condition(api, &name, conditions::is_crd_established()),
    )
    .await
    .expect("CRD established in time")
    .expect("watch the CRD");
}

/// A fresh namespace (`PREFIX-xxxxxx`) so parallel tests never meet.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let suffix: u32 = rand::random::<u32>() & 0xff_ffff;
    let name = format!("{prefix}-{suffix:06x}");
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

/// Wakes [`wait_for`] once per change of any object of `api`'s kind (and
/// on its initial list): a kube `watcher` on the kind.
pub fn changes<K>(api: &Api<K>) -> Changes
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .map(|_| ())
        .boxed()
}

/// A stream of wake-ups, one per observed change (see [`changes`]).
pub type Changes = BoxStream<'static, ()>;

/// Runs `probe` now and again after every change `watch` observes, until it
/// returns `Some`. The watches start (list, then watch) before the second
/// probe, so no change is missed; [`HANG`] only turns a hang into a failure
/// naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, watch: Vec<Changes>, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let mut wake = futures::stream::select_all(watch);
    let run = async {
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            if wake.next().await.is_none() {
                panic!("the watches ended while waiting for {what}");
            }
        }
    };
    tokio::time::timeout(HANG, run)
        .await
        .unwrap_or_else(|_| panic!("hang: {what} never happened within {HANG:?}"))
}

/// A two-model sim resource (no weights needed), `podPerModel`.
pub fn sim_resource(name: &str, groups: i32) -> TokenRouterDeployment {
    let yaml = format!(
        r#"
apiVersion: tokenrouter.io/v1alpha1
kind: TokenRouterDeployment
metadata: {{name: {name}}}
spec:
  image: example.com/tokenrouter:test
  backend: sim
  models:
    - name: small
      entry: true
      sim: {{latency_ms: {{base: 1}}}}
    - name: big
      sim: {{latency_ms: {{base: 5}}}}
  policy: {{class: Random, kwargs: {{probability: 0.2, seed: 1}}}}
  groups: {groups}
  delayedBatching: {{mode: fixed, thresholds: {{small: [1], big: [1, 2]}}}}
"#
    );
    serde_yaml::from_str(&yaml).expect("sample resource")
}

/// The operator's controller for one namespace, in this process; stopped on drop.
pub struct Operator {
    task: tokio::task::JoinHandle<()>,
    /// Reconciles the controller has run (its `reconciles` counter).
    pub reconciles: prometheus::IntCounter,
}

impl Operator {
    /// Starts the controller for `ns` with no drain wait.
    pub fn start(client: &Client, ns: &str) -> Self {
        Self::start_with(client, ns, true)
    }

    /// [`Operator::start`] with or without the cleanup finalizer (the
    /// chart's default is without: a garbage collector deletes what a
    /// resource owns).
    pub fn start_with(client: &Client, ns: &str, cleanup_finalizer: bool) -> Self {
        let metrics = operator::metrics::Metrics::new().unwrap();
        let settings = operator::Settings {
            drain: operator::groups::DrainPolicy {
                settle: Duration::ZERO,
                timeout: Duration::ZERO,
            },
            // Missing Secrets/PVCs are rechecked on this period.
            recheck_period: Duration::from_secs(1),
            autoscale_period: Duration::from_secs(1),
            // The kit has no garbage collector: the operator cleans up,
            // unless a test asks otherwise.
            cleanup_finalizer,
            ..operator::Settings::default()
        };
        let reconciles = metrics.reconciles.clone();
        let ctx = Arc::new(operator::Context::new(client.clone(), metrics, settings));
        let task = tokio::spawn(operator::run(ctx, Some(ns.to_string())));
        Self { task, reconciles }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `PATH` with the k8s test kit's tools (kubectl, helm, kubernetes-validate).
pub fn kit_path() -> String {
    let cache = std::env::var("TOKENROUTER_K8S_CACHE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/tokenrouter-k8s",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    format!("{cache}/bin:{}", std::env::var("PATH").unwrap_or_default())
}

/// Runs `kubernetes-validate --strict` on `yaml`; returns its output on failure.
pub fn kubernetes_validate(yaml: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = std::process::Command::new("kubernetes-validate")
        .args(["--strict", "--no-warn", "--quiet"])
        .arg(&file)
        .env("PATH", kit_path())
        .output()
        .map_err(|e| format!("cannot run kubernetes-validate: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The API of resources in `ns`.
pub fn trds(client: &Client, ns: &str) -> Api<TokenRouterDeployment> {
    Api::namespaced(client.clone(), ns)
}
