//! The roll's drain transitions (crate::roll's module doc), one test each,
//! and a whole roll through a small model of the StatefulSet controller.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::groups::{self, DrainPolicy};

const POLICY: DrainPolicy = DrainPolicy {
    settle: Duration::from_secs(10),
    timeout: Duration::from_secs(100),
};

fn set(groups: &[i32]) -> BTreeSet<i32> {
    groups.iter().copied().collect()
}

fn view(applied: i32, wanted: i32, replicas: i32, replaced: bool) -> RollView {
    RollView {
        applied,
        wanted,
        replicas,
        nothing_ready: false,
        replaced,
    }
}

fn wait(secs: u64, inflight: Option<u64>) -> Option<DrainWait> {
    Some(DrainWait {
        elapsed: Duration::from_secs(secs),
        inflight,
    })
}

#[test]
fn the_next_group_is_unlisted_before_the_partition_moves() {
    let all = set(&[0, 1, 2]);
    let s = step(&view(3, 2, 3, true), &all, all.clone(), 3, &POLICY, None);
    assert_eq!(s.partition, 3, "held");
    assert_eq!(s.listed, set(&[0, 1]));
    assert_eq!(s.draining, Some(2));
    assert_eq!(s.notes, [RollNote::Unlisted(2)]);
}

#[test]
fn the_partition_moves_after_settle_and_idle_or_the_timeout() {
    let now = set(&[0, 1]);
    let plan = set(&[0, 1, 2]); // every pod ready: the plan would list 2
    let go = |w| step(&view(3, 2, 3, true), &now, plan.clone(), 3, &POLICY, w);
    for (w, why) in [
        (None, "no wait known"),
        (wait(0, Some(0)), "a fresh wait (after an operator restart)"),
        (wait(5, Some(0)), "settle not elapsed"),
        (wait(20, Some(1)), "a request in flight"),
        (wait(20, None), "no answer"),
    ] {
        let s = go(w);
        assert_eq!((s.partition, s.draining), (3, Some(2)), "{why}");
        assert_eq!(s.listed, set(&[0, 1]), "{why}: stays unlisted");
        assert!(s.notes.is_empty(), "{why}");
    }
    for w in [wait(10, Some(0)), wait(100, None)] {
        let s = go(w);
        assert_eq!((s.partition, s.draining), (2, None));
        assert_eq!(s.listed, set(&[0, 1]), "out while replaced");
        assert_eq!(s.notes, [RollNote::Replacing(2)]);
    }
}

#[test]
fn a_group_being_replaced_stays_out_until_ready_then_the_roll_moves_on() {
    let now = set(&[0, 1]);
    // Group 2's pods restart: the plan's count of ready pods would list it.
    let s = step(
        &view(2, 2, 3, false),
        &now,
        set(&[0, 1, 2]),
        3,
        &POLICY,
        None,
    );
    assert_eq!((s.partition, s.draining), (2, None));
    assert_eq!(s.listed, set(&[0, 1]));
    // Replaced and Ready: listed again, and group 1 leaves in the same write.
    let s = step(
        &view(2, 1, 3, true),
        &now,
        set(&[0, 1, 2]),
        3,
        &POLICY,
        None,
    );
    assert_eq!((s.partition, s.draining), (2, Some(1)));
    assert_eq!(s.listed, set(&[0, 2]));
    assert_eq!(s.notes, [RollNote::Relisted(2), RollNote::Unlisted(1)]);
}

#[test]
fn the_roll_ends_with_group_zero_listed_again() {
    let now = set(&[1]);
    let s = step(&view(0, 0, 2, false), &now, set(&[0, 1]), 2, &POLICY, None);
    assert_eq!((s.partition, s.listed.clone()), (0, set(&[1])));
    let s = step(&view(0, 0, 2, true), &now, set(&[0, 1]), 2, &POLICY, None);
    assert_eq!((s.partition, s.listed, s.draining), (0, set(&[0, 1]), None));
    assert_eq!(s.notes, [RollNote::Relisted(0)]);
    // A steady resource: nothing to do.
    let s = step(
        &view(0, 0, 2, true),
        &set(&[0, 1]),
        set(&[0, 1]),
        2,
        &POLICY,
        None,
    );
    assert_eq!((s.partition, s.listed, s.notes), (0, set(&[0, 1]), vec![]));
}

#[test]
fn the_last_listed_group_is_never_unlisted() {
    let one = set(&[0]);
    let s = step(&view(1, 0, 1, true), &one, one.clone(), 1, &POLICY, None);
    assert_eq!((s.partition, s.listed, s.draining), (0, set(&[0]), None));
    assert_eq!(s.notes, [RollNote::NoDrain(0)]);
    // Two groups, only the target listed (the other never became ready).
    let s = step(
        &view(2, 1, 2, false),
        &set(&[1]),
        set(&[1]),
        2,
        &POLICY,
        None,
    );
    assert_eq!((s.partition, s.listed), (1, set(&[1])));
    assert_eq!(s.notes, [RollNote::NoDrain(1)]);
}

