//! One entry of `model:`: our keys and the official per-model ones
//! (`model_path`, `port`, `tp_size`, `scheduler_class`, `scheduler_kwargs`,
//! `delayed_batching_threshold`). Model paths may be Hugging Face ids,
//! resolved from the local cache.

use std::path::Path;

use serde_yaml::Value;

use super::{positive, resolve_path, Env};
use crate::backend::Backend;
use crate::dtype_choice::DTypeSetting;
use crate::env_expand::expand_env;
use crate::error::ConfigError;
use crate::hf_cache;
use crate::latency::{LatencyError, LatencyModel};
use crate::model::{ModelSpec, SimModel, DEFAULT_SIM_VOCAB_SIZE};
use crate::placement::DeviceSpec;
use crate::raw::{RawLatency, RawModel, RawSimModel};
use crate::system::{KvBudget, DEFAULT_MEM_FRACTION_CPU, DEFAULT_MEM_FRACTION_CUDA};

/// Group-level settings a model inherits.
pub(super) struct ModelDefaults<'a> {
    pub backend: Backend,
    pub device: DeviceSpec,
    pub dtype: DTypeSetting,
    pub tp_size: usize,
    pub kv_budget: Option<KvBudget>,
    /// `system.block_size` (a per-model token budget holds at least one block).
    pub block_size: usize,
    pub base_dir: &'a Path,
    pub env: Env<'a>,
}

/// The official per-model policy keys, read once every model is known
/// (they describe the group's policy, see `policy`).
#[derive(Debug, Default)]
pub(super) struct OfficialKeys {
    /// `model.<name>.scheduler_class`.
    pub class: Option<String>,
    /// `model.<name>.scheduler_kwargs`.
    pub kwargs: Option<serde_json::Value>,
    /// `model.<name>.delayed_batching_threshold`.
    pub thresholds: Option<Value>,
}

/// `tp_size` (or `default`): >= 1. Values > 1 are accepted; the model runs
/// on one device and start-up warns (see `service::build`).
pub(super) fn check_tp_size(
    tp_size: Option<usize>,
    default: usize,
    key: &str,
) -> Result<usize, ConfigError> {
    match tp_size.unwrap_or(default) {
        0 => Err(ConfigError::invalid(key, "must be >= 1 (got 0)")),
        n => Ok(n),
    }
}

/// The model's directory from `path` or the official `model_path` (a local
/// directory, or a Hugging Face id found in the local cache), and the id
/// when it came from the cache.
fn model_dir(
    raw: &RawModel,
    key: &str,
    defaults: &ModelDefaults,
) -> Result<Option<(std::path::PathBuf, Option<String>)>, ConfigError> {
    let (text, field) = match (&raw.path, &raw.model_path) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                format!("{key}.model_path"),
                "`path` and `model_path` name the same thing; set one",
            ))
        }
        (Some(p), None) => (p, "path"),
        (None, Some(p)) => (p, "model_path"),
        (None, None) => return Ok(None),
    };
    let field_key = format!("{key}.{field}");
    let expanded =
        expand_env(text, defaults.env).map_err(|m| ConfigError::invalid(&field_key, m))?;
    match hf_cache::resolve_model_dir(expanded.trim(), defaults.base_dir, defaults.env) {
        Ok(Some(dir)) if dir == defaults.base_dir.join(expanded.trim()) => Ok(Some((dir, None))),
        Ok(Some(dir)) => Ok(Some((dir, Some(expanded.trim().to_string())))),
        Ok(None) => Ok(Some((
            resolve_path(text, defaults.base_dir, defaults.env, &field_key)?,
            None,
        ))),
        Err(e) => Err(ConfigError::invalid(field_key, e.to_string())),
    }
}

