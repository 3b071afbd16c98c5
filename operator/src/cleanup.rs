//! The cleanup half of a reconcile: when a resource is deleted, remove what
//! it owns before the finalizer lets it go. Garbage collection would do the
//! same through the owner references; doing it here also covers clusters
//! (and test servers) without a garbage collector, and the deletion is
//! visible in the operator's Events and logs.

use std::sync::Arc;

use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::info;

use crate::build;
use crate::context::key;
use crate::context::Context;
use crate::error::Result;
use crate::names;

async fn delete_owned<K>(api: Api<K>, selector: &str) -> Result<usize>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut n = 0;
    for obj in api.list(&ListParams::default().labels(selector)).await? {
        match api
            .delete(&obj.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => n += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// Deletes every object labelled as owned by `trd`.
pub async fn cleanup(trd: Arc<TokenRouterDeployment>, ctx: Arc<Context>) -> Result<Action> {
    let ns = trd.namespace().unwrap_or_default();
    let c = ctx.client.clone();
    let selector = names::owned_selector(&trd);
    let mut n = 0;
    // The gateway first (stop taking requests), then the groups, then config.
    n += delete_owned(Api::<Deployment>::namespaced(c.clone(), &ns), &selector).await?;
    n += delete_owned(Api::<StatefulSet>::namespaced(c.clone(), &ns), &selector).await?;
    n += delete_owned(Api::<Service>::namespaced(c.clone(), &ns), &selector).await?;
    n += delete_owned(Api::<ConfigMap>::namespaced(c.clone(), &ns), &selector).await?;
    // The one Secret the operator makes (the admin token), by name: the
    // operator may not list Secrets (no cluster-wide read of them).
    let secrets = Api::<Secret>::namespaced(c.clone(), &ns);
    match secrets
        .delete(&names::admin_secret(&trd), &DeleteParams::background())
        .await
    {
        Ok(_) => n += 1,
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    n += delete_owned(Api::<NetworkPolicy>::namespaced(c.clone(), &ns), &selector).await?;
    let monitors: Api<kube::api::DynamicObject> =
        Api::namespaced_with(c, &ns, &build::service_monitor_resource());
    // No ServiceMonitor kind or object: nothing to do.
    let _ = monitors
        .delete(&names::instance(&trd), &DeleteParams::default())
        .await;
    info!(resource = %key(&trd), objects = n, "cleaned up");
    ctx.forget(&key(&trd));
    Ok(Action::await_change())
}
