//! Estimation of the tuner's inputs from subserver metrics.
//!
//! - P: `tokenrouter_route_transitions_total{from,to}` counters, normalized per `from` row.
//! - L(b): mean step latency per `(model, batch_bucket)` from the histogram's `_sum / _count`;
//!   buckets become the points of a [`StepLatency::Table`].
//! - Credit: `tokenrouter_tokens_committed_total{model}` over the steps the model's requests
//!   made (the row total of its transitions); the chain only needs this mean per step.
//! - N: the largest `tokenrouter_active_concurrency` gauge.
//!
//! A series that appears at several URLs counts once (its largest value), because subservers
//! of one in-process group may expose the same registry.

use super::exposition::{parse_exposition, MetricsText, Sample};
use crate::error::TunerError;
use crate::inputs::{StepLatency, TunerInputs};
use std::collections::HashMap;

use protocol::metrics::subserver::{
    ACTIVE_CONCURRENCY as CONCURRENCY, ROUTE_TRANSITIONS_TOTAL as TRANSITIONS,
    STEP_LATENCY_SECONDS_COUNT as LATENCY_COUNT, STEP_LATENCY_SECONDS_SUM as LATENCY_SUM,
    TOKENS_COMMITTED_TOTAL as COMMITTED,
};

/// What the estimator requires of the metrics.
#[derive(Debug, Clone)]
pub struct EstimateOptions {
    /// Model order; empty means order of first appearance in the metrics.
    pub models: Vec<String>,
    /// Fewest routing transitions out of each model.
    pub min_transitions: f64,
    /// Fewest steps per `(model, batch_bucket)` for that bucket to count as a latency point.
    pub min_latency_samples: f64,
}

impl Default for EstimateOptions {
    fn default() -> Self {
        EstimateOptions {
            models: Vec::new(),
            min_transitions: 200.0,
            min_latency_samples: 20.0,
        }
    }
}

/// Inputs estimated from metrics, with the sample counts behind them.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsEstimate {
    /// Model names in model order.
    pub names: Vec<String>,
    /// Routing matrix P.
    pub transition: Vec<Vec<f64>>,
    /// Transitions observed out of each model.
    pub transition_samples: Vec<f64>,
    /// Step latency per model (a table over the batch buckets with enough samples).
    pub latency: Vec<StepLatency>,
    /// Steps behind each model's latency points.
    pub latency_samples: Vec<f64>,
    /// Committed tokens per request-step per model, when `tokens_committed_total` is exposed.
    pub mean_credit: Option<Vec<f64>>,
    /// Active requests, when the gauge is exposed and positive.
    pub concurrency: Option<usize>,
}

impl MetricsEstimate {
    /// A credit matrix with the estimated mean credit of model m in every entry of row m
    /// (the chain only uses `sum_j P[m][j] C[m][j]`).
    pub fn credit_matrix(&self) -> Option<Vec<Vec<f64>>> {
        self.mean_credit
            .as_ref()
            .map(|c| c.iter().map(|&cm| vec![cm; c.len()]).collect())
    }

    /// Tuner inputs from this estimate; `credit` and `concurrency` override the estimated ones.
    pub fn to_inputs(
        &self,
        credit: Option<Vec<Vec<f64>>>,
        delta_ms: f64,
        concurrency: Option<usize>,
    ) -> Result<TunerInputs, TunerError> {
        let credit =
            credit
                .or_else(|| self.credit_matrix())
                .ok_or_else(|| TunerError::MissingMetric {
                    metric: COMMITTED.into(),
                    detail: " (needed for the credit per step; pass --credit instead)".into(),
                })?;
        let n = concurrency
            .or(self.concurrency)
            .ok_or_else(|| TunerError::MissingMetric {
                metric: CONCURRENCY.into(),
                detail: " or it is 0 (pass --concurrency instead)".into(),
            })?;
        TunerInputs::new(
            self.latency.clone(),
            self.transition.clone(),
            credit,
            delta_ms,
            n,
        )?
        .with_names(self.names.clone())
    }
}

