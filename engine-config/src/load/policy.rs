//! The group's routing policy and delayed-batching table, from our
//! top-level keys or from the official per-model ones.
//!
//! The official layout names a class per model (`r2r_slm` on the small,
//! entry model; `r2r_llm` on the large one) and puts the policy's arguments
//! (`scheduler_kwargs`) and the delayed-batching list on the model they
//! concern. We run one policy per group, so the classes must name the same
//! policy, the `*_slm` class must sit on the entry model, and the per-model
//! arguments are merged (a key given twice with different values is an
//! error). Official argument names are translated here.

use serde_yaml::Value;

use super::model::OfficialKeys;
use super::Env;
use crate::env_expand::expand_env;
use crate::error::ConfigError;
use crate::policy::{ClassRole, PolicyKind, PolicyName, PolicySpec};
use crate::threshold::{parse_model_list, parse_thresholds, ThresholdTable};

type Kwargs = serde_json::Map<String, serde_json::Value>;

/// The group's policy from the top-level `scheduler_class` or the per-model ones.
pub(super) fn build_policy(
    top_class: Option<String>,
    top_kwargs: Option<serde_json::Value>,
    official: &[OfficialKeys],
    names: &[String],
    entry: usize,
    env: Env,
) -> Result<PolicySpec, ConfigError> {
    let mut kwargs = kwargs_map(top_kwargs, "scheduler_kwargs")?;
    let per_model = official.iter().any(|o| o.class.is_some());
    let kind = match (top_class, per_model) {
        (Some(_), true) => {
            let i = official.iter().position(|o| o.class.is_some()).unwrap_or(0);
            return Err(ConfigError::invalid(
                format!("model.{}.scheduler_class", names[i]),
                "scheduler_class is also set at the top level; set it in one place",
            ));
        }
        (Some(class), false) => parse_class(&class, "scheduler_class")?.0,
        (None, true) => per_model_kind(official, names, entry)?,
        (None, false) => {
            return Err(ConfigError::invalid(
                "scheduler_class",
                format!(
                    "required, at the top level or on every model (built-in: {})",
                    PolicyKind::known()
                ),
            ))
        }
    };
    for (o, name) in official.iter().zip(names) {
        let key = format!("model.{name}.scheduler_kwargs");
        for (k, v) in kwargs_map(o.kwargs.clone(), &key)? {
            match kwargs.get(&k) {
                Some(old) if *old != v => {
                    return Err(ConfigError::invalid(
                        format!("{key}.{k}"),
                        format!("{v} conflicts with {old} given for another model; the group runs one policy"),
                    ))
                }
                _ => {
                    kwargs.insert(k, v);
                }
            }
        }
    }
    translate_official_kwargs(kind, &mut kwargs)?;
    expand_path_kwargs(&mut kwargs, env)?;
    Ok(PolicySpec {
        name: PolicyName::from(kind),
        kwargs,
    })
}

/// `${NAME}` / `${NAME:-fallback}` in a path argument (`router_path`, any
/// key ending in `_path`), as in the models' paths: one file then serves
/// whichever cache Make or the deployment sets. Relative results still
/// resolve against the config's folder when the policy opens them.
fn expand_path_kwargs(kwargs: &mut Kwargs, env: Env) -> Result<(), ConfigError> {
    for (k, v) in kwargs.iter_mut() {
        if let (true, serde_json::Value::String(text)) = (k.ends_with("_path"), &*v) {
            let expanded = expand_env(text, env)
                .map_err(|m| ConfigError::invalid(format!("scheduler_kwargs.{k}"), m))?;
            *v = serde_json::Value::String(expanded);
        }
    }
    Ok(())
}

fn parse_class(class: &str, key: &str) -> Result<(PolicyKind, ClassRole), ConfigError> {
    PolicyKind::from_class(class).ok_or_else(|| {
        ConfigError::invalid(
            key,
            format!(
                "unknown scheduler_class \"{class}\" (built-in: {}; official per-model classes \
                 add _slm / _llm to r2r, citer, collm, rstitch, me, glimprouter, query_level, random)",
                PolicyKind::known()
            ),
        )
    })
}

