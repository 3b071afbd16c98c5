//! GlimpRouter: step-level routing. At the start of each reasoning step
//! (the answer's start, or after a step delimiter, "\n\n" by default) the
//! small model writes the step's first token: a glimpse. When that token's
//! normalized entropy is above `threshold`, the glimpse is dropped and the
//! large model writes the whole step, up to and including the next
//! delimiter, then hands the pen back.
//!
//! Per request the policy keeps the text tail (to find delimiters across
//! tokens) and whether the next token starts a step. The entry model's
//! instance makes the glimpse decision; the large model's instance only
//! watches for the end of its step.

use std::collections::HashMap;
use std::sync::Arc;

use crate::routing::signal_health::{SignalError, SignalHealth};
use crate::routing::{Dest, RoutingPolicy, StepView};
use crate::step_delimiter::StepDelimiter;
use crate::{
    kwarg_u64, kwarg_unit, LiveThreshold, Placement, PolicyEnv, PolicyError, ShareDirection,
    ThresholdKnob,
};
use protocol::ids::{ModelIdx, Rid};

/// Per-request state.
#[derive(Debug, Default)]
struct StepState {
    /// Text since the last delimiter (only its possibly-delimiter tail).
    tail: String,
    /// The next token this model writes starts a step.
    at_step_start: bool,
}

/// `scheduler_kwargs`: `threshold` (normalized entropy of the glimpse,
/// default 0.1), `step_delimiter` (default "\n\n"), `target` (the large
/// model, default the last).
pub struct GlimpRouterPolicy {
    threshold: LiveThreshold,
    delimiter: Arc<StepDelimiter>,
    at: Placement,
    target: ModelIdx,
    requests: HashMap<Rid, StepState>,
    health: SignalHealth,
}

impl GlimpRouterPolicy {
    /// Reads the kwargs; needs the model's tokenizer to find delimiters.
    pub fn from_kwargs(
        kwargs: &serde_json::Value,
        at: Placement,
        env: &PolicyEnv,
    ) -> Result<Self, PolicyError> {
        if at.num_models < 2 {
            return Err(PolicyError::ModelCount {
                policy: "GlimpRouter",
                needed: "at least 2",
                got: at.num_models,
            });
        }
        let threshold = kwarg_unit(kwargs, "threshold", "a normalized entropy")?.unwrap_or(0.1);
        let delimiter = match kwargs.get("step_delimiter") {
            None | Some(serde_json::Value::Null) => "\n\n".to_string(),
            Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
            Some(v) => {
                return Err(PolicyError::BadKwarg {
                    key: "step_delimiter".into(),
                    reason: format!("expected a non-empty string, got {v}"),
                })
            }
        };
        let tokenizer = env
            .tokenizer
            .as_ref()
            .ok_or_else(|| PolicyError::BadKwarg {
                key: "step_delimiter".into(),
                reason: "GlimpRouter finds step ends in text and needs the model's tokenizer \
                     (backend tch)"
                    .into(),
            })?;
        let default_target = at.num_models as u64 - 1;
        let target = kwarg_u64(kwargs, "target")?.unwrap_or(default_target);
        if target as usize >= at.num_models || target == at.entry as u64 {
            return Err(PolicyError::BadKwarg {
                key: "target".into(),
                reason: format!("must name a non-entry model below {}", at.num_models),
            });
        }
        Ok(Self::new(
            env.live_threshold(threshold),
            StepDelimiter::new(tokenizer, &delimiter),
            at,
            target as ModelIdx,
        ))
    }

    /// A policy for model `at.model` handing uncertain steps to `target`.
    pub fn new(
        threshold: LiveThreshold,
        delimiter: StepDelimiter,
        at: Placement,
        target: ModelIdx,
    ) -> Self {
        Self {
            threshold,
            delimiter: Arc::new(delimiter),
            at,
            target,
            requests: HashMap::new(),
            health: SignalHealth::new("GlimpRouter"),
        }
    }

    /// The predicate: the glimpse is uncertain, the large model takes the step.
    pub fn takes_step(&self, glimpse_entropy: f32) -> bool {
        glimpse_entropy as f64 > self.threshold.get()
    }

    fn state(&mut self, rid: Rid, fresh_turn: bool) -> &mut StepState {
        let home = self.at.model == self.at.entry;
        let st = self.requests.entry(rid).or_insert_with(|| StepState {
            tail: String::new(),
            // The answer's first token starts a step.
            at_step_start: home,
        });
        if fresh_turn && !home {
            // A guest's turn always begins at a step start.
            st.tail.clear();
            st.at_step_start = false;
        }
        st
    }
}

