//! Rolling an edit group by group. Ordinal k of every model's StatefulSet is
//! group k, so a plain per-set RollingUpdate would restart model A's pod of
//! group 3 while model B's pod of group 3 still runs the old template: the
//! group would mix revisions (and hand requests between them). Instead the
//! operator drives one `RollingUpdate.partition` shared by every serving set:
//!
//! ```text
//!   template changed ─> partition = replicas          (nothing rolls yet)
//!   every set: ordinals >= p updated, all pods ready ─> partition = p - 1
//!   ...                                              ─> partition = 0 (done)
//! ```
//!
//! So the pods of group p-1 of every model are replaced together, and the
//! next group starts only when the previous one is back. A StatefulSet
//! whose status does not describe its current spec yet (`observedGeneration`)
//! holds the roll. When no pod of any set is ready there is nothing to
//! protect and the roll goes to 0 at once (a fix for a broken deployment
//! must not wait for readiness it cannot reach).
//!
//! A group must not receive requests while its pods are replaced, so before
//! the partition is lowered to k the roll takes group k out of the gateways'
//! group list (a set of groups, crate::groups) and waits the scale-down's
//! drain rule ([`crate::groups::drained`]): the settle time since it was
//! unlisted (the gateways re-read a mounted ConfigMap only after the
//! kubelet's sync) and zero in-flight requests on it, or the timeout. One
//! reconcile at a time, with p the applied partition and k = p - 1:
//!
//! ```text
//!   group p replaced (updated, ready) and k listed ─> unlist k (and list p
//!                                                     again), remember when
//!   k unlisted, not drained yet                     ─> hold partition p
//!   k unlisted, drained                             ─> partition = k
//!   partition k, group k not updated and ready     ─> hold, k stays unlisted
//!   partition k, group k updated and ready         ─> list k, next step (k-1)
//!   partition 0, group 0 updated and ready         ─> list 0: done
//! ```
//!
//! The unlist time lives in the controller's memory only
//! ([`crate::context::Memory::roll_unlisted`]): after an operator restart a
//! group found unlisted waits a fresh settle, as a scale-down does. The last
//! listed group is never unlisted: a one-group resource cannot roll without
//! a gap, so its partition is lowered at once (its requests fail while its
//! pods restart) and an Event says so. Nothing ready, or a partition that
//! jumps (nothing ready, a new edit), drains nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetUpdateStrategy,
};

use kube::ResourceExt;

use crate::build::{name_of, Desired};
use crate::groups::{self, DrainPolicy};
use crate::names;

/// One serving StatefulSet as the roll sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollObservation {
    /// The applied set's `tokenrouter.io/template-hash` differs from the
    /// template about to be applied (or is absent: a set written before it).
    pub stale_template: bool,
    /// The partition applied last.
    pub partition: i32,
    /// `metadata.generation` and `status.observedGeneration`.
    pub generation: i64,
    /// `status.observedGeneration` (0: no status yet).
    pub observed_generation: i64,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
}

impl RollObservation {
    /// What `set` (as read from the API server) tells the roll, given the
    /// hash of the template about to be applied to it.
    pub fn of(set: &StatefulSet, desired_hash: &str) -> Self {
        let status = set.status.clone().unwrap_or_default();
        let spec = set.spec.as_ref();
        Self {
            stale_template: set
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(names::TEMPLATE_HASH))
                .is_none_or(|h| h != desired_hash),
            partition: spec
                .and_then(|s| {
                    s.update_strategy
                        .as_ref()?
                        .rolling_update
                        .as_ref()?
                        .partition
                })
                .unwrap_or(0),
            generation: set.metadata.generation.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
        }
    }
}

/// The partition to apply to every serving set. `existing` holds the sets
/// that exist, `replicas` the group count about to be applied.
pub fn partition(existing: &[RollObservation], replicas: i32) -> i32 {
    let replicas = replicas.max(0);
    if existing.is_empty() {
        return 0; // Fresh sets: their first revision is the only one.
    }
    if existing.iter().all(|s| s.ready == 0) {
        return 0;
    }
    if existing.iter().any(|s| s.stale_template) {
        return replicas; // A new roll: hold every group, then step.
    }
    let p = existing
        .iter()
        .map(|s| s.partition)
        .max()
        .unwrap_or(0)
        .clamp(0, replicas);
    if p == 0 {
        return 0;
    }
    if replaced(existing, replicas, p) {
        p - 1
    } else {
        p
    }
}

