//! `tokenrouter report`: one results page from labelled `bench` folders and
//! `eval` results, through the shared page writer.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::accuracy::{self, add_eval, Family};
use crate::compare::{add_quality, add_runs, point, Run};
use crate::eval::run::EvalReport;
use crate::frontier;
use crate::page::Page;
use crate::stats::difference_interval;
use crate::verdict::{Goal, Verdict};
use crate::work_page;

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
    /// An eval label on the token-level curve (repeatable; include the
    /// single-model ends). With --eval-query-level the page says, computed,
    /// whether this curve sits above each query-level result at its share.
    #[arg(long = "eval-token-level")]
    eval_token_level: Vec<String>,
    /// An eval label of a query-level method (repeatable).
    #[arg(long = "eval-query-level", requires = "eval_token_level")]
    eval_query_level: Vec<String>,
    /// An eval label of random token-level routing (repeatable; charted).
    #[arg(long = "eval-random")]
    eval_random: Vec<String>,
    /// An eval label on a second token-level curve, e.g. a trained router's
    /// threshold sweep (repeatable). The page says, computed, whether the
    /// --eval-token-level curve sits above each of these at its share.
    #[arg(long = "eval-challenger", requires = "eval_token_level")]
    eval_challenger: Vec<String>,
    /// Eval labels of the small-only and large-only runs, SMALL,LARGE: the
    /// page checks that large-only beats small-only beyond their intervals.
    #[arg(long = "eval-ends", value_delimiter = ',')]
    eval_ends: Vec<String>,
    /// Legend names of the token-level, query-level and random curves, and
    /// of the challenger curve when there is one.
    #[arg(long = "eval-curve-names", value_delimiter = ',')]
    eval_curve_names: Vec<String>,
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
    /// A target checked on the page: `NAME|>=|TARGET|V1,V2,...` (or `<=`),
    /// one value per seed or repeat (repeatable). The page says met / not
    /// met with the mean, its spread and the ratio to the target.
    #[arg(long = "verdict")]
    verdicts: Vec<String>,
    /// `GROUP|BASELINE` (two --run labels): explain their speed ratio at
    /// each concurrency from the compute counters the runs scraped.
    #[arg(long)]
    speed_why: Option<String>,
}

/// Parses `NAME|>=|TARGET|V1,V2,...`.
fn parse_verdict(spec: &str) -> Result<Verdict> {
    let parts: Vec<&str> = spec.split('|').collect();
    let [name, goal, target, values] = parts.as_slice() else {
        bail!("--verdict expects NAME|>=|TARGET|V1,V2,... (or <=), got `{spec}`");
    };
    let goal = match goal.trim() {
        ">=" => Goal::AtLeast,
        "<=" => Goal::AtMost,
        g => bail!("--verdict `{spec}`: the comparison must be >= or <=, not `{g}`"),
    };
    let target: f64 = target
        .trim()
        .parse()
        .with_context(|| format!("--verdict `{spec}`: target `{target}` is not a number"))?;
    let values = values
        .split(',')
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .with_context(|| format!("--verdict `{spec}`: value `{v}` is not a number"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Verdict::new(name.trim(), target, goal, values))
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
    let verdicts: Vec<Verdict> = args
        .verdicts
        .iter()
        .map(|v| parse_verdict(v))
        .collect::<Result<_>>()?;
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
        if work_page::add_work(&mut page, &runs) {
            if let Some(spec) = &args.speed_why {
                page.para(&speed_why(&runs, spec)?);
            }
        }
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
            page.para(&frontier::compare(&token, &query).with_context(|| {
                format!("comparing token-level routing with query-level `{q}`")
            })?);
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
        add_eval_verdicts(&mut page, &args, &reports, &assets, &stem)?;
    }
    for f in &args.findings {
        page.para(f);
    }
    if !verdicts.is_empty() {
        page.section("Verdicts");
        let lines: Vec<String> = verdicts
            .iter()
            .map(|v| format!("- {}", v.sentence()))
            .collect();
        page.para(&lines.join("\n"));
    }
    page.write(&args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

/// The `--speed-why GROUP|BASELINE` sentence.
fn speed_why(runs: &[Run], spec: &str) -> Result<String> {
    let (g, b) = spec
        .split_once('|')
        .with_context(|| format!("--speed-why `{spec}`: expected GROUP|BASELINE"))?;
    let find = |label: &str| {
        runs.iter()
            .find(|r| r.label == label)
            .with_context(|| format!("--speed-why: `{label}` is not a --run label"))
    };
    work_page::explain(find(g)?, find(b)?)
        .with_context(|| format!("--speed-why: `{g}` and `{b}` share no concurrency with counters"))
}

/// The eval result labelled `label`.
fn find<'a>(reports: &'a [EvalReport], label: &str) -> Result<&'a EvalReport> {
    reports
        .iter()
        .find(|r| r.label == label)
        .with_context(|| format!("`{label}` is not an --eval label"))
}