impl RoutingPolicy for GlimpRouterPolicy {
    fn name(&self) -> &'static str {
        "GlimpRouter"
    }

    fn wants_logit_signals(&self) -> bool {
        true
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        let home = view.model == self.at.entry;
        // Only the entry reads the glimpse's entropy; a step without it is
        // counted and logged, and the entry keeps the pen for that step.
        let entropy = match view.normalized_entropies() {
            Some(Ok(h)) => Some(h),
            _ if !home => None,
            Some(Err(e)) => {
                self.health.failed(&SignalError::compute(e));
                None
            }
            None => {
                self.health
                    .failed(&SignalError::missing("the backend gave no logits"));
                None
            }
        };
        let delimiter = self.delimiter.clone();
        let mut dests = Vec::with_capacity(view.items.len());
        for (i, item) in view.items.iter().enumerate() {
            let glimpse_uncertain = entropy
                .as_ref()
                .and_then(|h| h.get(i))
                .is_some_and(|&h| self.takes_step(h));
            let target = self.target;
            let st = self.state(item.rid, item.written_this_turn == 0);
            if home && st.at_step_start && glimpse_uncertain {
                // Drop the glimpse: the large model writes this whole step.
                st.at_step_start = false;
                dests.push(Dest::Peer {
                    to: target,
                    keep_token: false,
                });
                continue;
            }
            let ends_step = delimiter.push(&mut st.tail, item.token);
            st.at_step_start = ends_step;
            dests.push(if !home && ends_step {
                Dest::Peer {
                    to: item.home,
                    keep_token: true,
                }
            } else {
                Dest::Stay
            });
        }
        dests
    }

    fn receive(&mut self, rid: Rid, tokens: &[u32]) -> usize {
        // The large model's step came back: the next token here starts a
        // step when it ended on a delimiter.
        let delimiter = self.delimiter.clone();
        let st = self.state(rid, false);
        for &t in tokens {
            st.at_step_start = delimiter.push(&mut st.tail, t);
        }
        tokens.len()
    }

    fn release(&mut self, rid: Rid) {
        self.requests.remove(&rid);
    }

    fn signal_health(&self) -> Option<SignalHealth> {
        Some(self.health.clone())
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

    const A: u32 = 0;
    const NL2: u32 = 1;

    fn policy(model: ModelIdx) -> GlimpRouterPolicy {
        let texts = vec!["a".to_string(), "\n\n".to_string(), "b".to_string()];
        GlimpRouterPolicy::new(
            LiveThreshold::new(0.5),
            StepDelimiter::from_texts(texts, "\n\n"),
            Placement {
                model,
                num_models: 2,
                entry: 0,
            },
            1,
        )
    }

    /// One step of one request: token, whether its distribution is flat.
    fn step(p: &mut GlimpRouterPolicy, token: u32, flat: bool, written: usize) -> Dest {
        let row: Vec<f32> = if flat {
            vec![0.0; 3]
        } else {
            vec![20.0, 0.0, 0.0]
        };
        let logits = Tensor::from_slice(&row).view([1, 3]);
        let items = [RouteItem {
            rid: 7,
            home: 0,
            token,
            position: 10,
            written_this_turn: written,
            seed: 0,
            prompt_entropy: None,
        }];
        let view = StepView {
            model: p.at.model,
            num_models: 2,
            items: &items,
            logits: Some(&logits),
            hidden: None,
            embeddings: None,
            signals: None,
        };
        p.route(&view)[0]
    }

    const TO_LARGE: Dest = Dest::Peer {
        to: 1,
        keep_token: false,
    };

    #[test]
    fn only_an_uncertain_glimpse_at_a_step_start_hands_the_step_over() {
        let mut small = policy(0);
        // First token of the answer is a step start; confident: stay.
        assert_eq!(step(&mut small, A, false, 0), Dest::Stay);
        // Mid-step uncertainty does not matter.
        assert_eq!(step(&mut small, A, true, 1), Dest::Stay);
        assert_eq!(step(&mut small, NL2, false, 2), Dest::Stay);
        // After "\n\n": an uncertain glimpse sends the step away.
        assert_eq!(step(&mut small, A, true, 3), TO_LARGE);
        // The large model wrote the step and its delimiter: next is a start.
        small.receive(7, &[A, A, NL2]);
        assert_eq!(step(&mut small, A, true, 0), TO_LARGE);
        small.receive(7, &[A]); // returned without a delimiter (budget)
        assert_eq!(step(&mut small, A, true, 0), Dest::Stay);
    }

    #[test]
    fn the_large_model_writes_until_the_delimiter() {
        let mut large = policy(1);
        assert_eq!(step(&mut large, A, true, 0), Dest::Stay);
        assert_eq!(step(&mut large, A, false, 1), Dest::Stay);
        assert_eq!(
            step(&mut large, NL2, false, 2),
            Dest::Peer {
                to: 0,
                keep_token: true
            }
        );
    }
}
