//! What every reconcile shares: the client, the event reporter, metrics,
//! the HTTP probe, settings, and per-resource memory (autoscaler history,
//! drain start, a roll's unlist time, error backoff). The memory is only an
//! optimisation: after a restart it starts empty and every decision stays
//! safe (no scale-down before a full window, a fresh drain wait for a
//! scale-down and for a roll).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::runtime::events::Reporter;
use kube::Client;

use crate::autoscale::History;
use crate::build::network::NetworkAccess;
use crate::groups::DrainPolicy;
use crate::metrics::Metrics;
use crate::probe::HttpProbe;

/// Operator settings (from the command line).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a scale-down waits.
    pub drain: DrainPolicy,
    /// Requeue period while the operator autoscales.
    pub autoscale_period: Duration,
    /// Requeue period otherwise (a resync).
    pub resync_period: Duration,
    /// Requeue period while the resource cannot be applied (a spec problem
    /// or a missing Secret/PVC), so a fix is seen without a watch on them.
    pub recheck_period: Duration,
    /// Who may reach the serving pods; `None`: render no NetworkPolicy.
    pub network: Option<NetworkAccess>,
    /// Keep a finalizer on each resource and delete what it owns before
    /// letting it go: for clusters without a garbage collector (the test
    /// kit). Off (the default), owner references do it, and a namespace or
    /// `helm uninstall` never waits on the operator.
    pub cleanup_finalizer: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            drain: DrainPolicy::default(),
            autoscale_period: Duration::from_secs(15),
            resync_period: Duration::from_secs(300),
            recheck_period: Duration::from_secs(10),
            network: None,
            cleanup_finalizer: false,
        }
    }
}

/// Key of a resource in the context's memory (`namespace/name`).
pub fn key(trd: &crds::TokenRouterDeployment) -> String {
    use kube::ResourceExt;
    format!("{}/{}", trd.namespace().unwrap_or_default(), trd.name_any())
}

/// Memory about one resource (keyed by namespace/name).
#[derive(Debug, Default)]
pub struct Memory {
    /// Autoscaler recommendations.
    pub history: History,
    /// When the current scale-down unlisted its groups.
    pub drain_since: Option<Instant>,
    /// The group a roll unlisted to drain it, and when (crate::roll).
    pub roll_unlisted: Option<(i32, Instant)>,
    /// Consecutive failed reconciles (for the backoff).
    pub failures: u32,
}

/// The controller's shared state.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Who the Events say they come from.
    pub reporter: Reporter,
    /// Reconcile metrics.
    pub metrics: Metrics,
    /// Pod metrics reader.
    pub probe: HttpProbe,
    /// Settings.
    pub settings: Settings,
    /// Monotonic clock origin of the autoscaler's history.
    pub started: Instant,
    memory: Mutex<HashMap<String, Memory>>,
}

impl Context {
    /// A context for `client`.
    pub fn new(client: Client, metrics: Metrics, settings: Settings) -> Self {
        Self {
            client,
            reporter: Reporter {
                controller: crate::names::FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
            metrics,
            probe: HttpProbe::new(Duration::from_secs(3)),
            settings,
            started: Instant::now(),
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` on the memory of resource `key`.
    pub fn remember<T>(&self, key: &str, f: impl FnOnce(&mut Memory) -> T) -> T {
        f(self
            .memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_string())
            .or_default())
    }

    /// Forgets a deleted resource.
    pub fn forget(&self, key: &str) {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}
