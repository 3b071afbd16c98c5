//! Rendering of tuning results: human text, JSON (`{"results": [...]}`) and the YAML
//! `delayed_batching_threshold` table the runtime reads.

use super::predict::{ModelPrediction, Prediction};
use super::search::{Scored, SearchStrategy, TuneResult};
use super::simulate::SimulationReport;
use serde::Serialize;
use std::fmt::Write;

/// One evaluated vector in a listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Threshold per model.
    pub thresholds: Vec<usize>,
    /// Throughput in tokens per second.
    pub throughput_tok_s: f64,
}

/// How B* was searched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchSummary {
    /// Strategy used.
    pub strategy: SearchStrategy,
    /// Vectors evaluated.
    pub evaluated: usize,
    /// Evaluated vectors that deadlock.
    pub infeasible: usize,
    /// Vectors skipped for exceeding the state limit.
    pub skipped: usize,
    /// Reachable states summed over the evaluated feasible vectors (exact search).
    pub states_total: usize,
    /// Largest reachable state space among them.
    pub states_max: usize,
    /// Wall time in seconds.
    pub elapsed_s: f64,
}

/// Everything reported for one concurrency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportRow {
    /// Active requests N.
    pub concurrency: usize,
    /// Best (or requested) thresholds.
    pub thresholds: Vec<usize>,
    /// Their throughput in tokens per second.
    pub throughput_tok_s: f64,
    /// `exact` (Markov chain) or `simulation`.
    pub method: &'static str,
    /// 95% half width when the method is simulation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci95_tok_s: Option<f64>,
    /// Per-model rates.
    pub models: Vec<ModelPrediction>,
    /// Reachable states of the exact chain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub states: Option<usize>,
    /// Second best vector of the search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<Candidate>,
    /// Search statistics (absent when thresholds were given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchSummary>,
    /// Simulation of the same thresholds, validating the exact value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulation: Option<SimulationReport>,
    /// Every feasible evaluated vector, best first (with `--all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<Vec<Candidate>>,
}

impl ReportRow {
    /// Row of one exact prediction.
    pub fn from_prediction(p: Prediction) -> Self {
        ReportRow {
            concurrency: p.concurrency,
            thresholds: p.thresholds,
            throughput_tok_s: p.throughput_tok_s,
            method: "exact",
            ci95_tok_s: None,
            models: p.models,
            states: Some(p.states),
            runner_up: None,
            search: None,
            simulation: None,
            all: None,
        }
    }

    /// Row of one simulation.
    pub fn from_simulation(s: SimulationReport) -> Self {
        ReportRow {
            concurrency: s.concurrency,
            thresholds: s.thresholds,
            throughput_tok_s: s.throughput_tok_s,
            method: "simulation",
            ci95_tok_s: Some(s.ci95_tok_s),
            models: s.models,
            states: None,
            runner_up: None,
            search: None,
            simulation: None,
            all: None,
        }
    }

    /// Row of an exact search.
    pub fn from_exact_search(r: TuneResult<Prediction>, keep_all: bool) -> Self {
        let mut row = ReportRow::from_prediction(r.best.clone());
        row.runner_up = r
            .runner_up
            .as_ref()
            .map(|p| candidate(&p.thresholds, p.throughput_tok_s));
        row.search = Some(summary(&r));
        row.all = keep_all.then(|| {
            r.all
                .into_iter()
                .map(|p| candidate(&p.thresholds, p.throughput_tok_s))
                .collect()
        });
        row
    }

    /// Row of a search by simulation.
    pub fn from_simulated_search(r: TuneResult<SimulationReport>, keep_all: bool) -> Self {
        let mut row = ReportRow::from_simulation(r.best.clone());
        row.runner_up = r
            .runner_up
            .as_ref()
            .map(|s| candidate(&s.thresholds, s.throughput_tok_s));
        row.search = Some(summary(&r));
        row.all = keep_all.then(|| {
            r.all
                .into_iter()
                .map(|s| candidate(&s.thresholds, s.throughput_tok_s))
                .collect()
        });
        row
    }
}

fn candidate(thresholds: &[usize], throughput_tok_s: f64) -> Candidate {
    Candidate {
        thresholds: thresholds.to_vec(),
        throughput_tok_s,
    }
}

fn summary<T: Scored>(r: &TuneResult<T>) -> SearchSummary {
    SearchSummary {
        strategy: r.strategy,
        evaluated: r.evaluated,
        infeasible: r.infeasible,
        skipped: r.skipped,
        states_total: r.states_total,
        states_max: r.states_max,
        elapsed_s: r.elapsed_s,
    }
}

