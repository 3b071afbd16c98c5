//! Objects a resource refers to but does not own (the gateway's API-key
//! Secret, model PVCs): the operator looks them up before applying, and a
//! missing one becomes `Degraded` with a precise reason instead of pods that
//! hang in `ContainerCreating` or a crash loop. A claim that exists but is
//! not Bound is shown the same way ([`unbound`], with the newest Event about
//! it) without holding the apply back: a `WaitForFirstConsumer` claim binds
//! only once a pod uses it. The lookup is async; what counts as a problem is
//! the pure [`problems`] and [`unbound`].

use std::collections::{BTreeMap, BTreeSet};

use crds::TokenRouterDeployment;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::Client;

/// The key `gateway.apiKeySecretRef` reads when it names none.
pub const DEFAULT_API_KEYS_KEY: &str = "api-keys";

/// What a resource refers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct References {
    /// The API-key Secret and the key in it.
    pub api_key_secret: Option<(String, String)>,
    /// Claim name -> models that mount it.
    pub claims: BTreeMap<String, Vec<String>>,
}

/// Condition reason of a claim that exists but is not Bound.
pub const PVC_NOT_BOUND: &str = "PVCNotBound";

/// The phase of a claim the volume controller has bound.
const BOUND: &str = "Bound";

/// A claim that exists: its phase and what the cluster last said about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimState {
    /// `status.phase` (`Pending`, `Bound`, `Lost`); `None` before any
    /// controller wrote one.
    pub phase: Option<String>,
    /// For a claim not Bound, the Event [`claim_event`] picks (`Reason:
    /// message`), when the operator may read Events.
    pub event: Option<String>,
    /// The access modes of the bound volume (`status.accessModes`), else
    /// the ones the claim asks for (`spec.accessModes`).
    pub access_modes: Vec<String>,
}

impl ClaimState {
    /// A claim in `phase` with no Event.
    pub fn in_phase(phase: &str) -> Self {
        Self {
            phase: Some(phase.into()),
            ..Self::default()
        }
    }
}

/// What exists of [`References`]: for the Secret, its keys (`None`: no such
/// Secret); the claims that exist, with their state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Keys of the API-key Secret, if it exists.
    pub secret_keys: Option<BTreeSet<String>>,
    /// Claims that exist.
    pub claims: BTreeMap<String, ClaimState>,
}

/// The references of `trd`'s spec.
pub fn references(trd: &TokenRouterDeployment) -> References {
    let mut claims: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &trd.spec.models {
        if let Some(pvc) = m.source.as_ref().and_then(|s| s.pvc.as_ref()) {
            claims
                .entry(pvc.claim_name.clone())
                .or_default()
                .push(m.name.clone());
        }
    }
    References {
        api_key_secret: trd.spec.gateway.api_key_secret_ref.as_ref().map(|r| {
            (
                r.name.clone(),
                r.key.clone().unwrap_or_else(|| DEFAULT_API_KEYS_KEY.into()),
            )
        }),
        claims,
    }
}

/// Every missing reference as (reason, message), in a stable order.
pub fn problems(refs: &References, found: &Found) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some((name, key)) = &refs.api_key_secret {
        match &found.secret_keys {
            None => out.push((
                "SecretNotFound".to_string(),
                format!("gateway.apiKeySecretRef: Secret {name} does not exist"),
            )),
            Some(keys) if !keys.contains(key) => out.push((
                "SecretKeyNotFound".to_string(),
                format!(
                    "gateway.apiKeySecretRef: Secret {name} has no key {key} (keys: {})",
                    keys.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            )),
            Some(_) => {}
        }
    }
    for (claim, models) in &refs.claims {
        if !found.claims.contains_key(claim) {
            out.push((
                "PVCNotFound".to_string(),
                format!(
                    "PersistentVolumeClaim {claim} (source of model {}) does not exist",
                    models.join(", ")
                ),
            ));
        }
    }
    out
}

/// Every claim that exists but is not Bound, as ([`PVC_NOT_BOUND`],
/// message naming the claim, its phase, the models that mount it and the
/// Event about it). Not a reason to hold off: pods may be what the claim
/// waits for.
pub fn unbound(refs: &References, found: &Found) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (claim, models) in &refs.claims {
        let Some(state) = found.claims.get(claim) else {
            continue;
        };
        if state.phase.as_deref() == Some(BOUND) {
            continue;
        }
        // The API server sets Pending on create; no phase at all is the same.
        let phase = state.phase.as_deref().unwrap_or("Pending");
        let mut message = format!(
            "PersistentVolumeClaim {claim} (source of model {}) is {phase}, not Bound",
            models.join(", ")
        );
        if let Some(event) = &state.event {
            message.push_str(&format!(" ({event})"));
        }
        out.push((PVC_NOT_BOUND.to_string(), message));
    }
    out
}

