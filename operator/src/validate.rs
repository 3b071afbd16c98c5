//! Spec problems the API server's schema and CEL rules cannot see (or that
//! depend on other fields in ways CEL keeps too costly): pure, so unit tests
//! cover every reason.

use crds::v1alpha1::{Backend, ModelSpec, Placement};
use crds::TokenRouterDeployment;

use crate::names;

/// Longest Service name: a DNS label (RFC 1123).
pub const MAX_SERVICE_NAME: usize = 63;
/// Longest StatefulSet name: its pods carry the label
/// `controller-revision-hash: NAME-HASH` (a dash and up to 10 characters),
/// and a label value is at most 63 characters.
pub const MAX_STATEFULSET_NAME: usize = 52;

/// An object name the API server (or the StatefulSet controller) would
/// refuse: the resource's name is too long for what it derives.
fn name_problem(trd: &TokenRouterDeployment) -> Option<(String, String)> {
    let too_long = |name: &str, kind: &str, max: usize| {
        (name.len() > max).then(|| {
            (
                "NameTooLong".to_string(),
                format!(
                    "the {kind} name {name} is {} characters, over the {max} allowed: \
                     shorten the resource's name ({} characters) or the model names",
                    name.len(),
                    names::instance(trd).len()
                ),
            )
        })
    };
    names::serving_sets(trd)
        .iter()
        .find_map(|n| too_long(n, "StatefulSet", MAX_STATEFULSET_NAME))
        .or_else(|| too_long(&names::gateway(trd), "Service", MAX_SERVICE_NAME))
}

/// Under MPS every serving pod must request one `nvidia.com/gpu` (or the
/// renamed `nvidia.com/gpu.shared`, the plugin's `renameByDefault`): the
/// device plugin injects the MPS pipe directory only into containers it
/// gives a GPU replica, and a pod without one would run outside MPS (or on
/// no GPU). It refuses a request of more than one shared GPU
/// (`failRequestsGreaterThanOne`, on by default under MPS), which would
/// leave the StatefulSet failing to create the pod.
fn mps_request_problem(trd: &TokenRouterDeployment) -> Option<(String, String)> {
    crate::build::mps::of(&trd.spec)?;
    let pods: Vec<&ModelSpec> = match trd.spec.placement {
        Placement::PodPerModel => trd.spec.models.iter().collect(),
        Placement::PodPerGroup => trd.spec.models.iter().filter(|m| m.entry).collect(),
    };
    for m in pods {
        let limits = m.resources.as_ref().and_then(|r| r.limits.as_ref());
        let gpus: f64 = GPU_RESOURCES
            .iter()
            .filter_map(|r| limits?.get(*r))
            .map(|q| q.0.trim().parse::<f64>().unwrap_or(f64::INFINITY))
            .sum();
        if gpus == 0.0 {
            return Some((
                "MpsWithoutGpuRequest".into(),
                format!(
                    "nodePool.mps is enabled but model {} requests no {GPU}: set \
                     resources.limits.{GPU}: 1 (one MPS replica of the device plugin; \
                     nvidia.com/gpu.shared where the plugin renames shared GPUs)",
                    m.name
                ),
            ));
        }
        if gpus > 1.0 {
            return Some((
                "MpsMoreThanOneGpu".into(),
                format!(
                    "nodePool.mps is enabled but model {} requests more than one shared GPU: \
                     each pod is one MPS client of one GPU, and the device plugin refuses \
                     a request above 1 (set resources.limits.{GPU}: 1)",
                    m.name
                ),
            ));
        }
    }
    None
}

/// The device plugin's resource name.
const GPU: &str = "nvidia.com/gpu";
/// The names a shared GPU goes by: the plugin's own, and its
/// `renameByDefault` name.
const GPU_RESOURCES: [&str; 2] = [GPU, "nvidia.com/gpu.shared"];

