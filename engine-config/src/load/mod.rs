//! From YAML text to a validated `EngineConfig`: syntax, then shape (serde,
//! unknown keys rejected with their path), then meaning (defaults, ranges,
//! references between keys). Every error names the key it concerns.
//!
//! `mod.rs` holds the passes and the group-level rules; each section of the
//! file is built in its own module (`model`, `sections`, `policy`), and
//! `entry` holds the public loaders on `EngineConfig`.

mod entry;
#[cfg(test)]
mod generation_tests;
mod model;
#[cfg(test)]
mod official_tests;
mod policy;
mod sections;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde_yaml::Value;

pub use entry::{DEFAULT_CONFIG_YAML, EMBEDDED_GROUPS_YAML, FAST_CONFIG_YAML};

use super::backend::Backend;
use super::engine_config::{EngineConfig, SimGroupConfig};
use super::env_expand::expand_env;
use super::error::{ConfigError, Location};
use super::execution_mode::ExecutionMode;
use super::generation::GenerationDefaults;
use super::placement::DeviceSpec;
use super::raw::{describe, RawConfig};
use super::transport::TransportConfig;
use model::{build_model, check_tp_size, ModelDefaults, OfficialKeys};
use sections::{build_gateway, build_generation, build_system, build_transport};

/// Environment lookup for `${NAME}` in path values (and `HF_HOME` & co.).
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Default `max_batch_wait_ms`.
const DEFAULT_MAX_BATCH_WAIT_MS: f64 = 50.0;

/// Parses and validates `text`; relative paths resolve against `base_dir`.
pub(super) fn parse(text: &str, base_dir: &Path, env: Env) -> Result<EngineConfig, ConfigError> {
    // Pass 1: syntax (also rejects repeated keys and multiple documents).
    let value: Value = serde_yaml::from_str(text).map_err(syntax_error)?;
    match &value {
        Value::Mapping(_) => {}
        Value::Null => {
            return Err(ConfigError::invalid(
                "model",
                "required (the config is empty)",
            ))
        }
        other => {
            return Err(ConfigError::invalid(
                "(root)",
                format!(
                    "the config must be a map of keys (model, system, ...), got {}",
                    describe(other)
                ),
            ))
        }
    }
    // Pass 2: shape, tracking the path of every key.
    let raw: RawConfig = serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text))
        .map_err(schema_error)?;
    // Pass 3: meaning.
    let base_dir = std::path::absolute(base_dir).map_err(|source| ConfigError::Io {
        path: base_dir.to_path_buf(),
        source,
    })?;
    build(raw, base_dir, env)
}

fn syntax_error(e: serde_yaml::Error) -> ConfigError {
    let location = e.location().map(|l| Location {
        line: l.line(),
        column: l.column(),
    });
    let mut message = e.to_string();
    if let Some(l) = location {
        // The location is reported separately; drop its first mention.
        message = message.replacen(&format!(" at line {} column {}", l.line, l.column), "", 1);
    }
    ConfigError::Syntax { message, location }
}

fn schema_error(e: serde_path_to_error::Error<serde_yaml::Error>) -> ConfigError {
    let key = e.path().to_string();
    let inner = e.into_inner();
    let location = inner.location().map(|l| Location {
        line: l.line(),
        column: l.column(),
    });
    let mut message = inner.to_string();
    if let Some(l) = location {
        if let Some(rest) =
            message.strip_suffix(&format!(" at line {} column {}", l.line, l.column))
        {
            message = rest.to_string();
        }
    }
    // serde_yaml prefixes its own notion of the path (the key, or for an
    // unknown key its parent); ours is more precise, so drop theirs.
    let prefixes = key
        .char_indices()
        .filter(|&(_, c)| c == '.' || c == '[')
        .map(|(i, _)| &key[..i])
        .chain(std::iter::once(key.as_str()));
    if let Some(rest) = prefixes
        .filter(|p| !p.is_empty())
        .find_map(|p| message.strip_prefix(&format!("{p}: ")))
    {
        message = rest.to_string();
    }
    let key = if key == "." {
        "(root)".to_string()
    } else {
        key
    };
    ConfigError::Schema {
        key,
        message,
        location,
    }
}

