//! `tokenrouter report`: one results page from labelled `bench` folders and
//! `eval` results, through the shared page writer.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::compare::{add_eval, add_quality, add_runs, Run};
use crate::eval::run::EvalReport;
use crate::page::Page;

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Page title.
    #[arg(long)]
    title: String,
    /// The command a user types to regenerate the page (e.g. `make bench-cpu`).
    #[arg(long)]
    command: String,
    /// The page (Markdown); charts go to a folder of the same stem beside it.
    #[arg(long)]
    out: PathBuf,
    /// A bench folder: LABEL=DIR (repeatable, in table order).
    #[arg(long = "run")]
    runs: Vec<String>,
    /// An eval result: LABEL=FILE.json or FILE.json (repeatable).
    #[arg(long = "eval")]
    evals: Vec<String>,
    /// Label of the run whose outputs define agreement (e.g. large-only).
    #[arg(long)]
    agreement_reference: Option<String>,
    /// A paragraph placed before the tables (repeatable).
    #[arg(long = "note")]
    notes: Vec<String>,
    /// A paragraph placed after the tables (repeatable).
    #[arg(long = "finding")]
    findings: Vec<String>,
}

fn split(spec: &str) -> Result<(String, PathBuf)> {
    match spec.rsplit_once('=') {
        Some((l, p)) if !l.is_empty() && !p.is_empty() => Ok((l.into(), p.into())),
        _ => bail!("expected LABEL=PATH, got `{spec}`"),
    }
}

/// Runs `report`.
pub fn run_cli(args: ReportArgs) -> Result<()> {
    let stem = args
        .out
        .file_stem()
        .and_then(|s| s.to_str())
        .context("--out needs a file name")?
        .to_string();
    let assets = args.out.parent().unwrap_or(Path::new(".")).join(&stem);
    let mut page = Page::begin(&args.title, &args.command);
    for n in &args.notes {
        page.para(n);
    }
    let runs: Vec<Run> = args
        .runs
        .iter()
        .map(|s| {
            let (label, dir) = split(s)?;
            Run::load(&label, &dir).with_context(|| format!("reading run `{label}`"))
        })
        .collect::<Result<_>>()?;
    if !runs.is_empty() {
        page.section("Throughput and latency");
        add_runs(&mut page, &runs, &assets, &stem)?;
    }
    if let Some(reference) = &args.agreement_reference {
        let r = runs
            .iter()
            .find(|r| &r.label == reference)
            .with_context(|| format!("--agreement-reference `{reference}` is not a --run label"))?;
        page.section("Cost and quality");
        page.para(&format!(
            "Agreement: for each prompt, the number of leading words an output shares with \
             `{reference}`'s output for the same prompt, over that output's word count, averaged \
             over prompts (greedy decoding; outputs from each method's lowest concurrency). \
             Large share and throughput at that concurrency."
        ));
        add_quality(&mut page, &runs, r, &assets, &stem)?;
    }
    if !args.evals.is_empty() {
        let reports: Vec<EvalReport> = args
            .evals
            .iter()
            .map(|s| {
                let (label, path) = split(s).unwrap_or_else(|_| (String::new(), PathBuf::from(s)));
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let mut r: EvalReport = serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                if !label.is_empty() {
                    r.label = label;
                }
                Ok(r)
            })
            .collect::<Result<_>>()?;
        page.section("Accuracy");
        add_eval(&mut page, &reports);
    }
    for f in &args.findings {
        page.para(f);
    }
    page.write(&args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
