//! `tokenrouter tune`: B* tables from the exact chain, predictions, simulations, metrics.

use super::error::TunerError;
use super::inputs::{StepLatency, TunerInputs};
use super::metrics::{estimate_from_metrics, fetch_metrics, EstimateOptions, MetricsEstimate};
use super::predict::{predict_with, SolveOptions, DEFAULT_MAX_STATES};
use super::report::{render_json, render_text, render_yaml, ReportRow};
use super::search::{best_by_simulation, best_with, SearchOptions, SearchStrategy};
use super::simulate::{check_gaps, simulate, GapDistribution, SimulationOptions};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Arguments of `tokenrouter tune`.
#[derive(Debug, Clone, clap::Args)]
pub struct TuneArgs {
    /// Step latency per model in ms, the same at every batch size, e.g. `6.0,27.9`.
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "latency_table",
        allow_hyphen_values = true
    )]
    pub latencies_ms: Vec<f64>,
    /// Measured step latency per model as a function of batch size (JSON, or @file): per model
    /// a list of [batch, ms] points or one number, e.g. '[[[1,6.0],[8,6.6]],27.9]'.
    #[arg(long)]
    pub latency_table: Option<String>,
    /// Routing matrix P as JSON (or @file): P[m][j] = probability a request leaving a step of m goes to j.
    #[arg(long)]
    pub transition: Option<String>,
    /// Credit matrix C as JSON (or @file): output tokens a move m -> j counts. R2R: [[1,0],[1,0]].
    /// Default: estimated from metrics, else every step counts 1.
    #[arg(long)]
    pub credit: Option<String>,
    /// Slot width in ms; latencies are rounded to whole slots.
    #[arg(long, default_value_t = 0.1)]
    pub delta_ms: f64,
    /// Concurrency: `4`, an inclusive range `1..16`, or a list `1,2,4,8`. Default: from metrics.
    #[arg(long)]
    pub concurrency: Option<String>,
    /// Evaluate these thresholds (one per model) instead of searching B*.
    #[arg(long, value_delimiter = ',')]
    pub thresholds: Vec<usize>,
    /// Print {"results":[...]} as JSON.
    #[arg(long, conflicts_with = "yaml")]
    pub json: bool,
    /// Print a ready `delayed_batching_threshold` table (rows for concurrency 1..=max).
    #[arg(long, conflicts_with = "thresholds")]
    pub yaml: bool,
    /// Print every feasible evaluated vector.
    #[arg(long, conflicts_with = "thresholds")]
    pub all: bool,
    /// Also run the Monte-Carlo simulation: it validates the exact value, or, with
    /// --gap-samples, replaces the chain as the evaluator.
    #[arg(long)]
    pub simulate: bool,
    /// Empirical gaps (steps per visit) per model as JSON (or @file): a list of observed run
    /// lengths, or null for the chain's geometric gaps, e.g. '[[1,2,2,3,7],null]'.
    #[arg(long, requires = "simulate")]
    pub gap_samples: Option<String>,
    /// Measured completion events per simulation.
    #[arg(long, default_value_t = 2_000_000)]
    pub sim_events: u64,
    /// Seed of the simulation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Search strategy for B*.
    #[arg(long, value_enum, default_value_t = SearchStrategy::Auto)]
    pub search: SearchStrategy,
    /// Largest N^M that `--search auto` searches exhaustively
    /// (default: 256 with two models, 64 with three or more).
    #[arg(long)]
    pub exhaustive_limit: Option<usize>,
    /// Most reachable states per vector; larger vectors are skipped (and counted).
    #[arg(long, default_value_t = DEFAULT_MAX_STATES)]
    pub max_states: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Metrics URLs, one per model subserver (http://..., or file://path of a saved scrape).
    #[arg(long, num_args = 1..)]
    pub from_metrics: Vec<String>,
    /// Model names in model order (default: order of first appearance in the metrics).
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Fewest routing transitions out of each model the estimation accepts.
    #[arg(long, default_value_t = 200.0)]
    pub min_transitions: f64,
    /// Fewest steps per (model, batch bucket) for a latency point.
    #[arg(long, default_value_t = 20.0)]
    pub min_latency_samples: f64,
    /// Timeout of each metrics request in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub fetch_timeout_s: f64,
    /// Model where requests start.
    #[arg(long, default_value_t = 0)]
    pub entry_model: usize,
}