/// Merged series: (name, sorted labels) -> largest value, in order of first appearance.
struct Series {
    order: Vec<(String, Vec<(String, String)>)>,
    values: HashMap<(String, Vec<(String, String)>), f64>,
}

impl Series {
    fn merge(texts: &[MetricsText]) -> Result<Self, TunerError> {
        let mut series = Series {
            order: Vec::new(),
            values: HashMap::new(),
        };
        for text in texts {
            for Sample {
                name,
                mut labels,
                value,
            } in parse_exposition(&text.source, &text.text)?
            {
                labels.sort();
                let key = (name, labels);
                match series.values.get_mut(&key) {
                    Some(v) => *v = v.max(value),
                    None => {
                        series.order.push(key.clone());
                        series.values.insert(key, value);
                    }
                }
            }
        }
        Ok(series)
    }

    fn named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a [(String, String)], f64)> + 'a {
        self.order
            .iter()
            .filter(move |(n, _)| n == name)
            .map(move |key| (key.1.as_slice(), self.values[key]))
    }
}

fn label<'a>(labels: &'a [(String, String)], name: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn required_label<'a>(
    labels: &'a [(String, String)],
    name: &str,
    metric: &str,
) -> Result<&'a str, TunerError> {
    label(labels, name).ok_or_else(|| TunerError::MissingMetric {
        metric: metric.into(),
        detail: format!(" label `{name}` on a series with labels {labels:?}"),
    })
}

/// Estimates the tuner's inputs from the metrics of every subserver.
pub fn estimate_from_metrics(
    texts: &[MetricsText],
    options: &EstimateOptions,
) -> Result<MetricsEstimate, TunerError> {
    let series = Series::merge(texts)?;
    let names = model_order(&series, options)?;
    let m = names.len();
    let index = |name: &str, metric: &str| -> Result<usize, TunerError> {
        names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| TunerError::InvalidInput {
                field: "models".into(),
                reason: format!("{metric} mentions model \"{name}\", which is not in {names:?}"),
            })
    };

    let mut counts = vec![vec![0.0; m]; m];
    for (labels, value) in series.named(TRANSITIONS) {
        let from = index(required_label(labels, "from", TRANSITIONS)?, TRANSITIONS)?;
        let to = index(required_label(labels, "to", TRANSITIONS)?, TRANSITIONS)?;
        counts[from][to] += value;
    }
    let mut transition = vec![vec![0.0; m]; m];
    let mut transition_samples = vec![0.0; m];
    for (from, row) in counts.iter().enumerate() {
        let total: f64 = row.iter().sum();
        if total.is_nan() || total < options.min_transitions {
            return Err(TunerError::TooFewSamples {
                what: format!(
                    "routing transitions from model \"{}\" ({TRANSITIONS})",
                    names[from]
                ),
                found: total,
                required: options.min_transitions,
            });
        }
        transition_samples[from] = total;
        for (to, &c) in row.iter().enumerate() {
            transition[from][to] = c / total;
        }
    }

    let latency_by_bucket = latency_points(&series, &names, &index)?;
    let mut latency = Vec::with_capacity(m);
    let mut latency_samples = vec![0.0; m];
    for (model, buckets) in latency_by_bucket.into_iter().enumerate() {
        let most = buckets.iter().map(|b| b.2).fold(0.0, f64::max);
        let points: Vec<(usize, f64)> = buckets
            .iter()
            .filter(|b| b.2 >= options.min_latency_samples)
            .map(|&(batch, sum_s, count)| (batch, 1000.0 * sum_s / count))
            .collect();
        if points.is_empty() {
            return Err(TunerError::TooFewSamples {
                what: format!(
                    "step latency of model \"{}\" (no batch bucket of {LATENCY_COUNT})",
                    names[model]
                ),
                found: most,
                required: options.min_latency_samples,
            });
        }
        latency_samples[model] = buckets
            .iter()
            .filter(|b| b.2 >= options.min_latency_samples)
            .map(|b| b.2)
            .sum();
        latency.push(if points.len() == 1 {
            StepLatency::Constant(points[0].1)
        } else {
            StepLatency::Table(points)
        });
    }

    let mut committed = vec![None; m];
    for (labels, value) in series.named(COMMITTED) {
        let model = index(required_label(labels, "model", COMMITTED)?, COMMITTED)?;
        *committed[model].get_or_insert(0.0) += value;
    }
    let mean_credit = committed
        .iter()
        .zip(&transition_samples)
        .map(|(c, steps)| c.map(|c| c / steps))
        .collect::<Option<Vec<f64>>>();

    let concurrency = series
        .named(CONCURRENCY)
        .map(|(_, v)| v)
        .filter(|v| v.is_finite())
        .fold(None, |acc: Option<f64>, v| {
            Some(acc.map_or(v, |a| a.max(v)))
        })
        .map(|v| v.round())
        .filter(|&v| v >= 1.0)
        .map(|v| v as usize);

    Ok(MetricsEstimate {
        names,
        transition,
        transition_samples,
        latency,
        latency_samples,
        mean_credit,
        concurrency,
    })
}

