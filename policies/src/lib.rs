//! Routing policies behind one trait: the routing seam ([`routing`]:
//! `RoutingPolicy`, the `StepView` a policy reads, the `Dest` it returns,
//! the steerable threshold and per-step signal failures), one file per
//! policy, the factory that maps config names to them ([`build_in`]), the
//! router checkpoints ([`router`]: the pickle reader, R2R and CITER nets),
//! and the routing signals of a step's logits ([`signals`], over
//! [`HostLogits`]). Each policy is only its `route` predicate (plus what it
//! reads); the scheduler is the same for all of them.
//!
//! It sees the engine only through the routing seam: it must not depend on
//! `subserver` (scheduler, KV cache, runner, service), which depends on it.
//! Below it sit `protocol`, `textio`, `engine-config`, `kernels` and
//! `model-files`.

pub mod citer;
pub mod collm;
pub mod draw;
pub mod ensemble;
pub mod glimp;
pub mod handover;
pub mod host_logits;
pub mod live_threshold;
pub mod query_level;
pub mod r2r;
pub mod random;
pub mod router;
pub mod routing;
pub mod rstitch;
/// Per-step signal failures (they live with the routing seam, which reports them).
pub use crate::routing::signal_health;
pub mod signals;
pub mod single;
pub mod step_delimiter;

use std::path::PathBuf;

use engine_config::{PolicyKind, PolicyName};
use protocol::ids::ModelIdx;
use textio::TextTokenizer;

use crate::routing::RoutingPolicy;
pub use host_logits::HostLogits;
pub use live_threshold::{LiveThreshold, ShareDirection, ThresholdKnob};

/// Policy construction errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// No policy has that name.
    #[error("unknown scheduler_class `{0}` (known: {known})", known = PolicyKind::known())]
    Unknown(String),
    /// A kwarg is missing, of the wrong type, or out of range.
    #[error("scheduler_kwargs.{key}: {reason}")]
    BadKwarg {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The model cannot give what the policy reads on every step.
    #[error("{policy} cannot run here: {reason}")]
    Unusable {
        /// Policy name.
        policy: &'static str,
        /// What is missing or does not fit.
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
            Self::Unusable { .. } => "unusable",
        }
    }
}

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

impl Placement {
    /// Model `i` of the group `cfg` configures.
    pub fn member(cfg: &engine_config::EngineConfig, i: usize) -> Self {
        Placement {
            model: i as ModelIdx,
            num_models: cfg.models().len(),
            entry: cfg.entry_index() as ModelIdx,
        }
    }
}

/// What the model a policy instance reads gives it after each step, so a
/// policy can refuse at start-up what would fail on every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFacts {
    /// Width of the final hidden state, when the backend gives hidden states.
    pub hidden_size: Option<usize>,
    /// Width of the token embeddings, when the backend gives them.
    pub embed_size: Option<usize>,
    /// Columns of the logits, when the backend gives logits.
    pub logits_width: Option<usize>,
}

impl ModelFacts {
    /// A `PolicyError::Unusable` unless the backend gives logits.
    pub fn need_logits(facts: Option<Self>, policy: &'static str) -> Result<(), PolicyError> {
        match facts {
            Some(f) if f.logits_width.is_none() => Err(PolicyError::Unusable {
                policy,
                reason: "it reads the logits and this model's backend gives none (for the sim \
                         backend set `sim.logits: true`)"
                    .into(),
            }),
            _ => Ok(()),
        }
    }
}

/// What a policy may need besides its kwargs: where relative paths in the
/// kwargs resolve, the device its own weights go to, the model's tokenizer
/// (text-aware policies), the group's live threshold cell and what the
/// model's steps give the policy.
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
    /// What the model's steps give (`None`: unknown, nothing is checked).
    pub model: Option<ModelFacts>,
}

