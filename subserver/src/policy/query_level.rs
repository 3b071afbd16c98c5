//! Query-level routing, the baseline token-level routing is compared with:
//! one model writes the whole answer. A request's `model` field picks the
//! writer directly (the gateway pins the request); otherwise a classifier
//! configured here decides once per request:
//!
//! - `always_large_above_prompt_tokens: N`: prompts longer than N tokens go
//!   to the large model before any compute;
//! - `entropy_threshold: τ`: the entry model reads the prompt once; when
//!   its mean normalized next-token entropy over the prompt is above τ the
//!   request is delegated to the large model, which writes every token.
//!
//! With neither, the entry model writes everything.

use crate::peer::message::{ModelIdx, Rid};
use crate::policy::{
    kwarg_u64, kwarg_unit, LiveThreshold, Placement, PolicyEnv, PolicyError, ShareDirection,
    ThresholdKnob,
};
use crate::routing::{Dest, RoutingPolicy, StepView};

/// `scheduler_kwargs`: `always_large_above_prompt_tokens`,
/// `entropy_threshold`, `target` (the large model, default the last).
pub struct QueryLevelPolicy {
    above_tokens: Option<usize>,
    entropy_threshold: Option<LiveThreshold>,
    target: ModelIdx,
    at: Placement,
}

impl QueryLevelPolicy {
    /// Reads the kwargs.
    pub fn from_kwargs(
        kwargs: &serde_json::Value,
        at: Placement,
        env: &PolicyEnv,
    ) -> Result<Self, PolicyError> {
        let above_tokens = kwarg_u64(kwargs, "always_large_above_prompt_tokens")?;
        let entropy = kwarg_unit(kwargs, "entropy_threshold", "a normalized entropy")?;
        let default_target = at.num_models.saturating_sub(1) as u64;
        let target = kwarg_u64(kwargs, "target")?.unwrap_or(default_target);
        if at.num_models > 1 && (target as usize >= at.num_models || target == at.entry as u64) {
            return Err(PolicyError::BadKwarg {
                key: "target".into(),
                reason: format!("must name a non-entry model below {}", at.num_models),
            });
        }
        Ok(Self {
            above_tokens: above_tokens.map(|n| n as usize),
            entropy_threshold: entropy.map(|t| env.live_threshold(t)),
            target: target as ModelIdx,
            at,
        })
    }

    /// The entropy predicate: an uncertain prompt goes to the large model.
    pub fn prompt_is_hard(&self, mean_entropy: f32) -> bool {
        self.entropy_threshold
            .as_ref()
            .is_some_and(|t| mean_entropy as f64 > t.get())
    }
}

impl RoutingPolicy for QueryLevelPolicy {
    fn name(&self) -> &'static str {
        "QueryLevel"
    }

    fn assign(&mut self, _rid: Rid, prompt: &[u32]) -> Option<ModelIdx> {
        if self.at.num_models < 2 {
            return None;
        }
        self.above_tokens
            .filter(|&n| prompt.len() > n)
            .map(|_| self.target)
    }

    fn wants_prompt_entropy(&self) -> bool {
        self.entropy_threshold.is_some() && self.at.model == self.at.entry
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        view.items
            .iter()
            .map(|item| match item.prompt_entropy {
                Some(h) if self.at.num_models > 1 && self.prompt_is_hard(h) => {
                    Dest::Delegate { to: self.target }
                }
                _ => Dest::Stay,
            })
            .collect()
    }

    fn knob(&self) -> Option<ThresholdKnob> {
        self.entropy_threshold
            .as_ref()
            .map(|cell| ThresholdKnob::unit(cell.clone(), ShareDirection::FallsWithThreshold))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(model: u16) -> Placement {
        Placement {
            model,
            num_models: 2,
            entry: 0,
        }
    }

    #[test]
    fn long_prompts_go_large_before_any_compute() {
        let kw = serde_json::json!({"always_large_above_prompt_tokens": 4});
        let mut p = QueryLevelPolicy::from_kwargs(&kw, at(0), &PolicyEnv::default()).unwrap();
        assert_eq!(p.assign(1, &[1, 2, 3, 4]), None);
        assert_eq!(p.assign(2, &[1, 2, 3, 4, 5]), Some(1));
        assert!(!p.wants_prompt_entropy());
    }

    #[test]
    fn the_entropy_classifier_compares_the_mean_with_the_threshold() {
        let kw = serde_json::json!({"entropy_threshold": 0.4});
        let p = QueryLevelPolicy::from_kwargs(&kw, at(0), &PolicyEnv::default()).unwrap();
        assert!(p.wants_prompt_entropy());
        assert!(p.prompt_is_hard(0.41));
        assert!(!p.prompt_is_hard(0.39));
        let guest = QueryLevelPolicy::from_kwargs(&kw, at(1), &PolicyEnv::default()).unwrap();
        assert!(
            !guest.wants_prompt_entropy(),
            "only the entry reads the prompt"
        );
        let e = QueryLevelPolicy::from_kwargs(
            &serde_json::json!({"entropy_threshold": 3}),
            at(0),
            &PolicyEnv::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("entropy_threshold"));
    }
}
