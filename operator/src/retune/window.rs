//! The sample window of one group: counters since the last accepted estimate.
//!
//! The first scrape only sets the baseline. Each later scrape is estimated from its increase
//! over the baseline; when that window holds too few samples, the baseline stays and the
//! window grows by one interval; once an estimate is accepted, the baseline moves to that
//! scrape. A change of routing is therefore fully visible one accepted window after it
//! happened (at most two intervals when each interval holds enough samples).

use tuner::metrics::MetricSeries;

/// Baseline of one group's counters.
#[derive(Debug, Clone, Default)]
pub struct SampleWindow {
    baseline: Option<MetricSeries>,
}

impl SampleWindow {
    /// The increase of `now` over the baseline, or `None` for the first scrape (which becomes
    /// the baseline).
    pub fn observe(&mut self, now: &MetricSeries) -> Option<MetricSeries> {
        match &self.baseline {
            Some(base) => Some(now.increase_since(base)),
            None => {
                self.baseline = Some(now.clone());
                None
            }
        }
    }

    /// The window ending at `now` was used: the next one starts there.
    pub fn accept(&mut self, now: MetricSeries) {
        self.baseline = Some(now);
    }

    /// Forgets the baseline (the group was rebuilt).
    pub fn reset(&mut self) {
        self.baseline = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuner::metrics::MetricsText;

    fn series(v: u32) -> MetricSeries {
        MetricSeries::from_texts(&[MetricsText {
            source: "t".into(),
            text: format!("c_total {v}\n"),
        }])
        .unwrap()
    }

    #[test]
    fn grows_until_accepted_then_restarts() {
        let mut w = SampleWindow::default();
        assert!(w.observe(&series(10)).is_none());
        let value = |s: MetricSeries| s.named("c_total").next().unwrap().1;
        assert_eq!(value(w.observe(&series(15)).unwrap()), 5.0);
        // Not accepted: the next window still starts at 10.
        assert_eq!(value(w.observe(&series(30)).unwrap()), 20.0);
        w.accept(series(30));
        assert_eq!(value(w.observe(&series(31)).unwrap()), 1.0);
        w.reset();
        assert!(w.observe(&series(40)).is_none());
    }
}
