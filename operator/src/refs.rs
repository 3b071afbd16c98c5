//! Objects a resource refers to but does not own (the gateway's API-key
//! Secret, model PVCs): the operator looks them up before applying, and a
//! missing one becomes `Degraded` with a precise reason instead of pods that
//! hang in `ContainerCreating` or a crash loop. The lookup is async; what
//! counts as a problem is the pure [`problems`].

use std::collections::{BTreeMap, BTreeSet};

use crds::TokenRouterDeployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::api::Api;
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

/// What exists of [`References`]: for the Secret, its keys (`None`: no such
/// Secret); the claims that exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Keys of the API-key Secret, if it exists.
    pub secret_keys: Option<BTreeSet<String>>,
    /// Claims that exist.
    pub claims: BTreeSet<String>,
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
        if !found.claims.contains(claim) {
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
        if claims.get_opt(claim).await?.is_some() {
            found.claims.insert(claim.clone());
        }
    }
    Ok(found)
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
            claims: ["weights".to_string(), "big-weights".to_string()].into(),
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

    #[test]
    fn a_resource_without_references_has_no_problems() {
        let t = trd("  image: img\n  backend: sim\n  models: [{name: a, entry: true}]\n  policy: {class: Random}\n");
        assert!(problems(&references(&t), &Found::default()).is_empty());
    }
}