/// Runs `tokenrouter tune`: prints the report on stdout.
pub fn run(args: TuneArgs) -> Result<(), TunerError> {
    let output = report(&args)?;
    std::io::stdout()
        .lock()
        .write_all(output.as_bytes())
        .map_err(|source| TunerError::Io {
            what: "writing the report to stdout".into(),
            source,
        })
}

/// The report `tokenrouter tune` prints, as text, JSON or YAML.
pub fn report(args: &TuneArgs) -> Result<String, TunerError> {
    let args = args.clone();
    let estimate = if args.from_metrics.is_empty() {
        None
    } else {
        Some(estimate(&args)?)
    };
    let concurrencies = match (
        &args.concurrency,
        estimate.as_ref().and_then(|e| e.concurrency),
    ) {
        (Some(spec), _) => parse_concurrency(spec)?,
        (None, Some(n)) => {
            check_concurrency(n)?;
            vec![n]
        }
        (None, None) => return Err(invalid("--concurrency", "required (e.g. 4 or 1..16)")),
    };
    let concurrencies = if args.yaml {
        // The runtime indexes the table by concurrency, so it needs every row from 1.
        (1..=concurrencies.iter().copied().max().unwrap_or(1)).collect()
    } else {
        concurrencies
    };
    let base = build_inputs(&args, estimate.as_ref(), concurrencies[0])?;
    let gaps = match &args.gap_samples {
        Some(text) => parse_gaps(text)?,
        None => Vec::new(),
    };
    check_gaps(&base, &gaps)?;
    let simulation = SimulationOptions {
        events: args.sim_events,
        seed: args.seed,
        gaps: gaps.clone(),
        ..SimulationOptions::default()
    };
    let search = SearchOptions {
        strategy: args.search,
        exhaustive_limit: args.exhaustive_limit,
        solve: SolveOptions {
            max_states: args.max_states,
        },
        threads: args
            .threads
            .unwrap_or(SearchOptions::default().threads)
            .max(1),
        keep_all: args.all,
        progress: std::io::stderr().is_terminal(),
    };

    let mut rows = Vec::with_capacity(concurrencies.len());
    let mut hint: Option<Vec<usize>> = None;
    for &n in &concurrencies {
        let inputs = base.with_concurrency(n)?;
        let row = if !args.thresholds.is_empty() {
            evaluate_given(&args, &inputs, &search, &simulation, !gaps.is_empty())?
        } else if !gaps.is_empty() {
            let result = best_by_simulation(&inputs, &search, &simulation, hint.as_deref())?;
            ReportRow::from_simulated_search(result, args.all)
        } else {
            let result = best_with(&inputs, &search, hint.as_deref())?;
            let mut row = ReportRow::from_exact_search(result, args.all);
            if args.simulate {
                row.simulation = Some(simulate(&inputs, &row.thresholds, &simulation)?);
            }
            row
        };
        tracing::debug!(concurrency = n, thresholds = ?row.thresholds, throughput_tok_s = row.throughput_tok_s, "tuned");
        hint = Some(row.thresholds.clone());
        rows.push(row);
    }

    Ok(if args.json {
        render_json(&rows).map_err(|e| invalid("--json", &e.to_string()))?
    } else if args.yaml {
        render_yaml(&rows, base.names())
    } else {
        render_text(&rows, base.names())
    })
}

