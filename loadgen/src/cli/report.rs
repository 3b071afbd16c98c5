//! `tokenrouter report`: one results page from labelled `bench` folders and
//! `eval` results, through the shared page writer.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::compare::{add_eval, add_quality, add_runs, point, Run};
use crate::eval::run::EvalReport;
use crate::frontier;
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
    /// A bench folder: LABEL=DIR (repeatable, in table order). The label
    /// ends at the first `=`; write `=` inside a label as `\=`.
    #[arg(long = "run")]
    runs: Vec<String>,
    /// An eval result: LABEL=FILE.json or FILE.json (repeatable; its own
    /// label is kept when none is given). `=` in a label: `\=`.
    #[arg(long = "eval")]
    evals: Vec<String>,
    /// Label of the run whose outputs define agreement (e.g. large-only).
    #[arg(long)]
    agreement_reference: Option<String>,
    /// With --agreement-reference: a token-level method's label (repeatable;
    /// include the single-model end points). The page then says, computed,
    /// whether these sit above the --query-level method at its share.
    #[arg(long = "token-level", requires = "query_level")]
    token_level: Vec<String>,
    /// With --agreement-reference: the query-level method's label.
    #[arg(long, requires = "agreement_reference")]
    query_level: Option<String>,
    /// When the measurement began (UTC), if before this command; the page's date.
    #[arg(long, requires = "load_start")]
    started: Option<String>,
    /// The 1-minute load average when the measurement began.
    #[arg(long, requires = "started")]
    load_start: Option<f64>,
    /// A paragraph placed before the tables (repeatable).
    #[arg(long = "note")]
    notes: Vec<String>,
    /// A paragraph placed after the tables (repeatable).
    #[arg(long = "finding")]
    findings: Vec<String>,
}

/// Splits `LABEL=PATH` at the first `=` that is not escaped: a label may
/// hold `=` written as `\=` (e.g. `R-Stitch τ\=0.1=runs/rstitch`), and a
/// path may hold any character, `=` included.
fn split(spec: &str) -> Result<(String, PathBuf)> {
    let mut label = String::new();
    let mut chars = spec.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if spec[i + 1..].starts_with('=') => {
                label.push('=');
                chars.next();
            }
            '=' => {
                let path = &spec[i + 1..];
                if label.is_empty() || path.is_empty() {
                    break;
                }
                return Ok((label, path.into()));
            }
            c => label.push(c),
        }
    }
    bail!("expected LABEL=PATH (write `=` inside a label as `\\=`), got `{spec}`")
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
    if let Some(date) = &args.started {
        page.started_at(date, args.load_start);
    }
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
             Large share and throughput at that concurrency. Large-model perplexity (where the \
             run was scored): exp of the large model's mean negative log-likelihood per output \
             token, each output scored after its own prompt."
        ));
        add_quality(&mut page, &runs, r, &assets, &stem)?;
        if let Some(q) = &args.query_level {
            let point_of = |label: &str| {
                let run = runs
                    .iter()
                    .find(|x| x.label == label)
                    .with_context(|| format!("`{label}` is not a --run label"))?;
                point(run, r).with_context(|| format!("`{label}` has no share or agreement"))
            };
            let query = point_of(q)?;
            let token = args
                .token_level
                .iter()
                .map(|l| point_of(l))
                .collect::<Result<Vec<_>>>()?;
            page.para(&frontier::compare(&token, &query));
        }
    }
    if !args.evals.is_empty() {
        let reports: Vec<EvalReport> = args
            .evals
            .iter()
            .map(|s| {
                // A bare path (which may hold `=`) keeps the label stored in the file.
                let (label, path) = if Path::new(s).is_file() {
                    (String::new(), PathBuf::from(s))
                } else {
                    split(s)?
                };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_ends_at_the_first_unescaped_equals_sign() {
        let (l, p) = split("large-only=runs/large").unwrap();
        assert_eq!((l.as_str(), p), ("large-only", PathBuf::from("runs/large")));
        // The path may hold `=` (eval.sh names files after labels).
        let (l, p) = split("R-Stitch=raw/eval/R-Stitch τ=0.1.json").unwrap();
        assert_eq!(l, "R-Stitch");
        assert_eq!(p, PathBuf::from("raw/eval/R-Stitch τ=0.1.json"));
        // `\=` puts `=` in the label.
        let (l, p) = split("R-Stitch τ\\=0.1=raw/a=b").unwrap();
        assert_eq!(l, "R-Stitch τ=0.1");
        assert_eq!(p, PathBuf::from("raw/a=b"));
        for bad in ["no-separator", "=path", "label=", "a\\=b"] {
            assert!(split(bad).is_err(), "{bad}");
        }
    }
}