/// Model names from `options.models` or in order of first appearance.
fn model_order(series: &Series, options: &EstimateOptions) -> Result<Vec<String>, TunerError> {
    if !options.models.is_empty() {
        return Ok(options.models.clone());
    }
    let mut names: Vec<String> = Vec::new();
    for (name, labels) in &series.order {
        let keys: &[&str] = match name.as_str() {
            TRANSITIONS => &["from", "to"],
            LATENCY_SUM | LATENCY_COUNT | COMMITTED => &["model"],
            _ => &[],
        };
        for key in keys {
            if let Some(model) = label(labels, key) {
                if !names.iter().any(|n| n == model) {
                    names.push(model.to_string());
                }
            }
        }
    }
    if names.is_empty() {
        return Err(TunerError::MissingMetric {
            metric: TRANSITIONS.into(),
            detail: " (no model found in the metrics)".into(),
        });
    }
    Ok(names)
}

/// One latency point: (batch bucket, latency sum in s, step count).
type LatencyBucket = (usize, f64, f64);

/// Per model: its latency buckets, ascending by bucket.
fn latency_points(
    series: &Series,
    names: &[String],
    index: &dyn Fn(&str, &str) -> Result<usize, TunerError>,
) -> Result<Vec<Vec<LatencyBucket>>, TunerError> {
    let mut sums: HashMap<(usize, usize), f64> = HashMap::new();
    for (labels, value) in series.named(LATENCY_SUM) {
        let model = index(required_label(labels, "model", LATENCY_SUM)?, LATENCY_SUM)?;
        let bucket = batch_bucket(labels, LATENCY_SUM)?;
        *sums.entry((model, bucket)).or_insert(0.0) += value;
    }
    let mut points = vec![Vec::new(); names.len()];
    for (labels, count) in series.named(LATENCY_COUNT) {
        let model = index(
            required_label(labels, "model", LATENCY_COUNT)?,
            LATENCY_COUNT,
        )?;
        let bucket = batch_bucket(labels, LATENCY_COUNT)?;
        let sum = sums
            .get(&(model, bucket))
            .copied()
            .ok_or_else(|| TunerError::MissingMetric {
                metric: LATENCY_SUM.into(),
                detail: format!(" for model \"{}\", batch_bucket \"{bucket}\"", names[model]),
            })?;
        points[model].push((bucket, sum, count));
    }
    for p in &mut points {
        p.sort_by_key(|b: &LatencyBucket| b.0);
        p.dedup_by_key(|b| b.0);
    }
    Ok(points)
}