/// Prediction (and simulation) of the thresholds given on the command line.
fn evaluate_given(
    args: &TuneArgs,
    inputs: &TunerInputs,
    search: &SearchOptions,
    simulation: &SimulationOptions,
    empirical_gaps: bool,
) -> Result<ReportRow, TunerError> {
    if empirical_gaps {
        return Ok(ReportRow::from_simulation(simulate(
            inputs,
            &args.thresholds,
            simulation,
        )?));
    }
    let mut row =
        ReportRow::from_prediction(predict_with(inputs, &args.thresholds, &search.solve)?);
    if args.simulate {
        row.simulation = Some(simulate(inputs, &args.thresholds, simulation)?);
    }
    Ok(row)
}

fn estimate(args: &TuneArgs) -> Result<MetricsEstimate, TunerError> {
    if !args.fetch_timeout_s.is_finite() || args.fetch_timeout_s <= 0.0 {
        return Err(invalid(
            "--fetch-timeout-s",
            "must be a positive number of seconds",
        ));
    }
    let texts = fetch_metrics(
        &args.from_metrics,
        Duration::from_secs_f64(args.fetch_timeout_s),
    )?;
    let options = EstimateOptions {
        models: args.models.clone(),
        min_transitions: args.min_transitions,
        min_latency_samples: args.min_latency_samples,
    };
    let estimate = estimate_from_metrics(&texts, &options)?;
    tracing::info!(
        models = ?estimate.names,
        transition = ?estimate.transition,
        latency = ?estimate.latency,
        concurrency = ?estimate.concurrency,
        "estimated tuner inputs from metrics"
    );
    Ok(estimate)
}

/// Inputs from explicit arguments, falling back to the metrics estimate.
fn build_inputs(
    args: &TuneArgs,
    estimate: Option<&MetricsEstimate>,
    n: usize,
) -> Result<TunerInputs, TunerError> {
    let latency: Vec<StepLatency> = if let Some(text) = &args.latency_table {
        parse_json(text, "--latency-table")?
    } else if !args.latencies_ms.is_empty() {
        args.latencies_ms
            .iter()
            .map(|&ms| StepLatency::Constant(ms))
            .collect()
    } else if let Some(e) = estimate {
        e.latency.clone()
    } else {
        return Err(invalid(
            "--latencies-ms",
            "required (or --latency-table, or --from-metrics)",
        ));
    };
    let transition: Vec<Vec<f64>> = match (&args.transition, estimate) {
        (Some(text), _) => parse_json(text, "--transition")?,
        (None, Some(e)) => e.transition.clone(),
        (None, None) => return Err(invalid("--transition", "required (or --from-metrics)")),
    };
    let credit: Vec<Vec<f64>> = match (&args.credit, estimate.and_then(|e| e.credit_matrix())) {
        (Some(text), _) => parse_json(text, "--credit")?,
        (None, Some(c)) => c,
        (None, None) => {
            tracing::info!("no --credit: every step's token counts 1");
            vec![vec![1.0; latency.len()]; latency.len()]
        }
    };
    let inputs = TunerInputs::new(latency, transition, credit, args.delta_ms, n)?
        .with_entry_model(args.entry_model)?;
    let names = if !args.models.is_empty() {
        args.models.clone()
    } else if let Some(e) = estimate {
        e.names.clone()
    } else {
        return Ok(inputs);
    };
    inputs.with_names(names)
}

fn invalid(field: &str, reason: &str) -> TunerError {
    TunerError::InvalidInput {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Parses JSON given inline or as `@path`.
fn parse_json<T: serde::de::DeserializeOwned>(text: &str, flag: &str) -> Result<T, TunerError> {
    let body = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|source| TunerError::Io {
            what: format!("reading {flag} file {path}"),
            source,
        })?,
        None => text.to_string(),
    };
    serde_json::from_str(&body).map_err(|e| invalid(flag, &format!("invalid JSON: {e}")))
}

