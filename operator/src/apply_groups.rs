//! The group steps of an apply pass: read the serving sets and the
//! gateways' list, plan the group count (a scale-down's drain), and take the
//! roll's step (crate::roll: drain a group before its pods are replaced).

use std::collections::BTreeSet;
use std::time::Instant;

use crds::TokenRouterDeployment;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::events::{EventType, Recorder};

use super::{observe_set, publish};
use crate::build::{config, serving, Desired};
use crate::context::{key, Context};
use crate::error::Result;
use crate::{groups, names, roll};

/// The groups the gateway's list holds now (none before it exists); groups
/// below `bound` are recognised.
async fn listed_groups(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    ns: &str,
    bound: i32,
) -> Result<BTreeSet<i32>> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let map = api.get_opt(&names::groups_config(trd)).await?;
    let urls: Vec<String> = (0..bound).map(|k| config::group_url(trd, ns, k)).collect();
    Ok(map
        .and_then(|m| m.data?.remove(names::GROUPS_KEY))
        .map_or_else(BTreeSet::new, |text| groups::listed_in(&text, &urls)))
}

/// The serving sets as they exist: the entry set's replicas (`None`: not
/// created yet), the fewest ready pods of any set, and the sets found.
pub(super) async fn existing_sets(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    ns: &str,
) -> Result<(Option<i32>, i32, Vec<StatefulSet>)> {
    let sets_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    let existing = sets_api.get_opt(&serving::entry_set(trd)).await?;
    let current = existing.as_ref().and_then(|s| s.spec.as_ref()?.replicas);
    let mut ready = i32::MAX;
    let mut sets = Vec::new();
    for name in names::serving_sets(trd) {
        let set = sets_api.get_opt(&name).await?;
        ready = ready.min(set.as_ref().map_or(0, |s| observe_set(&name, s).ready));
        sets.extend(set);
    }
    Ok((current, ready.max(0), sets))
}

/// The group plan: a scale-down's unlisted groups must drain before their
/// pods go. Returns it with the gateways' list as it is now.
pub(super) async fn plan_groups(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    ns: &str,
    token: &str,
    (current, desired, ready): (Option<i32>, i32, i32),
) -> Result<(groups::GroupPlan, BTreeSet<i32>)> {
    let drained = match current {
        Some(cur) if cur > desired => {
            let since = ctx.remember(&key(trd), |m| {
                *m.drain_since.get_or_insert_with(Instant::now)
            });
            let mut inflight = Vec::new();
            for k in desired..cur {
                let url = config::group_url(trd, ns, k);
                inflight.push(ctx.probe.inflight(&url, Some(token)).await);
            }
            groups::drained(&ctx.settings.drain, since.elapsed(), &inflight)
        }
        _ => false,
    };
    let bound = current.unwrap_or(0).max(desired);
    let listed_now = listed_groups(trd, ctx, ns, bound).await?;
    let plan = groups::plan(current, &listed_now, desired, ready, drained);
    if !plan.draining {
        ctx.remember(&key(trd), |m| m.drain_since = None);
    }
    Ok((plan, listed_now))
}

/// The roll's step (crate::roll): probes the drain target when it is already
/// unlisted, keeps its unlist time in memory (a fresh one after a restart),
/// and writes the step's list into the desired groups ConfigMap.
pub(super) async fn roll_step(
    trd: &TokenRouterDeployment,
    ctx: &Context,
    (ns, token): (&str, &str),
    desired_objs: &mut Desired,
    existing: &[StatefulSet],
    (plan, listed_now, desired): (&groups::GroupPlan, &BTreeSet<i32>, i32),
) -> roll::RollStep {
    let view = roll::view(desired_objs, existing, plan.replicas);
    // When `k` left the list: remembered, or now (the first look after a restart).
    let unlisted_at = |k: i32| {
        ctx.remember(&key(trd), |m| match m.roll_unlisted {
            Some((g, at)) if g == k => at,
            _ => Instant::now(),
        })
    };
    let mut wait = None;
    if let Some(k) = view.drain_target().filter(|k| !listed_now.contains(k)) {
        let since = unlisted_at(k);
        ctx.remember(&key(trd), |m| m.roll_unlisted = Some((k, since)));
        let url = config::group_url(trd, ns, k);
        wait = Some(roll::DrainWait {
            elapsed: since.elapsed(),
            inflight: ctx.probe.inflight(&url, Some(token)).await,
        });
    }
    let step = roll::step(
        &view,
        listed_now,
        plan.listed.clone(),
        desired,
        &ctx.settings.drain,
        wait,
    );
    // A group unlisted by this step starts its settle now (even if an earlier
    // attempt whose list was never written left a time in memory).
    let keep = step.draining.map(|k| {
        let fresh = step.notes.contains(&roll::RollNote::Unlisted(k));
        (
            k,
            if fresh {
                Instant::now()
            } else {
                unlisted_at(k)
            },
        )
    });
    ctx.remember(&key(trd), |m| m.roll_unlisted = keep);
    desired_objs.groups_config = config::groups(trd, ns, &step.listed, plan.replicas);
    roll::apply_partition(desired_objs, step.partition);
    step
}

/// One Event per thing the roll did.
pub(super) async fn publish_roll(
    recorder: &Recorder,
    trd: &TokenRouterDeployment,
    step: &roll::RollStep,
) {
    for note in &step.notes {
        let (kind, reason, text) = match *note {
            roll::RollNote::Unlisted(k) => (
                EventType::Normal,
                "RollDrainingGroup",
                format!("group {k} left the gateways' list; its pods are replaced once it drained"),
            ),
            roll::RollNote::Replacing(k) => (
                EventType::Normal,
                "RollingGroup",
                format!("replacing group {k} of every model (partition {k})"),
            ),
            roll::RollNote::Relisted(k) => (
                EventType::Normal,
                "RollRelistedGroup",
                format!("group {k} is replaced and Ready: listed to the gateways again"),
            ),
            roll::RollNote::NoDrain(k) => (
                EventType::Warning,
                "RollWithoutDrain",
                format!(
                    "group {k} is the only listed group: it is replaced while it serves \
                     (a one-group resource cannot roll without a gap; its requests fail \
                     until its pods are Ready again)"
                ),
            ),
        };
        publish(recorder, trd, kind, reason, text).await;
    }
}
