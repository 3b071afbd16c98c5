//! The one-token hand-over shared by R2R, CITER and Co-LLM: two models, the
//! entry (small) model writes; when the policy's signal fires, its token is
//! dropped and the other (large) model writes that position, one token,
//! and hands the request back with it.

use crate::{LiveThreshold, Placement, PolicyError, ShareDirection, ThresholdKnob};
use protocol::ids::ModelIdx;
use std::path::PathBuf;

use crate::router::{RouterCheckpoint, RouterError};
use crate::routing::{Dest, RoutingPolicy, StepView};
use crate::signal_health::{SignalError, SignalHealth};
use crate::PolicyEnv;

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
/// model, and the count of steps whose signal failed.
#[derive(Debug)]
pub struct HandoverBar {
    threshold: LiveThreshold,
    direction: ShareDirection,
    large: ModelIdx,
    health: SignalHealth,
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
            threshold,
            direction,
            large,
            health: SignalHealth::new(policy),
        }
    }

    /// Steps whose signal could not be computed.
    pub fn signal_failures(&self) -> u64 {
        self.health.failures()
    }

    /// The failure counts the scheduler exports.
    pub fn health(&self) -> SignalHealth {
        self.health.clone()
    }

    /// Destinations from one signal per row: rows where `fires(signal,
    /// threshold)` go to the large model without their token. A step without
    /// a signal is counted and logged (`SignalHealth`); the entry keeps
    /// writing for that step.
    pub fn route(
        &mut self,
        signals: Result<Vec<f32>, SignalError>,
        rows: usize,
        fires: impl Fn(f32, f64) -> bool,
    ) -> Vec<Dest> {
        let signals = match signals {
            Ok(s) if s.len() == rows => s,
            Ok(s) => {
                self.health.failed(&SignalError::shape(format!(
                    "{} signals for {rows} rows",
                    s.len()
                )));
                return vec![Dest::Stay; rows];
            }
            Err(e) => {
                self.health.failed(&e);
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

/// What a one-token hand-over policy reads at the entry model.
pub trait HandoverSignal: Send {
    /// One signal per `view.items` row, or why there is none this step.
    fn signals(&self, view: &StepView<'_>) -> Result<Vec<f32>, SignalError>;
}

/// A one-token hand-over policy (R2R, CITER, Co-LLM): at the entry model a
/// signal and its bar decide; the large model hands every token back.
pub struct HandoverPolicy<S> {
    name: &'static str,
    fires: fn(f32, f64) -> bool,
    entry: Option<(S, HandoverBar)>,
}

impl<S: HandoverSignal> HandoverPolicy<S> {
    /// The entry model's instance: rows where `fires(signal, threshold)` go large.
    pub fn at_entry(
        name: &'static str,
        signal: S,
        bar: HandoverBar,
        fires: fn(f32, f64) -> bool,
    ) -> Self {
        Self {
            name,
            fires,
            entry: Some((signal, bar)),
        }
    }

    /// The large model's instance (no signal, no bar).
    pub fn guest(name: &'static str, fires: fn(f32, f64) -> bool) -> Self {
        Self {
            name,
            fires,
            entry: None,
        }
    }
}

impl<S: HandoverSignal> RoutingPolicy for HandoverPolicy<S> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        match self.entry.as_mut() {
            None => guest_dests(view),
            Some((signal, bar)) => {
                let signals = signal.signals(view);
                bar.route(signals, view.items.len(), self.fires)
            }
        }
    }

    fn knob(&self) -> Option<ThresholdKnob> {
        self.entry.as_ref().map(|(_, bar)| bar.knob())
    }

    fn signal_health(&self) -> Option<SignalHealth> {
        self.entry.as_ref().map(|(_, bar)| bar.health())
    }
}

/// Opens the router at the `router_path` kwarg (a `torch.save` file as
/// published, a Hugging Face `ORG/REPO/FILE` in the local cache, or a
/// converted directory; resolved in `env`) and builds its network with
/// `load`; warns about unused tensors. Returns the network, the
/// checkpoint's threshold and the path read.
pub fn load_router<N>(
    kwargs: &serde_json::Value,
    env: &PolicyEnv,
    load: impl FnOnce(&mut RouterCheckpoint) -> Result<N, RouterError>,
) -> Result<(N, Option<f64>, PathBuf), PolicyError> {
    let bad = |reason: String| PolicyError::BadKwarg {
        key: "router_path".into(),
        reason,
    };
    let path = env
        .resolve_checkpoint(router_path_kwarg(kwargs)?)
        .map_err(bad)?;
    let mut ck = RouterCheckpoint::open(&path, env.device).map_err(|e| bad(e.to_string()))?;
    let net = load(&mut ck).map_err(|e| bad(e.to_string()))?;
    let unused = ck.weights.leftover();
    if !unused.is_empty() {
        tracing::warn!(router = %path.display(), ?unused, "router tensors the network does not use");
    }
    Ok((net, ck.meta.threshold, path))
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
            reason: "required: the router checkpoint (the published .pt file, a Hugging Face \
                     ORG/REPO/FILE in the local cache, or a `tokenrouter convert-router` directory; \
                     the official layout calls it `model_path`)"
                .into(),
        }),
        Some(v) => Err(PolicyError::BadKwarg {
            key: "router_path".into(),
            reason: format!("expected a path string, got {v}"),
        }),
    }
}