fn parse_gaps(text: &str) -> Result<Vec<GapDistribution>, TunerError> {
    let raw: Vec<Option<Vec<u32>>> = parse_json(text, "--gap-samples")?;
    Ok(raw
        .into_iter()
        .map(|g| g.map_or(GapDistribution::Geometric, GapDistribution::Empirical))
        .collect())
}

/// Largest concurrency the tuner takes: the chain's state space grows with
/// it, and a range is expanded into one row per value, so the bound is
/// checked before anything is allocated.
pub const MAX_CONCURRENCY: usize = 1024;

/// `4`, `1..16` / `1..=16` (inclusive) or `1,2,4`; ascending, duplicates
/// removed; every value in `1..=MAX_CONCURRENCY`.
pub fn parse_concurrency(spec: &str) -> Result<Vec<usize>, TunerError> {
    let bad = || {
        invalid(
            "--concurrency",
            &format!("expected N, A..B or a list, got `{spec}`"),
        )
    };
    let number = |s: &str| s.trim().parse::<usize>().map_err(|_| bad());
    let mut values: Vec<usize> = if let Some((a, b)) = spec.split_once("..") {
        let b = b.strip_prefix('=').unwrap_or(b);
        let (a, b) = (number(a)?, number(b)?);
        if a > b {
            return Err(bad());
        }
        check_concurrency(b)?;
        (a..=b).collect()
    } else {
        let parts: Vec<&str> = spec.split(',').collect();
        if parts.len() > MAX_CONCURRENCY {
            return Err(too_many(parts.len()));
        }
        let values: Vec<usize> = parts.into_iter().map(number).collect::<Result<_, _>>()?;
        for &v in &values {
            check_concurrency(v)?;
        }
        values
    };
    values.sort_unstable();
    values.dedup();
    if values.first() == Some(&0) || values.is_empty() {
        return Err(invalid("--concurrency", "every concurrency must be >= 1"));
    }
    Ok(values)
}

/// A concurrency above [`MAX_CONCURRENCY`] is refused with the bound.
pub fn check_concurrency(n: usize) -> Result<(), TunerError> {
    if n > MAX_CONCURRENCY {
        return Err(too_many(n));
    }
    Ok(())
}

