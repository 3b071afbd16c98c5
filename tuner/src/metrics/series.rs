//! Scraped series, merged across subservers, and the increase between two scrapes.
//!
//! The estimator reads cumulative counters. Over a whole process lifetime they mix every
//! routing regime the group went through, so the tune loop estimates from the *increase*
//! between two scrapes ([`MetricSeries::increase_since`]), as PromQL's `increase()` does:
//! a counter that went down was reset (the pod restarted) and counts from zero.

use super::exposition::{parse_exposition, MetricsText, Sample};
use crate::error::TunerError;
use std::collections::HashMap;

/// Label pairs, sorted by name.
pub type Labels = Vec<(String, String)>;

/// Series by (name, sorted labels), in order of first appearance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricSeries {
    order: Vec<(String, Labels)>,
    values: HashMap<(String, Labels), f64>,
}

impl MetricSeries {
    /// Merges the scrapes of several subservers. A series present in several scrapes counts
    /// once (its largest value): the models of an in-process group share one registry, which
    /// every one of their admin addresses exposes.
    pub fn from_texts(texts: &[MetricsText]) -> Result<Self, TunerError> {
        let mut series = MetricSeries::default();
        for text in texts {
            series.extend_max(parse_exposition(&text.source, &text.text)?);
        }
        Ok(series)
    }

    /// Series from samples (e.g. the answer of a Prometheus query); duplicates keep the largest.
    pub fn from_samples(samples: impl IntoIterator<Item = Sample>) -> Self {
        let mut series = MetricSeries::default();
        series.extend_max(samples);
        series
    }

    fn extend_max(&mut self, samples: impl IntoIterator<Item = Sample>) {
        for Sample {
            name,
            mut labels,
            value,
        } in samples
        {
            labels.sort();
            let key = (name, labels);
            match self.values.get_mut(&key) {
                Some(v) => *v = v.max(value),
                None => {
                    self.order.push(key.clone());
                    self.values.insert(key, value);
                }
            }
        }
    }

    /// Counters as their increase since `earlier`, gauges as they are now. A counter below its
    /// earlier value was reset and counts from zero; one absent earlier counts from zero.
    pub fn increase_since(&self, earlier: &MetricSeries) -> MetricSeries {
        let values = self
            .values
            .iter()
            .map(|(key, &now)| {
                let value = match earlier.values.get(key) {
                    Some(&before) if is_cumulative(&key.0) && now >= before => now - before,
                    _ => now,
                };
                (key.clone(), value)
            })
            .collect();
        MetricSeries {
            order: self.order.clone(),
            values,
        }
    }

    /// Adds up the series of separate processes (e.g. the same model's pods in several
    /// groups): counters and histogram parts are summed, a gauge keeps its largest value.
    /// Unlike [`Self::from_texts`], which takes one copy of a series several scrapes expose,
    /// this is for parts that count disjoint events.
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a MetricSeries>) -> MetricSeries {
        let mut out = MetricSeries::default();
        for part in parts {
            for key in &part.order {
                let value = part.values[key];
                match out.values.get_mut(key) {
                    Some(v) if is_cumulative(&key.0) => *v += value,
                    Some(v) => *v = v.max(value),
                    None => {
                        out.order.push(key.clone());
                        out.values.insert(key.clone(), value);
                    }
                }
            }
        }
        out
    }

    /// The series of metric `name`: (sorted labels, value), in order of first appearance.
    pub fn named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a [(String, String)], f64)> + 'a {
        self.order
            .iter()
            .filter(move |(n, _)| n == name)
            .map(move |key| (key.1.as_slice(), self.values[key]))
    }

    /// Every (name, labels) in order of first appearance.
    pub fn keys(&self) -> impl Iterator<Item = (&str, &[(String, String)])> {
        self.order.iter().map(|(n, l)| (n.as_str(), l.as_slice()))
    }

    /// True when no series is present.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// Counters and histogram parts accumulate; everything else is a gauge.
fn is_cumulative(name: &str) -> bool {
    ["_total", "_sum", "_count", "_bucket"]
        .iter()
        .any(|suffix| name.ends_with(suffix))
}

/// Value of label `name`, if present.
pub fn label<'a>(labels: &'a [(String, String)], name: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(source: &str, body: &str) -> MetricsText {
        MetricsText {
            source: source.into(),
            text: body.into(),
        }
    }

    #[test]
    fn duplicates_across_scrapes_count_once_and_labels_are_sorted() {
        let a = text("a", "c_total{to=\"x\",model=\"m\"} 3\ng 1\n");
        let b = text("b", "c_total{model=\"m\",to=\"x\"} 5\ng 4\n");
        let s = MetricSeries::from_texts(&[a, b]).unwrap();
        let c: Vec<_> = s.named("c_total").collect();
        assert_eq!(c.len(), 1);
        assert_eq!(label(c[0].0, "to"), Some("x"));
        assert_eq!(c[0].1, 5.0);
        assert_eq!(s.named("g").next().unwrap().1, 4.0);
    }

    #[test]
    fn sum_adds_counters_and_keeps_the_largest_gauge() {
        let a = MetricSeries::from_texts(&[text("a", "c_total{m=\"x\"} 3\ng 1\n")]).unwrap();
        let b =
            MetricSeries::from_texts(&[text("b", "c_total{m=\"x\"} 5\ng 4\nd_total 2\n")]).unwrap();
        let s = MetricSeries::sum([&a, &b]);
        let v = |name| s.named(name).next().unwrap().1;
        assert_eq!(v("c_total"), 8.0);
        assert_eq!(v("g"), 4.0);
        assert_eq!(v("d_total"), 2.0);
    }

    #[test]
    fn increase_subtracts_counters_keeps_gauges_and_survives_resets() {
        let before = MetricSeries::from_texts(&[text(
            "t0",
            "a_total 10\nb_total 50\nh_sum 1.5\nh_count 3\ng 7\n",
        )])
        .unwrap();
        let after = MetricSeries::from_texts(&[text(
            "t1",
            "a_total 25\nb_total 4\nh_sum 2.0\nh_count 5\ng 2\nnew_total 6\n",
        )])
        .unwrap();
        let d = after.increase_since(&before);
        let v = |name| d.named(name).next().unwrap().1;
        assert_eq!(v("a_total"), 15.0);
        assert_eq!(v("b_total"), 4.0, "a reset counts from zero");
        assert_eq!(v("h_sum"), 0.5);
        assert_eq!(v("h_count"), 2.0);
        assert_eq!(v("g"), 2.0, "a gauge is its current value");
        assert_eq!(v("new_total"), 6.0);
    }
}