/// The first spec problem of `trd`, as (reason, message).
pub fn check(trd: &TokenRouterDeployment) -> Option<(String, String)> {
    let spec = &trd.spec;
    if spec.models.iter().filter(|m| m.entry).count() != 1 {
        return Some((
            "NoEntryModel".into(),
            "exactly one model must have entry: true".into(),
        ));
    }
    let sim = spec.backend == Some(Backend::Sim);
    for m in &spec.models {
        let set = m.source.as_ref().map_or(0, |s| {
            usize::from(s.pvc.is_some())
                + usize::from(s.host_path.is_some())
                + usize::from(s.image_path.is_some())
        });
        if set == 0 && !sim {
            return Some((
                "ModelSourceMissing".into(),
                format!(
                    "model {} has no source (pvc, hostPath or imagePath); only backend: sim runs without weights",
                    m.name
                ),
            ));
        }
        if set > 1 {
            return Some((
                "ModelSourceAmbiguous".into(),
                format!(
                    "model {}: source must name exactly one of pvc, hostPath, imagePath",
                    m.name
                ),
            ));
        }
        if let Some(pvc) = m.source.as_ref().and_then(|s| s.pvc.as_ref()) {
            if pvc.claim_name.is_empty() {
                return Some((
                    "InvalidModelSource".into(),
                    format!("model {}: source.pvc.claimName is empty", m.name),
                ));
            }
        }
    }
    if let Some(m) = spec
        .models
        .iter()
        .find(|m| names::RESERVED_MODEL_NAMES.contains(&m.name.as_str()))
    {
        return Some((
            "ReservedModelName".into(),
            format!(
                "a model may not be named {}: NAME-{} names another object \
                 (the podPerGroup StatefulSet or the gateway's Service)",
                m.name, m.name
            ),
        ));
    }
    if let Some(p) = name_problem(trd) {
        return Some(p);
    }
    if let Some(p) = mps_request_problem(trd) {
        return Some(p);
    }
    if let Some(p) = crate::gpu_fit::problem(trd) {
        return Some(p);
    }
    if let Some(r) = &spec.gateway.api_key_secret_ref {
        if r.name.is_empty() || r.key.as_deref() == Some("") {
            return Some((
                "InvalidSecretRef".into(),
                "gateway.apiKeySecretRef needs a non-empty name (and key, if given)".into(),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trd(models: &str, extra: &str) -> TokenRouterDeployment {
        named("t", models, extra)
    }

    fn named(name: &str, models: &str, extra: &str) -> TokenRouterDeployment {
        serde_yaml::from_str(&format!(
            "apiVersion: tokenrouter.io/v1alpha1\nkind: TokenRouterDeployment\nmetadata: {{name: {name}, namespace: n}}\nspec:\n  image: img\n  policy: {{class: R2R}}\n  models: {models}\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn names_too_long_for_a_statefulset_or_service_are_refused() {
        let models = "[{name: reference, entry: true, source: {imagePath: /m}}]";
        // NAME-reference: 42 + 10 = 52 fits; one more does not.
        assert_eq!(reason(&named(&"a".repeat(42), models, "")), None);
        let p = check(&named(&"a".repeat(43), models, "")).unwrap();
        assert_eq!(p.0, "NameTooLong");
        assert!(
            p.1.contains("StatefulSet") && p.1.contains("53 characters"),
            "{}",
            p.1
        );
        // One StatefulSet of groups: NAME-group.
        let group = "  placement: podPerGroup\n";
        assert_eq!(reason(&named(&"a".repeat(46), models, group)), None);
        assert_eq!(
            reason(&named(&"a".repeat(47), models, group)).as_deref(),
            Some("NameTooLong")
        );
    }

    fn reason(t: &TokenRouterDeployment) -> Option<String> {
        check(t).map(|p| p.0)
    }

    #[test]
    fn each_problem_has_its_reason() {
        let ok = "[{name: a, entry: true, source: {imagePath: /m}}]";
        assert_eq!(reason(&trd(ok, "")), None);
        assert_eq!(
            reason(&trd("[{name: a, source: {imagePath: /m}}]", "")).as_deref(),
            Some("NoEntryModel")
        );
        assert_eq!(
            reason(&trd("[{name: a, entry: true}]", "")).as_deref(),
            Some("ModelSourceMissing")
        );
        assert_eq!(
            reason(&trd("[{name: a, entry: true, source: {}}]", "")).as_deref(),
            Some("ModelSourceMissing")
        );
        assert_eq!(
            reason(&trd("[{name: a, entry: true}]", "  backend: sim\n")),
            None
        );
        let both = "[{name: a, entry: true, source: {imagePath: /m, hostPath: /h}}]";
        let p = check(&trd(both, "")).unwrap();
        assert_eq!(p.0, "ModelSourceAmbiguous");
        assert!(p.1.contains("model a"));
        assert_eq!(
            reason(&trd(
                "[{name: a, entry: true, source: {pvc: {claimName: ''}}}]",
                ""
            ))
            .as_deref(),
            Some("InvalidModelSource")
        );
        assert_eq!(
            reason(&trd(ok, "  gateway: {apiKeySecretRef: {name: ''}}\n")).as_deref(),
            Some("InvalidSecretRef")
        );
        for reserved in ["group", "gateway"] {
            let models = format!("[{{name: {reserved}, entry: true, source: {{imagePath: /m}}}}]");
            let p = check(&trd(&models, "")).unwrap();
            assert_eq!(p.0, "ReservedModelName");
            assert!(p.1.contains(&format!("NAME-{reserved}")), "{}", p.1);
        }
        let mps = "  nodePool: {mps: {enabled: true}}\n";
        let p = check(&trd(ok, mps)).unwrap();
        assert_eq!(p.0, "MpsWithoutGpuRequest");
        assert!(p.1.contains("model a"), "{}", p.1);
        let gpu = "[{name: a, entry: true, source: {imagePath: /m}, resources: {limits: {nvidia.com/gpu: 1}}}]";
        assert_eq!(reason(&trd(gpu, mps)), None);
        let shared = "[{name: a, entry: true, source: {imagePath: /m}, resources: {limits: {nvidia.com/gpu.shared: 1}}}]";
        assert_eq!(reason(&trd(shared, mps)), None);
        let two = "[{name: a, entry: true, source: {imagePath: /m}, resources: {limits: {nvidia.com/gpu: 2}}}]";
        let p = check(&trd(two, mps)).unwrap();
        assert_eq!(p.0, "MpsMoreThanOneGpu");
        assert!(p.1.contains("model a"), "{}", p.1);
        // Without MPS a pod may take several whole GPUs.
        assert_eq!(reason(&trd(two, "")), None);
    }
}
