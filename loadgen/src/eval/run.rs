//! Asking every problem of a set through one endpoint and grading answers.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{equivalent, extract_answer, extract_reference, short};
use crate::bench::{self, RunSettings};
use crate::dataset::Prompt;
use crate::stats::wilson;

/// The instruction put before each math problem (`{problem}` is replaced).
pub const DEFAULT_TEMPLATE: &str =
    "Solve the problem step by step, then give the final answer as \\boxed{ANSWER}.\n\nProblem: {problem}";
/// The prompt of a short-answer item: the question as written (it carries
/// its own instruction, "Answer with a number.").
pub const SHORT_TEMPLATE: &str = "{problem}";

/// The template of one item: `template` when given, else the default of
/// its kind.
fn template_for<'a>(template: Option<&'a str>, p: &Prompt) -> &'a str {
    template.unwrap_or(if p.kind.is_some() {
        SHORT_TEMPLATE
    } else {
        DEFAULT_TEMPLATE
    })
}

/// Grades one output: the answer found and whether it is right.
fn grade(p: &Prompt, output: &str, expected: &str) -> (Option<String>, bool) {
    match p.kind {
        Some(kind) => short::grade(kind, output, &p.text, expected, &p.aliases),
        None => {
            let given = extract_answer(output);
            let ok = given.as_deref().is_some_and(|g| equivalent(g, expected));
            (given, ok)
        }
    }
}

/// One graded problem.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Graded {
    /// Index in the problem set.
    pub index: usize,
    /// Expected answer (extracted from the reference).
    pub expected: String,
    /// Answer extracted from the output (`None`: none found).
    pub given: Option<String>,
    /// The output as the server wrote it (empty when the request failed),
    /// so a page's reader can check the grading.
    #[serde(default)]
    pub output: String,
    /// Whether it matches.
    pub correct: bool,
    /// Output tokens.
    pub tokens: usize,
    /// Output tokens written by the large model, when reported.
    pub large_tokens: Option<usize>,
    /// Error, when the request failed.
    pub error: Option<String>,
}

/// One method's result on the problem set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalReport {
    /// Method name as shown in tables.
    pub label: String,
    /// Problems answered correctly.
    pub correct: usize,
    /// Problems asked.
    pub total: usize,
    /// The accuracy's Wilson 95% interval (`crate::stats::wilson`), for
    /// scripts that tabulate reports (absent from older reports).
    #[serde(default)]
    pub accuracy_ci95: Option<(f64, f64)>,
    /// Share of output tokens written by the large model, when reported.
    pub large_share: Option<f64>,
    /// Wall time of the whole set (s).
    pub wall_s: f64,
    /// Output tokens in all.
    pub output_tokens: usize,
    /// Concurrency the problems were asked with.
    pub concurrency: usize,
    /// Output tokens per second over the set.
    #[serde(default)]
    pub output_tok_s: Option<f64>,
    /// Changes of writer per 100 output tokens, when reported.
    #[serde(default)]
    pub switches_per_100_tokens: Option<f64>,
    /// Every problem.
    pub items: Vec<Graded>,
}

/// Why a set cannot be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A problem has no reference answer to check against.
    #[error("problem {0} has no reference answer (`answer`, `solution`, ...)")]
    NoReference(usize),
}

/// Asks each problem once (greedy unless the settings say otherwise) and
/// grades it. `settings.num_prompts` is set to the number of problems;
/// `template: None` picks each item's default ([`DEFAULT_TEMPLATE`] for
/// math, [`SHORT_TEMPLATE`] for short answers).
pub async fn evaluate(
    label: &str,
    settings: &RunSettings,
    problems: &[Prompt],
    template: Option<&str>,
    large_model: Option<&str>,
) -> Result<EvalReport, EvalError> {
    let expected: Vec<String> = problems
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p.reference
                .as_deref()
                .map(extract_reference)
                .ok_or(EvalError::NoReference(i))
        })
        .collect::<Result<_, _>>()?;
    let prompts: Vec<Prompt> = problems
        .iter()
        .map(|p| Prompt {
            text: template_for(template, p).replace("{problem}", &p.text),
            ..p.clone()
        })
        .collect();
    let settings = RunSettings {
        num_prompts: prompts.len(),
        ..settings.clone()
    };
    let t0 = Instant::now();
    let (records, summary) = bench::run(&settings, Arc::new(prompts), large_model).await;
    let wall_s = t0.elapsed().as_secs_f64();
    let items: Vec<Graded> = records
        .iter()
        .map(|r| {
            let o = &r.outcome;
            let exp = &expected[r.index];
            let (given, correct) = if o.ok() {
                grade(&problems[r.index], &o.text, exp)
            } else {
                (None, false)
            };
            Graded {
                index: r.index,
                expected: exp.clone(),
                correct,
                given,
                output: o.text.clone(),
                tokens: o.completion_tokens,
                large_tokens: large_model.and_then(|m| {
                    (!o.tokens_by_model.is_empty())
                        .then(|| o.tokens_by_model.get(m).copied().unwrap_or(0))
                }),
                error: o.error.clone(),
            }
        })
        .collect();
    let correct = items.iter().filter(|g| g.correct).count();
    Ok(EvalReport {
        label: label.to_string(),
        correct,
        total: items.len(),
        accuracy_ci95: Some(wilson(correct, items.len())),
        large_share: summary.large_model_share,
        wall_s,
        output_tokens: summary.output_tokens,
        concurrency: settings.concurrency,
        output_tok_s: Some(summary.output_tok_s),
        switches_per_100_tokens: summary.switches_per_100_tokens,
        items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tools/bench/depth_table.py` reads `accuracy_ci95` as `[lo, hi]`;
    /// reports written before the field existed still load.
    #[test]
    fn the_interval_is_written_as_a_pair_and_may_be_absent() {
        let report = EvalReport {
            label: "m".into(),
            correct: 81,
            total: 263,
            accuracy_ci95: Some(wilson(81, 263)),
            large_share: None,
            wall_s: 1.0,
            output_tokens: 1,
            concurrency: 1,
            output_tok_s: None,
            switches_per_100_tokens: None,
            items: Vec::new(),
        };
        let json = serde_json::to_value(&report).unwrap();
        let pair = json["accuracy_ci95"].as_array().unwrap();
        assert_eq!(pair.len(), 2);
        assert!(
            pair[0].as_f64().unwrap() < 81.0 / 263.0 && 81.0 / 263.0 < pair[1].as_f64().unwrap()
        );
        let mut old = json;
        old.as_object_mut().unwrap().remove("accuracy_ci95");
        let back: EvalReport = serde_json::from_value(old).unwrap();
        assert_eq!(back.accuracy_ci95, None);
    }
}
