//! Autoscaling by concurrency: a pure decision over the gateway's load and
//! a short history of recommendations (as HPA's `behavior` windows).
//!
//! * raw recommendation = `ceil((running + waiting) / targetConcurrencyPerGroup)`,
//!   clamped to `[minGroups, maxGroups]`;
//! * scale **up** to the lowest recommendation of the last
//!   `scaleUpStabilizationSeconds` (the higher count was wanted throughout);
//! * scale **down** to the highest recommendation of the last
//!   `scaleDownStabilizationSeconds`;
//! * a window only counts once the history covers it (after an operator
//!   restart nothing scales down before a full window of samples);
//! * missing metrics hold the current count (clamped to the bounds).

use std::collections::VecDeque;

use crds::v1alpha1::AutoscalingSpec;

/// Why the count is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The load asks for more groups (window satisfied).
    ScaleUp,
    /// The load asks for fewer groups (window satisfied).
    ScaleDown,
    /// Within the windows, or already right.
    Stable,
    /// The count was outside `[minGroups, maxGroups]`.
    Bounds,
    /// No load figure: hold.
    MetricsMissing,
}

/// The autoscaler's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Groups to run.
    pub groups: i32,
    /// Why.
    pub reason: Reason,
}

/// Recommendations of the last few minutes, `(time in s, groups)`, oldest first.
#[derive(Debug, Clone, Default)]
pub struct History {
    samples: VecDeque<(f64, i32)>,
    since: Option<f64>,
}

impl History {
    fn record(&mut self, now: f64, groups: i32, keep: f64) {
        self.since.get_or_insert(now);
        self.samples.push_back((now, groups));
        while self.samples.front().is_some_and(|(t, _)| *t < now - keep) {
            self.samples.pop_front();
        }
    }

    /// Recommendations within `window` seconds of `now`, or `None` when the
    /// history does not reach back that far yet.
    fn window(&self, now: f64, window: f64) -> Option<impl Iterator<Item = i32> + '_> {
        let since = self.since?;
        (since <= now - window).then(|| {
            self.samples
                .iter()
                .filter(move |(t, _)| *t >= now - window)
                .map(|(_, g)| *g)
        })
    }
}

/// The raw recommendation for `load` requests (running + waiting).
pub fn recommend(spec: &AutoscalingSpec, load: u64) -> i32 {
    let per = u64::try_from(spec.target_concurrency_per_group.max(1)).unwrap_or(1);
    let want = i32::try_from(load.div_ceil(per)).unwrap_or(i32::MAX);
    want.clamp(spec.min_groups, spec.max_groups.max(spec.min_groups))
}

