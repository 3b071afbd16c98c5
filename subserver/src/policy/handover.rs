//! The one-token hand-over shared by R2R, CITER and Co-LLM: two models, the
//! entry (small) model writes; when the policy's signal fires, its token is
//! dropped and the other (large) model writes that position, one token,
//! and hands the request back with it.

use tracing::error;

use crate::peer::message::ModelIdx;
use crate::policy::{kwarg_f64, Placement, PolicyError};
use crate::scheduler::policy::{Dest, StepView};

/// The other model of a two-model group; an error for any other group size.
pub fn other_model(policy: &'static str, at: Placement) -> Result<ModelIdx, PolicyError> {
    if at.num_models != 2 || at.entry > 1 {
        return Err(PolicyError::ModelCount {
            policy,
            needed: "exactly 2",
            got: at.num_models,
        });
    }
    Ok(1 - at.entry)
}

/// Destinations at the entry model: rows whose signal fired go to `large`
/// without their token.
pub fn entry_dests(fire: &[bool], large: ModelIdx) -> Vec<Dest> {
    fire.iter()
        .map(|&f| {
            if f {
                Dest::Peer {
                    to: large,
                    keep_token: false,
                }
            } else {
                Dest::Stay
            }
        })
        .collect()
}

/// Destinations at the large model: every row keeps its token and returns home.
pub fn guest_dests(view: &StepView<'_>) -> Vec<Dest> {
    view.items
        .iter()
        .map(|item| Dest::Peer {
            to: item.home,
            keep_token: true,
        })
        .collect()
}

/// An optional threshold kwarg, checked to lie in [0, 1].
pub fn threshold_kwarg(kwargs: &serde_json::Value, what: &str) -> Result<Option<f64>, PolicyError> {
    let t = kwarg_f64(kwargs, "threshold")?;
    if let Some(t) = t {
        if !(0.0..=1.0).contains(&t) {
            return Err(PolicyError::BadKwarg {
                key: "threshold".into(),
                reason: format!("{what} must be in [0, 1], got {t}"),
            });
        }
    }
    Ok(t)
}

/// The required `router_path` kwarg.
pub fn router_path_kwarg(kwargs: &serde_json::Value) -> Result<&str, PolicyError> {
    match kwargs.get("router_path") {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(s),
        None | Some(serde_json::Value::Null) => Err(PolicyError::BadKwarg {
            key: "router_path".into(),
            reason: "required: the router directory written by `tokenrouter convert-router`".into(),
        }),
        Some(v) => Err(PolicyError::BadKwarg {
            key: "router_path".into(),
            reason: format!("expected a path string, got {v}"),
        }),
    }
}

/// Logs a signal failure once per policy instance; the step keeps the
/// small model's tokens (the output stays valid, only unrouted).
pub fn report_once(reported: &mut bool, policy: &str, reason: &str) {
    if !*reported {
        *reported = true;
        error!(
            policy,
            reason, "routing signal unavailable; the entry model keeps writing"
        );
    }
}
