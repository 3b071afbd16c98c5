//! R2R (Roads to Rome): after each small-model token a trained router reads
//! the small model's final hidden state, the embedding of the sampled token
//! and the top-100 logits, and predicts whether the small model diverges
//! from the large one. When the probability is at least the threshold the
//! small model's token is dropped and the large model writes that position
//! (one token, then it hands back).

use tch::Tensor;

use crate::handover::{
    load_router, other_model, router_path_kwarg, HandoverBar, HandoverPolicy, HandoverSignal,
};
use crate::router::r2r_net::R2rNet;
use crate::routing::signal_health::SignalError;
use crate::routing::StepView;
use crate::{kwarg_unit, ModelFacts, Placement, PolicyEnv, PolicyError, ShareDirection};

/// `scheduler_kwargs`: `router_path` (required; the official layout's
/// `model_path`: the published `.pt` file, a Hugging Face `ORG/REPO/FILE` in
/// the local cache, or a `tokenrouter convert-router` directory; relative
/// paths against the config file) and `threshold` (default: the
/// checkpoint's `common_args.threshold`).
pub type R2rPolicy = HandoverPolicy<R2rNet>;

/// The predicate: a probability at or above the threshold goes to the large model.
pub fn diverges(probability: f32, threshold: f64) -> bool {
    probability as f64 >= threshold
}

impl R2rPolicy {
    /// Reads the kwargs; the entry model's instance loads the router on `env.device`.
    pub fn from_kwargs(
        kwargs: &serde_json::Value,
        at: Placement,
        env: &PolicyEnv,
    ) -> Result<Self, PolicyError> {
        let large = other_model("R2R", at)?;
        router_path_kwarg(kwargs)?;
        let given = kwarg_unit(kwargs, "threshold", "a router probability bar")?;
        if at.model != at.entry {
            // The large model only writes the token it is handed; no router here.
            return Ok(Self::guest("R2R", diverges));
        }
        let (net, stored, path) = load_router(kwargs, env, R2rNet::load)?;
        check_fits(&net, env.model)?;
        let threshold = match given.or(stored) {
            Some(t) if (0.0..=1.0).contains(&t) => t,
            Some(t) => {
                return Err(PolicyError::BadKwarg {
                    key: "threshold".into(),
                    reason: format!("the checkpoint's threshold {t} is outside [0, 1]; pass one"),
                })
            }
            None => {
                return Err(PolicyError::BadKwarg {
                    key: "threshold".into(),
                    reason: format!(
                        "{} records no threshold (common_args.threshold); pass one",
                        path.display()
                    ),
                })
            }
        };
        tracing::info!(
            router = %path.display(),
            hidden = net.hidden_size(),
            top_k = net.top_k(),
            blocks = net.num_blocks(),
            threshold,
            "R2R router loaded"
        );
        let bar = HandoverBar::new(
            "R2R",
            env.live_threshold(threshold),
            ShareDirection::FallsWithThreshold,
            large,
        );
        Ok(Self::at_entry("R2R", net, bar, diverges))
    }
}

/// The router must read what the small model gives: its hidden width, its
/// embedding width, and at least `top_k` logits.
fn check_fits(net: &R2rNet, facts: Option<ModelFacts>) -> Result<(), PolicyError> {
    let Some(f) = facts else { return Ok(()) };
    let unusable = |reason: String| PolicyError::Unusable {
        policy: "R2R",
        reason,
    };
    let (Some(h), Some(e), Some(v)) = (f.hidden_size, f.embed_size, f.logits_width) else {
        return Err(unusable(
            "the router reads hidden states, token embeddings and logits, and this model's \
             backend does not give all three"
                .into(),
        ));
    };
    let mismatch = |what: &str, router: i64, model: usize| {
        unusable(format!(
            "the router reads {what} {router} wide, the entry model's are {model} \
             (a router trained for another model pair?)"
        ))
    };
    if net.hidden_size() != h as i64 {
        return Err(mismatch("hidden states", net.hidden_size(), h));
    }
    if net.embed_size() != e as i64 {
        return Err(mismatch("token embeddings", net.embed_size(), e));
    }
    if (v as i64) < net.top_k() {
        return Err(unusable(format!(
            "the router reads the top {} logits, the model has {v}",
            net.top_k()
        )));
    }
    Ok(())
}