fn too_many(n: usize) -> TunerError {
    invalid(
        "--concurrency",
        &format!("{n} is above the largest concurrency the tuner models ({MAX_CONCURRENCY})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tune: TuneArgs,
    }

    fn args(line: &[&str]) -> TuneArgs {
        let mut full = vec!["tune"];
        full.extend_from_slice(line);
        Cli::try_parse_from(full).unwrap().tune
    }

    const R2R: [&str; 8] = [
        "--latencies-ms",
        "6.0,27.9",
        "--transition",
        "[[0.65,0.35],[1,0]]",
        "--credit",
        "[[1,0],[1,0]]",
        "--delta-ms",
        "0.1",
    ];

    #[test]
    fn concurrency_specs() {
        assert_eq!(parse_concurrency("4").unwrap(), vec![4]);
        assert_eq!(parse_concurrency("1..4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(parse_concurrency("2..=3").unwrap(), vec![2, 3]);
        assert_eq!(parse_concurrency("8,1,4,4").unwrap(), vec![1, 4, 8]);
        // Huge ranges are refused before anything is allocated.
        for huge in [
            "1..18446744073709551615",
            "1..=1000000000",
            "1025",
            "1,2,99999999999",
        ] {
            let e = parse_concurrency(huge).unwrap_err().to_string();
            assert!(e.contains("1024"), "{huge}: {e}");
        }
        assert_eq!(parse_concurrency("1..1024").unwrap().len(), 1024);
        for bad in ["0", "4..1", "x", "1..", ""] {
            assert!(parse_concurrency(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn builds_inputs_from_the_issue_example() {
        let mut line = R2R.to_vec();
        line.extend(["--concurrency", "4", "--models", "quick,reference"]);
        let a = args(&line);
        let inputs = build_inputs(&a, None, 4).unwrap();
        assert_eq!(inputs.slots(1, 1), 279);
        assert!((inputs.mean_credit(0) - 0.65).abs() < 1e-12);
        assert_eq!(inputs.names()[1], "reference");
        let text = report(&a).unwrap();
        assert!(
            text.starts_with("N=4   B*=[1, 3]  207.95 tok/s (exact)  runner-up [2, 3]"),
            "{text}"
        );
    }

    #[test]
    fn latency_table_and_gaps_parse() {
        let mut line = R2R[2..].to_vec();
        line.extend([
            "--latency-table",
            "[[[1,6.0],[8,6.6]],27.9]",
            "--concurrency",
            "2",
        ]);
        let a = args(&line);
        let inputs = build_inputs(&a, None, 8).unwrap();
        assert_eq!(inputs.slots(0, 8), 66);
        assert_eq!(inputs.slots(1, 8), 279);
        let gaps = parse_gaps("[[1,2,3],null]").unwrap();
        assert_eq!(
            gaps,
            vec![
                GapDistribution::Empirical(vec![1, 2, 3]),
                GapDistribution::Geometric
            ]
        );
    }

    #[test]
    fn bad_arguments_are_clear_errors() {
        let mut line = R2R.to_vec();
        line.extend(["--concurrency", "4"]);
        line[3] = "[[0.6,0.35],[1,0]]";
        let err = run(args(&line)).unwrap_err();
        assert!(err.to_string().contains("transition[0]"), "{err}");
        line[3] = "[[0.65,0.35],[1,0]";
        let err = run(args(&line)).unwrap_err();
        assert!(
            err.to_string().contains("--transition") && err.to_string().contains("invalid JSON"),
            "{err}"
        );
        let err = run(args(&R2R)).unwrap_err();
        assert!(err.to_string().contains("--concurrency"), "{err}");
        let mut line = R2R.to_vec();
        line.extend(["--concurrency", "4", "--thresholds", "1,2,3"]);
        let err = run(args(&line)).unwrap_err();
        assert!(
            err.to_string().contains("3 thresholds for 2 models"),
            "{err}"
        );
        let mut line = R2R.to_vec();
        line[1] = "-6.0,27.9";
        line.extend(["--concurrency", "4"]);
        let err = run(args(&line)).unwrap_err();
        assert!(err.to_string().contains("latency[0]"), "{err}");
    }

    #[test]
    fn json_yaml_and_all_outputs() {
        let mut line = R2R.to_vec();
        line.extend(["--concurrency", "2..4", "--json"]);
        let json: serde_json::Value = serde_json::from_str(&report(&args(&line)).unwrap()).unwrap();
        let results = json["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        assert_eq!(results[2]["concurrency"], 4);
        assert_eq!(results[2]["thresholds"], serde_json::json!([1, 3]));
        assert!(results[2]["throughput_tok_s"].as_f64().unwrap() > 200.0);
        assert_eq!(
            results[2]["runner_up"]["thresholds"],
            serde_json::json!([2, 3])
        );
        assert_eq!(results[2]["search"]["evaluated"], 16);

        let mut line = R2R.to_vec();
        line.extend([
            "--concurrency",
            "3..4",
            "--yaml",
            "--models",
            "quick,reference",
        ]);
        let yaml = report(&args(&line)).unwrap();
        // Rows start at concurrency 1 even though the range starts at 3.
        let rows: Vec<&str> = yaml.lines().filter(|l| l.starts_with("  - [")).collect();
        assert_eq!(rows.len(), 4);
        assert!(rows[3].starts_with("  - [1, 3]  # N=4"), "{yaml}");

        let mut line = R2R.to_vec();
        line.extend(["--concurrency", "3", "--all"]);
        let text = report(&args(&line)).unwrap();
        // 9 vectors, 3 deadlock: 6 listed.
        let listed = text
            .lines()
            .filter(|l| l.trim_start().starts_with('['))
            .count();
        assert_eq!(listed, 6, "{text}");
    }

    #[test]
    fn simulate_validates_and_replaces_the_chain() {
        let mut line = R2R.to_vec();
        line.extend([
            "--concurrency",
            "4",
            "--thresholds",
            "1,3",
            "--simulate",
            "--sim-events",
            "400000",
            "--json",
        ]);
        let json: serde_json::Value = serde_json::from_str(&report(&args(&line)).unwrap()).unwrap();
        let row = &json["results"][0];
        let exact = row["throughput_tok_s"].as_f64().unwrap();
        let simulated = row["simulation"]["throughput_tok_s"].as_f64().unwrap();
        assert!(
            (exact - simulated).abs() < 0.01 * exact,
            "{exact} vs {simulated}"
        );
        // With empirical gaps the simulation is the evaluator.
        let mut line = R2R.to_vec();
        line.extend([
            "--concurrency",
            "2",
            "--simulate",
            "--sim-events",
            "100000",
            "--gap-samples",
            "[[3],null]",
            "--json",
        ]);
        let json: serde_json::Value = serde_json::from_str(&report(&args(&line)).unwrap()).unwrap();
        let row = &json["results"][0];
        assert_eq!(row["method"], "simulation");
        assert_eq!(row["search"]["evaluated"], 4);
        // Gap samples without --simulate are refused by clap.
        let mut line = vec!["tune"];
        line.extend(R2R);
        line.extend(["--concurrency", "2", "--gap-samples", "[[3],null]"]);
        assert!(Cli::try_parse_from(line).is_err());
    }

    #[test]
    fn tunes_from_a_saved_scrape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.txt");
        std::fs::write(
            &path,
            "tokenrouter_route_transitions_total{from=\"quick\",to=\"quick\"} 650\n\
tokenrouter_route_transitions_total{from=\"quick\",to=\"reference\"} 350\n\
tokenrouter_route_transitions_total{from=\"reference\",to=\"quick\"} 350\n\
tokenrouter_step_latency_seconds_sum{model=\"quick\",batch_bucket=\"1\"} 0.6\n\
tokenrouter_step_latency_seconds_count{model=\"quick\",batch_bucket=\"1\"} 100\n\
tokenrouter_step_latency_seconds_sum{model=\"reference\",batch_bucket=\"1\"} 2.79\n\
tokenrouter_step_latency_seconds_count{model=\"reference\",batch_bucket=\"1\"} 100\n\
tokenrouter_tokens_committed_total{model=\"quick\"} 650\n\
tokenrouter_tokens_committed_total{model=\"reference\"} 350\n\
tokenrouter_active_concurrency 4\n",
        )
        .unwrap();
        let url = format!("file://{}", path.display());
        let a = args(&["--from-metrics", &url]);
        let estimate = estimate(&a).unwrap();
        let inputs = build_inputs(&a, Some(&estimate), 4).unwrap();
        // Same chain as the explicit R2R inputs: same B* and throughput.
        let explicit = build_inputs(&args(&R2R), None, 4).unwrap();
        let search = SearchOptions::default();
        let from_metrics = best_with(&inputs, &search, None).unwrap();
        let from_args = best_with(&explicit, &search, None).unwrap();
        assert_eq!(from_metrics.best.thresholds, from_args.best.thresholds);
        assert!(
            (from_metrics.best.throughput_tok_s - from_args.best.throughput_tok_s).abs() < 1e-6
        );
        assert_eq!(
            inputs.names(),
            &["quick".to_string(), "reference".to_string()]
        );
        let text = report(&a).unwrap();
        assert!(text.starts_with("N=4   B*=[1, 3]"), "{text}");
        let err = run(args(&["--from-metrics", &url, "--min-transitions", "1000"])).unwrap_err();
        assert!(err.to_string().contains("too few samples"), "{err}");
    }
}
