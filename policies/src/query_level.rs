//! Query-level routing, the baseline token-level routing is compared with:
//! one model writes the whole answer. A request's `model` field picks the
//! writer directly (the gateway pins the request); otherwise a classifier
//! configured here decides once per request:
//!
//! - `always_large_above_prompt_tokens: N`: prompts longer than N tokens go
//!   to the large model before any compute;
//! - `entropy_threshold: τ`: the entry model reads the prompt once; when
//!   its mean normalized next-token entropy over the prompt is above τ the
//!   request is delegated to the large model, which writes every token
//!   (RouteLLM's difficulty score, computed at prefill). The group's
//!   `target_large_share` steers τ like any threshold;
//! - `query_share: s` (with or without `entropy_threshold`): a prompt goes
//!   large when its entropy ranks among the hardest `s` of the prompts seen
//!   so far (the last [`CALIBRATION_WINDOW`], itself included). The rank is
//!   randomized within ties and within the gap to the next rank (a draw from
//!   the request's seed), so every query, the first one included, goes large
//!   with probability `s`: a short benchmark or repeated identical prompts
//!   still see the asked share. τ, reported as the live threshold, is the
//!   `1 - s` quantile;
//! - `random_share: p`: random query-level routing, each query large with
//!   probability `p`, drawn once from the request's seed (mixed with `seed`).
//!
//! With none, the entry model writes everything.

use std::collections::VecDeque;

use crate::draw::uniform;
use crate::routing::{Dest, RoutingPolicy, StepView};
use crate::{
    kwarg_u64, kwarg_unit, LiveThreshold, Placement, PolicyEnv, PolicyError, ShareDirection,
    ThresholdKnob,
};
use protocol::ids::{ModelIdx, Rid};

/// Prompt entropies a `query_share` calibration remembers.
pub const CALIBRATION_WINDOW: usize = 1024;
/// The draw stream of random query-level routing (apart from per-token draws).
const QUERY_STREAM: u64 = 0x0051_7565_7279;
/// The draw stream that breaks ties in the calibrated rank.
const RANK_STREAM: u64 = 0x0052_616e_6b00;
/// The threshold before any prompt is seen, when `query_share` is set alone.
const DEFAULT_ENTROPY_THRESHOLD: f64 = 0.5;

/// Calibrates query-level routing to a share of queries: a prompt goes
/// large when its randomized rank among the recent prompt entropies is in
/// the top `share`.
#[derive(Debug, Clone)]
pub struct ShareCalibration {
    share: f64,
    seen: VecDeque<f32>,
}

/// One calibrated decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareDecision {
    /// The prompt goes to the large model.
    pub large: bool,
    /// The `1 - share` quantile of the remembered entropies (the threshold
    /// reported for the calibration).
    pub threshold: f64,
}

impl ShareCalibration {
    /// A calibration to send `share` of queries large.
    pub fn new(share: f64) -> Self {
        Self {
            share,
            seen: VecDeque::with_capacity(CALIBRATION_WINDOW),
        }
    }

    /// Records a prompt's entropy and decides it. `u` in `[0, 1)` places
    /// the prompt within its rank: its percentile is `(below + u * tied) /
    /// n`, where `tied` counts equal entropies (itself included). Under
    /// exchangeable arrivals that percentile is uniform on `[0, 1)` at every
    /// `n`, so `P(large) = share` from the first query on, ties and all.
    pub fn decide(&mut self, entropy: f32, u: f64) -> ShareDecision {
        if self.seen.len() == CALIBRATION_WINDOW {
            self.seen.pop_front();
        }
        self.seen.push_back(entropy);
        let mut sorted: Vec<f32> = self.seen.iter().copied().collect();
        sorted.sort_by(f32::total_cmp);
        let n = sorted.len();
        let below = sorted.partition_point(|&e| e < entropy);
        let tied = sorted.partition_point(|&e| e <= entropy) - below;
        let percentile = (below as f64 + u * tied as f64) / n as f64;
        let above = (self.share * n as f64).floor() as usize;
        ShareDecision {
            large: percentile >= 1.0 - self.share,
            threshold: sorted[n - above.min(n - 1) - 1] as f64,
        }
    }
}