/// The Pareto chart, the large-over-small check and the token-level
/// against query-level verdict of the eval results.
fn add_eval_verdicts(
    page: &mut Page,
    args: &ReportArgs,
    reports: &[EvalReport],
    assets: &Path,
    stem: &str,
) -> Result<()> {
    if !matches!(args.eval_ends.len(), 0 | 2) {
        bail!("--eval-ends expects SMALL,LARGE (two labels)");
    }
    let names: [&str; 4] = match args.eval_curve_names.as_slice() {
        [] => [
            "token-level",
            "query-level",
            "random token-level",
            "challenger",
        ],
        [a, b, c] => [a, b, c, "challenger"],
        [a, b, c, d] => [a, b, c, d],
        _ => {
            bail!("--eval-curve-names expects three or four names: TOKEN,QUERY,RANDOM[,CHALLENGER]")
        }
    };
    if let [small, large] = args.eval_ends.as_slice() {
        let (s, l) = (find(reports, small)?, find(reports, large)?);
        let (lo, hi) = difference_interval(l.correct, l.total, s.correct, s.total);
        let d = l.correct as f64 / l.total.max(1) as f64 - s.correct as f64 / s.total.max(1) as f64;
        page.para(&format!(
            "Does the set separate the two models? `{large}` minus `{small}`: {:+.1} points \
             (95% CI {:+.1} to {:+.1}, Newcombe): **{}**.",
            100.0 * d,
            100.0 * lo,
            100.0 * hi,
            if lo > 0.0 {
                "yes, the interval excludes 0"
            } else {
                "no, the interval reaches 0, so accuracy here cannot rank routers"
            }
        ));
    }
    let family = |label: &str| {
        if args.eval_token_level.iter().any(|l| l == label) {
            Family::TokenLevel
        } else if args.eval_query_level.iter().any(|l| l == label) {
            Family::QueryLevel
        } else if args.eval_random.iter().any(|l| l == label) {
            Family::Random
        } else if args.eval_challenger.iter().any(|l| l == label) {
            Family::Challenger
        } else {
            Family::Other
        }
    };
    let tagged: Vec<(Family, &EvalReport)> =
        reports.iter().map(|r| (family(&r.label), r)).collect();
    if tagged.iter().any(|(_, r)| r.large_share.is_some()) {
        let file = accuracy::pareto(assets, &tagged, names)?;
        page.image("accuracy against large share", &format!("{stem}/{file}"));
    }
    let found = |labels: &[String]| {
        labels
            .iter()
            .map(|l| find(reports, l))
            .collect::<Result<Vec<_>>>()
    };
    if !args.eval_query_level.is_empty() {
        let (token, queries) = (
            found(&args.eval_token_level)?,
            found(&args.eval_query_level)?,
        );
        page.para(
            &accuracy::verdicts(&token, &queries)
                .context("comparing token-level with query-level accuracy")?,
        );
    }
    if !args.eval_challenger.is_empty() {
        let (token, points) = (
            found(&args.eval_token_level)?,
            found(&args.eval_challenger)?,
        );
        page.para(
            &accuracy::verdicts_named(&token, &points, names[0], names[3])
                .context("comparing the two token-level curves")?,
        );
    }
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

    #[test]
    fn verdict_specs_parse_and_bad_ones_say_why() {
        let v = parse_verdict("share miss|<=|0.05|0.01, 0.03").unwrap();
        assert_eq!(v.values, vec![0.01, 0.03]);
        assert_eq!(v.met(), Some(true));
        for (bad, why) in [
            ("a|>=|1", "expects NAME"),
            ("a|==|1|2", "must be >= or <="),
            ("a|>=|x|2", "target `x`"),
            ("a|>=|1|2,y", "value `y`"),
        ] {
            let e = parse_verdict(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