fn batch_bucket(labels: &[(String, String)], metric: &str) -> Result<usize, TunerError> {
    let text = required_label(labels, "batch_bucket", metric)?;
    match text.parse::<usize>() {
        Ok(b) if b >= 1 => Ok(b),
        _ => Err(TunerError::InvalidInput {
            field: format!("{metric}{{batch_bucket=\"{text}\"}}"),
            reason: "batch_bucket must be a batch size >= 1".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> MetricsText {
        let quick = "# TYPE tokenrouter_route_transitions_total counter\n\
tokenrouter_route_transitions_total{from=\"quick\",to=\"quick\"} 650\n\
tokenrouter_route_transitions_total{from=\"quick\",to=\"reference\"} 350\n\
tokenrouter_step_latency_seconds_bucket{model=\"quick\",batch_bucket=\"1\",le=\"0.01\"} 100\n\
tokenrouter_step_latency_seconds_sum{model=\"quick\",batch_bucket=\"1\"} 0.6\n\
tokenrouter_step_latency_seconds_count{model=\"quick\",batch_bucket=\"1\"} 100\n\
tokenrouter_step_latency_seconds_sum{model=\"quick\",batch_bucket=\"4\"} 0.325\n\
tokenrouter_step_latency_seconds_count{model=\"quick\",batch_bucket=\"4\"} 50\n\
tokenrouter_step_latency_seconds_sum{model=\"quick\",batch_bucket=\"16\"} 0.08\n\
tokenrouter_step_latency_seconds_count{model=\"quick\",batch_bucket=\"16\"} 5\n\
tokenrouter_tokens_committed_total{model=\"quick\"} 650\n\
tokenrouter_active_concurrency 4\n";
        let reference =
            "tokenrouter_route_transitions_total{from=\"reference\",to=\"quick\"} 350\n\
tokenrouter_step_latency_seconds_sum{model=\"reference\",batch_bucket=\"2\"} 2.79\n\
tokenrouter_step_latency_seconds_count{model=\"reference\",batch_bucket=\"2\"} 100\n\
tokenrouter_tokens_committed_total{model=\"reference\"} 350\n\
tokenrouter_active_concurrency 3\n";
        MetricsText {
            source: name.into(),
            text: if name == "quick" {
                quick.into()
            } else {
                reference.into()
            },
        }
    }

    #[test]
    fn estimates_routing_latency_credit_and_concurrency() {
        let texts = [fixture("quick"), fixture("reference")];
        let options = EstimateOptions {
            min_transitions: 300.0,
            ..EstimateOptions::default()
        };
        let e = estimate_from_metrics(&texts, &options).unwrap();
        assert_eq!(e.names, vec!["quick", "reference"]);
        assert_eq!(e.transition, vec![vec![0.65, 0.35], vec![1.0, 0.0]]);
        assert_eq!(e.transition_samples, vec![1000.0, 350.0]);
        // Bucket 16 has 5 < 20 steps and is left out.
        match &e.latency[0] {
            StepLatency::Table(points) => {
                assert_eq!(points.len(), 2);
                assert_eq!(points[0].0, 1);
                assert!((points[0].1 - 6.0).abs() < 1e-9);
                assert_eq!(points[1].0, 4);
                assert!((points[1].1 - 6.5).abs() < 1e-9);
            }
            other => panic!("expected a table, got {other:?}"),
        }
        match e.latency[1] {
            StepLatency::Constant(ms) => assert!((ms - 27.9).abs() < 1e-9),
            ref other => panic!("expected a constant, got {other:?}"),
        }
        assert_eq!(e.latency_samples, vec![150.0, 100.0]);
        // 650 committed tokens over 1000 request-steps: R2R's 0.65 per small-model step.
        assert_eq!(e.mean_credit, Some(vec![0.65, 1.0]));
        assert_eq!(e.concurrency, Some(4));
        let inputs = e.to_inputs(None, 0.1, None).unwrap();
        assert_eq!(
            inputs.names(),
            &["quick".to_string(), "reference".to_string()]
        );
        assert!((inputs.mean_credit(0) - 0.65).abs() < 1e-12);
        assert_eq!(inputs.concurrency(), 4);
    }

    #[test]
    fn model_order_follows_the_option() {
        let texts = [fixture("quick"), fixture("reference")];
        let options = EstimateOptions {
            models: vec!["reference".into(), "quick".into()],
            min_transitions: 300.0,
            ..EstimateOptions::default()
        };
        let e = estimate_from_metrics(&texts, &options).unwrap();
        assert_eq!(e.names, vec!["reference", "quick"]);
        assert_eq!(e.transition, vec![vec![0.0, 1.0], vec![0.35, 0.65]]);
        let options = EstimateOptions {
            models: vec!["quick".into()],
            ..options
        };
        let err = estimate_from_metrics(&texts, &options).unwrap_err();
        assert!(
            err.to_string().contains("\"reference\", which is not in"),
            "{err}"
        );
    }

    #[test]
    fn refuses_too_few_samples() {
        let texts = [fixture("quick"), fixture("reference")];
        // 350 transitions out of reference < 400.
        let options = EstimateOptions {
            min_transitions: 400.0,
            ..EstimateOptions::default()
        };
        match estimate_from_metrics(&texts, &options).unwrap_err() {
            TunerError::TooFewSamples {
                what,
                found,
                required,
            } => {
                assert!(what.contains("\"reference\""), "{what}");
                assert_eq!((found, required), (350.0, 400.0));
            }
            other => panic!("expected TooFewSamples, got {other}"),
        }
        let options = EstimateOptions {
            min_transitions: 300.0,
            min_latency_samples: 500.0,
            ..EstimateOptions::default()
        };
        let err = estimate_from_metrics(&texts, &options).unwrap_err();
        assert!(
            err.to_string().contains("step latency of model \"quick\""),
            "{err}"
        );
        // Without the reference subserver its row is empty.
        let err =
            estimate_from_metrics(&[fixture("quick")], &EstimateOptions::default()).unwrap_err();
        assert!(err.to_string().contains("too few samples"), "{err}");
    }

    #[test]
    fn duplicated_series_count_once() {
        let texts = [fixture("quick"), fixture("quick"), fixture("reference")];
        let options = EstimateOptions {
            min_transitions: 300.0,
            ..EstimateOptions::default()
        };
        let e = estimate_from_metrics(&texts, &options).unwrap();
        assert_eq!(e.transition_samples, vec![1000.0, 350.0]);
    }

    #[test]
    fn missing_credit_and_concurrency_need_overrides() {
        let text = MetricsText {
            source: "only-routing".into(),
            text: "tokenrouter_route_transitions_total{from=\"a\",to=\"b\"} 300\n\
tokenrouter_route_transitions_total{from=\"b\",to=\"a\"} 300\n\
tokenrouter_step_latency_seconds_sum{model=\"a\",batch_bucket=\"1\"} 0.3\n\
tokenrouter_step_latency_seconds_count{model=\"a\",batch_bucket=\"1\"} 50\n\
tokenrouter_step_latency_seconds_sum{model=\"b\",batch_bucket=\"1\"} 1.0\n\
tokenrouter_step_latency_seconds_count{model=\"b\",batch_bucket=\"1\"} 50\n"
                .into(),
        };
        let e = estimate_from_metrics(&[text], &EstimateOptions::default()).unwrap();
        assert_eq!(e.mean_credit, None);
        assert_eq!(e.concurrency, None);
        let err = e.to_inputs(None, 0.1, Some(2)).unwrap_err();
        assert!(err.to_string().contains("tokens_committed_total"), "{err}");
        let err = e
            .to_inputs(Some(vec![vec![1.0; 2]; 2]), 0.1, None)
            .unwrap_err();
        assert!(err.to_string().contains("active_concurrency"), "{err}");
        let inputs = e
            .to_inputs(Some(vec![vec![1.0; 2]; 2]), 0.1, Some(2))
            .unwrap();
        assert_eq!(inputs.slots(1, 1), 200);
    }
}
