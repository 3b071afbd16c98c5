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

use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetUpdateStrategy,
};

use kube::ResourceExt;

use crate::build::{name_of, Desired};
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
    let group_done = existing.iter().all(|s| {
        s.observed_generation >= s.generation && s.updated >= replicas - p && s.ready >= replicas
    });
    if group_done {
        p - 1
    } else {
        p
    }
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

/// Decides the shared partition of the group-by-group roll (see the module doc)
/// and stamps it on every desired serving set.
pub fn apply_partition(desired: &mut Desired, existing: &[StatefulSet], replicas: i32) -> i32 {
    let observed: Vec<RollObservation> = desired
        .serving
        .iter()
        .filter_map(|(want, _)| {
            let have = existing.iter().find(|s| s.name_any() == name_of(want))?;
            Some(RollObservation::of(have, &template_hash(want)))
        })
        .collect();
    let partition = partition(&observed, replicas);
    for (set, _) in &mut desired.serving {
        stamp(set, partition);
    }
    partition
}

/// The group being replaced under `partition` (none when the roll is done).
pub fn rolling_group(partition: i32) -> Option<i32> {
    (partition > 0).then(|| partition - 1)
}

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
        assert_eq!(rolling_group(2), Some(1));
        assert_eq!(rolling_group(0), None);
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
