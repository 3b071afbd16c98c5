//! R-Stitch, as published: low-entropy tokens belong to the small model and
//! high-entropy tokens to the large one. The small (entry) model hands over
//! when the normalized entropy of its next-token distribution is above
//! `threshold` (τ, default 0.03): its token is dropped and the large model
//! writes that position. The large model keeps the pen while its own entropy
//! stays above τ and hands back as soon as it is at or below τ, keeping that
//! confident token. Each model keeps its own KV.

use crate::routing::{Dest, RoutingPolicy, StepView};
use crate::signal_health::{SignalError, SignalHealth};
use crate::{
    kwarg_unit, LiveThreshold, ModelFacts, Placement, PolicyEnv, PolicyError, ShareDirection,
    ThresholdKnob,
};
use protocol::ids::ModelIdx;

/// `scheduler_kwargs`: `threshold` (τ, default 0.03).
pub struct RStitchPolicy {
    threshold: LiveThreshold,
    /// The small (entry) model's instance; else a large model's.
    small: bool,
    /// Where the small model hands over to (the other model of the pair).
    other: ModelIdx,
    /// Steps whose entropy could not be computed.
    health: SignalHealth,
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
        ModelFacts::need_logits(env.model, "RStitch")?;
        Ok(Self {
            threshold: env.live_threshold(threshold),
            small: at.model == at.entry,
            other: 1 - at.model,
            health: SignalHealth::new("RStitch"),
        })
    }

    /// The small model's predicate: hand over when its entropy is above τ.
    pub fn small_hands_over(&self, normalized_entropy: f32) -> bool {
        normalized_entropy as f64 > self.threshold.get()
    }

    /// The large model's predicate: hand back when its entropy is at or below τ.
    pub fn large_hands_back(&self, normalized_entropy: f32) -> bool {
        normalized_entropy as f64 <= self.threshold.get()
    }

    /// Steps whose entropy could not be computed (each one logged).
    pub fn signal_failures(&self) -> u64 {
        self.health.failures()
    }
}

impl RoutingPolicy for RStitchPolicy {
    fn name(&self) -> &'static str {
        "RStitch"
    }

    fn wants_logit_signals(&self) -> bool {
        true
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        let entropy = match view.normalized_entropies() {
            Some(Ok(h)) => h,
            // Start-up refuses a backend without logits; a failed reduction
            // is counted and logged, and the current writer keeps the pen.
            Some(Err(e)) => {
                self.health.failed(&SignalError::compute(e));
                return vec![Dest::Stay; view.items.len()];
            }
            None => {
                self.health
                    .failed(&SignalError::missing("the backend gave no logits"));
                return vec![Dest::Stay; view.items.len()];
            }
        };
        entropy
            .iter()
            .zip(view.items)
            .map(|(&h, item)| {
                if self.small && self.small_hands_over(h) {
                    Dest::Peer {
                        to: self.other,
                        keep_token: false,
                    }
                } else if !self.small && self.large_hands_back(h) {
                    Dest::Peer {
                        to: item.home,
                        keep_token: true,
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

    fn signal_health(&self) -> Option<SignalHealth> {
        Some(self.health.clone())
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

    /// Row 0: one logit far above the rest (entropy ~0); row 1: uniform (entropy 1).
    fn confident_and_uncertain() -> Tensor {
        let mut row0 = vec![0.0f32; 16];
        row0[3] = 30.0;
        let flat: Vec<f32> = [row0, vec![0.0; 16]].concat();
        Tensor::from_slice(&flat).view([2, 16])
    }

    fn policy(model: ModelIdx) -> RStitchPolicy {
        let at = Placement {
            model,
            num_models: 2,
            entry: 0,
        };
        RStitchPolicy::from_kwargs(
            &serde_json::json!({"threshold": 0.03}),
            at,
            &PolicyEnv::default(),
        )
        .unwrap()
    }

    #[test]
    fn the_small_model_hands_over_uncertain_tokens_without_them() {
        let mut p = policy(0);
        let logits = confident_and_uncertain();
        let items = [item(), item()];
        let view = StepView {
            model: 0,
            num_models: 2,
            items: &items,
            logits: Some(&logits),
            hidden: None,
            embeddings: None,
            signals: None,
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
        assert_eq!(p.signal_failures(), 0);
    }

    #[test]
    fn the_large_model_keeps_uncertain_tokens_and_hands_back_confident_ones() {
        let mut p = policy(1);
        let logits = confident_and_uncertain();
        let items = [item(), item()];
        let view = StepView {
            model: 1,
            num_models: 2,
            items: &items,
            logits: Some(&logits),
            hidden: None,
            embeddings: None,
            signals: None,
        };
        // The confident row goes home with its token; the uncertain one is
        // exactly what the large model is there for: it keeps writing.
        assert_eq!(
            p.route(&view),
            vec![
                Dest::Peer {
                    to: 0,
                    keep_token: true
                },
                Dest::Stay
            ]
        );
        // The bar is inclusive on the large side: entropy == τ hands back.
        assert!(p.large_hands_back(0.03));
        assert!(!p.small_hands_over(0.03));
    }

    #[test]
    fn missing_logits_are_counted_not_silent() {
        let mut p = policy(0);
        let items = [item()];
        let view = StepView {
            model: 0,
            num_models: 2,
            items: &items,
            logits: None,
            hidden: None,
            embeddings: None,
            signals: None,
        };
        assert_eq!(p.route(&view), vec![Dest::Stay]);
        assert_eq!(p.route(&view), vec![Dest::Stay]);
        assert_eq!(p.signal_failures(), 2);
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
