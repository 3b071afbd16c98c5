//! Weights on a ReadWriteOnce claim. Such a volume attaches to one node at
//! a time, so every pod that mounts it must run there: a pod scheduled
//! elsewhere hangs in `ContainerCreating` on a Multi-Attach error. The two
//! model pods of a group start in parallel and their co-location is only
//! preferred by default, so on a claim like that the operator makes it
//! required ([`require_colocation`]: a non-entry pod waits for its entry
//! pod's node). Several groups cannot be co-located that way (each group's
//! pods may land on another node), so a resource that may run more than
//! one group on such a claim is `Degraded` ([`problem`]).

use crds::TokenRouterDeployment;
use k8s_openapi::api::core::v1::PodAffinity;

use crate::build::Desired;
use crate::refs::{Found, References};

/// Condition reason of a ReadWriteOnce claim under more than one group.
pub const REASON: &str = "ReadWriteOnceClaim";

/// Access modes that let pods on several nodes mount one volume.
const SHARED_MODES: [&str; 2] = ["ReadOnlyMany", "ReadWriteMany"];

/// The claims of `refs` that exist and attach to one node only (their modes
/// are ReadWriteOnce or ReadWriteOncePod, with no shared mode beside).
pub fn single_node_claims(refs: &References, found: &Found) -> Vec<String> {
    refs.claims
        .keys()
        .filter(|claim| {
            found.claims.get(*claim).is_some_and(|state| {
                !state.access_modes.is_empty()
                    && !state
                        .access_modes
                        .iter()
                        .any(|m| SHARED_MODES.contains(&m.as_str()))
            })
        })
        .cloned()
        .collect()
}

/// The most groups `trd` may run: `autoscaling.maxGroups` while the
/// operator autoscales, else `spec.groups`.
pub fn max_groups(trd: &TokenRouterDeployment) -> i32 {
    if trd.spec.autoscaling.enabled {
        trd.spec.autoscaling.max_groups
    } else {
        trd.spec.groups
    }
}

/// `Degraded` for single-node claims under a resource that may run more
/// than one group.
pub fn problem(trd: &TokenRouterDeployment, claims: &[String]) -> Option<(String, String)> {
    let groups = max_groups(trd);
    if claims.is_empty() || groups <= 1 {
        return None;
    }
    let field = if trd.spec.autoscaling.enabled {
        "autoscaling.maxGroups"
    } else {
        "groups"
    };
    Some((
        REASON.to_string(),
        format!(
            "PersistentVolumeClaim {} is ReadWriteOnce (one node at a time) but {field} is \
             {groups}: pods of a group placed on another node cannot attach it (Multi-Attach) \
             and hang in ContainerCreating; set {field}: 1, or give the models a ReadOnlyMany \
             or ReadWriteMany claim",
            claims.join(", ")
        ),
    ))
}

/// Turns every preferred pod affinity of the serving pods (a non-entry pod
/// near its group's entry pod) into a required one, so a pod that mounts a
/// single-node claim starts only on the node its entry pod holds it on.
pub fn require_colocation(desired: &mut Desired) {
    for (set, _) in &mut desired.serving {
        let affinity = set
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .and_then(|p| p.affinity.as_mut())
            .and_then(|a| a.pod_affinity.as_mut());
        if let Some(PodAffinity {
            preferred_during_scheduling_ignored_during_execution: preferred,
            required_during_scheduling_ignored_during_execution: required,
        }) = affinity
        {
            let terms = preferred.take().unwrap_or_default();
            required
                .get_or_insert_with(Vec::new)
                .extend(terms.into_iter().map(|w| w.pod_affinity_term));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, Inputs};
    use crate::refs::{self, ClaimState};

    fn trd(extra: &str) -> TokenRouterDeployment {
        serde_yaml::from_str(&format!(
            "apiVersion: tokenrouter.io/v1alpha1\nkind: TokenRouterDeployment\nmetadata: {{name: t, namespace: n}}\nspec:\n  image: img\n  policy: {{class: R2R}}\n  models:\n  - {{name: quick, entry: true, source: {{pvc: {{claimName: w, subPath: q}}}}}}\n  - {{name: reference, source: {{pvc: {{claimName: w, subPath: r}}}}}}\n{extra}"
        ))
        .unwrap()
    }

    fn found(modes: &[&str]) -> Found {
        let state = ClaimState {
            access_modes: modes.iter().map(|m| m.to_string()).collect(),
            ..ClaimState::in_phase("Bound")
        };
        Found {
            claims: [("w".to_string(), state)].into_iter().collect(),
            ..Found::default()
        }
    }

    #[test]
    fn only_claims_without_a_shared_mode_are_single_node() {
        let r = refs::references(&trd(""));
        assert_eq!(single_node_claims(&r, &found(&["ReadWriteOnce"])), ["w"]);
        assert_eq!(single_node_claims(&r, &found(&["ReadWriteOncePod"])), ["w"]);
        assert!(single_node_claims(&r, &found(&["ReadWriteOnce", "ReadOnlyMany"])).is_empty());
        assert!(single_node_claims(&r, &found(&["ReadWriteMany"])).is_empty());
        // Modes not known (yet): nothing is claimed.
        assert!(single_node_claims(&r, &found(&[])).is_empty());
        assert!(single_node_claims(&r, &Found::default()).is_empty());
    }

    #[test]
    fn more_than_one_group_on_a_single_node_claim_is_degraded() {
        let claims = vec!["w".to_string()];
        assert_eq!(problem(&trd("  groups: 1\n"), &claims), None);
        let auto = trd("  autoscaling: {enabled: true, minGroups: 1, maxGroups: 3}\n");
        let (reason, message) = problem(&auto, &claims).unwrap();
        assert_eq!(reason, REASON);
        assert!(
            message.starts_with("PersistentVolumeClaim w is ReadWriteOnce")
                && message.contains("autoscaling.maxGroups is 3"),
            "{message}"
        );
        let (_, message) = problem(&trd("  groups: 2\n"), &claims).unwrap();
        assert!(message.contains("groups is 2"), "{message}");
        assert_eq!(problem(&auto, &[]), None);
    }

    #[test]
    fn colocation_becomes_required() {
        let t = trd("");
        let mut d = build::desired(
            &t,
            &Inputs {
                namespace: "n".into(),
                replicas: 1,
                listed_groups: [0].into_iter().collect(),
                thresholds: Default::default(),
                network: None,
            },
        );
        let affinity = |d: &Desired, i: usize| {
            d.serving[i]
                .0
                .spec
                .clone()
                .unwrap()
                .template
                .spec
                .unwrap()
                .affinity
        };
        let before = affinity(&d, 1).unwrap().pod_affinity.unwrap();
        let term = before
            .preferred_during_scheduling_ignored_during_execution
            .unwrap()[0]
            .pod_affinity_term
            .clone();
        require_colocation(&mut d);
        let after = affinity(&d, 1).unwrap().pod_affinity.unwrap();
        assert_eq!(
            after.preferred_during_scheduling_ignored_during_execution,
            None
        );
        assert_eq!(
            after.required_during_scheduling_ignored_during_execution,
            Some(vec![term])
        );
        // The entry pod has no affinity to turn.
        assert_eq!(affinity(&d, 0), None);
    }
}