/// Decides the group count at time `now` (seconds, monotonic) given the
/// current count and the gateway's load (`None`: metrics missing).
pub fn decide(
    spec: &AutoscalingSpec,
    current: i32,
    load: Option<u64>,
    now: f64,
    history: &mut History,
) -> Decision {
    let (lo, hi) = (spec.min_groups, spec.max_groups.max(spec.min_groups));
    let bounded = current.clamp(lo, hi);
    let Some(load) = load else {
        let reason = if bounded == current {
            Reason::MetricsMissing
        } else {
            Reason::Bounds
        };
        return Decision {
            groups: bounded,
            reason,
        };
    };
    let up = f64::from(spec.scale_up_stabilization_seconds.max(0));
    let down = f64::from(spec.scale_down_stabilization_seconds.max(0));
    history.record(now, recommend(spec, load), up.max(down));
    if bounded != current {
        return Decision {
            groups: bounded,
            reason: Reason::Bounds,
        };
    }
    if let Some(min_wanted) = history.window(now, up).and_then(Iterator::min) {
        if min_wanted > current {
            return Decision {
                groups: min_wanted,
                reason: Reason::ScaleUp,
            };
        }
    }
    if let Some(max_wanted) = history.window(now, down).and_then(Iterator::max) {
        if max_wanted < current {
            return Decision {
                groups: max_wanted,
                reason: Reason::ScaleDown,
            };
        }
    }
    Decision {
        groups: current,
        reason: Reason::Stable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: i32, max: i32, per: i32, up: i32, down: i32) -> AutoscalingSpec {
        AutoscalingSpec {
            enabled: true,
            min_groups: min,
            max_groups: max,
            target_concurrency_per_group: per,
            scale_up_stabilization_seconds: up,
            scale_down_stabilization_seconds: down,
        }
    }

    #[test]
    fn recommendation_is_ceil_of_load_over_target_within_bounds() {
        let s = spec(1, 10, 8, 0, 0);
        assert_eq!(recommend(&s, 0), 1);
        assert_eq!(recommend(&s, 8), 1);
        assert_eq!(recommend(&s, 9), 2);
        assert_eq!(recommend(&s, 1000), 10);
        assert_eq!(recommend(&spec(0, 4, 8, 0, 0), 0), 0);
    }

    #[test]
    fn no_windows_follow_the_load_at_once() {
        let s = spec(1, 10, 10, 0, 0);
        let mut h = History::default();
        let d = decide(&s, 1, Some(35), 0.0, &mut h);
        assert_eq!((d.groups, d.reason), (4, Reason::ScaleUp));
        let d = decide(&s, 4, Some(5), 1.0, &mut h);
        assert_eq!((d.groups, d.reason), (1, Reason::ScaleDown));
    }

    #[test]
    fn flapping_load_does_not_flap_the_count() {
        let s = spec(1, 10, 10, 30, 120);
        let mut h = History::default();
        let mut groups = 2;
        // Load alternates between 1 group's and 5 groups' worth every 10 s.
        for step in 0..60 {
            let load = if step % 2 == 0 { 10 } else { 50 };
            let d = decide(&s, groups, Some(load), f64::from(step) * 10.0, &mut h);
            groups = d.groups;
            assert_eq!(groups, 2, "step {step}: {d:?}");
        }
    }

    #[test]
    fn scale_up_waits_for_its_window_and_takes_the_lowest_wanted() {
        let s = spec(1, 10, 10, 30, 300);
        let mut h = History::default();
        assert_eq!(decide(&s, 1, Some(10), 0.0, &mut h).groups, 1);
        assert_eq!(decide(&s, 1, Some(40), 10.0, &mut h).groups, 1);
        assert_eq!(decide(&s, 1, Some(60), 20.0, &mut h).groups, 1);
        // At 40 s the window [10, 40] holds 4, 6, 6, 6: the lowest is 4.
        assert_eq!(decide(&s, 1, Some(60), 30.0, &mut h).groups, 1);
        let d = decide(&s, 1, Some(60), 40.0, &mut h);
        assert_eq!((d.groups, d.reason), (4, Reason::ScaleUp));
    }

    #[test]
    fn scale_down_needs_a_full_window_of_lower_demand() {
        let s = spec(1, 10, 10, 0, 60);
        let mut h = History::default();
        // Fresh history (e.g. the operator restarted): no scale-down yet.
        let d = decide(&s, 5, Some(0), 0.0, &mut h);
        assert_eq!((d.groups, d.reason), (5, Reason::Stable));
        assert_eq!(decide(&s, 5, Some(0), 30.0, &mut h).groups, 5);
        let d = decide(&s, 5, Some(20), 60.0, &mut h);
        assert_eq!((d.groups, d.reason), (2, Reason::ScaleDown));
    }

    #[test]
    fn missing_metrics_hold_but_bounds_still_apply() {
        let s = spec(2, 4, 10, 0, 0);
        let mut h = History::default();
        let d = decide(&s, 3, None, 0.0, &mut h);
        assert_eq!((d.groups, d.reason), (3, Reason::MetricsMissing));
        let d = decide(&s, 7, None, 1.0, &mut h);
        assert_eq!((d.groups, d.reason), (4, Reason::Bounds));
        let d = decide(&s, 0, Some(100), 2.0, &mut h);
        assert_eq!((d.groups, d.reason), (2, Reason::Bounds));
    }

    #[test]
    fn upper_bound_caps_a_burst() {
        let s = spec(1, 3, 1, 0, 0);
        let mut h = History::default();
        assert_eq!(decide(&s, 1, Some(1_000_000), 0.0, &mut h).groups, 3);
    }

    #[test]
    fn from_zero_groups_a_waiting_request_starts_one_and_idle_returns_to_zero() {
        // minGroups 0: the gateway stays ready with no group and counts the
        // requests waiting for one, so its load is a figure, not missing.
        let s = spec(0, 3, 4, 0, 60);
        let mut h = History::default();
        let d = decide(&s, 0, Some(0), 0.0, &mut h);
        assert_eq!((d.groups, d.reason), (0, Reason::Stable));
        let d = decide(&s, 0, Some(1), 1.0, &mut h);
        assert_eq!((d.groups, d.reason), (1, Reason::ScaleUp));
        // No gateway answering (e.g. it restarts): hold at zero, do not deadlock
        // on a bound.
        let d = decide(&s, 0, None, 2.0, &mut h);
        assert_eq!((d.groups, d.reason), (0, Reason::MetricsMissing));
        // Idle for a whole scale-down window: back to zero.
        assert_eq!(decide(&s, 1, Some(0), 30.0, &mut h).groups, 1);
        let d = decide(&s, 1, Some(0), 62.0, &mut h);
        assert_eq!((d.groups, d.reason), (0, Reason::ScaleDown));
    }
}
