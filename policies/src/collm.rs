//! Co-LLM: the fine-tuned small model carries one extra row in its head
//! (`deferral_columns: 1` in its config.json). The sigmoid of that last
//! logit column is the deferral score; above η (default 0.15, the paper's
//! setting) the small model's token is dropped and the large model writes
//! that position (one token, then it hands back). Sampling never draws the
//! extra column (the runner samples from the vocabulary only).

use tch::{Kind, Tensor};

use crate::handover::{other_model, HandoverBar, HandoverPolicy, HandoverSignal};
use crate::routing::signal_health::SignalError;
use crate::routing::StepView;
use crate::{kwarg_unit, ModelFacts, Placement, PolicyEnv, PolicyError, ShareDirection};

/// η when the kwargs give none.
pub const DEFAULT_THRESHOLD: f64 = 0.15;

/// `scheduler_kwargs`: `threshold` (η, default 0.15).
pub type CoLlmPolicy = HandoverPolicy<DeferralColumn>;

/// Co-LLM's signal: the sigmoid of the small model's extra head column.
#[derive(Debug, Clone, Copy)]
pub struct DeferralColumn;

impl HandoverSignal for DeferralColumn {
    fn signals(&self, view: &StepView<'_>) -> Result<Vec<f32>, SignalError> {
        match (view.logits, view.embeddings) {
            (Some(logits), Some(emb)) => deferral_scores(logits, emb.size()[0]),
            _ => Err(SignalError::missing(
                "the backend gives no logits or embedding matrix",
            )),
        }
    }
}

/// The predicate: a deferral score above η goes to the large model.
pub fn defers(score: f32, threshold: f64) -> bool {
    score as f64 > threshold
}

/// Deferral scores `[B]`: the sigmoid of the last column of `[B, V + 1]`
/// logits, checked to lie past the `vocab` sampled columns.
pub fn deferral_scores(logits: &Tensor, vocab: i64) -> Result<Vec<f32>, SignalError> {
    let width = logits.size().last().copied().unwrap_or(0);
    if width <= vocab {
        return Err(SignalError::shape(format!(
            "the head has {width} columns for a vocabulary of {vocab}: no deferral column \
             (set deferral_columns: 1 in the small model's config.json)"
        )));
    }
    let run = || -> Result<Vec<f32>, tch::TchError> {
        let s = logits
            .f_narrow(-1, width - 1, 1)?
            .f_to_kind(Kind::Float)?
            .f_sigmoid()?
            .f_flatten(0, -1)?
            .f_to_device(tch::Device::Cpu)?;
        Vec::<f32>::try_from(&s)
    };
    run().map_err(SignalError::compute)
}

impl CoLlmPolicy {
    /// Reads the kwargs.
    pub fn from_kwargs(
        kwargs: &serde_json::Value,
        at: Placement,
        env: &PolicyEnv,
    ) -> Result<Self, PolicyError> {
        let large = other_model("CoLLM", at)?;
        let threshold = kwarg_unit(kwargs, "threshold", "a deferral-probability bar")?
            .unwrap_or(DEFAULT_THRESHOLD);
        if at.model != at.entry {
            return Ok(Self::guest("CoLLM", defers));
        }
        ModelFacts::need_logits(env.model, "CoLLM")?;
        let bar = HandoverBar::new(
            "CoLLM",
            env.live_threshold(threshold),
            ShareDirection::FallsWithThreshold,
            large,
        );
        Ok(Self::at_entry("CoLLM", DeferralColumn, bar, defers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::{Dest, RouteItem, RoutingPolicy};

    #[test]
    fn the_last_column_is_the_deferral_logit() {
        // Vocabulary of 3 plus one deferral column: logits 0 -> 0.5, ln 3 -> 0.75, -ln 3 -> 0.25.
        let l = Tensor::from_slice(&[
            9.0f32,
            0.0,
            0.0,
            0.0, //
            0.0,
            9.0,
            0.0,
            3f32.ln(), //
            0.0,
            0.0,
            9.0,
            -(3f32.ln()),
        ])
        .view([3, 4]);
        let s = deferral_scores(&l, 3).unwrap();
        for (got, want) in s.iter().zip([0.5f32, 0.75, 0.25]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        assert!(deferral_scores(&l, 4)
            .unwrap_err()
            .detail
            .contains("deferral_columns"));
        assert!(defers(0.5, 0.15) && defers(0.25, 0.15) && !defers(0.125, 0.15));
        assert!(
            !defers(0.25, 0.25),
            "exactly at η the small model keeps the token"
        );
    }

    #[test]
    fn routes_rows_above_eta_to_the_large_model() {
        let at = Placement {
            model: 0,
            num_models: 2,
            entry: 0,
        };
        let mut p = CoLlmPolicy::from_kwargs(
            &serde_json::json!({"threshold": 0.5}),
            at,
            &PolicyEnv::default(),
        )
        .unwrap();
        assert_eq!(p.knob().unwrap().cell.get(), 0.5);
        let logits = Tensor::from_slice(&[1.0f32, 0.0, 2.0, 0.0, 1.0, -2.0]).view([2, 3]);
        let emb = Tensor::zeros([2, 4], (Kind::Float, tch::Device::Cpu));
        let item = RouteItem {
            rid: 1,
            home: 0,
            token: 0,
            position: 0,
            written_this_turn: 0,
            seed: 0,
            prompt_entropy: None,
        };
        let items = [item.clone(), item];
        let view = StepView {
            model: 0,
            num_models: 2,
            items: &items,
            logits: Some(&logits),
            hidden: None,
            embeddings: Some(&emb),
            signals: None,
        };
        assert_eq!(
            p.route(&view),
            vec![
                Dest::Peer {
                    to: 1,
                    keep_token: false
                },
                Dest::Stay
            ]
        );
        // Without a deferral column the small model keeps writing.
        let narrow = Tensor::zeros([2, 4], (Kind::Float, tch::Device::Cpu));
        let emb4 = Tensor::zeros([4, 4], (Kind::Float, tch::Device::Cpu));
        let view = StepView {
            logits: Some(&narrow),
            embeddings: Some(&emb4),
            ..view
        };
        assert_eq!(p.route(&view), vec![Dest::Stay, Dest::Stay]);
        let e = CoLlmPolicy::from_kwargs(
            &serde_json::json!({"threshold": "high"}),
            at,
            &PolicyEnv::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("scheduler_kwargs.threshold"));
    }
}
