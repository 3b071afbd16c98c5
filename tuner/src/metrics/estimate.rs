//! Estimation of the tuner's inputs from subserver metrics.
//!
//! The chain's inputs are read where the scheduler decides them, never reconstructed from the
//! committed output: for drop-and-rewrite policies (R2R, CITER, Co-LLM, Random) the entry
//! model's dropped token is never committed, so writer-to-writer transitions of the output
//! mistake "the large model wrote the next token" for "the request went back to the small
//! model". Instead:
//!
//! - P: `route_decisions_total{model,to}` normalized per `model` row: where a request goes at
//!   the end of a step on `model` (`to == model`: it stays).
//! - C: `route_credited_tokens_total{model,to}` over `route_decisions_total{model,to}`: the
//!   output tokens each move credits (0 for a dropped token).
//! - L(b): `step_seconds_by_batch_total / steps_by_batch_total` per `(model, batch_size)`, a
//!   [`StepLatency::Table`] over the batch sizes with enough steps.
//! - N: the largest `active_concurrency` gauge.
//!
//! The estimate works on any [`MetricSeries`]: a scrape, the increase between two scrapes
//! (what the operator's tune loop uses, so that a change of routing shows within one window),
//! or the answer of a Prometheus query.

use super::exposition::MetricsText;
use super::series::{label, MetricSeries};
use crate::error::TunerError;
use crate::inputs::{StepLatency, TunerInputs};
use std::collections::BTreeMap;

/// The series the estimator reads (names from `protocol`, where the subserver takes them).
pub use protocol::metrics::subserver::{
    ACTIVE_CONCURRENCY as CONCURRENCY, ROUTE_CREDITED_TOKENS_TOTAL as CREDITED,
    ROUTE_DECISIONS_TOTAL as DECISIONS, STEPS_BY_BATCH_TOTAL as STEPS_BY_BATCH,
    STEP_SECONDS_BY_BATCH_TOTAL as SECONDS_BY_BATCH,
};

/// What the estimator requires of the metrics.
#[derive(Debug, Clone)]
pub struct EstimateOptions {
    /// Model order (the entry model first); empty means order of first appearance.
    pub models: Vec<String>,
    /// Fewest routing decisions out of each model.
    pub min_decisions: f64,
    /// Fewest steps at one batch size for it to count as a latency point.
    pub min_latency_samples: f64,
}