/// `{"results": [...]}`.
pub fn render_json(rows: &[ReportRow]) -> Result<String, serde_json::Error> {
    #[derive(Serialize)]
    struct Results<'a> {
        results: &'a [ReportRow],
    }
    serde_json::to_string_pretty(&Results { results: rows }).map(|s| s + "\n")
}

/// The `delayed_batching_threshold` table: row i is concurrency i + 1, one B per model.
/// `rows` must cover concurrency 1, 2, ... without gaps.
pub fn render_yaml(rows: &[ReportRow], names: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# B* from `tokenrouter tune`: row i is concurrency i+1; one threshold per model [{}].",
        names.join(", ")
    );
    out.push_str("delayed_batching_threshold:\n");
    for row in rows {
        let b: Vec<String> = row.thresholds.iter().map(|b| b.to_string()).collect();
        let _ = writeln!(
            out,
            "  - [{}]  # N={}, {:.2} tok/s ({})",
            b.join(", "),
            row.concurrency,
            row.throughput_tok_s,
            row.method
        );
    }
    out
}

/// Human-readable report.
pub fn render_text(rows: &[ReportRow], names: &[String]) -> String {
    let mut out = String::new();
    for row in rows {
        let ci = row
            .ci95_tok_s
            .map(|c| format!(" ± {c:.2}"))
            .unwrap_or_default();
        let label = if row.search.is_some() { "B*" } else { "B" };
        let _ = write!(
            out,
            "N={:<3} {label}={:?}  {:.2}{ci} tok/s ({})",
            row.concurrency, row.thresholds, row.throughput_tok_s, row.method
        );
        if let Some(r) = &row.runner_up {
            let _ = write!(
                out,
                "  runner-up {:?} {:.2} tok/s",
                r.thresholds, r.throughput_tok_s
            );
        }
        out.push('\n');
        let mut details = Vec::new();
        if let Some(s) = &row.search {
            details.push(format!(
                "{:?} search: {} vectors, {} infeasible, {} skipped (state limit or no convergence), {} states in all (max {}), {:.3} s",
                s.strategy, s.evaluated, s.infeasible, s.skipped, s.states_total, s.states_max, s.elapsed_s
            ));
        }
        if let Some(states) = row.states {
            details.push(format!("its chain: {states} states"));
        }
        if !details.is_empty() {
            let _ = writeln!(out, "       {}", details.join("; "));
        }
        if let Some(sim) = &row.simulation {
            let _ = writeln!(
                out,
                "       simulated {:.2} ± {:.2} tok/s ({:+.2}% vs exact, {} events)",
                sim.throughput_tok_s,
                sim.ci95_tok_s,
                100.0 * (sim.throughput_tok_s - row.throughput_tok_s) / row.throughput_tok_s,
                sim.events
            );
        }
        if row.search.is_none() {
            for (m, model) in row.models.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "       {}: {:.2} steps/s, mean batch {:.3}, busy {:.1}%, waiting {:.3}, {:.2} tok/s",
                    names.get(m).unwrap_or(&model.name),
                    model.step_rate_per_s,
                    model.mean_batch,
                    100.0 * model.busy_fraction,
                    model.mean_waiting,
                    model.tokens_per_s
                );
            }
        }
        if let Some(all) = &row.all {
            for c in all {
                let _ = writeln!(
                    out,
                    "       {:?} {:.4} tok/s",
                    c.thresholds, c.throughput_tok_s
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::tests::r2r;
    use crate::predict::predict;

    #[test]
    fn json_has_the_documented_shape() {
        let rows = vec![ReportRow::from_prediction(
            predict(&r2r(4), &[1, 3]).unwrap(),
        )];
        let json: serde_json::Value = serde_json::from_str(&render_json(&rows).unwrap()).unwrap();
        let first = &json["results"][0];
        assert_eq!(first["concurrency"], 4);
        assert_eq!(first["thresholds"], serde_json::json!([1, 3]));
        assert!(first["throughput_tok_s"].as_f64().unwrap() > 0.0);
        assert_eq!(first["models"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn yaml_lists_one_row_per_concurrency() {
        let rows: Vec<ReportRow> = (1..=3)
            .map(|n| ReportRow::from_prediction(predict(&r2r(n), &[1, n]).unwrap()))
            .collect();
        let yaml = render_yaml(&rows, &["quick".into(), "reference".into()]);
        let lines: Vec<&str> = yaml.lines().collect();
        assert_eq!(lines[1], "delayed_batching_threshold:");
        assert!(lines[2].starts_with("  - [1, 1]  # N=1"));
        assert!(lines[4].starts_with("  - [1, 3]  # N=3"));
        assert!(lines[0].contains("[quick, reference]"));
    }
}