#[test]
fn nothing_ready_a_new_edit_or_a_scale_down_drains_nothing() {
    let obs = |stale, partition, updated, ready| RollObservation {
        stale_template: stale,
        partition,
        generation: 1,
        observed_generation: 1,
        updated,
        ready,
    };
    // Nothing ready: straight to 0, no target.
    let v = RollView::of(&[obs(false, 1, 1, 0)], 2);
    assert_eq!((v.wanted, v.drain_target()), (0, None));
    let s = step(&v, &set(&[]), set(&[]), 2, &POLICY, None);
    assert_eq!((s.partition, s.draining), (0, None));
    // A new edit holds every group and unlists none.
    let v = RollView::of(&[obs(true, 0, 2, 2)], 2);
    assert_eq!((v.wanted, v.drain_target()), (2, None));
    let s = step(&v, &set(&[0, 1]), set(&[0, 1]), 2, &POLICY, None);
    assert_eq!((s.partition, s.listed), (2, set(&[0, 1])));
    // A group left out by a scale-down (at or above the decided count) is
    // not listed again by the roll.
    let s = step(
        &view(1, 1, 2, true),
        &set(&[0]),
        set(&[0]),
        1,
        &POLICY,
        None,
    );
    assert_eq!(s.listed, set(&[0]));
}

/// The StatefulSet controller, one tick: under `partition`, each set
/// replaces its highest old pod (down for one tick, then updated and ready).
fn kubelet(sets: &mut [RollObservation], replicas: i32, down: &mut Vec<i32>) {
    down.clear();
    for s in sets.iter_mut() {
        if s.ready < replicas {
            s.updated += 1;
            s.ready = replicas;
        } else if s.updated < replicas - s.partition {
            let group = replicas - s.updated - 1;
            down.push(group);
            s.ready = replicas - 1;
        }
    }
}

#[test]
fn a_whole_roll_never_lists_a_group_while_its_pods_restart() {
    let replicas = 3;
    let mut sets = vec![
        RollObservation {
            stale_template: true,
            partition: 0,
            generation: 1,
            observed_generation: 1,
            updated: 3,
            ready: 3,
        };
        2
    ];
    let mut listed_now = set(&[0, 1, 2]);
    let mut unlisted_at: Option<(i32, u64)> = None; // the operator's memory
    let mut order = Vec::new();
    let mut down = Vec::new();
    for t in (0..200u64).map(|tick| tick * 5) {
        let v = RollView::of(&sets, replicas);
        let ready = sets.iter().map(|s| s.ready).min().unwrap_or(0);
        let plan = groups::plan(Some(replicas), &listed_now, replicas, ready, false);
        let w = v
            .drain_target()
            .filter(|k| !listed_now.contains(k))
            .map(|k| {
                let since = match unlisted_at {
                    Some((g, at)) if g == k => at,
                    _ => t,
                };
                DrainWait {
                    elapsed: Duration::from_secs(t - since),
                    inflight: Some(0),
                }
            });
        let s = step(&v, &listed_now, plan.listed, replicas, &POLICY, w);
        if let Some(RollNote::Replacing(k)) = s.notes.last().copied() {
            let since = unlisted_at.filter(|(g, _)| *g == k).map(|(_, at)| at);
            assert!(
                since.is_some_and(|at| t - at >= 10),
                "group {k} not settled"
            );
            assert!(!s.listed.contains(&k), "replaced while listed");
            order.push(k);
        }
        unlisted_at = s.draining.map(|k| match unlisted_at {
            Some((g, at)) if g == k => (g, at),
            _ => (k, t),
        });
        listed_now = s.listed;
        for o in &mut sets {
            o.stale_template = false;
            if o.partition != s.partition && o.updated == 3 && o.partition == 0 {
                o.updated = 0; // the new template: every pod is old
            }
            o.partition = s.partition;
        }
        kubelet(&mut sets, replicas, &mut down);
        for g in &down {
            assert!(
                !listed_now.contains(g),
                "group {g} listed while down at {t}s"
            );
        }
        if s.partition == 0 && sets.iter().all(|o| o.updated == 3 && o.ready == 3) {
            let v = RollView::of(&sets, replicas);
            let end = step(&v, &listed_now, listed_now.clone(), replicas, &POLICY, None);
            listed_now = end.listed;
            if listed_now == set(&[0, 1, 2]) {
                assert_eq!(order, [2, 1, 0]);
                return;
            }
        }
    }
    panic!("the roll did not finish: order {order:?}, listed {listed_now:?}");
}
