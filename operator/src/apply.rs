//! The apply half of a reconcile: decide the group count, build every owned
//! object, server-side apply them, remove stale ones, write the status.

use std::collections::BTreeSet;
use std::sync::Arc;

use crds::v1alpha1::{
    AppliedThresholds, DelayedBatchingMode, Placement, ThresholdSource, TokenRouterDeploymentStatus,
};
use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::autoscale::{self, Decision};
use crate::build::{self, name_of, serving, Desired, Inputs};
use crate::context::key;
use crate::context::Context;
use crate::error::Result;
use crate::names;
use crate::status::{self, Observation, SetObservation};
use crate::{refs, storage, validate};

#[path = "apply_groups.rs"]
mod steps;
use steps::{existing_sets, plan_groups, publish_roll, roll_step};

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

async fn publish(
    recorder: &Recorder,
    trd: &TokenRouterDeployment,
    kind: EventType,
    reason: &str,
    note: String,
) {
    crate::events::publish(recorder, trd, "Reconcile", kind, reason, note).await;
}

/// Creates the admin token Secret once and returns the token.
async fn admin_token(trd: &TokenRouterDeployment, ctx: &Context, ns: &str) -> Result<String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let name = names::admin_secret(trd);
    if let Some(secret) = api.get_opt(&name).await? {
        let token = secret
            .data
            .as_ref()
            .and_then(|d| d.get(names::ADMIN_TOKEN_KEY))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        if let Some(token) = token {
            return Ok(token);
        }
    }
    let token: String = {
        use rand::Rng;
        let bytes: [u8; 24] = rand::rng().random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    };
    match api
        .create(&PostParams::default(), &build::admin_secret(trd, &token))
        .await
    {
        Ok(_) => Ok(token),
        // Another reconcile (or an operator before a restart) made it first.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let secret = api.get(&name).await?;
            Ok(secret
                .data
                .and_then(|d| {
                    d.get(names::ADMIN_TOKEN_KEY)
                        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                })
                .unwrap_or(token))
        }
        Err(e) => Err(e.into()),
    }
}

fn observe_set(name: &str, set: &StatefulSet) -> SetObservation {
    let status = set.status.clone().unwrap_or_default();
    SetObservation {
        name: name.to_string(),
        ready: status.ready_replicas.unwrap_or(0),
        // A StatefulSet the controller has not looked at yet has no status.
        updated: status.updated_replicas.unwrap_or(0),
        replicas: set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
    }
}

/// The group count the spec or the autoscaler asks for.
async fn decide_groups(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    ns: &str,
    current: Option<i32>,
) -> (i32, Option<Decision>, Option<u64>) {
    let auto = &trd.spec.autoscaling;
    if !auto.enabled {
        return (trd.spec.groups.max(0), None, None);
    }
    let slices = Api::namespaced(ctx.client.clone(), ns);
    let load = ctx.probe.gateway_load(&slices, &names::gateway(trd)).await;
    let now = ctx.started.elapsed().as_secs_f64();
    let base = current.unwrap_or(auto.min_groups);
    let decision = ctx.remember(&key(trd), |m| {
        autoscale::decide(auto, base, load, now, &mut m.history)
    });
    (decision.groups, Some(decision), load)
}

/// The B table in force: the tune loop's while `mode: auto` and it has
/// applied one, else the spec's.
fn thresholds_in_force(trd: &TokenRouterDeployment) -> AppliedThresholds {
    let auto = trd
        .spec
        .delayed_batching
        .as_ref()
        .is_none_or(|d| d.mode == DelayedBatchingMode::Auto);
    let previous = trd.status.as_ref().and_then(|s| s.thresholds.clone());
    if let Some(tuned) = previous
        .clone()
        .filter(|t| auto && t.source == ThresholdSource::Tuned)
    {
        return tuned;
    }
    let table = build::spec_thresholds(trd);
    let applied_at = previous
        .filter(|p| p.source == ThresholdSource::Fixed && p.table == table)
        .and_then(|p| p.applied_at)
        .or_else(|| Some(now()));
    AppliedThresholds {
        table,
        source: ThresholdSource::Fixed,
        applied_at,
    }
}

async fn ssa<K>(api: &Api<K>, obj: &K) -> Result<K>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    crate::apply_fault::before_apply();
    let pp = PatchParams::apply(names::FIELD_MANAGER).force();
    Ok(api.patch(&name_of(obj), &pp, &Patch::Apply(obj)).await?)
}

