//! The "where the compute went" part of a bench page: each model's step
//! seconds and forward tokens per output token, from the counters a run
//! scraped (see [`crate::bench::work`]), and a computed sentence on why a
//! routed group is or is not faster than a baseline at each concurrency.

use crate::bench::work::ModelWork;
use crate::bench::Summary;
use crate::compare::Run;
use crate::page::Page;

/// Per output token, one model's work.
fn per_output(w: &ModelWork, s: &Summary) -> Option<(f64, f64)> {
    let out = s.output_tokens as f64;
    (out > 0.0).then(|| (w.busy_s * 100.0 / out, w.tokens / out))
}

/// Adds the table for every run that scraped counters; `false` when none did.
pub fn add_work(page: &mut Page, runs: &[Run]) -> bool {
    let mut rows = Vec::new();
    for r in runs {
        for s in &r.summaries {
            for (model, w) in &s.work_by_model {
                let Some((busy, fed)) = per_output(w, s) else {
                    continue;
                };
                let per_step = if w.steps > 0.0 {
                    w.tokens / w.steps
                } else {
                    0.0
                };
                let busy_share = w.busy_s / s.duration_s.max(1e-9);
                rows.push(vec![
                    r.label.clone(),
                    s.concurrency.to_string(),
                    model.clone(),
                    format!("{busy:.3}"),
                    format!("{busy_share:.2}"),
                    format!("{fed:.2}"),
                    format!("{per_step:.1}"),
                ]);
            }
        }
    }
    if rows.is_empty() {
        return false;
    }
    page.para(
        "Where the compute went (the server's own counters, `/metrics` scraped before and after \
         each measured run): per model, step seconds per 100 output tokens, the fraction of the \
         run's wall time it spent in steps (the models of a group may step at the same time), \
         tokens fed through its forward per output token (prompt, the catch-up prefill of a \
         request handed to it, and decode), and tokens per step.",
    );
    page.table(
        &[
            "method",
            "N",
            "model",
            "step s / 100 output tok",
            "busy / wall",
            "forward tokens / output tok",
            "tokens / step",
        ],
        &rows,
    );
    true
}

/// One sentence per concurrency both runs measured: the group's step
/// seconds per 100 output tokens against the baseline's, and what the
/// baseline's model fed through its forward in each.
pub fn explain(group: &Run, baseline: &Run) -> Option<String> {
    let mut parts = Vec::new();
    for g in &group.summaries {
        let Some(b) = baseline
            .summaries
            .iter()
            .find(|b| b.concurrency == g.concurrency)
        else {
            continue;
        };
        let Some((model, bw)) = b.work_by_model.iter().next() else {
            continue;
        };
        let (Some((b_busy, b_fed)), Some(gw)) = (per_output(bw, b), g.work_by_model.get(model))
        else {
            continue;
        };
        let Some((g_large_busy, g_fed)) = per_output(gw, g) else {
            continue;
        };
        let g_busy: f64 = g
            .work_by_model
            .values()
            .filter_map(|w| per_output(w, g).map(|x| x.0))
            .sum();
        let share = g.large_model_share.unwrap_or(0.0);
        let cores_busy: f64 = g
            .work_by_model
            .values()
            .map(|w| w.busy_s / g.duration_s.max(1e-9))
            .sum();
        parts.push(format!(
            "at N={n}, {gl} ran {g_busy:.3} model-seconds of steps per 100 output tokens \
             ({model}: {g_large_busy:.3}) against {bl}'s {b_busy:.3}, at {ratio:.2}× its \
             throughput, its models stepping {cores_busy:.2} of the wall time summed over \
             models ({bl}: {b_cores:.2}); {model} wrote {share:.1}% of the tokens but fed \
             {g_fed:.2} tokens per output token through its forward ({bl}: {b_fed:.2}), \
             {pct:.0}% of what it feeds alone",
            b_cores = bw.busy_s / b.duration_s.max(1e-9),
            n = g.concurrency,
            gl = group.label,
            bl = baseline.label,
            ratio = g.output_tok_s / b.output_tok_s.max(1e-9),
            share = share * 100.0,
            pct = g_fed / b_fed.max(1e-9) * 100.0,
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "Why the speed ratios are what they are (computed from the table above): {}. A \
             hand-over leaves the request's KV at home and makes the large model prefill \
             everything written since its last turn, so its forward tokens track the answer's \
             length, not its share; routing pays off where a prefill token costs much less than \
             a decode token (batch 1) and not where decode is already batched. Where the models' \
             summed busy time exceeds one wall, they step at the same time and split the \
             cores.",
            parts.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn summary(n: usize, tok_s: f64, out: usize, work: &[(&str, f64, f64)]) -> Summary {
        let mut s: Summary = serde_json::from_value(serde_json::json!({
            "concurrency": n, "completed": 1, "failed": 0, "first_error": null,
            "duration_s": out as f64 / tok_s, "output_tok_s": tok_s, "request_s": 1.0,
            "output_tokens": out, "ttft_ms": null, "itl_ms": null, "tpot_ms": null,
            "e2e_ms": null, "tokens_by_model": {}, "large_model_share": 0.2,
            "switches_per_100_tokens": null
        }))
        .unwrap();
        s.work_by_model = work
            .iter()
            .map(|&(m, busy_s, tokens)| {
                let w = ModelWork {
                    busy_s,
                    steps: tokens,
                    tokens,
                };
                (m.to_string(), w)
            })
            .collect::<BTreeMap<_, _>>();
        s
    }

    fn run(label: &str, summaries: Vec<Summary>) -> Run {
        Run {
            label: label.into(),
            summaries,
            texts: BTreeMap::new(),
            perplexity: None,
        }
    }

    #[test]
    fn the_table_and_the_explanation_come_from_the_counters() {
        let base = run(
            "large-only",
            vec![summary(8, 100.0, 1000, &[("reference", 9.0, 1100.0)])],
        );
        let group = run(
            "group",
            vec![summary(
                8,
                100.0,
                1000,
                &[("quick", 4.0, 1200.0), ("reference", 8.0, 1050.0)],
            )],
        );
        let mut page = Page::begin("t", "c");
        assert!(add_work(&mut page, &[base.clone(), group.clone()]));
        let text = page.render();
        assert!(
            text.contains("| group | 8 | reference | 0.800 | 0.80 | 1.05 | 1.0 |"),
            "{text}"
        );
        let why = explain(&group, &base).unwrap();
        assert!(
            why.contains("at N=8, group ran 1.200 model-seconds"),
            "{why}"
        );
        assert!(why.contains("fed 1.05 tokens per output token"), "{why}");
        assert!(why.contains("large-only: 1.10"), "{why}");
        assert!(why.contains("95% of what it feeds alone"), "{why}");
        assert!(why.contains("stepping 1.20 of the wall time"), "{why}");
        assert!(why.contains("(large-only: 0.90)"), "{why}");
        // No counters: no table, no sentence.
        let bare = run("x", vec![summary(8, 1.0, 10, &[])]);
        assert!(!add_work(
            &mut Page::begin("t", "c"),
            std::slice::from_ref(&bare)
        ));
        assert!(explain(&bare, &bare).is_none());
    }
}