fn build(raw: RawConfig, base_dir: PathBuf, env: Env) -> Result<EngineConfig, ConfigError> {
    let tp_size = check_tp_size(raw.tp_size, 1, "tp_size")?;
    let backend = raw.backend.unwrap_or(Backend::Tch);
    let device = raw.device.unwrap_or(DeviceSpec::Cpu);
    let dtype_setting = raw.dtype.unwrap_or_default();
    let dtype = dtype_setting.resolve(device);
    let raw_system = raw.system.unwrap_or_default();
    let (system, kv_budget) = build_system(&raw_system)?;

    let raw_models = raw.model.ok_or_else(|| {
        ConfigError::invalid("model", "required: a map of model name to settings")
    })?;
    if raw_models.0.is_empty() {
        return Err(ConfigError::invalid(
            "model",
            "must name at least one model",
        ));
    }
    let names: Vec<String> = raw_models.0.iter().map(|(name, _)| name.clone()).collect();
    let defaults = ModelDefaults {
        backend,
        device,
        dtype: dtype_setting,
        tp_size,
        kv_budget,
        block_size: system.block_size,
        base_dir: &base_dir,
        env,
    };
    let (models, official): (Vec<_>, Vec<OfficialKeys>) = raw_models
        .0
        .into_iter()
        .map(|(name, m)| build_model(name, m, &defaults))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();

    let entry = entry_index(raw_system.entry_model.as_deref(), &names)?;

    let policy = policy::build_policy(
        raw.scheduler_class,
        raw.scheduler_kwargs,
        &official,
        &names,
        entry,
        env,
    )?;
    let thresholds =
        policy::build_thresholds(raw.delayed_batching_threshold.as_ref(), &official, &names)?;

    let max_batch_wait_ms = raw.max_batch_wait_ms.unwrap_or(DEFAULT_MAX_BATCH_WAIT_MS);
    check_wait_and_share(max_batch_wait_ms, raw.target_large_share)?;
    let execution_mode = raw.execution_mode.unwrap_or(ExecutionMode::AsyncDelayed);
    let transport = build_transport(raw.transport, &names, env)?;
    check_mode_fits_transport(execution_mode, &transport)?;
    // The official layout puts the API port on the entry model.
    let entry_port = models[entry].port;
    let generation_override = build_generation(raw.generation_config)?;
    // Each model's own defaults, read where its directory is local.
    let model_generation = models
        .iter()
        .map(|m| match &m.path {
            Some(dir) => GenerationDefaults::from_model_dir(dir),
            None => Ok(GenerationDefaults::default()),
        })
        .collect::<Result<Vec<_>, _>>()?;

    Ok(EngineConfig {
        transport,
        gateway: build_gateway(raw.gateway.unwrap_or_default(), entry_port, &base_dir, env)?,
        models,
        entry,
        system,
        policy,
        thresholds,
        backend,
        sim: SimGroupConfig {
            seed: raw.sim.and_then(|s| s.seed).unwrap_or(0),
        },
        device,
        dtype,
        execution_mode,
        max_batch_wait_ms,
        fallback_on_peer_failure: raw.fallback_on_peer_failure.unwrap_or(false),
        target_large_share: raw.target_large_share,
        generation_override,
        model_generation,
        base_dir,
        source: None,
    })
}

/// The index of `system.entry_model` among the models.
fn entry_index(name: Option<&str>, names: &[String]) -> Result<usize, ConfigError> {
    let Some(name) = name else {
        return Err(ConfigError::invalid(
            "system.entry_model",
            format!(
                "required: the model that admits requests (models: {})",
                names.join(", ")
            ),
        ));
    };
    names.iter().position(|n| n == name).ok_or_else(|| {
        ConfigError::invalid(
            "system.entry_model",
            format!("\"{name}\" is not a model (models: {})", names.join(", ")),
        )
    })
}

/// `max_batch_wait_ms` is a finite positive wait; `target_large_share`, if
/// set, a share strictly between none and all.
fn check_wait_and_share(wait_ms: f64, share: Option<f64>) -> Result<(), ConfigError> {
    if !(wait_ms.is_finite() && wait_ms > 0.0) {
        return Err(ConfigError::invalid(
            "max_batch_wait_ms",
            format!("must be a finite number > 0 (got {wait_ms})"),
        ));
    }
    if let Some(share) = share {
        if !(share > 0.0 && share < 1.0) {
            return Err(ConfigError::invalid(
                "target_large_share",
                format!("must be in (0, 1) (got {share})"),
            ));
        }
    }
    Ok(())
}

/// Serial and lockstep steps need a lock or barrier shared in one process;
/// over TCP they would silently run async, so they are refused.
fn check_mode_fits_transport(
    mode: ExecutionMode,
    transport: &TransportConfig,
) -> Result<(), ConfigError> {
    match (mode, transport) {
        (ExecutionMode::Serial | ExecutionMode::Lockstep, TransportConfig::Tcp(_)) => {
            Err(ConfigError::invalid(
                "execution_mode",
                format!(
                    "`{mode}` needs every model in one process (transport inproc); \
                     over transport tcp use `async_delayed` or `async`"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// `value`, or `default`, when it is > 0.
fn positive(value: Option<usize>, default: usize, key: &str) -> Result<usize, ConfigError> {
    match value.unwrap_or(default) {
        0 => Err(ConfigError::invalid(key, "must be > 0 (got 0)")),
        v => Ok(v),
    }
}

/// Expands `${NAME}` and resolves a relative result against `base_dir`.
fn resolve_path(text: &str, base_dir: &Path, env: Env, key: &str) -> Result<PathBuf, ConfigError> {
    let expanded = expand_env(text, env).map_err(|m| ConfigError::invalid(key, m))?;
    if expanded.trim().is_empty() {
        return Err(ConfigError::invalid(key, "must not be empty"));
    }
    Ok(base_dir.join(expanded))
}
