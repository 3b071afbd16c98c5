//! The status computation: pure, from what the reconciler observed.

use crds::v1alpha1::{condition, ModelStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// What one serving StatefulSet reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetObservation {
    /// Model name (or `group` for `podPerGroup`).
    pub name: String,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.updatedReplicas` (pods already on the current template).
    pub updated: i32,
    /// `spec.replicas` the operator applied.
    pub replicas: i32,
}

/// Everything [`compute`] needs.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// `metadata.generation` of the resource.
    pub generation: Option<i64>,
    /// Groups wanted.
    pub desired_groups: i32,
    /// One entry per serving StatefulSet.
    pub sets: Vec<SetObservation>,
    /// Ready gateway pods, and how many are wanted.
    pub gateway_ready: i32,
    /// Gateway replicas wanted.
    pub gateway_replicas: i32,
    /// Why the resource cannot be served (a spec problem or a failed apply).
    pub problem: Option<(String, String)>,
}

/// The status fields [`compute`] fills.
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    /// `Ready`, `Progressing`, `Degraded`.
    pub conditions: Vec<Condition>,
    /// Fully ready groups.
    pub groups: i32,
    /// Per model.
    pub models: Vec<ModelStatus>,
}

fn condition(kind: &str, ok: bool, reason: &str, message: String, gen: Option<i64>) -> Condition {
    Condition {
        type_: kind.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: gen,
        last_transition_time: Time(now()),
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// Ready groups are those every set has ready (a group needs all its models).
pub fn compute(obs: &Observation) -> Computed {
    let gen = obs.generation;
    let groups = obs
        .sets
        .iter()
        .map(|s| s.ready.min(s.replicas))
        .min()
        .unwrap_or(0);
    let rolling = obs.sets.iter().any(|s| s.updated < s.replicas);
    let scaling = obs.sets.iter().any(|s| s.replicas != obs.desired_groups);
    let gateway_ok = obs.gateway_ready >= obs.gateway_replicas;
    let all_ready = groups >= obs.desired_groups && gateway_ok && !rolling;
    let (ready_reason, ready_msg) = if all_ready {
        (
            "AllGroupsReady",
            format!("{groups} of {} groups ready", obs.desired_groups),
        )
    } else if !gateway_ok {
        (
            "GatewayNotReady",
            format!(
                "{} of {} gateway pods ready",
                obs.gateway_ready, obs.gateway_replicas
            ),
        )
    } else {
        let waiting: Vec<String> = obs
            .sets
            .iter()
            .filter(|s| s.ready < obs.desired_groups || s.updated < s.replicas)
            .map(|s| format!("{} {}/{}", s.name, s.ready, obs.desired_groups))
            .collect();
        (
            "GroupsNotReady",
            format!("waiting for {}", waiting.join(", ")),
        )
    };
    let (prog, prog_reason, prog_msg) = if rolling {
        (
            true,
            "RollingUpdate",
            "pods are being replaced with the new template".to_string(),
        )
    } else if scaling {
        (
            true,
            "Scaling",
            format!("scaling to {} groups", obs.desired_groups),
        )
    } else if !all_ready {
        (true, "Starting", ready_msg.clone())
    } else {
        (false, "Stable", "nothing to do".to_string())
    };
    let (degraded, deg_reason, deg_msg) = match &obs.problem {
        Some((reason, message)) => (true, reason.as_str(), message.clone()),
        None => (false, "AsExpected", "no problem seen".to_string()),
    };
    Computed {
        conditions: vec![
            condition(
                condition::READY,
                all_ready && !degraded,
                ready_reason,
                ready_msg,
                gen,
            ),
            condition(condition::PROGRESSING, prog, prog_reason, prog_msg, gen),
            condition(condition::DEGRADED, degraded, deg_reason, deg_msg, gen),
        ],
        groups,
        models: obs
            .sets
            .iter()
            .map(|s| ModelStatus {
                name: s.name.clone(),
                ready_replicas: s.ready,
                replicas: s.replicas,
            })
            .collect(),
    }
}

/// Keeps `last_transition_time` of conditions whose status did not change
/// (Kubernetes' convention), taking everything else from `new`.
pub fn carry_transitions(old: &[Condition], mut new: Vec<Condition>) -> Vec<Condition> {
    for c in &mut new {
        if let Some(prev) = old
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
        {
            c.last_transition_time = prev.last_transition_time.clone();
        }
    }
    new
}

/// Whether `new` (the status a pass computed, as the merge patch it
/// becomes) says anything `old` does not, other than the live load.
///
/// A status write is a watched change of the resource: it starts another
/// reconcile, which under traffic saw a new `observedConcurrency` and wrote
/// again, back to back. So the load alone never causes a write; it goes out
/// with the next change that does (a new group count, a condition, a
/// thresholds table). Fields the patch leaves out (`None`: the tune loop's
/// `tuning`, its `thresholds`) keep the old value.
pub fn needs_write(
    old: &crds::v1alpha1::TokenRouterDeploymentStatus,
    new: &crds::v1alpha1::TokenRouterDeploymentStatus,
) -> bool {
    let mut merged = new.clone();
    merged.tuning = new.tuning.clone().or_else(|| old.tuning.clone());
    merged.thresholds = new.thresholds.clone().or_else(|| old.thresholds.clone());
    // The load appearing or going (metrics found or lost) is news; its value is not.
    if new.observed_concurrency.is_some() == old.observed_concurrency.is_some() {
        merged.observed_concurrency = old.observed_concurrency;
    }
    merged != *old
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, ready: i32, updated: i32, replicas: i32) -> SetObservation {
        SetObservation {
            name: name.into(),
            ready,
            updated,
            replicas,
        }
    }

    fn get<'a>(c: &'a Computed, kind: &str) -> &'a Condition {
        c.conditions.iter().find(|x| x.type_ == kind).unwrap()
    }

    fn obs(sets: Vec<SetObservation>, desired: i32) -> Observation {
        Observation {
            generation: Some(3),
            desired_groups: desired,
            sets,
            gateway_ready: 1,
            gateway_replicas: 1,
            problem: None,
        }
    }

    #[test]
    fn ready_when_every_model_of_every_group_is() {
        let c = compute(&obs(vec![set("small", 2, 2, 2), set("big", 2, 2, 2)], 2));
        assert_eq!(c.groups, 2);
        assert_eq!(get(&c, "Ready").status, "True");
        assert_eq!(get(&c, "Progressing").status, "False");
        assert_eq!(get(&c, "Degraded").status, "False");
        assert_eq!(get(&c, "Ready").observed_generation, Some(3));
    }

    #[test]
    fn a_group_counts_only_when_all_its_models_are_ready() {
        let c = compute(&obs(vec![set("small", 2, 2, 2), set("big", 1, 2, 2)], 2));
        assert_eq!(c.groups, 1);
        assert_eq!(get(&c, "Ready").status, "False");
        assert_eq!(get(&c, "Ready").reason, "GroupsNotReady");
        assert!(get(&c, "Ready").message.contains("big 1/2"));
        assert_eq!(get(&c, "Progressing").reason, "Starting");
    }

    #[test]
    fn rolling_and_scaling_are_progressing() {
        let c = compute(&obs(vec![set("small", 2, 1, 2)], 2));
        assert_eq!(get(&c, "Progressing").reason, "RollingUpdate");
        assert_eq!(get(&c, "Ready").status, "False");
        let c = compute(&obs(vec![set("small", 2, 2, 2)], 3));
        assert_eq!(get(&c, "Progressing").reason, "Scaling");
    }

    #[test]
    fn gateway_and_problems_show() {
        let mut o = obs(vec![set("small", 1, 1, 1)], 1);
        o.gateway_ready = 0;
        let c = compute(&o);
        assert_eq!(get(&c, "Ready").reason, "GatewayNotReady");
        o.gateway_ready = 1;
        o.problem = Some(("ApplyFailed".into(), "boom".into()));
        let c = compute(&o);
        assert_eq!(get(&c, "Degraded").status, "True");
        assert_eq!(get(&c, "Degraded").message, "boom");
        assert_eq!(get(&c, "Ready").status, "False");
    }

    #[test]
    fn transitions_keep_their_time_while_status_holds() {
        let first = compute(&obs(vec![set("small", 1, 1, 1)], 1)).conditions;
        let second = compute(&obs(vec![set("small", 1, 1, 1)], 1)).conditions;
        let kept = carry_transitions(&first, second);
        assert_eq!(kept[0].last_transition_time, first[0].last_transition_time);
    }

    #[test]
    fn the_load_alone_is_no_reason_to_write() {
        use crds::v1alpha1::TokenRouterDeploymentStatus as S;
        let conditions = compute(&obs(vec![set("small", 1, 1, 1)], 1)).conditions;
        let old = S {
            conditions: conditions.clone(),
            desired_groups: 1,
            observed_concurrency: Some(3),
            tuning: Some(Default::default()),
            ..S::default()
        };
        let mut new = S {
            tuning: None,
            observed_concurrency: Some(4),
            ..old.clone()
        };
        assert!(
            !needs_write(&old, &new),
            "only the load and an omitted field differ"
        );
        new.desired_groups = 2;
        assert!(
            needs_write(&old, &new),
            "a new decision is written (with the load)"
        );
        new.desired_groups = 1;
        new.conditions[0].message = "0 of 1 groups ready".into();
        assert!(needs_write(&old, &new), "a condition's change is written");
        assert!(
            needs_write(&S::default(), &old),
            "the first status is written"
        );
        let unseen = S {
            observed_concurrency: None,
            ..old.clone()
        };
        assert!(needs_write(&unseen, &old), "the load showing up is written");
    }
}
