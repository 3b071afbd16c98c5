//! `tokenrouter eval`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::{check_query_level, runtime, Target};
use crate::bench::RunSettings;
use crate::dataset;
use crate::eval::run::evaluate;

/// Arguments of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    target: Target,
    /// Problems with reference answers (JSONL or JSON; GSM8K and MATH-500 shapes work).
    #[arg(long, default_value = "data/eval/math30.jsonl")]
    dataset: PathBuf,
    /// Use only the first K problems.
    #[arg(long)]
    limit: Option<usize>,
    /// Output tokens per answer.
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    /// Problems asked at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Prompt around each problem; `{problem}` is replaced. Default: ask
    /// for a `\boxed{}` answer step by step for math problems, the question
    /// as written for short-answer items (those with a `kind`).
    #[arg(long)]
    template: Option<String>,
    /// Method name in reports.
    #[arg(long, default_value = "method")]
    label: String,
    /// Write the graded result (JSON) here.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs `eval`.
pub fn run_cli(args: EvalArgs) -> Result<()> {
    if args.concurrency == 0 || args.max_tokens == 0 {
        bail!("--concurrency and --max-tokens must be positive");
    }
    if args
        .template
        .as_ref()
        .is_some_and(|t| !t.contains("{problem}"))
    {
        bail!("--template must contain {{problem}}");
    }
    let mut problems = dataset::load(&args.dataset)?;
    if let Some(k) = args.limit {
        problems.truncate(k.max(1));
    }
    let settings = RunSettings {
        spec: args.target.spec(),
        concurrency: args.concurrency,
        num_prompts: problems.len(),
        warmup: 0,
        max_tokens: args.max_tokens,
        seed: args.target.seed,
        progress: !args.target.no_progress,
    };
    let report = runtime()?.block_on(evaluate(
        &args.label,
        &settings,
        &problems,
        args.template.as_deref(),
        args.target.large_model.as_deref(),
    ))?;
    let share = report
        .large_share
        .map_or_else(|| "n/a".into(), |s| format!("{:.1}%", s * 100.0));
    println!(
        "{}: {}/{} correct, large-model share {share}, {:.1} s, {} output tokens",
        report.label, report.correct, report.total, report.wall_s, report.output_tokens
    );
    let failed = report.items.iter().filter(|g| g.error.is_some()).count();
    if let Some(out) = &args.out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(out, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if failed == report.total {
        bail!(
            "every request failed: {}",
            report.items[0].error.as_deref().unwrap_or("unknown")
        );
    }
    check_query_level(&args.target, report.large_share)
}
