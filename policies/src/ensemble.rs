//! ME (model ensemble by weights): after every token the next writer is drawn
//! from fixed weights over two or more models (the paper: 0.6B / 8B / 32B
//! with 0.5 / 0.3 / 0.2), seeded per request so runs repeat. Every model
//! draws from the same per-request stream (the request's own seed, which
//! guests receive with the request), so the writer of a position does not
//! depend on who draws it.
//!
//! The model that holds the pen draws the next writer itself after each
//! token it writes (`direct`, the default): a model that draws itself keeps
//! writing, the home hands the next position over without computing a
//! token to drop, and a guest that draws another guest hands over to it
//! through the home's inbox without a step at the home; the home catches up
//! on what it skipped (one prefill) when it next writes. With `direct:
//! false` a guest writes one token and returns, and the home steps to draw
//! every position, dropping its token where a guest is drawn (the detour).

use crate::draw::uniform;
use crate::routing::{Dest, RoutingPolicy, StepView};
use crate::{kwarg_bool, kwarg_u64, Placement, PolicyError};
use protocol::ids::ModelIdx;

/// `scheduler_kwargs`: `weights` (one per model, non-negative, not all
/// zero), `seed`, `direct` (default true: the pen holder draws the next
/// writer; false: every position is drawn at the home).
pub struct EnsemblePolicy {
    cumulative: Vec<f64>,
    seed: u64,
    direct: bool,
    at: Placement,
}

impl EnsemblePolicy {
    /// Reads the kwargs.
    pub fn from_kwargs(kwargs: &serde_json::Value, at: Placement) -> Result<Self, PolicyError> {
        let bad = |reason: String| PolicyError::BadKwarg {
            key: "weights".into(),
            reason,
        };
        let weights: Vec<f64> = match kwargs.get("weights") {
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_f64()
                        .ok_or_else(|| bad(format!("expected numbers, got {v}")))
                })
                .collect::<Result<_, _>>()?,
            Some(v) => return Err(bad(format!("expected a list, got {v}"))),
            None => return Err(bad("required: one weight per model".into())),
        };
        if weights.len() != at.num_models {
            return Err(bad(format!(
                "{} weights for {} models",
                weights.len(),
                at.num_models
            )));
        }
        let total: f64 = weights.iter().sum();
        if weights.iter().any(|w| !(*w >= 0.0 && w.is_finite())) || total <= 0.0 {
            return Err(bad("weights must be non-negative and not all zero".into()));
        }
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Ok(Self {
            cumulative,
            seed: kwarg_u64(kwargs, "seed")?.unwrap_or(0),
            direct: kwarg_bool(kwargs, "direct")?.unwrap_or(true),
            at,
        })
    }

    /// The writer of `position` for a request seeded with `seed`.
    pub fn writer(&self, seed: u64, position: usize) -> ModelIdx {
        let u = uniform(seed ^ self.seed, position, 1);
        self.cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.cumulative.len() - 1) as ModelIdx
    }
}

