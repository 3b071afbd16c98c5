//! The one-token hand-over shared by R2R, CITER and Co-LLM: two models, the
//! entry (small) model writes; when the policy's signal fires, its token is
//! dropped and the other (large) model writes that position, one token,
//! and hands the request back with it.

use tracing::error;

use crate::peer::message::ModelIdx;
use crate::policy::{LiveThreshold, Placement, PolicyError, ShareDirection, ThresholdKnob};
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

/// The entry model's side of a hand-over policy: the live bar, the large
/// model, and whether a missing signal was already reported.
#[derive(Debug)]
pub struct HandoverBar {
    policy: &'static str,
    threshold: LiveThreshold,
    direction: ShareDirection,
    large: ModelIdx,
    reported: bool,
}

impl HandoverBar {
    /// `policy`'s bar at `threshold`, handing rows to `large`; `direction`
    /// says how the large share answers a higher bar.
    pub fn new(
        policy: &'static str,
        threshold: LiveThreshold,
        direction: ShareDirection,
        large: ModelIdx,
    ) -> Self {
        Self {
            policy,
            threshold,
            direction,
            large,
            reported: false,
        }
    }

    /// Destinations from one signal per row: rows where `fires(signal,
    /// threshold)` go to the large model without their token. Without a
    /// signal the entry keeps writing (and says so once).
    pub fn route(
        &mut self,
        signals: Result<Vec<f32>, String>,
        rows: usize,
        fires: impl Fn(f32, f64) -> bool,
    ) -> Vec<Dest> {
        let signals = match signals {
            Ok(s) => s,
            Err(reason) => {
                if !self.reported {
                    self.reported = true;
                    error!(
                        policy = self.policy,
                        reason, "routing signal unavailable; the entry model keeps writing"
                    );
                }
                return vec![Dest::Stay; rows];
            }
        };
        let t = self.threshold.get();
        signals
            .iter()
            .map(|&s| {
                if fires(s, t) {
                    Dest::Peer {
                        to: self.large,
                        keep_token: false,
                    }
                } else {
                    Dest::Stay
                }
            })
            .collect()
    }

    /// The bar as `target_large_share` steers it.
    pub fn knob(&self) -> ThresholdKnob {
        ThresholdKnob::unit(self.threshold.clone(), self.direction)
    }
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
