//! Pods a StatefulSet cannot create. The StatefulSet controller reports a
//! refused pod only as a Warning Event `FailedCreate` on the set ("create
//! Pod x-0 in StatefulSet x failed error: ..."): a `runtimeClassName` that
//! names no RuntimeClass, a Pod Security level the pod breaks, a quota. The
//! set's status just lacks the pod. The TRD's Degraded condition names the
//! set and the controller's message, as it names image-pull failures
//! ([`crate::pods`]).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// Condition reason for sets that cannot create their pods.
pub const REASON: &str = "FailedCreate";

/// What one serving StatefulSet lacks: its name, the pods its spec wants
/// but its status does not count, and when it was created (an Event from
/// before is about an earlier set of the same name).
#[derive(Debug, Clone, PartialEq)]
pub struct SetGap {
    /// The StatefulSet's name.
    pub name: String,
    /// `spec.replicas - status.replicas` (pods not created).
    pub missing: i32,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
}

impl SetGap {
    /// The gap of `set` as the API server returned it.
    pub fn of(set: &StatefulSet) -> Self {
        let wanted = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let have = set.status.as_ref().map_or(0, |s| s.replicas);
        Self {
            name: set.name_any(),
            missing: wanted - have,
            created: set.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }
}

/// When `e` last happened (its series, last timestamp, event time or creation).
fn when(e: &Event) -> Option<Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or(e.last_timestamp.as_ref().map(|t| t.0))
        .or(e.event_time.as_ref().map(|t| t.0))
        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// One (reason, message) naming every set that lacks pods and has a
/// `FailedCreate` Event since it was created, with the newest Event's
/// message. A set that has all its pods is fine whatever old Events say.
pub fn problem(sets: &[SetGap], events: &[Event]) -> Option<(String, String)> {
    let mut out = Vec::new();
    for set in sets.iter().filter(|s| s.missing > 0) {
        let newest = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(REASON))
            .filter(|e| e.involved_object.kind.as_deref() == Some("StatefulSet"))
            .filter(|e| e.involved_object.name.as_deref() == Some(set.name.as_str()))
            .filter(|e| match (set.created, when(e)) {
                (Some(created), Some(at)) => at >= created,
                _ => true,
            })
            .max_by_key(|e| when(e));
        if let Some(e) = newest {
            let why = e.message.as_deref().unwrap_or(REASON).trim();
            out.push(format!(
                "StatefulSet {} cannot create {} of its pods: {why}",
                set.name, set.missing
            ));
        }
    }
    (!out.is_empty()).then(|| (REASON.to_string(), out.join("; ")))
}

/// [`problem`] of `sets` from the namespace's `FailedCreate` Events about
/// StatefulSets; none when Events cannot be listed (logged at debug: it
/// repeats every pass) or no set lacks a pod (then nothing is listed).
pub async fn observe(client: &Client, ns: &str, sets: &[SetGap]) -> Option<(String, String)> {
    if sets.iter().all(|s| s.missing <= 0) {
        return None;
    }
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let lp =
        ListParams::default().fields(&format!("involvedObject.kind=StatefulSet,reason={REASON}"));
    match api.list(&lp).await {
        Ok(list) => problem(sets, &list.items),
        Err(e) => {
            tracing::debug!(%ns, error = %e, "cannot list the StatefulSets' Events");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn event(set: &str, reason: &str, message: &str, s: i64) -> Event {
        Event {
            involved_object: ObjectReference {
                kind: Some("StatefulSet".into()),
                name: Some(set.into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Warning".into()),
            last_timestamp: Some(Time(at(s))),
            ..Default::default()
        }
    }

    fn gap(name: &str, missing: i32) -> SetGap {
        SetGap {
            name: name.into(),
            missing,
            created: Some(at(0)),
        }
    }

    const NO_CLASS: &str = "create Pod a-quick-0 in StatefulSet a-quick failed error: \
        pods \"a-quick-0\" is forbidden: pod rejected: RuntimeClass \"nvidia\" not found";

    #[test]
    fn a_set_missing_pods_is_named_with_the_newest_failure() {
        let events = [
            event("a-quick", REASON, "older", 5),
            event("a-quick", REASON, NO_CLASS, 10),
            event("a-quick", "SuccessfulCreate", "create Pod a-quick-1", 20),
            event("a-reference", REASON, "quota", 10),
        ];
        let (reason, message) =
            problem(&[gap("a-quick", 2), gap("a-reference", 0)], &events).unwrap();
        assert_eq!(reason, REASON);
        assert_eq!(
            message,
            format!("StatefulSet a-quick cannot create 2 of its pods: {NO_CLASS}")
        );
    }

    #[test]
    fn complete_sets_and_events_before_the_set_are_no_problem() {
        let events = [event("a-quick", REASON, NO_CLASS, 10)];
        assert_eq!(problem(&[gap("a-quick", 0)], &events), None);
        assert_eq!(problem(&[gap("a-quick", 1)], &[]), None);
        // The Event is about a set of the same name deleted before this one.
        let newer = SetGap {
            created: Some(at(11)),
            ..gap("a-quick", 1)
        };
        assert_eq!(problem(&[newer], &events), None);
    }
}
