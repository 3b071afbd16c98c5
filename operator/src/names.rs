//! Names and labels of the objects one `TokenRouterDeployment` owns. Every
//! builder and the cleanup take them from here, so they always agree.

use std::collections::BTreeMap;

use crds::v1alpha1::Placement;
use crds::TokenRouterDeployment;
use kube::ResourceExt;

/// The field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "tokenrouter-operator";
/// The finalizer that removes owned objects before the resource goes.
pub const FINALIZER: &str = "tokenrouter.io/cleanup";

/// `app.kubernetes.io/instance`: the resource's name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/component`: `model`, `group` or `gateway`.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// The model a pod serves (`podPerModel`).
pub const MODEL: &str = "tokenrouter.io/model";
/// Kubernetes sets this on every StatefulSet pod (1.28+): the ordinal = group.
pub const POD_INDEX: &str = "apps.kubernetes.io/pod-index";
/// Pod annotation: hash of the rendered config, so edits roll the pods.
pub const CONFIG_HASH: &str = "tokenrouter.io/config-hash";
/// StatefulSet annotation: hash of the pod template last applied (the
/// group-by-group roll starts when it changes).
pub const TEMPLATE_HASH: &str = "tokenrouter.io/template-hash";

/// Env var holding the pod's group (its StatefulSet ordinal).
pub const GROUP_ENV: &str = "TOKENROUTER_GROUP";
/// Env var holding the admin bearer token (from [`admin_secret`]).
pub const ADMIN_TOKEN_ENV: &str = "TOKENROUTER_ADMIN_TOKEN";
/// Env var holding the gateway's accepted API keys.
pub const API_KEYS_ENV: &str = "TOKENROUTER_API_KEYS";
/// Key of the admin token in [`admin_secret`].
pub const ADMIN_TOKEN_KEY: &str = "token";

/// Where the engine ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/tokenrouter";
/// Where the groups ConfigMap is mounted in the gateway.
pub const GROUPS_DIR: &str = "/etc/tokenrouter-groups";
/// The groups file's key in [`groups_config`].
pub const GROUPS_KEY: &str = "groups";
/// Key of the whole group's config in [`engine_config`].
pub const GROUP_CONFIG_KEY: &str = "engine.yaml";

/// Name of the resource (all objects derive from it).
pub fn instance(trd: &TokenRouterDeployment) -> String {
    trd.name_any()
}

/// StatefulSet and headless Service of one model (`podPerModel`).
pub fn model_set(trd: &TokenRouterDeployment, model: &str) -> String {
    format!("{}-{model}", instance(trd))
}

/// Model names that would give a model's StatefulSet or Service the name
/// of another object: `NAME-group` (the `podPerGroup` set) and
/// `NAME-gateway` (the gateway's Service). The CRD's CEL rule refuses them too.
pub const RESERVED_MODEL_NAMES: [&str; 2] = ["group", "gateway"];

/// StatefulSet and headless Service of whole groups (`podPerGroup`).
pub fn group_set(trd: &TokenRouterDeployment) -> String {
    format!("{}-group", instance(trd))
}

/// The ConfigMap with the rendered engine config.
pub fn engine_config(trd: &TokenRouterDeployment) -> String {
    format!("{}-engine", instance(trd))
}

/// The ConfigMap with the gateway's group list.
pub fn groups_config(trd: &TokenRouterDeployment) -> String {
    format!("{}-groups", instance(trd))
}

/// Gateway Deployment and Service.
pub fn gateway(trd: &TokenRouterDeployment) -> String {
    format!("{}-gateway", instance(trd))
}

/// The Secret with the subservers' admin token.
pub fn admin_secret(trd: &TokenRouterDeployment) -> String {
    format!("{}-admin-token", instance(trd))
}

/// Key of one model's config in [`engine_config`] (`podPerModel`).
pub fn model_config_key(model: &str) -> String {
    format!("{model}.yaml")
}

/// Labels every owned object carries (and cleanup selects on).
pub fn common_labels(trd: &TokenRouterDeployment) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "tokenrouter".into()),
        (INSTANCE.into(), instance(trd)),
        ("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into()),
    ])
}

/// The selector of everything the resource owns.
pub fn owned_selector(trd: &TokenRouterDeployment) -> String {
    format!(
        "{INSTANCE}={},app.kubernetes.io/managed-by={FIELD_MANAGER}",
        instance(trd)
    )
}

/// Labels that select the pods of one component (and model).
pub fn selector_labels(
    trd: &TokenRouterDeployment,
    component: &str,
    model: Option<&str>,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (INSTANCE.into(), instance(trd)),
        (COMPONENT.into(), component.into()),
    ]);
    if let Some(model) = model {
        labels.insert(MODEL.into(), model.into());
    }
    labels
}

/// [`common_labels`] plus [`selector_labels`].
pub fn labels(
    trd: &TokenRouterDeployment,
    component: &str,
    model: Option<&str>,
) -> BTreeMap<String, String> {
    let mut labels = common_labels(trd);
    labels.extend(selector_labels(trd, component, model));
    labels
}

/// The model pods' selector as a string (the scale subresource's selector).
pub fn serving_pods_selector(trd: &TokenRouterDeployment, component: &str) -> String {
    format!("{INSTANCE}={},{COMPONENT}={component}", instance(trd))
}

/// The serving StatefulSets' names for the current spec (each with a
/// headless Service of the same name).
pub fn serving_sets(trd: &TokenRouterDeployment) -> Vec<String> {
    match trd.spec.placement {
        Placement::PodPerModel => trd
            .spec
            .models
            .iter()
            .map(|m| model_set(trd, &m.name))
            .collect(),
        Placement::PodPerGroup => vec![group_set(trd)],
    }
}