impl Default for EstimateOptions {
    fn default() -> Self {
        EstimateOptions {
            models: Vec::new(),
            min_decisions: 200.0,
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
    /// Routing decisions observed out of each model.
    pub decisions: Vec<f64>,
    /// Credit matrix C (0 where no decision was observed).
    pub credit: Vec<Vec<f64>>,
    /// Step latency per model (a table over the batch sizes with enough steps).
    pub latency: Vec<StepLatency>,
    /// Steps behind each model's latency points.
    pub latency_samples: Vec<f64>,
    /// Active requests, when the gauge is exposed and positive.
    pub concurrency: Option<usize>,
}

impl MetricsEstimate {
    /// Tuner inputs from this estimate; `credit` and `concurrency` override the estimated ones.
    pub fn to_inputs(
        &self,
        credit: Option<Vec<Vec<f64>>>,
        delta_ms: f64,
        concurrency: Option<usize>,
    ) -> Result<TunerInputs, TunerError> {
        let n = concurrency
            .or(self.concurrency)
            .ok_or_else(|| TunerError::MissingMetric {
                metric: CONCURRENCY.into(),
                detail: " or it is 0 (pass --concurrency instead)".into(),
            })?;
        TunerInputs::new(
            self.latency.clone(),
            self.transition.clone(),
            credit.unwrap_or_else(|| self.credit.clone()),
            delta_ms,
            n,
        )?
        .with_names(self.names.clone())
    }
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

/// Estimates the tuner's inputs from the scrapes of every subserver of a group.
pub fn estimate_from_metrics(
    texts: &[MetricsText],
    options: &EstimateOptions,
) -> Result<MetricsEstimate, TunerError> {
    estimate(&MetricSeries::from_texts(texts)?, options)
}

/// Estimates the tuner's inputs from merged series (a scrape or an increase).
pub fn estimate(
    series: &MetricSeries,
    options: &EstimateOptions,
) -> Result<MetricsEstimate, TunerError> {
    let names = model_order(series, options)?;
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
    let matrix = |metric: &str| -> Result<Vec<Vec<f64>>, TunerError> {
        let mut out = vec![vec![0.0; m]; m];
        for (labels, value) in series.named(metric) {
            let from = index(required_label(labels, "model", metric)?, metric)?;
            let to = index(required_label(labels, "to", metric)?, metric)?;
            out[from][to] += value;
        }
        Ok(out)
    };

    let counts = matrix(DECISIONS)?;
    let credited = matrix(CREDITED)?;
    let mut transition = vec![vec![0.0; m]; m];
    let mut credit = vec![vec![0.0; m]; m];
    let mut decisions = vec![0.0; m];
    let unvisited = unvisited_models(&counts);
    for from in 0..m {
        let total: f64 = counts[from].iter().sum();
        if unvisited[from] && (total.is_nan() || total < options.min_decisions) {
            // Nothing routes to it, so the chain never enters it and its row cannot move
            // the throughput: a hand-back to the entry stands in, instead of refusing every
            // round for as long as the routing keeps it idle.
            decisions[from] = total;
            transition[from][0] = 1.0;
            continue;
        }
        if total.is_nan() || total < options.min_decisions {
            return Err(TunerError::TooFewSamples {
                what: format!(
                    "routing decisions of model \"{}\" ({DECISIONS})",
                    names[from]
                ),
                found: total,
                required: options.min_decisions,
            });
        }
        decisions[from] = total;
        for to in 0..m {
            let c = counts[from][to];
            transition[from][to] = c / total;
            if c > 0.0 {
                credit[from][to] = credited[from][to] / c;
            }
        }
    }

    let (latency, latency_samples) = latency_tables(series, &names, &index, options, &unvisited)?;
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
        decisions,
        credit,
        latency,
        latency_samples,
        concurrency,
    })
}

/// Per model (entry first), whether no other model handed it a decision in the window: the
/// chain then never enters it. The entry model is always visited (requests start there).
fn unvisited_models(counts: &[Vec<f64>]) -> Vec<bool> {
    (0..counts.len())
        .map(|to| to != 0 && (0..counts.len()).all(|from| from == to || counts[from][to] == 0.0))
        .collect()
}

/// Per model: a latency table over the batch sizes with at least `min_latency_samples` steps,
/// and the steps behind it. An unvisited model with no such batch size borrows the entry
/// model's latency (its value cannot matter to a chain that never enters it).
fn latency_tables(
    series: &MetricSeries,
    names: &[String],
    index: &dyn Fn(&str, &str) -> Result<usize, TunerError>,
    options: &EstimateOptions,
    unvisited: &[bool],
) -> Result<(Vec<StepLatency>, Vec<f64>), TunerError> {
    // (model, batch) -> (seconds, steps)
    let mut points: BTreeMap<(usize, usize), (f64, f64)> = BTreeMap::new();
    for (metric, steps) in [(SECONDS_BY_BATCH, false), (STEPS_BY_BATCH, true)] {
        for (labels, value) in series.named(metric) {
            let model = index(required_label(labels, "model", metric)?, metric)?;
            let batch = batch_size(labels, metric)?;
            let entry = points.entry((model, batch)).or_insert((0.0, 0.0));
            if steps {
                entry.1 += value;
            } else {
                entry.0 += value;
            }
        }
    }
    let mut latency: Vec<StepLatency> = Vec::with_capacity(names.len());
    let mut samples = vec![0.0; names.len()];
    for (model, name) in names.iter().enumerate() {
        let mine = points.range((model, 0)..(model + 1, 0));
        let most = mine.clone().map(|(_, p)| p.1).fold(0.0, f64::max);
        let kept: Vec<(usize, f64)> = mine
            .filter(|(_, &(_, steps))| steps >= options.min_latency_samples)
            .map(|(&(_, batch), &(seconds, steps))| {
                samples[model] += steps;
                (batch, 1000.0 * seconds / steps)
            })
            .collect();
        latency.push(match kept.len() {
            0 if unvisited[model] && model > 0 => latency[0].clone(),
            0 => {
                return Err(TunerError::TooFewSamples {
                    what: format!(
                        "step latency of model \"{name}\" (no batch size of {STEPS_BY_BATCH})"
                    ),
                    found: most,
                    required: options.min_latency_samples,
                })
            }
            1 => StepLatency::Constant(kept[0].1),
            _ => StepLatency::Table(kept),
        });
    }
    Ok((latency, samples))
}

/// Model names from `options.models` or in order of first appearance.
fn model_order(
    series: &MetricSeries,
    options: &EstimateOptions,
) -> Result<Vec<String>, TunerError> {
    if !options.models.is_empty() {
        return Ok(options.models.clone());
    }
    let mut names: Vec<String> = Vec::new();
    for (name, labels) in series.keys() {
        let keys: &[&str] = match name {
            DECISIONS | CREDITED => &["model", "to"],
            STEPS_BY_BATCH | SECONDS_BY_BATCH => &["model"],
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
            metric: DECISIONS.into(),
            detail: " (no model found in the metrics)".into(),
        });
    }
    Ok(names)
}