/// Every model names a class; they name one policy; roles fit the entry.
fn per_model_kind(
    official: &[OfficialKeys],
    names: &[String],
    entry: usize,
) -> Result<PolicyKind, ConfigError> {
    let mut kind: Option<(PolicyKind, &str)> = None;
    for (i, (o, name)) in official.iter().zip(names).enumerate() {
        let key = format!("model.{name}.scheduler_class");
        let Some(class) = o.class.as_deref() else {
            return Err(ConfigError::invalid(
                key,
                "required: the other models name their scheduler_class",
            ));
        };
        let (k, role) = parse_class(class, &key)?;
        match role {
            ClassRole::Small if i != entry => {
                return Err(ConfigError::invalid(
                    key,
                    format!(
                        "\"{class}\" is the small (entry) model's class, but system.entry_model is \"{}\"",
                        names[entry]
                    ),
                ))
            }
            ClassRole::Large if i == entry => {
                return Err(ConfigError::invalid(
                    key,
                    format!("\"{class}\" is a large model's class, but \"{name}\" is system.entry_model"),
                ))
            }
            _ => {}
        }
        match kind {
            Some((first, first_name)) if first != k => {
                return Err(ConfigError::invalid(
                    key,
                    format!(
                        "\"{class}\" is {}, but model \"{first_name}\" runs {}; a group runs one policy",
                        k.name(),
                        first.name()
                    ),
                ))
            }
            Some(_) => {}
            None => kind = Some((k, name)),
        }
    }
    kind.map(|(k, _)| k)
        .ok_or_else(|| ConfigError::invalid("model", "must name at least one model"))
}

fn kwargs_map(value: Option<serde_json::Value>, key: &str) -> Result<Kwargs, ConfigError> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(Kwargs::new()),
        Some(serde_json::Value::Object(map)) => Ok(map),
        Some(other) => Err(ConfigError::invalid(
            key,
            format!("must be a map of argument name to value (got {other})"),
        )),
    }
}

/// The official argument names of the router policies: `model_path` is the
/// router checkpoint (our `router_path`) and `switching_strategy` picks how
/// R2R decides (we implement `neural`, the trained router).
fn translate_official_kwargs(kind: PolicyKind, kwargs: &mut Kwargs) -> Result<(), ConfigError> {
    if !matches!(kind, PolicyKind::R2r | PolicyKind::Citer) {
        return Ok(());
    }
    if let Some(path) = kwargs.remove("model_path") {
        if kwargs.contains_key("router_path") {
            return Err(ConfigError::invalid(
                "scheduler_kwargs.model_path",
                "`model_path` (official) and `router_path` name the same router; set one",
            ));
        }
        kwargs.insert("router_path".into(), path);
    }
    if let Some(strategy) = kwargs.remove("switching_strategy") {
        if kind != PolicyKind::R2r || strategy.as_str() != Some("neural") {
            return Err(ConfigError::unsupported(
                "scheduler_kwargs.switching_strategy",
                format!(
                    "{strategy} is not implemented; {} routes with its trained router (`neural`)",
                    kind.name()
                ),
            ));
        }
    }
    Ok(())
}

/// The delayed-batching table: the top-level key (any of its forms) or the
/// official per-model lists (models without one never wait).
pub(super) fn build_thresholds(
    top: Option<&Value>,
    official: &[OfficialKeys],
    names: &[String],
) -> Result<ThresholdTable, ConfigError> {
    let given: Vec<_> = official
        .iter()
        .zip(names)
        .filter_map(|(o, n)| o.thresholds.as_ref().map(|v| (n, v)))
        .collect();
    if given.is_empty() {
        return parse_thresholds(top, names, "delayed_batching_threshold");
    }
    if top.is_some_and(|v| !v.is_null()) {
        return Err(ConfigError::invalid(
            format!("model.{}.delayed_batching_threshold", given[0].0),
            "delayed_batching_threshold is also set at the top level; set it in one place",
        ));
    }
    let per_model = official
        .iter()
        .zip(names)
        .map(|(o, n)| match &o.thresholds {
            None | Some(Value::Null) => Ok(vec![1]),
            Some(v) => parse_model_list(v, &format!("model.{n}.delayed_batching_threshold")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    ThresholdTable::from_per_model(per_model)
        .map_err(|e| ConfigError::invalid("delayed_batching_threshold", e.to_string()))
}