/// When `e` last happened: its series' last sighting, else its last
/// timestamp, its event time or its creation.
fn when(e: &Event) -> Option<Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or(e.last_timestamp.as_ref().map(|t| t.0))
        .or(e.event_time.as_ref().map(|t| t.0))
        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// What to show of `events` (all about one claim) as `Reason: message`:
/// the newest Warning (`ProvisioningFailed`, ...), else the newest Event of
/// any type (`WaitForFirstConsumer`, `ExternalProvisioning`), since a
/// provisioner's repeated Normal "waiting" Events would hide its failure.
pub fn claim_event(events: &[Event]) -> Option<String> {
    let newest = |warning: bool| {
        events
            .iter()
            .filter(|e| !warning || e.type_.as_deref() == Some("Warning"))
            .max_by_key(|e| when(e))
    };
    let e = newest(true).or_else(|| newest(false))?;
    let reason = e.reason.as_deref().unwrap_or("Event");
    Some(match e.message.as_deref().map(str::trim) {
        Some(m) if !m.is_empty() => format!("{reason}: {m}"),
        _ => reason.to_string(),
    })
}

/// One (reason, message) for all problems: the first's reason, every message.
pub fn summarize(problems: &[(String, String)]) -> Option<(String, String)> {
    let first = problems.first()?;
    let message = problems
        .iter()
        .map(|(_, m)| m.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Some((first.0.clone(), message))
}

/// Looks the references up in `ns`.
pub async fn lookup(client: &Client, ns: &str, refs: &References) -> kube::Result<Found> {
    let mut found = Found::default();
    if let Some((name, _)) = &refs.api_key_secret {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        found.secret_keys = secrets.get_opt(name).await?.map(|s| {
            let data = s.data.unwrap_or_default().into_keys();
            data.chain(s.string_data.unwrap_or_default().into_keys())
                .collect()
        });
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for claim in refs.claims.keys() {
        let Some(pvc) = claims.get_opt(claim).await? else {
            continue;
        };
        let access_modes = pvc
            .status
            .as_ref()
            .and_then(|s| s.access_modes.clone())
            .filter(|m| !m.is_empty())
            .or_else(|| pvc.spec.as_ref().and_then(|s| s.access_modes.clone()))
            .unwrap_or_default();
        let phase = pvc.status.and_then(|s| s.phase);
        let event = match phase.as_deref() {
            Some(BOUND) => None,
            _ => claim_events(client, ns, claim).await,
        };
        found.claims.insert(
            claim.clone(),
            ClaimState {
                phase,
                event,
                access_modes,
            },
        );
    }
    Ok(found)
}

/// [`claim_event`] of the Events about `claim`; `None` when they cannot be
/// listed (no RBAC for Events: the condition then goes without the reason).
async fn claim_events(client: &Client, ns: &str, claim: &str) -> Option<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let about = format!("involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim}");
    match events.list(&ListParams::default().fields(&about)).await {
        Ok(list) => claim_event(&list.items),
        Err(e) => {
            // Debug: this repeats every recheck while the claim is unbound.
            tracing::debug!(%claim, error = %e, "cannot list the claim's Events");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trd(yaml_spec: &str) -> TokenRouterDeployment {
        serde_yaml::from_str(&format!(
            "apiVersion: tokenrouter.io/v1alpha1\nkind: TokenRouterDeployment\nmetadata: {{name: t, namespace: n}}\nspec:\n{yaml_spec}"
        ))
        .unwrap()
    }

    const SPEC: &str = r#"
  image: img
  models:
    - {name: small, entry: true, source: {pvc: {claimName: weights, subPath: a}}}
    - {name: big, source: {pvc: {claimName: weights, subPath: b}}}
    - {name: huge, source: {pvc: {claimName: big-weights}}}
  policy: {class: R2R}
  gateway: {apiKeySecretRef: {name: keys}}
"#;

    #[test]
    fn references_name_the_secret_key_and_each_claim_once() {
        let r = references(&trd(SPEC));
        assert_eq!(r.api_key_secret, Some(("keys".into(), "api-keys".into())));
        assert_eq!(r.claims["weights"], vec!["small", "big"]);
        assert_eq!(r.claims["big-weights"], vec!["huge"]);
    }

    #[test]
    fn each_missing_object_has_its_reason() {
        let r = references(&trd(SPEC));
        let none = problems(&r, &Found::default());
        let reasons: Vec<&str> = none.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(reasons, ["SecretNotFound", "PVCNotFound", "PVCNotFound"]);
        assert!(none[2].1.contains("weights (source of model small, big)"));
        let wrong_key = Found {
            secret_keys: Some(["other".to_string()].into()),
            claims: bound(&["weights", "big-weights"]),
        };
        let p = problems(&r, &wrong_key);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "SecretKeyNotFound");
        assert!(
            p[0].1.contains("has no key api-keys (keys: other)"),
            "{p:?}"
        );
        let all = Found {
            secret_keys: Some(["api-keys".to_string()].into()),
            ..wrong_key
        };
        assert!(problems(&r, &all).is_empty());
        assert_eq!(summarize(&[]), None);
        let s = summarize(&none).unwrap();
        assert_eq!(s.0, "SecretNotFound");
        assert_eq!(s.1.matches("does not exist").count(), 3);
    }

    fn bound(claims: &[&str]) -> BTreeMap<String, ClaimState> {
        claims
            .iter()
            .map(|c| (c.to_string(), ClaimState::in_phase(BOUND)))
            .collect()
    }

    #[test]
    fn a_claim_not_bound_is_named_with_its_phase_models_and_event() {
        let r = references(&trd(SPEC));
        let mut found = Found {
            claims: bound(&["weights", "big-weights"]),
            ..Found::default()
        };
        assert!(unbound(&r, &found).is_empty(), "all bound: nothing to say");
        found.claims.insert(
            "weights".into(),
            ClaimState {
                phase: Some("Pending".into()),
                event: Some("ProvisioningFailed: no capacity".into()),
                access_modes: Vec::new(),
            },
        );
        found
            .claims
            .insert("big-weights".into(), ClaimState::default());
        let u = unbound(&r, &found);
        assert_eq!(u.len(), 2);
        assert!(u.iter().all(|(reason, _)| reason == PVC_NOT_BOUND));
        assert_eq!(
            u[0].1,
            "PersistentVolumeClaim big-weights (source of model huge) is Pending, not Bound"
        );
        assert_eq!(
            u[1].1,
            "PersistentVolumeClaim weights (source of model small, big) is Pending, not Bound \
             (ProvisioningFailed: no capacity)"
        );
        // Missing claims are problems (they block), not unbound claims.
        found.claims.remove("big-weights");
        assert_eq!(unbound(&r, &found).len(), 1);
        assert_eq!(problems(&r, &found)[0].0, "SecretNotFound");
        found
            .claims
            .insert("weights".into(), ClaimState::in_phase("Lost"));
        assert!(unbound(&r, &found)[0]
            .1
            .contains("weights (source of model small, big) is Lost"));
    }

    fn event(kind: &str, reason: &str, message: &str, at_s: i64) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("e{at_s}")},
            "involvedObject": {"kind": "PersistentVolumeClaim", "name": "weights"},
            "type": kind, "reason": reason, "message": message,
            "lastTimestamp": Timestamp::from_second(at_s).unwrap().to_string(),
        }))
        .unwrap()
    }

    #[test]
    fn the_newest_warning_wins_over_newer_normal_events() {
        assert_eq!(claim_event(&[]), None);
        let waiting = event(
            "Normal",
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
            100,
        );
        assert_eq!(
            claim_event(std::slice::from_ref(&waiting)).as_deref(),
            Some("WaitForFirstConsumer: waiting for first consumer to be created before binding")
        );
        let events = [
            event("Warning", "ProvisioningFailed", "old failure", 10),
            waiting,
            event(
                "Warning",
                "ProvisioningFailed",
                "storageclass \"fast\" not found",
                50,
            ),
            event(
                "Normal",
                "ExternalProvisioning",
                "waiting for a volume",
                200,
            ),
        ];
        assert_eq!(
            claim_event(&events).as_deref(),
            Some("ProvisioningFailed: storageclass \"fast\" not found")
        );
        let mut bare = event("Normal", "Provisioning", " ", 300);
        bare.type_ = None;
        assert_eq!(claim_event(&[bare]).as_deref(), Some("Provisioning"));
    }

    #[test]
    fn a_resource_without_references_has_no_problems() {
        let t = trd("  image: img\n  backend: sim\n  models: [{name: a, entry: true}]\n  policy: {class: Random}\n");
        assert!(problems(&references(&t), &Found::default()).is_empty());
    }
}
