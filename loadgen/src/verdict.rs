//! Computed verdicts for results pages: a target met or not met, with the
//! measured ratio and its spread over seeds, and the marker of results
//! measured on a busy machine. Every page writer uses these, so no page
//! states a target without saying whether it was met.

/// Load average (1 min) above which a page's numbers are marked noisy.
pub const NOISY_LOAD: f64 = 2.0;

/// Which side of the target passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// The measured value must be at least the target.
    AtLeast,
    /// The measured value must be at most the target.
    AtMost,
}

/// One target checked against runs (one value per seed or repeat).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// What was measured ("speed-up of async over serial").
    pub name: String,
    /// The target value.
    pub target: f64,
    /// Which side passes.
    pub goal: Goal,
    /// The measured values, one per seed.
    pub values: Vec<f64>,
}

impl Verdict {
    /// A verdict on `values` (one per seed) against `target`.
    pub fn new(name: &str, target: f64, goal: Goal, values: Vec<f64>) -> Self {
        Self {
            name: name.into(),
            target,
            goal,
            values,
        }
    }

    /// Mean of the values (`None`: none).
    pub fn mean(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .values
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Whether the mean meets the target (`None`: nothing measured).
    pub fn met(&self) -> Option<bool> {
        let m = self.mean()?;
        Some(match self.goal {
            Goal::AtLeast => m >= self.target,
            Goal::AtMost => m <= self.target,
        })
    }

    /// "**met**: 1.23 (mean of 3 seeds, 1.20–1.26) against a target of ≥ 1.10,
    /// ratio 1.12" — the sentence a page prints. One seed is said to be one.
    pub fn sentence(&self) -> String {
        let (Some(mean), Some(met)) = (self.mean(), self.met()) else {
            return format!("{}: **not measured** (no runs)", self.name);
        };
        let finite: Vec<f64> = self
            .values
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        let (lo, hi) = finite
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        let spread = match finite.len() {
            1 => "one run, no spread".to_string(),
            n => format!("mean of {n} runs, spread {} to {}", num(lo), num(hi)),
        };
        let sign = match self.goal {
            Goal::AtLeast => "≥",
            Goal::AtMost => "≤",
        };
        let ratio = if self.target != 0.0 {
            format!(", {:.2}× the target", mean / self.target)
        } else {
            String::new()
        };
        format!(
            "{}: **{}**: {} ({spread}) against a target of {sign} {}{ratio}",
            self.name,
            if met { "met" } else { "not met" },
            num(mean),
            num(self.target)
        )
    }
}

/// A number with 3 significant figures (at least 2 decimals below 10).
fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// The page's warning when other work shared the machine: a load average
/// (1 min) above [`NOISY_LOAD`] when the measurement began, or above the
/// machine's `cores` (at least [`NOISY_LOAD`]) plus one when it ended. The
/// end bar is higher because a measurement that keeps every core busy ends
/// near the core count by its own threads; one more busy job adds about one.
/// `None`: quiet, or unknown.
pub fn noisy_marker(
    load_start: Option<f64>,
    load_end: Option<f64>,
    cores: usize,
) -> Option<String> {
    let end_bar = NOISY_LOAD.max(cores as f64) + 1.0;
    let (when, load, bar) = match (load_start, load_end) {
        (Some(s), _) if s > NOISY_LOAD => ("start", s, NOISY_LOAD),
        (_, Some(e)) if e > end_bar => ("end", e, end_bar),
        _ => return None,
    };
    Some(format!(
        "**Noisy: the load average was {load:.2} at the {when} of the measurement (above \
         {bar}).** Other work shared the CPUs, so throughput and latency here are lower and \
         more variable than on a quiet machine; rerun the command on a quiet one before \
         quoting them."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_say_met_or_not_with_ratio_and_spread() {
        let v = Verdict::new("speed-up", 1.1, Goal::AtLeast, vec![1.2, 1.26]);
        assert_eq!(v.met(), Some(true));
        let s = v.sentence();
        assert!(
            s.contains("**met**: 1.230 (mean of 2 runs, spread 1.200 to 1.260)"),
            "{s}"
        );
        assert!(s.contains("≥ 1.100, 1.12× the target"), "{s}");
        let v = Verdict::new("share error", 0.05, Goal::AtMost, vec![0.08]);
        assert_eq!(v.met(), Some(false));
        assert!(v
            .sentence()
            .contains("**not met**: 0.080 (one run, no spread)"));
        let v = Verdict::new("x", 1.0, Goal::AtLeast, vec![]);
        assert_eq!(v.met(), None);
        assert!(v.sentence().contains("not measured"));
    }

    #[test]
    fn a_busy_start_or_an_end_above_the_runs_own_load_is_noisy() {
        assert!(noisy_marker(Some(0.5), Some(1.9), 2).is_none());
        assert!(noisy_marker(None, None, 2).is_none());
        // A 2-core run that kept both cores busy ends near 2 by itself.
        assert!(noisy_marker(Some(1.1), Some(2.17), 2).is_none());
        let m = noisy_marker(Some(0.4), Some(3.25), 2).unwrap();
        assert!(
            m.contains("3.25 at the end") && m.contains("above 3)"),
            "{m}"
        );
        let m = noisy_marker(Some(2.5), None, 2).unwrap();
        assert!(m.contains("2.50 at the start"), "{m}");
        // On 16 cores the end bar is 17.
        assert!(noisy_marker(Some(1.0), Some(16.5), 16).is_none());
        assert!(noisy_marker(Some(1.0), Some(17.5), 16).is_some());
    }
}