/// Whether every set's status describes its spec and shows the groups from
/// `p` up updated and every pod ready (group `p`, if any, is replaced).
fn replaced(existing: &[RollObservation], replicas: i32, p: i32) -> bool {
    existing.iter().all(|s| {
        s.observed_generation >= s.generation && s.updated >= replicas - p && s.ready >= replicas
    })
}

/// Hash of `set`'s pod template (what the StatefulSet controller rolls on).
pub fn template_hash(set: &StatefulSet) -> String {
    let template = set
        .spec
        .as_ref()
        .map(|s| serde_json::to_string(&s.template).unwrap_or_default())
        .unwrap_or_default();
    crate::build::config::hash(&[("template".to_string(), template)].into())
}

/// Marks a desired `set` with its template hash and the roll's `partition`.
pub fn stamp(set: &mut StatefulSet, partition: i32) {
    let hash = template_hash(set);
    set.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(names::TEMPLATE_HASH.to_string(), hash);
    if let Some(spec) = set.spec.as_mut() {
        spec.update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateStatefulSetStrategy {
                partition: Some(partition),
                ..Default::default()
            }),
        });
    }
}

/// Where the roll stands, as one reconcile sees it (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollView {
    /// The partition applied now (the largest over the existing sets,
    /// clamped to `replicas`): group `applied` is the one replaced last.
    pub applied: i32,
    /// What [`partition`] allows next (`applied - 1`: group `applied` is done).
    pub wanted: i32,
    /// The serving sets' replicas about to be applied.
    pub replicas: i32,
    /// No pod of any set is ready: nothing to protect, nothing drains.
    pub nothing_ready: bool,
    /// Group `applied` is updated and ready on every set.
    pub replaced: bool,
}

impl RollView {
    /// The view of the existing sets (`replicas`: about to be applied).
    pub fn of(existing: &[RollObservation], replicas: i32) -> Self {
        let replicas = replicas.max(0);
        let applied = existing
            .iter()
            .map(|s| s.partition)
            .max()
            .unwrap_or(0)
            .clamp(0, replicas);
        Self {
            applied,
            wanted: partition(existing, replicas),
            replicas,
            nothing_ready: existing.iter().all(|s| s.ready == 0),
            replaced: !existing.is_empty() && replaced(existing, replicas, applied),
        }
    }

    /// The group the next step replaces, which must drain first: set when the
    /// roll steps one group down with something ready to protect.
    pub fn drain_target(&self) -> Option<i32> {
        let k = self.wanted;
        (!self.nothing_ready && k >= 0 && k == self.applied - 1).then_some(k)
    }
}

/// How long the drain target has been unlisted and what it reports in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainWait {
    /// Since the roll unlisted it (a fresh wait after an operator restart).
    pub elapsed: Duration,
    /// Its entry pod's in-flight requests (`None`: did not answer).
    pub inflight: Option<u64>,
}

/// What a roll step tells the operator about (an Event each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollNote {
    /// Group k left the gateways' list; it is replaced once drained.
    Unlisted(i32),
    /// Group k drained; the partition goes down to it.
    Replacing(i32),
    /// Group k is replaced and Ready and listed again.
    Relisted(i32),
    /// Group k is the only listed group: replaced without draining.
    NoDrain(i32),
}

/// The decision of one reconcile: the partition, the list, the drain wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollStep {
    /// The partition to apply to every serving set.
    pub partition: i32,
    /// The groups to list to the gateways.
    pub listed: BTreeSet<i32>,
    /// The unlisted group whose drain is awaited (its unlist time is kept).
    pub draining: Option<i32>,
    /// What changed, if anything worth an Event.
    pub notes: Vec<RollNote>,
}