fn batch_size(labels: &[(String, String)], metric: &str) -> Result<usize, TunerError> {
    let text = required_label(labels, "batch_size", metric)?;
    match text.parse::<usize>() {
        Ok(b) if b >= 1 => Ok(b),
        _ => Err(TunerError::InvalidInput {
            field: format!("{metric}{{batch_size=\"{text}\"}}"),
            reason: "batch_size must be a batch size >= 1".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The R2R pair at p = 0.35 as two subservers would expose it: the small model decided
    /// 650 stays and 350 hand-overs (dropped tokens), the large one 350 returns (kept tokens).
    pub(crate) fn fixture(name: &str) -> MetricsText {
        let quick = "# TYPE tokenrouter_route_decisions_total counter\n\
tokenrouter_route_decisions_total{model=\"quick\",to=\"quick\"} 650\n\
tokenrouter_route_decisions_total{model=\"quick\",to=\"reference\"} 350\n\
tokenrouter_route_credited_tokens_total{model=\"quick\",to=\"quick\"} 650\n\
tokenrouter_route_credited_tokens_total{model=\"quick\",to=\"reference\"} 0\n\
tokenrouter_steps_by_batch_total{model=\"quick\",batch_size=\"1\"} 100\n\
tokenrouter_step_seconds_by_batch_total{model=\"quick\",batch_size=\"1\"} 0.6\n\
tokenrouter_steps_by_batch_total{model=\"quick\",batch_size=\"4\"} 50\n\
tokenrouter_step_seconds_by_batch_total{model=\"quick\",batch_size=\"4\"} 0.325\n\
tokenrouter_steps_by_batch_total{model=\"quick\",batch_size=\"16\"} 5\n\
tokenrouter_step_seconds_by_batch_total{model=\"quick\",batch_size=\"16\"} 0.08\n\
tokenrouter_active_concurrency{model=\"quick\"} 4\n";
        let reference = "tokenrouter_route_decisions_total{model=\"reference\",to=\"quick\"} 350\n\
tokenrouter_route_credited_tokens_total{model=\"reference\",to=\"quick\"} 350\n\
tokenrouter_steps_by_batch_total{model=\"reference\",batch_size=\"2\"} 100\n\
tokenrouter_step_seconds_by_batch_total{model=\"reference\",batch_size=\"2\"} 2.79\n\
tokenrouter_active_concurrency{model=\"reference\"} 3\n";
        MetricsText {
            source: name.into(),
            text: if name == "quick" {
                quick.into()
            } else {
                reference.into()
            },
        }
    }

    fn options(min_decisions: f64) -> EstimateOptions {
        EstimateOptions {
            min_decisions,
            ..EstimateOptions::default()
        }
    }

    #[test]
    fn estimates_routing_credit_latency_and_concurrency() {
        let texts = [fixture("quick"), fixture("reference")];
        let e = estimate_from_metrics(&texts, &options(300.0)).unwrap();
        assert_eq!(e.names, vec!["quick", "reference"]);
        // The hand-over is counted where it is decided: the request goes back to the small
        // model after every large-model step (row 1 is [1, 0], not the writer transitions).
        assert_eq!(e.transition, vec![vec![0.65, 0.35], vec![1.0, 0.0]]);
        assert_eq!(e.credit, vec![vec![1.0, 0.0], vec![1.0, 0.0]]);
        assert_eq!(e.decisions, vec![1000.0, 350.0]);
        // Batch size 16 has 5 < 20 steps and is left out.
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
        let mut o = options(300.0);
        o.models = vec!["reference".into(), "quick".into()];
        let e = estimate_from_metrics(&texts, &o).unwrap();
        assert_eq!(e.names, vec!["reference", "quick"]);
        assert_eq!(e.transition, vec![vec![0.0, 1.0], vec![0.35, 0.65]]);
        o.models = vec!["quick".into()];
        let err = estimate_from_metrics(&texts, &o).unwrap_err();
        assert!(
            err.to_string().contains("\"reference\", which is not in"),
            "{err}"
        );
    }

    #[test]
    fn a_model_nothing_routes_to_does_not_hold_the_estimate_back() {
        // The small model kept every token: the large one decided nothing and stepped
        // nothing. Its row and latency cannot matter to the chain, which never enters it.
        let quick = "tokenrouter_route_decisions_total{model=\"quick\",to=\"quick\"} 900\n\
tokenrouter_route_decisions_total{model=\"quick\",to=\"reference\"} 0\n\
tokenrouter_route_credited_tokens_total{model=\"quick\",to=\"quick\"} 900\n\
tokenrouter_steps_by_batch_total{model=\"quick\",batch_size=\"1\"} 100\n\
tokenrouter_step_seconds_by_batch_total{model=\"quick\",batch_size=\"1\"} 0.6\n";
        let texts = [MetricsText {
            source: "quick".into(),
            text: quick.into(),
        }];
        let mut o = options(300.0);
        o.models = vec!["quick".into(), "reference".into()];
        let e = estimate_from_metrics(&texts, &o).unwrap();
        assert_eq!(e.transition, vec![vec![1.0, 0.0], vec![1.0, 0.0]]);
        assert_eq!(e.decisions, vec![900.0, 0.0]);
        assert_eq!(e.latency[1], e.latency[0]);
        // The chain solves on it: B for the unvisited model is whatever costs nothing.
        let tuned = crate::search::best(&e.to_inputs(None, 0.1, Some(4)).unwrap()).unwrap();
        // Every step of the small model writes a token per sequence: 4 / 6 ms.
        assert!(
            (tuned.best.throughput_tok_s - 4000.0 / 6.0).abs() < 1e-6,
            "{tuned:?}"
        );
        // One hand-over is a visit: then the large model's own samples are required.
        let visited = format!(
            "{quick}tokenrouter_route_decisions_total{{model=\"quick\",to=\"reference\"}} 1\n"
        );
        let texts = [MetricsText {
            source: "quick".into(),
            text: visited,
        }];
        match estimate_from_metrics(&texts, &o).unwrap_err() {
            TunerError::TooFewSamples { what, .. } => {
                assert!(what.contains("\"reference\""), "{what}")
            }
            other => panic!("expected TooFewSamples, got {other}"),
        }
    }

    #[test]
    fn refuses_too_few_samples() {
        let texts = [fixture("quick"), fixture("reference")];
        // 350 decisions at reference < 400.
        match estimate_from_metrics(&texts, &options(400.0)).unwrap_err() {
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
        let o = EstimateOptions {
            min_latency_samples: 500.0,
            ..options(300.0)
        };
        let err = estimate_from_metrics(&texts, &o).unwrap_err();
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
        let e = estimate_from_metrics(&texts, &options(300.0)).unwrap();
        assert_eq!(e.decisions, vec![1000.0, 350.0]);
    }

    #[test]
    fn an_increase_estimates_the_latest_window_only() {
        // p went from 0.35 to 0.6: cumulative counts mix both, the increase shows 0.6.
        let texts = [fixture("quick"), fixture("reference")];
        let later = |t: &MetricsText| MetricsText {
            source: t.source.clone(),
            text: t
                .text
                .replace("quick\"} 650", "quick\"} 1050")
                .replace("to=\"reference\"} 350", "to=\"reference\"} 950")
                .replace("to=\"quick\"} 350", "to=\"quick\"} 950")
                .replace("\"1\"} 100", "\"1\"} 200")
                .replace("\"1\"} 0.6", "\"1\"} 1.2")
                .replace("\"2\"} 100", "\"2\"} 200")
                .replace("\"2\"} 2.79", "\"2\"} 5.58"),
        };
        let before = MetricSeries::from_texts(&texts).unwrap();
        let after = MetricSeries::from_texts(&texts.each_ref().map(later)).unwrap();
        let cumulative = estimate(&after, &options(300.0)).unwrap();
        assert!((cumulative.transition[0][1] - 0.475).abs() < 1e-12);
        let window = estimate(&after.increase_since(&before), &options(300.0)).unwrap();
        assert!((window.transition[0][1] - 0.6).abs() < 1e-12);
        assert_eq!(window.decisions, vec![1000.0, 600.0]);
        // Only batch size 1 moved in the window (batch size 4 had no new step).
        assert_eq!(window.latency[0], StepLatency::Constant(6.0));
        // Nothing new: too few decisions, and it says so.
        let err = estimate(&after.increase_since(&after), &options(300.0)).unwrap_err();
        assert!(err.to_string().contains("too few samples"), "{err}");
    }
}