/// Applies every desired object; returns the serving sets as the API server
/// answered (with their status) and the gateway Deployment.
async fn apply_objects(
    ctx: &Context,
    ns: &str,
    desired: &Desired,
) -> Result<(Vec<StatefulSet>, Deployment)> {
    let client = ctx.client.clone();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), ns);
    // The policy and config first, so new pods start closed and find their
    // config; the gateway last.
    if let Some(policy) = &desired.network_policy {
        ssa(
            &Api::<NetworkPolicy>::namespaced(client.clone(), ns),
            policy,
        )
        .await?;
    }
    ssa(&maps, &desired.engine_config).await?;
    ssa(&maps, &desired.groups_config).await?;
    let mut applied = Vec::new();
    for (set, service) in &desired.serving {
        ssa(&services, service).await?;
        applied.push(ssa(&sets, set).await?);
    }
    ssa(
        &Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
        &desired.disruption_budget,
    )
    .await?;
    ssa(&services, &desired.gateway_service).await?;
    let gateway = ssa(&deploys, &desired.gateway).await?;
    Ok((applied, gateway))
}

/// Deletes serving sets and Services of models no longer in the spec (or of
/// the other placement); owned objects only, found by label.
async fn remove_stale(trd: &TokenRouterDeployment, ctx: &Context, ns: &str) -> Result<Vec<String>> {
    let keep: BTreeSet<String> = names::serving_sets(trd)
        .into_iter()
        .chain([names::gateway(trd)])
        .collect();
    let lp = ListParams::default().labels(&names::owned_selector(trd));
    let mut removed = Vec::new();
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    for set in sets.list(&lp).await? {
        let name = set.name_any();
        if !keep.contains(&name) {
            sets.delete(&name, &DeleteParams::background()).await?;
            removed.push(format!("statefulset/{name}"));
        }
    }
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    for svc in services.list(&lp).await? {
        let name = svc.name_any();
        if !keep.contains(&name) {
            services.delete(&name, &DeleteParams::background()).await?;
            removed.push(format!("service/{name}"));
        }
    }
    if ctx.settings.network.is_none() {
        // Rendering switched off: a policy an earlier run applied goes too.
        let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), ns);
        let name = build::network::name(trd);
        match policies.delete(&name, &DeleteParams::background()).await {
            Ok(_) => removed.push(format!("networkpolicy/{name}")),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

/// Applies the ServiceMonitor (or removes it); a cluster without the
/// Prometheus operator's CRD gets a Degraded reason, not a failed reconcile.
async fn apply_monitor(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    ns: &str,
    desired: &Desired,
) -> Option<(String, String)> {
    let ar = build::service_monitor_resource();
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
    match &desired.service_monitor {
        Some(monitor) => {
            let pp = PatchParams::apply(names::FIELD_MANAGER).force();
            match api.patch(&names::instance(trd), &pp, &Patch::Apply(monitor)).await {
                Ok(_) => None,
                Err(e) => Some((
                    "ServiceMonitorUnavailable".into(),
                    format!("cannot apply the ServiceMonitor (is the Prometheus operator installed?): {e}"),
                )),
            }
        }
        None => {
            // Absent kind or object: nothing to remove.
            let _ = api
                .delete(&names::instance(trd), &DeleteParams::default())
                .await;
            None
        }
    }
}

async fn write_status(
    api: &Api<TokenRouterDeployment>,
    trd: &TokenRouterDeployment,
    status: &TokenRouterDeploymentStatus,
) -> Result<()> {
    let patch = json!({ "status": status });
    api.patch_status(
        &trd.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// One apply pass for `trd`.
pub async fn apply(trd: Arc<TokenRouterDeployment>, ctx: Arc<Context>) -> Result<Action> {
    let ns = trd.namespace().unwrap_or_default();
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let api: Api<TokenRouterDeployment> = Api::namespaced(ctx.client.clone(), &ns);
    let old = trd.status.clone().unwrap_or_default();
    let component = serving::component(trd.spec.placement);
    let mut status = TokenRouterDeploymentStatus {
        observed_generation: trd.metadata.generation,
        selector: Some(names::serving_pods_selector(&trd, component)),
        // The tune loop owns `tuning`, and `thresholds` once tuned (crate::tune::status):
        // left out of this merge patch, a reconcile that read an older status cannot undo them.
        tuning: None,
        thresholds: None,
        ..old.clone()
    };

    // A spec problem, or a Secret/PVC it names that does not exist: say so
    // and hold off (pods could not start), rechecking until it is fixed. A
    // claim that exists but is not Bound is only shown: pods may be what it
    // waits for (WaitForFirstConsumer).
    let mut unbound = Vec::new();
    let mut single_node = Vec::new();
    let problem = match validate::check(&trd) {
        Some(p) => Some(p),
        None => {
            let references = refs::references(&trd);
            let found = refs::lookup(&ctx.client, &ns, &references).await?;
            unbound = refs::unbound(&references, &found);
            single_node = storage::single_node_claims(&references, &found);
            unbound.extend(storage::problem(&trd, &single_node));
            refs::summarize(&refs::problems(&references, &found))
        }
    };
    if let Some(problem) = problem {
        publish(
            &recorder,
            &trd,
            EventType::Warning,
            &problem.0,
            problem.1.clone(),
        )
        .await;
        let computed = status::compute(&Observation {
            generation: trd.metadata.generation,
            problem: Some(problem),
            ..Default::default()
        });
        status.conditions = status::carry_transitions(&old.conditions, computed.conditions);
        if status::needs_write(&old, &status) {
            write_status(&api, &trd, &status).await?;
        }
        return Ok(Action::requeue(ctx.settings.recheck_period));
    }

    let colocate = !single_node.is_empty();
    let result = apply_all(&trd, &ctx, (&ns, colocate), &recorder, &mut status).await;
    let problem = match &result {
        Ok(problem) => {
            let all: Vec<_> = problem.iter().chain(&unbound).cloned().collect();
            refs::summarize(&all)
        }
        Err(e) => {
            publish(
                &recorder,
                &trd,
                EventType::Warning,
                "ApplyFailed",
                e.to_string(),
            )
            .await;
            Some(("ApplyFailed".to_string(), e.to_string()))
        }
    };
    if let Some(p) = &problem {
        // Keep what we knew, but say what went wrong.
        let mut conds = status.conditions.clone();
        conds.retain(|c| c.type_ != crds::v1alpha1::condition::DEGRADED);
        conds.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: crds::v1alpha1::condition::DEGRADED.into(),
            status: "True".into(),
            reason: p.0.clone(),
            message: p.1.clone(),
            observed_generation: trd.metadata.generation,
            last_transition_time: now(),
        });
        status.conditions = status::carry_transitions(&old.conditions, conds);
    }
    // Only a changed status is written: each write is a watched change
    // that starts another reconcile (status::needs_write).
    if status::needs_write(&old, &status) {
        write_status(&api, &trd, &status).await?;
    }
    // A drain (scale-down or roll) waits on time, not on a watched change.
    let draining = ctx.remember(&key(&trd), |m| {
        m.drain_since.is_some() || m.roll_unlisted.is_some()
    });
    result?;
    let period = if trd.spec.autoscaling.enabled || draining {
        ctx.settings.autoscale_period
    } else {
        ctx.settings.resync_period
    };
    // A claim binding, or a pod's image pull, is no change this controller
    // watches: look again soon.
    Ok(Action::requeue(
        if unbound.is_empty() && problem.is_none() {
            period
        } else {
            period.min(ctx.settings.recheck_period)
        },
    ))
}

/// Everything after the spec check; fills `status` and returns a
/// non-fatal problem, if any.
/// `colocate`: a model claim attaches to one node only, so a group's pods
/// must share a node ([`storage::require_colocation`]).
async fn apply_all(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    (ns, colocate): (&str, bool),
    recorder: &Recorder,
    status: &mut TokenRouterDeploymentStatus,
) -> Result<Option<(String, String)>> {
    let token = admin_token(trd, ctx, ns).await?;
    let (current, ready_before, existing_sets) = existing_sets(trd, ctx, ns).await?;
    let (desired, decision, load) = decide_groups(trd, ctx, ns, current).await;
    let (plan, listed_now) =
        plan_groups(trd, ctx, ns, &token, (current, desired, ready_before)).await?;
    let thresholds = thresholds_in_force(trd);
    let mut desired_objs = build::desired(
        trd,
        &Inputs {
            namespace: ns.to_string(),
            replicas: plan.replicas,
            listed_groups: plan.listed.clone(),
            thresholds: thresholds.table.clone(),
            network: ctx.settings.network.clone(),
        },
    );
    let step = roll_step(
        trd,
        ctx,
        (ns, &token),
        &mut desired_objs,
        &existing_sets,
        (&plan, &listed_now, desired),
    )
    .await;
    if colocate {
        storage::require_colocation(&mut desired_objs);
    }
    let (applied, gateway) = apply_objects(ctx, ns, &desired_objs).await?;
    publish_roll(recorder, trd, &step).await;
    let removed = remove_stale(trd, ctx, ns).await?;
    if !removed.is_empty() {
        publish(
            recorder,
            trd,
            EventType::Normal,
            "Removed",
            format!("removed {}", removed.join(", ")),
        )
        .await;
    }
    let problem = observe_problems(trd, ctx, ns, &desired_objs, &applied).await;

    announce(
        recorder,
        trd,
        ctx,
        status,
        (current, plan.replicas, decision.as_ref()),
    )
    .await;
    fill_status(
        trd,
        status,
        (&applied, &gateway),
        desired,
        problem.clone(),
        thresholds,
        load,
    );
    Ok(problem)
}

/// What keeps the applied objects from serving, all in one (reason,
/// message): a missing ServiceMonitor CRD, images that cannot be pulled,
/// pods the scheduler cannot place, pods a StatefulSet cannot create.
async fn observe_problems(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    ns: &str,
    desired: &Desired,
    applied: &[StatefulSet],
) -> Option<(String, String)> {
    let mut problems: Vec<(String, String)> = apply_monitor(trd, ctx, ns, desired)
        .await
        .into_iter()
        .collect();
    problems.extend(crate::pods::observe(&ctx.client, ns, &names::instance(trd)).await);
    let gaps: Vec<_> = applied
        .iter()
        .map(crate::create_failures::SetGap::of)
        .collect();
    problems.extend(crate::create_failures::observe(&ctx.client, ns, &gaps).await);
    refs::summarize(&problems)
}

/// Events for a changed group count (`Scaled`) and a newly applied
/// generation (`Applied`).
async fn announce(
    recorder: &Recorder,
    trd: &TokenRouterDeployment,
    ctx: &Context,
    status: &mut TokenRouterDeploymentStatus,
    (current, replicas, decision): (Option<i32>, i32, Option<&Decision>),
) {
    if current.is_some_and(|c| c != replicas) {
        ctx.metrics.scalings.inc();
        let why = decision
            .map(|d| format!(" ({:?})", d.reason))
            .unwrap_or_default();
        publish(
            recorder,
            trd,
            EventType::Normal,
            "Scaled",
            format!("groups {} -> {replicas}{why}", current.unwrap_or(0)),
        )
        .await;
        status.last_scale_time = Some(now());
    }
    if status.observed_generation != trd.status.as_ref().and_then(|s| s.observed_generation) {
        info!(resource = %key(trd), generation = ?trd.metadata.generation, "applied");
        publish(
            recorder,
            trd,
            EventType::Normal,
            "Applied",
            format!(
                "applied generation {}: {replicas} groups",
                trd.metadata.generation.unwrap_or(0),
            ),
        )
        .await;
    }
}

/// The status computed from the applied sets and gateway, with condition
/// transition times carried from the old status.
fn fill_status(
    trd: &TokenRouterDeployment,
    status: &mut TokenRouterDeploymentStatus,
    (applied, gateway): (&[StatefulSet], &Deployment),
    desired: i32,
    problem: Option<(String, String)>,
    thresholds: AppliedThresholds,
    load: Option<u64>,
) {
    let names: Vec<String> = names::serving_sets(trd);
    let sets: Vec<SetObservation> = applied
        .iter()
        .zip(&names)
        .map(|(set, name)| {
            let label = match trd.spec.placement {
                Placement::PodPerModel => name
                    .strip_prefix(&format!("{}-", names::instance(trd)))
                    .unwrap_or(name)
                    .to_string(),
                Placement::PodPerGroup => "group".to_string(),
            };
            observe_set(&label, set)
        })
        .collect();
    let gw_status = gateway.status.clone().unwrap_or_default();
    let computed = status::compute(&Observation {
        generation: trd.metadata.generation,
        desired_groups: desired,
        sets,
        gateway_ready: gw_status.ready_replicas.unwrap_or(0),
        gateway_replicas: trd.spec.gateway.replicas,
        problem,
    });
    let old = trd.status.clone().unwrap_or_default();
    status.conditions = status::carry_transitions(&old.conditions, computed.conditions);
    status.groups = computed.groups;
    status.desired_groups = desired;
    status.models = computed.models;
    status.thresholds = (thresholds.source == ThresholdSource::Fixed).then_some(thresholds);
    status.observed_concurrency = load.and_then(|l| i64::try_from(l).ok());
}
