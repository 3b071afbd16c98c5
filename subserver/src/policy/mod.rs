//! Routing policies and the registry that maps config names to them. Each
//! policy is only its `route` predicate (plus what it reads); the scheduler
//! is the same for all of them.

pub mod draw;
pub mod ensemble;
pub mod random;
pub mod rstitch;
pub mod signals;
pub mod single;

use crate::peer::message::ModelIdx;
use crate::scheduler::policy::RoutingPolicy;

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

const KNOWN: &[&str] = &["Random", "RStitch", "ME", "Single"];

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

/// Builds the policy instance for one model of a group.
pub fn build(
    name: &str,
    kwargs: &serde_json::Value,
    at: Placement,
) -> Result<Box<dyn RoutingPolicy>, PolicyError> {
    match name {
        "Random" | "random" | "Bernoulli" | "bernoulli" => {
            Ok(Box::new(random::RandomPolicy::from_kwargs(kwargs, at)?))
        }
        "RStitch" | "r_stitch" | "R-Stitch" => {
            Ok(Box::new(rstitch::RStitchPolicy::from_kwargs(kwargs, at)?))
        }
        "ME" | "me" => Ok(Box::new(ensemble::EnsemblePolicy::from_kwargs(kwargs, at)?)),
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
