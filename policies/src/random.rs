//! Random routing (Bernoulli `p`, seeded per request) with R2R hand-over
//! semantics: at the entry model each token goes to the target model with
//! probability `p`; the entry's token is dropped and the target writes that
//! position, one token, then hands back. It is the baseline for token-level
//! routers, and with the simulated backend the stand-in for a router signal.

use crate::draw::uniform;
use crate::routing::{Dest, RoutingPolicy, StepView};
use crate::{
    kwarg_f64, kwarg_u64, LiveThreshold, Placement, PolicyEnv, PolicyError, ShareDirection,
    ThresholdKnob,
};
use protocol::ids::ModelIdx;

/// `scheduler_kwargs`: `probability` (default 0.5), `seed` (mixed into each
/// request's seed), `target` (model index, default the last model).
pub struct RandomPolicy {
    probability: LiveThreshold,
    seed: u64,
    target: ModelIdx,
    at: Placement,
}

impl RandomPolicy {
    /// Reads the kwargs.
    pub fn from_kwargs(
        kwargs: &serde_json::Value,
        at: Placement,
        env: &PolicyEnv,
    ) -> Result<Self, PolicyError> {
        let probability = kwarg_f64(kwargs, "probability")?.unwrap_or(0.5);
        if !(0.0..=1.0).contains(&probability) {
            return Err(PolicyError::BadKwarg {
                key: "probability".into(),
                reason: format!("must be in [0, 1], got {probability}"),
            });
        }
        let default_target = at.num_models.saturating_sub(1) as u64;
        let target = kwarg_u64(kwargs, "target")?.unwrap_or(default_target);
        if target as usize >= at.num_models || target == at.entry as u64 {
            return Err(PolicyError::BadKwarg {
                key: "target".into(),
                reason: format!(
                    "must name a non-entry model below {}, got {target}",
                    at.num_models
                ),
            });
        }
        if at.num_models < 2 {
            return Err(PolicyError::ModelCount {
                policy: "Random",
                needed: "at least 2",
                got: at.num_models,
            });
        }
        Ok(Self {
            probability: env.live_threshold(probability),
            seed: kwarg_u64(kwargs, "seed")?.unwrap_or(0),
            target: target as ModelIdx,
            at,
        })
    }
}

impl RoutingPolicy for RandomPolicy {
    fn name(&self) -> &'static str {
        "Random"
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        view.items
            .iter()
            .map(|item| {
                if view.model == self.at.entry {
                    if uniform(item.seed ^ self.seed, item.position, 0) < self.probability.get() {
                        Dest::Peer {
                            to: self.target,
                            keep_token: false,
                        }
                    } else {
                        Dest::Stay
                    }
                } else {
                    // The target writes one token and returns it.
                    Dest::Peer {
                        to: item.home,
                        keep_token: true,
                    }
                }
            })
            .collect()
    }

    fn knob(&self) -> Option<ThresholdKnob> {
        Some(ThresholdKnob::unit(
            self.probability.clone(),
            ShareDirection::RisesWithThreshold,
        ))
    }
}