/// One transition of the roll (module doc). `listed_now`: the gateways' list
/// now; `listed`: what the group plan would list; `limit`: the decided group
/// count (no group at or above it is listed again); `wait`: the drain target's
/// wait, given when it is already unlisted.
pub fn step(
    view: &RollView,
    listed_now: &BTreeSet<i32>,
    mut listed: BTreeSet<i32>,
    limit: i32,
    policy: &DrainPolicy,
    wait: Option<DrainWait>,
) -> RollStep {
    let mut notes = Vec::new();
    // The group replaced last, taken out by the roll: back once replaced and
    // ready, out while not (the plan's count of ready pods would list it).
    let last = view.applied;
    if last < view.replicas.min(limit) && !listed_now.contains(&last) {
        if view.replaced {
            listed.insert(last);
            notes.push(RollNote::Relisted(last));
        } else {
            listed.remove(&last);
        }
    }
    let hold = |listed, draining, notes| RollStep {
        partition: view.applied,
        listed,
        draining,
        notes,
    };
    let Some(k) = view.drain_target() else {
        return RollStep {
            partition: view.wanted,
            ..hold(listed, None, notes)
        };
    };
    if listed.iter().all(|&g| g == k) {
        // The last listed group: no other group can take its requests.
        notes.push(RollNote::NoDrain(k));
        return RollStep {
            partition: k,
            ..hold(listed, None, notes)
        };
    }
    listed.remove(&k);
    if listed_now.contains(&k) {
        notes.push(RollNote::Unlisted(k));
        return hold(listed, Some(k), notes);
    }
    match wait {
        Some(w) if groups::drained(policy, w.elapsed, &[w.inflight]) => {
            notes.push(RollNote::Replacing(k));
            RollStep {
                partition: k,
                ..hold(listed, None, notes)
            }
        }
        _ => hold(listed, Some(k), notes),
    }
}

/// The roll's view of the desired serving sets against the `existing` ones.
pub fn view(desired: &Desired, existing: &[StatefulSet], replicas: i32) -> RollView {
    let observed: Vec<RollObservation> = desired
        .serving
        .iter()
        .filter_map(|(want, _)| {
            let have = existing.iter().find(|s| s.name_any() == name_of(want))?;
            Some(RollObservation::of(have, &template_hash(want)))
        })
        .collect();
    RollView::of(&observed, replicas)
}

/// Stamps the roll's `partition` on every desired serving set.
pub fn apply_partition(desired: &mut Desired, partition: i32) {
    for (set, _) in &mut desired.serving {
        stamp(set, partition);
    }
}

#[cfg(test)]
#[path = "roll_tests.rs"]
mod drain_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn set(stale: bool, partition: i32, updated: i32, ready: i32) -> RollObservation {
        RollObservation {
            stale_template: stale,
            partition,
            generation: 2,
            observed_generation: 2,
            updated,
            ready,
        }
    }

    #[test]
    fn fresh_sets_and_steady_sets_have_no_partition() {
        assert_eq!(partition(&[], 3), 0);
        assert_eq!(partition(&[set(false, 0, 3, 3), set(false, 0, 3, 3)], 3), 0);
    }

    #[test]
    fn an_edit_holds_every_group_then_steps_one_group_at_a_time() {
        // Edit: both sets run the old hash.
        let mut sets = vec![set(true, 0, 3, 3), set(true, 0, 3, 3)];
        let mut p = partition(&sets, 3);
        assert_eq!(p, 3);
        let mut seen = vec![p];
        for s in &mut sets {
            s.stale_template = false;
            s.partition = p;
            s.updated = 0;
        }
        // Step: group 2 may go; then it waits until both models' pod of
        // group 2 is updated and ready.
        p = partition(&sets, 3);
        seen.push(p);
        for s in &mut sets {
            s.partition = p;
        }
        assert_eq!(partition(&sets, 3), 2, "group 2 not replaced yet");
        sets[0].updated = 1;
        assert_eq!(partition(&sets, 3), 2, "only one model's pod done");
        sets[1].updated = 1;
        sets[1].ready = 2;
        assert_eq!(partition(&sets, 3), 2, "updated but not ready");
        sets[1].ready = 3;
        while p > 0 {
            p = partition(&sets, 3);
            seen.push(p);
            for s in &mut sets {
                s.partition = p;
                s.updated = 3 - p;
            }
        }
        assert_eq!(seen, [3, 2, 1, 0]);
    }

    #[test]
    fn stale_status_holds_the_roll() {
        let mut s = set(false, 2, 3, 3);
        s.generation = 3;
        assert_eq!(partition(&[s.clone()], 3), 2);
        s.observed_generation = 3;
        assert_eq!(partition(&[s], 3), 1);
    }

    #[test]
    fn a_second_edit_restarts_the_roll_and_scaling_clamps_it() {
        assert_eq!(partition(&[set(true, 1, 2, 3)], 3), 3);
        assert_eq!(partition(&[set(false, 3, 0, 1)], 2), 2, "clamped");
        // A set written before the annotation existed rolls like an edit.
        assert_eq!(partition(&[set(false, 0, 2, 2), set(true, 0, 2, 2)], 2), 2);
    }

    #[test]
    fn nothing_ready_rolls_at_once() {
        assert_eq!(partition(&[set(true, 0, 2, 0), set(true, 0, 2, 0)], 2), 0);
        assert_eq!(partition(&[set(false, 2, 0, 0)], 2), 0);
    }
}
