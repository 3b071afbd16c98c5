//! `tokenrouter bench`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::{check_query_level, runtime, Target};
use crate::bench::{output, run, RunSettings};
use crate::dataset;

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    target: Target,
    /// Active requests; one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    concurrency: Vec<usize>,
    /// Measured requests per concurrency.
    #[arg(long, default_value_t = 64)]
    num_prompts: usize,
    /// Output tokens per request (unless the dataset sets `max_tokens`).
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Prompts (JSON array or JSONL; `prompt`/`question`/`problem`/`messages`).
    #[arg(long, conflicts_with = "synthetic")]
    dataset: Option<PathBuf>,
    /// Synthetic prompts: IN words in, OUT tokens out (e.g. 64,128).
    #[arg(long, value_delimiter = ',', num_args = 1)]
    synthetic: Option<Vec<usize>>,
    /// Unmeasured requests before each concurrency.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Folder for requests.csv, summary.json, throughput.svg, latency.svg.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Name of this run in charts.
    #[arg(long, default_value = "run")]
    label: String,
}

/// Runs `bench`.
pub fn run_cli(args: BenchArgs) -> Result<()> {
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        bail!("--concurrency needs positive values, e.g. 1,4,8,16");
    }
    if args.num_prompts == 0 || args.max_tokens == 0 {
        bail!("--num-prompts and --max-tokens must be positive");
    }
    let prompts = match (&args.dataset, &args.synthetic) {
        (Some(path), _) => dataset::load(path)?,
        (None, Some(s)) if s.len() == 2 && s[0] > 0 && s[1] > 0 => {
            dataset::synthetic(args.num_prompts + args.warmup, s[0], s[1], args.target.seed)
        }
        (None, Some(_)) => bail!("--synthetic needs IN,OUT (two positive numbers), e.g. 64,128"),
        (None, None) => bail!("give --dataset FILE or --synthetic IN,OUT"),
    };
    let prompts = Arc::new(prompts);
    let rt = runtime()?;
    let mut records = Vec::new();
    let mut summaries = Vec::new();
    for &n in &args.concurrency {
        let settings = RunSettings {
            spec: args.target.spec(),
            concurrency: n,
            num_prompts: args.num_prompts,
            warmup: args.warmup,
            max_tokens: args.max_tokens,
            seed: args.target.seed,
            progress: !args.target.no_progress,
        };
        let (mut r, s) = rt.block_on(run(
            &settings,
            prompts.clone(),
            args.target.large_model.as_deref(),
        ));
        println!("{}", s.line());
        if s.completed == 0 {
            bail!(
                "no request completed at N={n}: {}",
                s.first_error.as_deref().unwrap_or("unknown error")
            );
        }
        records.append(&mut r);
        summaries.push(s);
    }
    if let Some(dir) = &args.out {
        output::write_all(dir, &records, &summaries, &args.label)
            .with_context(|| format!("writing {}", dir.display()))?;
        eprintln!(
            "wrote {}/{{requests.csv,summary.json,throughput.svg,latency.svg}}",
            dir.display()
        );
    } else {
        println!("{}", serde_json::to_string_pretty(&summaries)?);
    }
    for s in &summaries {
        check_query_level(&args.target, s.large_model_share)
            .with_context(|| format!("at N={}", s.concurrency))?;
    }
    Ok(())
}
