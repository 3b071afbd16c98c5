//! The sample window of a tuner: counters since the last accepted estimate, per pod.
//!
//! Each pod (a distinct admin URL) has its own baseline. A pod seen for the first time only
//! sets its baseline; a pod that is gone is forgotten. Each later scrape is estimated from the
//! increase of every known pod over its baseline, summed over the pods (the same model's pods
//! in several groups count disjoint events). When that window holds too few samples, the
//! baselines stay and the window grows by one interval; once an estimate is accepted, the
//! baselines move to that scrape. A change of routing is therefore fully visible one accepted
//! window after it happened (at most two intervals when each interval holds enough samples).

use std::collections::BTreeMap;
use tuner::metrics::MetricSeries;

/// One scrape: series by pod (admin URL).
pub type Scrape = BTreeMap<String, MetricSeries>;

/// Baselines of the pods' counters.
#[derive(Debug, Clone, Default)]
pub struct SampleWindow {
    baselines: Scrape,
}

impl SampleWindow {
    /// The summed increase of the pods of `now` over their baselines, or `None` when no pod of
    /// `now` had one yet. New pods become baselines; pods absent from `now` are forgotten.
    pub fn observe(&mut self, now: &Scrape) -> Option<MetricSeries> {
        self.baselines.retain(|pod, _| now.contains_key(pod));
        let increases: Vec<MetricSeries> = now
            .iter()
            .filter_map(|(pod, series)| {
                self.baselines
                    .get(pod)
                    .map(|base| series.increase_since(base))
            })
            .collect();
        for (pod, series) in now {
            self.baselines
                .entry(pod.clone())
                .or_insert_with(|| series.clone());
        }
        (!increases.is_empty()).then(|| MetricSeries::sum(&increases))
    }

    /// The window ending at `now` was used: the next one starts there.
    pub fn accept(&mut self, now: Scrape) {
        self.baselines = now;
    }

    /// Forgets every baseline (the group was rebuilt).
    pub fn reset(&mut self) {
        self.baselines.clear();
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

    fn scrape(pods: &[(&str, u32)]) -> Scrape {
        pods.iter()
            .map(|(p, v)| (p.to_string(), series(*v)))
            .collect()
    }

    fn value(s: MetricSeries) -> f64 {
        s.named("c_total").next().unwrap().1
    }

    #[test]
    fn grows_until_accepted_then_restarts() {
        let mut w = SampleWindow::default();
        assert!(w.observe(&scrape(&[("a", 10)])).is_none());
        assert_eq!(value(w.observe(&scrape(&[("a", 15)])).unwrap()), 5.0);
        // Not accepted: the next window still starts at 10.
        assert_eq!(value(w.observe(&scrape(&[("a", 30)])).unwrap()), 20.0);
        w.accept(scrape(&[("a", 30)]));
        assert_eq!(value(w.observe(&scrape(&[("a", 31)])).unwrap()), 1.0);
        w.reset();
        assert!(w.observe(&scrape(&[("a", 40)])).is_none());
    }

    #[test]
    fn pods_are_summed_new_ones_start_as_baselines_and_gone_ones_are_forgotten() {
        let mut w = SampleWindow::default();
        assert!(w.observe(&scrape(&[("a", 10), ("b", 100)])).is_none());
        // a +5, b +20; c is new: only its baseline.
        let now = scrape(&[("a", 15), ("b", 120), ("c", 7)]);
        assert_eq!(value(w.observe(&now).unwrap()), 25.0);
        // b is gone; c counts from its baseline.
        let now = scrape(&[("a", 16), ("c", 9)]);
        assert_eq!(value(w.observe(&now).unwrap()), 6.0 + 2.0);
        // b comes back (a restarted pod at the same address): a new baseline.
        let now = scrape(&[("a", 16), ("b", 3), ("c", 9)]);
        assert_eq!(value(w.observe(&now).unwrap()), 6.0 + 2.0);
    }
}