impl RoutingPolicy for EnsemblePolicy {
    fn name(&self) -> &'static str {
        "ME"
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        view.items
            .iter()
            .map(|item| {
                if view.model != self.at.entry {
                    // A guest writes the position it was handed (its token
                    // is kept); who writes the next one?
                    let next = if self.direct {
                        self.writer(item.seed, item.position + 1)
                    } else {
                        item.home
                    };
                    return if next == view.model {
                        Dest::Stay
                    } else {
                        Dest::Peer {
                            to: next,
                            keep_token: true,
                        }
                    };
                }
                match self.writer(item.seed, item.position) {
                    // Not this model's position (the first one, or any
                    // position with the detour): drop the token.
                    w if w != self.at.entry => Dest::Peer {
                        to: w,
                        keep_token: false,
                    },
                    _ if !self.direct => Dest::Stay,
                    // Ours: keep it, and hand the next one over right away
                    // instead of computing a token to drop.
                    _ => match self.writer(item.seed, item.position + 1) {
                        n if n == self.at.entry => Dest::Stay,
                        n => Dest::Peer {
                            to: n,
                            keep_token: true,
                        },
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_follow_the_weights() {
        let at = Placement {
            model: 0,
            num_models: 3,
            entry: 0,
        };
        let p = EnsemblePolicy::from_kwargs(
            &serde_json::json!({"weights": [0.5, 0.3, 0.2], "seed": 4}),
            at,
        )
        .unwrap();
        let n = 60_000;
        let mut counts = [0usize; 3];
        for pos in 0..n {
            counts[p.writer(77, pos) as usize] += 1;
        }
        for (c, w) in counts.iter().zip([0.5, 0.3, 0.2]) {
            assert!((*c as f64 / n as f64 - w).abs() < 0.01, "{counts:?}");
        }
        assert_eq!(p.writer(77, 123), p.writer(77, 123));
        let only_last =
            EnsemblePolicy::from_kwargs(&serde_json::json!({"weights": [0, 0, 2]}), at).unwrap();
        assert!((0..100).all(|pos| only_last.writer(1, pos) == 2));
    }

    #[test]
    fn a_guest_draws_the_next_writer_from_the_requests_stream() {
        use crate::routing::RouteItem;
        let mk = |kw: serde_json::Value| {
            let at = Placement {
                model: 1,
                num_models: 3,
                entry: 0,
            };
            EnsemblePolicy::from_kwargs(&kw, at).unwrap()
        };
        let mut direct = mk(serde_json::json!({"weights": [0.5, 0.3, 0.2], "seed": 4}));
        let mut detour =
            mk(serde_json::json!({"weights": [0.5, 0.3, 0.2], "seed": 4, "direct": false}));
        let mut seen = [0usize; 3];
        for position in 0..300 {
            let items = [RouteItem {
                rid: 1,
                home: 0,
                token: 5,
                position,
                written_this_turn: 1,
                seed: 77,
                prompt_entropy: None,
            }];
            let view = StepView {
                model: 1,
                num_models: 3,
                items: &items,
                logits: None,
                hidden: None,
                embeddings: None,
                signals: None,
            };
            // The writer the home would draw for the next position.
            let next = direct.writer(77, position + 1);
            seen[next as usize] += 1;
            let want = if next == 1 {
                Dest::Stay
            } else {
                Dest::Peer {
                    to: next,
                    keep_token: true,
                }
            };
            assert_eq!(direct.route(&view), vec![want]);
            assert_eq!(
                detour.route(&view),
                vec![Dest::Peer {
                    to: 0,
                    keep_token: true
                }]
            );
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");

        // At the home: a position drawn for a guest is dropped; its own
        // token is kept and the next writer drawn at once.
        let home_at = Placement {
            model: 0,
            num_models: 3,
            entry: 0,
        };
        let kw = serde_json::json!({"weights": [0.5, 0.3, 0.2], "seed": 4});
        let mut home = EnsemblePolicy::from_kwargs(&kw, home_at).unwrap();
        for position in 0..300 {
            let items = [RouteItem {
                rid: 1,
                home: 0,
                token: 5,
                position,
                written_this_turn: 0,
                seed: 77,
                prompt_entropy: None,
            }];
            let view = StepView {
                model: 0,
                num_models: 3,
                items: &items,
                logits: None,
                hidden: None,
                embeddings: None,
                signals: None,
            };
            let (w, next) = (home.writer(77, position), home.writer(77, position + 1));
            let want = match (w, next) {
                (0, 0) => Dest::Stay,
                (0, n) => Dest::Peer {
                    to: n,
                    keep_token: true,
                },
                (w, _) => Dest::Peer {
                    to: w,
                    keep_token: false,
                },
            };
            assert_eq!(home.route(&view), vec![want]);
        }
    }

    #[test]
    fn bad_weights_are_named() {
        let at = Placement {
            model: 0,
            num_models: 3,
            entry: 0,
        };
        for kw in [
            serde_json::json!({}),
            serde_json::json!({"weights": [1, 2]}),
            serde_json::json!({"weights": [0, 0, 0]}),
            serde_json::json!({"weights": [1, -1, 1]}),
            serde_json::json!({"weights": [1, 1, 1], "direct": "yes"}),
        ] {
            let e = EnsemblePolicy::from_kwargs(&kw, at).err().unwrap();
            let key = if kw.get("direct").is_some() {
                "scheduler_kwargs.direct"
            } else {
                "scheduler_kwargs.weights"
            };
            assert!(e.to_string().contains(key), "{e}");
        }
    }
}