/// `scheduler_kwargs`: `always_large_above_prompt_tokens`,
/// `entropy_threshold`, `query_share`, `random_share`, `seed`, `target`
/// (the large model, default the last).
pub struct QueryLevelPolicy {
    above_tokens: Option<usize>,
    entropy_threshold: Option<LiveThreshold>,
    calibration: Option<ShareCalibration>,
    random_share: Option<f64>,
    seed: u64,
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
        let mut entropy = kwarg_unit(kwargs, "entropy_threshold", "a normalized entropy")?;
        let query_share = kwarg_unit(kwargs, "query_share", "a share of queries")?;
        let random_share = kwarg_unit(kwargs, "random_share", "a probability")?;
        if random_share.is_some() && (entropy.is_some() || query_share.is_some()) {
            return Err(PolicyError::BadKwarg {
                key: "random_share".into(),
                reason: "random query-level routing ignores the prompt: set it without \
                         entropy_threshold and query_share"
                    .into(),
            });
        }
        if query_share.is_some() {
            entropy.get_or_insert(DEFAULT_ENTROPY_THRESHOLD);
        }
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
            calibration: query_share.map(ShareCalibration::new),
            random_share,
            seed: kwarg_u64(kwargs, "seed")?.unwrap_or(0),
            target: target as ModelIdx,
            at,
        })
    }

    /// The entropy predicate: an uncertain prompt goes to the large model.
    /// With `query_share`, the calibration decides (its rank draw comes from
    /// the request's `seed`) and moves the reported threshold.
    pub fn prompt_is_hard(&mut self, mean_entropy: f32, seed: u64) -> bool {
        let Some(cell) = self.entropy_threshold.as_ref() else {
            return false;
        };
        if let Some(cal) = self.calibration.as_mut() {
            let d = cal.decide(mean_entropy, uniform(seed ^ self.seed, 0, RANK_STREAM));
            cell.set(d.threshold);
            return d.large;
        }
        mean_entropy as f64 > cell.get()
    }

    /// Random query-level: whether the request with `seed` goes large (the
    /// same answer at every step of the request).
    fn drawn_large(&self, seed: u64) -> bool {
        self.random_share
            .is_some_and(|p| uniform(seed ^ self.seed, 0, QUERY_STREAM) < p)
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
        let routes = self.at.num_models > 1 && view.model == self.at.entry;
        view.items
            .iter()
            .map(|item| {
                let large = routes
                    && (self.drawn_large(item.seed)
                        || item
                            .prompt_entropy
                            .is_some_and(|h| self.prompt_is_hard(h, item.seed)));
                if large {
                    Dest::Delegate { to: self.target }
                } else {
                    Dest::Stay
                }
            })
            .collect()
    }

    /// The entropy threshold, unless `query_share` calibrates it (then the
    /// calibration owns it, and `target_large_share` is refused).
    fn knob(&self) -> Option<ThresholdKnob> {
        if self.calibration.is_some() {
            return None;
        }
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
        let mut p = QueryLevelPolicy::from_kwargs(&kw, at(0), &PolicyEnv::default()).unwrap();
        assert!(p.wants_prompt_entropy());
        assert!(p.prompt_is_hard(0.41, 1));
        assert!(!p.prompt_is_hard(0.39, 1));
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

    fn view_of(items: &[crate::routing::RouteItem]) -> StepView<'_> {
        StepView {
            model: 0,
            num_models: 2,
            items,
            logits: None,
            signals: None,
            hidden: None,
            embeddings: None,
        }
    }

    fn item(rid: Rid, seed: u64, prompt_entropy: Option<f32>) -> crate::routing::RouteItem {
        crate::routing::RouteItem {
            rid,
            home: 0,
            token: 1,
            position: 5,
            written_this_turn: 0,
            seed,
            prompt_entropy,
        }
    }

    #[test]
    fn the_calibrated_threshold_sends_the_asked_share_of_queries_large() {
        let mut cal = ShareCalibration::new(0.25);
        // One prompt: the threshold is its entropy; its rank draw decides.
        let d = cal.decide(0.9, 0.8);
        assert_eq!(d.threshold, f64::from(0.9f32));
        assert!(d.large, "a draw in the top quarter of its rank goes large");
        assert!(!cal.decide(0.9, 0.5).large);
        let kw = serde_json::json!({"query_share": 0.25});
        let mut p = QueryLevelPolicy::from_kwargs(&kw, at(0), &PolicyEnv::default()).unwrap();
        assert!(p.wants_prompt_entropy());
        assert!(p.knob().is_none(), "the calibration owns the threshold");
        // Entropies 0.00, 0.01, ..., 0.99 in a shuffled order.
        let order: Vec<u64> = (0..100u64).map(|i| (i * 37) % 100).collect();
        let mut large = 0;
        for (rid, &e) in order.iter().enumerate() {
            let items = [item(rid as Rid, rid as u64, Some(e as f32 / 100.0))];
            if p.route(&view_of(&items)) == vec![Dest::Delegate { to: 1 }] {
                large += 1;
            }
        }
        // Running quantiles over a growing window: about a quarter go large.
        assert!((18..=32).contains(&large), "{large} of 100 went large");
        // With the full window the threshold is the 75% quantile.
        let t = p.entropy_threshold.as_ref().unwrap().get();
        assert!((0.73..=0.76).contains(&t), "threshold {t}");
    }

    #[test]
    fn a_short_run_or_identical_prompts_still_see_the_asked_share() {
        // Eight requests with the same prompt entropy (a repeated prompt), a
        // fresh policy each time: the mean share over many seeds is the
        // asked 0.3, not 0 (cold start) or 1 (ties).
        let mut large = 0;
        let runs = 400u64;
        for run in 0..runs {
            let kw = serde_json::json!({"query_share": 0.3, "seed": run});
            let mut p = QueryLevelPolicy::from_kwargs(&kw, at(0), &PolicyEnv::default()).unwrap();
            for r in 0..8u64 {
                let items = [item(r as Rid, run * 8 + r, Some(0.42))];
                large += usize::from(p.route(&view_of(&items)) == vec![Dest::Delegate { to: 1 }]);
            }
        }
        let share = large as f64 / (runs * 8) as f64;
        assert!((share - 0.3).abs() < 0.03, "share {share}");
    }

    #[test]
    fn random_query_level_draws_once_per_request_at_the_given_share() {
        let kw = serde_json::json!({"random_share": 0.3, "seed": 7});
        let mut p = QueryLevelPolicy::from_kwargs(&kw, at(0), &PolicyEnv::default()).unwrap();
        assert!(!p.wants_prompt_entropy());
        let mut large = 0;
        for seed in 0..2000u64 {
            let items = [item(1, seed, None)];
            let first = p.route(&view_of(&items));
            // The same request gets the same answer at every step.
            let mut later = item(1, seed, None);
            later.position = 9;
            assert_eq!(p.route(&view_of(&[later])), first);
            large += usize::from(first == vec![Dest::Delegate { to: 1 }]);
        }
        let share = large as f64 / 2000.0;
        assert!((share - 0.3).abs() < 0.04, "share {share}");
        // The large model's instance never delegates.
        let mut guest = QueryLevelPolicy::from_kwargs(&kw, at(1), &PolicyEnv::default()).unwrap();
        let items = [item(1, 3, None)];
        let v = StepView {
            model: 1,
            ..view_of(&items)
        };
        assert_eq!(guest.route(&v), vec![Dest::Stay]);
        let e = QueryLevelPolicy::from_kwargs(
            &serde_json::json!({"random_share": 0.3, "query_share": 0.3}),
            at(0),
            &PolicyEnv::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("random_share"), "{e}");
    }
}
