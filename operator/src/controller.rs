//! The controller in controller-rs shape: `reconcile` (apply or clean up,
//! behind a finalizer), `error_policy` (backoff), and `run`, which watches
//! the resources and everything they own.

use std::sync::Arc;
use std::time::Duration;

use crds::TokenRouterDeployment;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::watcher::Config;
use kube::ResourceExt;
use tracing::{info, warn};

use crate::context::{key, Context};
use crate::error::{Error, Result};
use crate::{apply, cleanup, names};

/// Brings the cluster in line with one resource (or removes what it owns
/// when it is being deleted).
pub async fn reconcile(trd: Arc<TokenRouterDeployment>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.start();
    let ns = trd
        .namespace()
        .ok_or_else(|| Error::NoNamespace(trd.name_any()))?;
    let api: Api<TokenRouterDeployment> = Api::namespaced(ctx.client.clone(), &ns);
    let key = key(&trd);
    if !ctx.settings.cleanup_finalizer {
        return without_finalizer(&api, trd, ctx.clone())
            .await
            .inspect(|_| {
                ctx.remember(&key, |m| m.failures = 0);
            });
    }
    let result = finalizer(&api, names::FINALIZER, trd, |event| async {
        match event {
            FinalizerEvent::Apply(trd) => apply::apply(trd, ctx.clone()).await,
            FinalizerEvent::Cleanup(trd) => cleanup::cleanup(trd, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(inner)
        | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner,
        other => Error::Finalizer(other.to_string()),
    });
    if result.is_ok() {
        ctx.remember(&key, |m| m.failures = 0);
    }
    result
}

/// The reconcile without a finalizer: garbage collection removes what the
/// resource owns through the owner references. A finalizer an earlier
/// operator (or `--cleanup-finalizer`) left is taken off first, so the
/// resource and its namespace are never held by an operator that may be
/// gone; a resource being deleted gets no more applies.
async fn without_finalizer(
    api: &Api<TokenRouterDeployment>,
    trd: Arc<TokenRouterDeployment>,
    ctx: Arc<Context>,
) -> Result<Action> {
    if trd.finalizers().iter().any(|f| f == names::FINALIZER) {
        // The list without ours, under the resourceVersion read: another
        // writer's change in between fails it (409), and the next reconcile
        // looks again.
        let rest: Vec<&String> = trd
            .finalizers()
            .iter()
            .filter(|f| *f != names::FINALIZER)
            .collect();
        let patch = serde_json::json!({"metadata": {
            "finalizers": rest,
            "resourceVersion": trd.metadata.resource_version,
        }});
        api.patch(
            &trd.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    }
    if trd.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    apply::apply(trd, ctx).await
}

/// Backoff after a failed reconcile: 5 s, doubling per consecutive
/// failure, at most 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(6);
    Duration::from_secs(5 * (1u64 << exp)).min(Duration::from_secs(300))
}

/// Counts the failure and requeues with [`backoff`].
pub fn error_policy(trd: Arc<TokenRouterDeployment>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(err);
    let failures = ctx.remember(&key(&trd), |m| {
        m.failures += 1;
        m.failures
    });
    let delay = backoff(failures);
    warn!(resource = %key(&trd), error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs the controller until the watch streams end (on shutdown). `namespace`
/// limits it to one namespace.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let client = ctx.client.clone();
    let (trds, sets, services, maps, deploys) = match &namespace {
        Some(ns) => (
            Api::<TokenRouterDeployment>::namespaced(client.clone(), ns),
            Api::<StatefulSet>::namespaced(client.clone(), ns),
            Api::<Service>::namespaced(client.clone(), ns),
            Api::<ConfigMap>::namespaced(client.clone(), ns),
            Api::<Deployment>::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    let owned = Config::default().labels(&format!(
        "app.kubernetes.io/managed-by={}",
        names::FIELD_MANAGER
    ));
    // The tune loop: a second controller over the same resources (crate::tune::driver).
    let registry = ctx.metrics.registry.clone();
    let tune = crate::tune::driver::run(
        client.clone(),
        ctx.reporter.clone(),
        &registry,
        namespace.clone(),
    );
    let main = Controller::new(trds, Config::default())
        .owns(sets, owned.clone())
        .owns(services, owned.clone())
        .owns(maps, owned.clone())
        .owns(deploys, owned)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => info!(resource = %obj, "reconciled"),
                Err(e) => warn!(error = %e, "reconcile error"),
            }
        });
    futures::future::join(main, tune).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(2), Duration::from_secs(10));
        assert_eq!(backoff(4), Duration::from_secs(40));
        assert_eq!(backoff(50), Duration::from_secs(300));
    }
}
