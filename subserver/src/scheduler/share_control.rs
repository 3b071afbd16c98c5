//! `target_large_share`: steer the routing threshold online so the share of
//! output tokens written by the large model(s) approaches a target. Users
//! set cost directly instead of guessing a threshold.
//!
//! The controller sits at the entry model, where every token is committed.
//! Every `window` committed tokens it smooths the window's measured share
//! (EWMA) and moves the threshold against the error. Steps are relative to
//! the threshold's magnitude (thresholds live on very different scales: an
//! entropy bar near 0.03, a probability near 0.5), bounded per window, and
//! the threshold stays inside the policy's range.

use crate::peer::message::ModelIdx;
use policies::routing::{ShareDirection, ThresholdKnob};

/// Committed tokens per control update.
pub const DEFAULT_WINDOW: usize = 32;
/// Weight of the newest window in the smoothed share.
const ALPHA: f64 = 0.3;
/// Relative threshold change per unit of share error.
const GAIN: f64 = 2.0;
/// Largest relative change per update.
const MAX_REL_STEP: f64 = 0.25;
/// Smallest magnitude steps are taken relative to, as a fraction of the
/// range (so a threshold at 0 can move).
const FLOOR: f64 = 1e-3;

/// A bounded, smoothed share controller.
#[derive(Debug)]
pub struct ShareController {
    target: f64,
    knob: ThresholdKnob,
    entry: ModelIdx,
    window: usize,
    counted: usize,
    large: usize,
    smoothed: Option<f64>,
}

impl ShareController {
    /// Steers `knob` toward `target` (in [0, 1]) of tokens written by
    /// models other than `entry`.
    pub fn new(target: f64, knob: ThresholdKnob, entry: ModelIdx) -> Self {
        Self {
            target: target.clamp(0.0, 1.0),
            knob,
            entry,
            window: DEFAULT_WINDOW,
            counted: 0,
            large: 0,
            smoothed: None,
        }
    }

    /// The smoothed share measured so far (`None` before the first window).
    pub fn smoothed_share(&self) -> Option<f64> {
        self.smoothed
    }

    /// Counts one committed token; returns the new threshold when this
    /// token closed a window.
    pub fn observe(&mut self, writer: ModelIdx) -> Option<f64> {
        self.counted += 1;
        if writer != self.entry {
            self.large += 1;
        }
        if self.counted < self.window {
            return None;
        }
        let measured = self.large as f64 / self.counted as f64;
        self.counted = 0;
        self.large = 0;
        let smoothed = match self.smoothed {
            Some(s) => ALPHA * measured + (1.0 - ALPHA) * s,
            None => measured,
        };
        self.smoothed = Some(smoothed);
        let err = self.target - smoothed;
        let sign = match self.knob.direction {
            ShareDirection::RisesWithThreshold => 1.0,
            ShareDirection::FallsWithThreshold => -1.0,
        };
        let current = self.knob.cell.get();
        let scale = current
            .abs()
            .max(FLOOR * (self.knob.max - self.knob.min).abs());
        let rel = (GAIN * err).clamp(-MAX_REL_STEP, MAX_REL_STEP);
        let next = (current + sign * rel * scale).clamp(self.knob.min, self.knob.max);
        self.knob.cell.set(next);
        tracing::debug!(
            measured,
            smoothed,
            target = self.target,
            threshold = next,
            "target_large_share update"
        );
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policies::routing::LiveThreshold;

    /// Runs the controller against a deterministic plant: the share a
    /// threshold yields is `response(threshold)`, realized exactly per window.
    fn settle(
        target: f64,
        start: f64,
        direction: ShareDirection,
        response: impl Fn(f64) -> f64,
    ) -> (f64, f64) {
        let knob = ThresholdKnob {
            cell: LiveThreshold::new(start),
            direction,
            min: 0.0,
            max: 1.0,
        };
        let cell = knob.cell.clone();
        let mut c = ShareController::new(target, knob, 0);
        let mut acc = 0.0;
        for _ in 0..400 {
            let share = response(cell.get());
            // Bresenham-style: emit large tokens at exactly `share`.
            for _ in 0..DEFAULT_WINDOW {
                acc += share;
                let writer = if acc >= 1.0 {
                    acc -= 1.0;
                    1
                } else {
                    0
                };
                c.observe(writer);
            }
        }
        (cell.get(), response(cell.get()))
    }

    #[test]
    fn converges_on_an_entropy_like_bar() {
        // Share falls steeply with an entropy threshold near 0.03.
        let (thr, share) = settle(0.2, 0.03, ShareDirection::FallsWithThreshold, |t| {
            (-t / 0.02).exp()
        });
        assert!((share - 0.2).abs() < 0.02, "share {share} at {thr}");
    }

    #[test]
    fn converges_on_a_probability_bar_from_far() {
        let (thr, share) = settle(0.35, 0.98, ShareDirection::RisesWithThreshold, |t| t * t);
        assert!((share - 0.35).abs() < 0.02, "share {share} at {thr}");
    }

    #[test]
    fn stays_in_range_when_the_target_is_unreachable() {
        let (thr, _) = settle(0.9, 0.5, ShareDirection::RisesWithThreshold, |t| t * 0.5);
        assert_eq!(thr, 1.0);
        let (thr, _) = settle(0.0, 0.5, ShareDirection::RisesWithThreshold, |t| 0.1 + t);
        assert_eq!(thr, 0.0);
    }

    #[test]
    fn updates_once_per_window() {
        let knob = ThresholdKnob {
            cell: LiveThreshold::new(0.5),
            direction: ShareDirection::RisesWithThreshold,
            min: 0.0,
            max: 1.0,
        };
        let mut c = ShareController::new(0.5, knob, 0);
        for _ in 0..DEFAULT_WINDOW - 1 {
            assert_eq!(c.observe(1), None);
        }
        // All large: above target, so a rising knob goes down.
        let next = c.observe(1).unwrap();
        assert!(next < 0.5);
        assert_eq!(c.smoothed_share(), Some(1.0));
    }
}