pub(super) fn build_model(
    name: String,
    mut raw: RawModel,
    defaults: &ModelDefaults,
) -> Result<(ModelSpec, OfficialKeys), ConfigError> {
    let key = format!("model.{name}");
    if name.trim().is_empty() {
        return Err(ConfigError::invalid(
            "model",
            "model names must not be empty",
        ));
    }
    let tp_size = check_tp_size(raw.tp_size, defaults.tp_size, &format!("{key}.tp_size"))?;
    let dir = model_dir(&raw, &key, defaults)?;
    if defaults.backend == Backend::Tch && dir.is_none() {
        return Err(ConfigError::invalid(
            format!("{key}.model_path"),
            "required for backend tch (a Hugging Face model directory or id; `path` also works)",
        ));
    }
    let (path, hub_id) = match dir {
        Some((p, id)) => (Some(p), id),
        None => (None, None),
    };
    let sim = raw
        .sim
        .take()
        .map(|s| build_sim(s, &format!("{key}.sim")))
        .transpose()?;
    if defaults.backend == Backend::Sim && sim.is_none() {
        return Err(ConfigError::invalid(
            format!("{key}.sim"),
            "required for backend sim (at least `latency_ms`)",
        ));
    }
    let device = raw.device.unwrap_or(defaults.device);
    // The model's own budget wins over `system:`'s (a pod per model sizes
    // each model's pool to its own pod).
    let own = super::sections::kv_budget(
        raw.mem_fraction_static,
        raw.kv_cache_tokens,
        defaults.block_size,
        &key,
    )?;
    let kv_budget = own
        .or(defaults.kv_budget)
        .unwrap_or(KvBudget::Fraction(if device.is_cuda() {
            DEFAULT_MEM_FRACTION_CUDA
        } else {
            DEFAULT_MEM_FRACTION_CPU
        }));
    let spec = ModelSpec {
        name,
        path,
        hub_id,
        device,
        dtype: raw.dtype.unwrap_or(defaults.dtype).resolve(device),
        dtype_auto: raw.dtype.unwrap_or(defaults.dtype) == DTypeSetting::Auto,
        tp_size,
        port: raw.port,
        kv_budget,
        sim,
    };
    let official = OfficialKeys {
        class: raw.scheduler_class,
        kwargs: raw.scheduler_kwargs,
        thresholds: raw.delayed_batching_threshold,
    };
    Ok((spec, official))
}

fn build_sim(raw: RawSimModel, key: &str) -> Result<SimModel, ConfigError> {
    let latency_key = format!("{key}.latency_ms");
    let latency = raw.latency_ms.ok_or_else(|| {
        ConfigError::invalid(
            &latency_key,
            "required: {base, per_seq, per_token} or {table}",
        )
    })?;
    Ok(SimModel {
        latency_ms: build_latency(latency, &latency_key)?,
        vocab_size: positive(
            raw.vocab_size,
            DEFAULT_SIM_VOCAB_SIZE,
            &format!("{key}.vocab_size"),
        )?,
        logits: raw.logits.unwrap_or(false),
    })
}

fn build_latency(raw: RawLatency, key: &str) -> Result<LatencyModel, ConfigError> {
    let linear_given = raw.base.is_some()
        || raw.per_seq.is_some()
        || raw.per_token.is_some()
        || raw.per_context.is_some();
    let result = match (raw.table, linear_given) {
        (Some(_), true) => {
            return Err(ConfigError::invalid(
                format!("{key}.table"),
                "cannot be combined with `base`, `per_seq`, `per_token` or `per_context`",
            ))
        }
        (Some(table), false) => LatencyModel::table(table),
        (None, _) => {
            let base = raw.base.ok_or_else(|| {
                ConfigError::invalid(
                    key,
                    "needs `base` (with optional `per_seq`, `per_token`, `per_context`) or `table`",
                )
            })?;
            LatencyModel::linear(
                base,
                raw.per_seq.unwrap_or(0.0),
                raw.per_token.unwrap_or(0.0),
            )
            .and_then(|m| m.with_per_context(raw.per_context.unwrap_or(0.0)))
        }
    };
    result.map_err(|e| match e {
        LatencyError::BadMs { field, value } => ConfigError::invalid(
            format!("{key}.{field}"),
            format!("must be a finite number >= 0 (got {value})"),
        ),
        LatencyError::ContextOnTable => ConfigError::invalid(
            format!("{key}.per_context"),
            "cannot be combined with `table`",
        ),
        LatencyError::EmptyTable => ConfigError::invalid(
            format!("{key}.table"),
            "must have at least one [batch, ms] row",
        ),
        LatencyError::Unordered {
            index,
            batch,
            previous,
        } => ConfigError::invalid(
            format!("{key}.table[{index}]"),
            format!(
                "batch sizes must be >= 1 and strictly increasing (got {batch} after {previous})"
            ),
        ),
    })
}