impl Default for PolicyEnv {
    fn default() -> Self {
        Self {
            base_dir: PathBuf::from("."),
            device: tch::Device::Cpu,
            tokenizer: None,
            threshold: None,
            model: None,
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

    /// A checkpoint path: a local file or directory (relative to
    /// `base_dir`), else a Hugging Face `ORG/REPO/FILE` found in the local
    /// cache (`HF_HUB_CACHE` / `HF_HOME` / `~/.cache/huggingface/hub`).
    /// The error names every path tried.
    pub fn resolve_checkpoint(&self, path: &str) -> Result<PathBuf, String> {
        let env = |name: &str| std::env::var(name).ok();
        match engine_config::hf_cache::resolve_file(path, &self.base_dir, &env) {
            Ok(Some(p)) => Ok(p),
            Ok(None) => Ok(self.resolve(path)),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Reads an optional kwarg with `read`; `expected` names the type in the error.
fn kwarg<T>(
    kwargs: &serde_json::Value,
    key: &str,
    expected: &str,
    read: impl Fn(&serde_json::Value) -> Option<T>,
) -> Result<Option<T>, PolicyError> {
    match kwargs.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => read(v).map(Some).ok_or_else(|| PolicyError::BadKwarg {
            key: key.into(),
            reason: format!("expected {expected}, got {v}"),
        }),
    }
}

/// Reads an optional f64 kwarg.
pub fn kwarg_f64(kwargs: &serde_json::Value, key: &str) -> Result<Option<f64>, PolicyError> {
    kwarg(kwargs, key, "a number", serde_json::Value::as_f64)
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
    kwarg(
        kwargs,
        key,
        "a non-negative integer",
        serde_json::Value::as_u64,
    )
}

/// Reads an optional boolean kwarg.
pub fn kwarg_bool(kwargs: &serde_json::Value, key: &str) -> Result<Option<bool>, PolicyError> {
    kwarg(kwargs, key, "true or false", serde_json::Value::as_bool)
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

/// Builds the policy instance for one model of a group in `env`; `name` is
/// any spelling the registry (`config::PolicyKind`) knows.
pub fn build_in(
    name: &str,
    kwargs: &serde_json::Value,
    at: Placement,
    env: &PolicyEnv,
) -> Result<Box<dyn RoutingPolicy>, PolicyError> {
    let kind = PolicyName::parse(name)
        .ok_or_else(|| PolicyError::Unknown(name.to_string()))?
        .kind();
    build_kind(kind, kwargs, at, env)
}

/// Builds `kind`: the one place a registry entry becomes a policy (the
/// match is exhaustive, so a new `PolicyKind` cannot be left unbuilt).
pub fn build_kind(
    kind: PolicyKind,
    kwargs: &serde_json::Value,
    at: Placement,
    env: &PolicyEnv,
) -> Result<Box<dyn RoutingPolicy>, PolicyError> {
    Ok(match kind {
        PolicyKind::Random => Box::new(random::RandomPolicy::from_kwargs(kwargs, at, env)?),
        PolicyKind::RStitch => Box::new(rstitch::RStitchPolicy::from_kwargs(kwargs, at, env)?),
        PolicyKind::Me => Box::new(ensemble::EnsemblePolicy::from_kwargs(kwargs, at)?),
        PolicyKind::GlimpRouter => {
            Box::new(glimp::GlimpRouterPolicy::from_kwargs(kwargs, at, env)?)
        }
        PolicyKind::QueryLevel => {
            Box::new(query_level::QueryLevelPolicy::from_kwargs(kwargs, at, env)?)
        }
        PolicyKind::R2r => Box::new(r2r::R2rPolicy::from_kwargs(kwargs, at, env)?),
        PolicyKind::Citer => Box::new(citer::CiterPolicy::from_kwargs(kwargs, at, env)?),
        PolicyKind::CoLlm => Box::new(collm::CoLlmPolicy::from_kwargs(kwargs, at, env)?),
        PolicyKind::Single => Box::new(single::SinglePolicy),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name and alias in the registry builds, on the model its role
    /// puts it on (router policies on the large side, where no checkpoint
    /// is read; the router side is covered by the router tests).
    #[test]
    fn every_registered_spelling_builds() {
        // GlimpRouter finds step ends in text: it needs a real tokenizer.
        let tokenizer =
            TextTokenizer::from_dir(textio::test_assets::qwen3_tokenizer_dir()).unwrap();
        let env = PolicyEnv {
            tokenizer: Some(tokenizer),
            ..PolicyEnv::default()
        };
        let mut built = 0;
        for kind in PolicyKind::all() {
            let kwargs = match kind {
                PolicyKind::R2r | PolicyKind::Citer => {
                    serde_json::json!({"router_path": "unused/on/the/large/side"})
                }
                PolicyKind::Me => serde_json::json!({"weights": [0.6, 0.4]}),
                _ => serde_json::json!({}),
            };
            for spelling in kind.spellings() {
                let (_, role) = PolicyKind::from_class(&spelling).unwrap();
                let model = match (kind, role) {
                    (PolicyKind::R2r | PolicyKind::Citer, _)
                    | (_, engine_config::ClassRole::Large) => 1,
                    _ => 0,
                };
                let at = Placement {
                    model,
                    num_models: 2,
                    entry: 0,
                };
                let p = build_in(&spelling, &kwargs, at, &env)
                    .unwrap_or_else(|e| panic!("{spelling}: {e}"));
                assert!(!p.name().is_empty());
                built += 1;
            }
        }
        assert!(built >= 30, "{built}");
    }

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
