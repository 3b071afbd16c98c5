//! CITER: a trained router reads the small model's final hidden state and
//! outputs a confidence that its token is good enough. Below the bar τ
//! (default 0.98, the paper's setting) the token is dropped and the large
//! model writes that position (one token, then it hands back).

use crate::handover::{
    load_router, other_model, router_path_kwarg, HandoverBar, HandoverPolicy, HandoverSignal,
};
use crate::router::citer_net::CiterNet;
use crate::routing::signal_health::SignalError;
use crate::routing::StepView;
use crate::{kwarg_unit, Placement, PolicyEnv, PolicyError, ShareDirection};

/// τ when neither the kwargs nor the checkpoint give one.
pub const DEFAULT_THRESHOLD: f64 = 0.98;

/// `scheduler_kwargs`: `router_path` (required: a `torch.save` state dict,
/// a Hugging Face `ORG/REPO/FILE` in the local cache, or a converted
/// directory) and `threshold` (τ; default the checkpoint's threshold,
/// else 0.98).
pub type CiterPolicy = HandoverPolicy<CiterNet>;

/// The predicate: a confidence below τ goes to the large model.
pub fn defers(confidence: f32, threshold: f64) -> bool {
    (confidence as f64) < threshold
}

impl CiterPolicy {
    /// Reads the kwargs; the entry model's instance loads the router on `env.device`.
    pub fn from_kwargs(
        kwargs: &serde_json::Value,
        at: Placement,
        env: &PolicyEnv,
    ) -> Result<Self, PolicyError> {
        let large = other_model("CITER", at)?;
        router_path_kwarg(kwargs)?;
        let given = kwarg_unit(kwargs, "threshold", "a confidence bar")?;
        if at.model != at.entry {
            return Ok(Self::guest("CITER", defers));
        }
        let (net, stored, path) = load_router(kwargs, env, CiterNet::load)?;
        if let Some(f) = env.model {
            if f.hidden_size != Some(net.hidden_size() as usize) {
                return Err(PolicyError::Unusable {
                    policy: "CITER",
                    reason: format!(
                        "the router reads hidden states {} wide, the entry model gives {}",
                        net.hidden_size(),
                        f.hidden_size.map_or("none".to_string(), |h| h.to_string())
                    ),
                });
            }
        }
        let threshold = given
            .or(stored)
            .unwrap_or(DEFAULT_THRESHOLD)
            .clamp(0.0, 1.0);
        tracing::info!(router = %path.display(), hidden = net.hidden_size(), threshold, "CITER router loaded");
        let bar = HandoverBar::new(
            "CITER",
            env.live_threshold(threshold),
            ShareDirection::RisesWithThreshold,
            large,
        );
        Ok(Self::at_entry("CITER", net, bar, defers))
    }
}

impl HandoverSignal for CiterNet {
    /// The router's confidence in each row's token.
    fn signals(&self, view: &StepView<'_>) -> Result<Vec<f32>, SignalError> {
        let Some(hidden) = view.hidden else {
            return Err(SignalError::missing("the backend gives no hidden states"));
        };
        let h = hidden.size()[1];
        if h != self.hidden_size() {
            return Err(SignalError::shape(format!(
                "the router reads hidden states {} wide, the model has {h}",
                self.hidden_size()
            )));
        }
        self.forward(hidden)
            .and_then(|c| Vec::<f32>::try_from(&c.f_to_device(tch::Device::Cpu)?))
            .map_err(SignalError::compute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_confidence_defers_and_the_bar_is_strict() {
        assert!(defers(0.97, 0.98));
        assert!(
            !defers(0.98, 0.98),
            "exactly at τ the small model keeps the token"
        );
        assert!(!defers(0.99, 0.98));
        assert!(!defers(0.0, 0.0), "τ = 0 never defers");
        assert!(defers(0.999_999, 1.0));
    }

    #[test]
    fn kwargs_errors_name_the_key() {
        let at = Placement {
            model: 0,
            num_models: 2,
            entry: 0,
        };
        let env = PolicyEnv::default();
        let e = CiterPolicy::from_kwargs(&serde_json::json!({"threshold": 0.9}), at, &env)
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("scheduler_kwargs.router_path"),
            "{e}"
        );
        let e = CiterPolicy::from_kwargs(
            &serde_json::json!({"router_path": "x", "threshold": -0.1}),
            at,
            &env,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("scheduler_kwargs.threshold"), "{e}");
        let dir = std::env::temp_dir().join(format!("citer-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = CiterPolicy::from_kwargs(
            &serde_json::json!({"router_path": dir.to_str().unwrap()}),
            at,
            &env,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("router.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