impl HandoverSignal for R2rNet {
    /// The router's probability that each row's token diverges.
    fn signals(&self, view: &StepView<'_>) -> Result<Vec<f32>, SignalError> {
        let (Some(logits), Some(hidden), Some(emb)) = (view.logits, view.hidden, view.embeddings)
        else {
            return Err(SignalError::missing(
                "the backend gives no logits, hidden states or embeddings",
            ));
        };
        let (h, e) = (hidden.size()[1], emb.size()[1]);
        if h != self.hidden_size() || e != self.embed_size() {
            return Err(SignalError::shape(format!(
                "the router reads hidden {} / embedding {} wide, the model has {h} / {e}",
                self.hidden_size(),
                self.embed_size()
            )));
        }
        let run = || -> Result<Vec<f32>, tch::TchError> {
            let ids: Vec<i64> = view.items.iter().map(|i| i.token as i64).collect();
            let ids = Tensor::f_from_slice(&ids)?.f_to_device(emb.device())?;
            let token_emb = emb.f_index_select(0, &ids)?;
            let p = self.forward(hidden, &token_emb, logits)?;
            Vec::<f32>::try_from(&p.f_to_device(tch::Device::Cpu)?)
        };
        run().map_err(SignalError::compute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::{Dest, RoutingPolicy};

    #[test]
    fn the_bar_is_inclusive() {
        assert!(diverges(0.5, 0.5));
        assert!(diverges(0.51, 0.5));
        assert!(!diverges(0.49, 0.5));
        assert!(diverges(0.0, 0.0), "threshold 0 sends every token");
        assert!(!diverges(0.999, 1.0));
    }

    #[test]
    fn kwargs_errors_name_the_key() {
        let at = Placement {
            model: 0,
            num_models: 2,
            entry: 0,
        };
        let env = PolicyEnv::default();
        let e = R2rPolicy::from_kwargs(&serde_json::json!({}), at, &env)
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("scheduler_kwargs.router_path"),
            "{e}"
        );
        let e = R2rPolicy::from_kwargs(&serde_json::json!({"router_path": 3}), at, &env)
            .err()
            .unwrap();
        assert!(e.to_string().contains("expected a path string"), "{e}");
        let e = R2rPolicy::from_kwargs(
            &serde_json::json!({"router_path": "/nonexistent/router"}),
            at,
            &env,
        )
        .err()
        .unwrap();
        assert!(
            e.to_string().contains("router.json") && e.to_string().contains("convert-router"),
            "{e}"
        );
        let e = R2rPolicy::from_kwargs(
            &serde_json::json!({"router_path": "r", "threshold": 1.5}),
            at,
            &env,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("scheduler_kwargs.threshold"), "{e}");
        let three = Placement {
            num_models: 3,
            ..at
        };
        assert!(matches!(
            R2rPolicy::from_kwargs(&serde_json::json!({"router_path": "r"}), three, &env),
            Err(PolicyError::ModelCount { .. })
        ));
    }

    #[test]
    fn the_large_model_hands_every_token_back() {
        let at = Placement {
            model: 1,
            num_models: 2,
            entry: 0,
        };
        let mut p = R2rPolicy::from_kwargs(
            &serde_json::json!({"router_path": "not/loaded/on/the/large/side"}),
            at,
            &PolicyEnv::default(),
        )
        .unwrap();
        assert!(p.knob().is_none());
        let items = [crate::routing::RouteItem {
            rid: 7,
            home: 0,
            token: 5,
            position: 3,
            written_this_turn: 0,
            seed: 0,
            prompt_entropy: None,
        }];
        let view = StepView {
            model: 1,
            num_models: 2,
            items: &items,
            logits: None,
            hidden: None,
            embeddings: None,
            signals: None,
        };
        assert_eq!(
            p.route(&view),
            vec![Dest::Peer {
                to: 0,
                keep_token: true
            }]
        );
    }
}
