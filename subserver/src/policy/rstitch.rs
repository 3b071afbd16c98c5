//! R-Stitch: the writer keeps the pen while it is confident. When the
//! normalized entropy of the current writer's next-token distribution is
//! above `threshold` (default 0.03), its token is dropped and the other model
//! writes that position; switching goes both ways and each model keeps its
//! own KV. (The scheduler makes a model that just got the pen write at least
//! one token, so two uncertain models cannot ping-pong forever.)

use crate::peer::message::ModelIdx;
use crate::policy::{
    kwarg_unit, LiveThreshold, Placement, PolicyEnv, PolicyError, ShareDirection, ThresholdKnob,
};
use crate::routing::{Dest, RoutingPolicy, StepView};
use crate::sampling::signals::normalized_entropy_rows;

/// `scheduler_kwargs`: `threshold` (τ, default 0.03).
pub struct RStitchPolicy {
    threshold: LiveThreshold,
    other: ModelIdx,
}

impl RStitchPolicy {
    /// Reads the kwargs; R-Stitch pairs exactly two models.
    pub fn from_kwargs(
        kwargs: &serde_json::Value,
        at: Placement,
        env: &PolicyEnv,
    ) -> Result<Self, PolicyError> {
        if at.num_models != 2 {
            return Err(PolicyError::ModelCount {
                policy: "RStitch",
                needed: "exactly 2",
                got: at.num_models,
            });
        }
        let threshold = kwarg_unit(kwargs, "threshold", "a normalized entropy")?.unwrap_or(0.03);
        Ok(Self {
            threshold: env.live_threshold(threshold),
            other: 1 - at.model,
        })
    }

    /// The predicate: hand over when the entropy is above the threshold.
    pub fn hands_over(&self, normalized_entropy: f32) -> bool {
        normalized_entropy as f64 > self.threshold.get()
    }
}

impl RoutingPolicy for RStitchPolicy {
    fn name(&self) -> &'static str {
        "RStitch"
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        let entropy = match view.logits.map(normalized_entropy_rows) {
            Some(Ok(h)) => h,
            // No logits (simulated backend) or a failed reduction: keep the pen.
            _ => return vec![Dest::Stay; view.items.len()],
        };
        entropy
            .iter()
            .map(|&h| {
                if self.hands_over(h) {
                    Dest::Peer {
                        to: self.other,
                        keep_token: false,
                    }
                } else {
                    Dest::Stay
                }
            })
            .collect()
    }

    fn knob(&self) -> Option<ThresholdKnob> {
        Some(ThresholdKnob::unit(
            self.threshold.clone(),
            ShareDirection::FallsWithThreshold,
        ))
    }
}

#[cfg(test)]
mod tests {
    use tch::Tensor;

    use super::*;
    use crate::routing::RouteItem;

    fn item() -> RouteItem {
        RouteItem {
            rid: 1,
            home: 0,
            token: 0,
            position: 5,
            written_this_turn: 1,
            seed: 0,
            prompt_entropy: None,
        }
    }

    #[test]
    fn confident_rows_stay_and_uncertain_rows_switch_both_ways() {
        let at = Placement {
            model: 0,
            num_models: 2,
            entry: 0,
        };
        let mut p = RStitchPolicy::from_kwargs(
            &serde_json::json!({"threshold": 0.03}),
            at,
            &PolicyEnv::default(),
        )
        .unwrap();
        // Row 0: one logit far above the rest (entropy ~0); row 1: uniform (entropy 1).
        let mut row0 = vec![0.0f32; 16];
        row0[3] = 30.0;
        let flat: Vec<f32> = [row0, vec![0.0; 16]].concat();
        let logits = Tensor::from_slice(&flat).view([2, 16]);
        let items = [item(), item()];
        let view = StepView {
            model: 0,
            num_models: 2,
            items: &items,
            logits: Some(&logits),
            hidden: None,
            embeddings: None,
        };
        assert_eq!(
            p.route(&view),
            vec![
                Dest::Stay,
                Dest::Peer {
                    to: 1,
                    keep_token: false
                }
            ]
        );
        let mut back = RStitchPolicy::from_kwargs(
            &serde_json::json!({}),
            Placement { model: 1, ..at },
            &PolicyEnv::default(),
        )
        .unwrap();
        let view = StepView { model: 1, ..view };
        assert_eq!(
            back.route(&view)[1],
            Dest::Peer {
                to: 0,
                keep_token: false
            }
        );
    }

    #[test]
    fn kwargs_are_checked() {
        let at = Placement {
            model: 0,
            num_models: 3,
            entry: 0,
        };
        assert!(
            RStitchPolicy::from_kwargs(&serde_json::json!({}), at, &PolicyEnv::default()).is_err()
        );
        let at = Placement {
            num_models: 2,
            ..at
        };
        let e = RStitchPolicy::from_kwargs(
            &serde_json::json!({"threshold": 2.0}),
            at,
            &PolicyEnv::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("scheduler_kwargs.threshold"));
    }
}
