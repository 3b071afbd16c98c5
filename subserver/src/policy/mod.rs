//! Routing policies and the registry that maps config names to them. Each
//! policy is only its `route` predicate (plus what it reads); the scheduler
//! is the same for all of them.

pub mod citer;
pub mod collm;
pub mod draw;
pub mod ensemble;
pub mod glimp;
pub mod handover;
pub mod live_threshold;
pub mod query_level;
pub mod r2r;
pub mod random;
pub mod router;
pub mod rstitch;
pub mod signals;
pub mod single;
pub mod step_delimiter;

use std::path::PathBuf;

use crate::peer::message::ModelIdx;
use crate::tokenizer::TextTokenizer;

use crate::routing::RoutingPolicy;
pub use live_threshold::{LiveThreshold, ShareDirection, ThresholdKnob};

/// Policy construction errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// No policy has that name.
    #[error("unknown scheduler_class `{0}` (known: {known})", known = KNOWN.join(", "))]
    Unknown(String),
    /// A kwarg is missing, of the wrong type, or out of range.
    #[error("scheduler_kwargs.{key}: {reason}")]
    BadKwarg {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The policy needs a different number of models.
    #[error("{policy} needs {needed} models, the group has {got}")]
    ModelCount {
        /// Policy name.
        policy: &'static str,
        /// What it needs.
        needed: &'static str,
        /// What the group has.
        got: usize,
    },
}

impl PolicyError {
    /// Stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Unknown(_) => "unknown_policy",
            Self::BadKwarg { .. } => "bad_kwarg",
            Self::ModelCount { .. } => "model_count",
        }
    }
}

const KNOWN: &[&str] = &[
    "R2R",
    "CITER",
    "CoLLM",
    "Random",
    "RStitch",
    "ME",
    "GlimpRouter",
    "QueryLevel",
    "Single",
];

/// Where a policy instance runs.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    /// This model.
    pub model: ModelIdx,
    /// Models in the group.
    pub num_models: usize,
    /// The entry (home) model.
    pub entry: ModelIdx,
}

/// What a policy may need besides its kwargs: where relative paths in the
/// kwargs resolve, the device its own weights go to, the model's tokenizer
/// (text-aware policies) and the group's live threshold cell.
#[derive(Clone)]
pub struct PolicyEnv {
    /// Directory relative kwarg paths (router checkpoints) resolve against.
    pub base_dir: PathBuf,
    /// Device of the model the policy reads (router weights go there).
    pub device: tch::Device,
    /// The model's tokenizer, when it has one.
    pub tokenizer: Option<TextTokenizer>,
    /// The group-wide threshold cell; `None` gives each instance its own.
    pub threshold: Option<LiveThreshold>,
}

impl Default for PolicyEnv {
    fn default() -> Self {
        Self {
            base_dir: PathBuf::from("."),
            device: tch::Device::Cpu,
            tokenizer: None,
            threshold: None,
        }
    }
}

impl PolicyEnv {
    /// The live threshold: the group's cell set to `initial`, or a new one.
    /// Every member sets the same configured value, so the order they are
    /// built in does not matter.
    pub fn live_threshold(&self, initial: f64) -> LiveThreshold {
        match &self.threshold {
            Some(cell) => {
                cell.set(initial);
                cell.clone()
            }
            None => LiveThreshold::new(initial),
        }
    }

    /// `path` as given, or joined to `base_dir` when relative.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = PathBuf::from(path);
        if p.is_absolute() {
            p
        } else {
            self.base_dir.join(p)
        }
    }
}

/// Reads an optional f64 kwarg.
pub fn kwarg_f64(kwargs: &serde_json::Value, key: &str) -> Result<Option<f64>, PolicyError> {
    match kwargs.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| PolicyError::BadKwarg {
            key: key.into(),
            reason: format!("expected a number, got {v}"),
        }),
    }
}

/// Reads an optional `key` in [0, 1] (a probability or a normalized
/// entropy); `what` names it in the error.
pub fn kwarg_unit(
    kwargs: &serde_json::Value,
    key: &str,
    what: &str,
) -> Result<Option<f64>, PolicyError> {
    let t = kwarg_f64(kwargs, key)?;
    match t {
        Some(t) if !(0.0..=1.0).contains(&t) => Err(PolicyError::BadKwarg {
            key: key.into(),
            reason: format!("{what} must be in [0, 1], got {t}"),
        }),
        _ => Ok(t),
    }
}

/// Reads an optional u64 kwarg.
pub fn kwarg_u64(kwargs: &serde_json::Value, key: &str) -> Result<Option<u64>, PolicyError> {
    match kwargs.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| PolicyError::BadKwarg {
            key: key.into(),
            reason: format!("expected a non-negative integer, got {v}"),
        }),
    }
}

/// Builds the policy instance for one model of a group, with a default
/// environment (paths relative to the working directory, CPU, no tokenizer).
pub fn build(
    name: &str,
    kwargs: &serde_json::Value,
    at: Placement,
) -> Result<Box<dyn RoutingPolicy>, PolicyError> {
    build_in(name, kwargs, at, &PolicyEnv::default())
}

/// Builds the policy instance for one model of a group in `env`.
pub fn build_in(
    name: &str,
    kwargs: &serde_json::Value,
    at: Placement,
    env: &PolicyEnv,
) -> Result<Box<dyn RoutingPolicy>, PolicyError> {
    match name {
        "Random" | "random" | "Bernoulli" | "bernoulli" => Ok(Box::new(
            random::RandomPolicy::from_kwargs(kwargs, at, env)?,
        )),
        "RStitch" | "r_stitch" | "R-Stitch" => Ok(Box::new(rstitch::RStitchPolicy::from_kwargs(
            kwargs, at, env,
        )?)),
        "ME" | "me" => Ok(Box::new(ensemble::EnsemblePolicy::from_kwargs(kwargs, at)?)),
        "GlimpRouter" | "glimprouter" | "glimp_router" | "glimp-router" => Ok(Box::new(
            glimp::GlimpRouterPolicy::from_kwargs(kwargs, at, env)?,
        )),
        "QueryLevel" | "query_level" | "query-level" | "querylevel" => Ok(Box::new(
            query_level::QueryLevelPolicy::from_kwargs(kwargs, at, env)?,
        )),
        "R2R" | "r2r" => Ok(Box::new(r2r::R2rPolicy::from_kwargs(kwargs, at, env)?)),
        "CITER" | "citer" => Ok(Box::new(citer::CiterPolicy::from_kwargs(kwargs, at, env)?)),
        "CoLLM" | "co_llm" | "co-llm" | "collm" => {
            Ok(Box::new(collm::CoLlmPolicy::from_kwargs(kwargs, at, env)?))
        }
        "Single" | "single" | "none" => Ok(Box::new(single::SinglePolicy)),
        other => Err(PolicyError::Unknown(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_and_bad_kwargs_are_precise() {
        let at = Placement {
            model: 0,
            num_models: 2,
            entry: 0,
        };
        let e = build("Nope", &serde_json::json!({}), at).err().unwrap();
        assert!(e.to_string().contains("Nope") && e.to_string().contains("Random"));
        let e = build("Random", &serde_json::json!({"probability": "high"}), at)
            .err()
            .unwrap();
        assert!(e.to_string().contains("scheduler_kwargs.probability"));
        let e = build("Random", &serde_json::json!({"probability": 1.5}), at)
            .err()
            .unwrap();
        assert!(e.to_string().contains("[0, 1]"));
    }
}
