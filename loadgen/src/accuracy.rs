//! The accuracy section of a results page from `tokenrouter eval` results:
//! each method's accuracy with its Wilson 95% interval beside its cost
//! (large share, time, tokens/s, switches), the accuracy/share Pareto chart,
//! and the computed verdict on token-level against query-level routing at
//! equal share.

use std::path::Path;

use crate::eval::run::EvalReport;
use crate::frontier::{check_inside, interpolate, FrontierError};
use crate::page::Page;
use crate::plot::{chart, PlotError, Series, Style};
use crate::stats::{wilson, Z95};

/// Which curve of the chart an eval result belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A token-level router's threshold sweep (with the single-model ends).
    TokenLevel,
    /// A query-level router's sweep.
    QueryLevel,
    /// Random token-level routing.
    Random,
    /// A second token-level router's sweep (a trained router against the
    /// first one's signal), charted beside it and compared point by point.
    Challenger,
    /// A single point (e.g. small-only, large-only).
    Other,
}

fn accuracy(r: &EvalReport) -> f64 {
    r.correct as f64 / r.total.max(1) as f64
}

fn pct(v: f64) -> String {
    format!("{:.1}%", 100.0 * v)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

/// Adds the table of `reports` to `page`: the article's pairing table
/// (share, accuracy, time) with the interval, throughput and switches.
pub fn add_eval(page: &mut Page, reports: &[EvalReport]) {
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let (lo, hi) = wilson(r.correct, r.total);
            vec![
                r.label.clone(),
                r.large_share.map_or_else(|| "–".into(), pct),
                format!("{}/{}", r.correct, r.total),
                pct(accuracy(r)),
                format!("{}–{}", pct(lo), pct(hi)),
                format!("{:.1}", r.wall_s),
                opt(r.output_tok_s, 1),
                opt(r.switches_per_100_tokens, 1),
                r.items
                    .iter()
                    .filter(|g| g.error.is_some())
                    .count()
                    .to_string(),
            ]
        })
        .collect();
    page.table(
        &[
            "method",
            "large share",
            "correct",
            "accuracy",
            "95% CI (Wilson)",
            "time (s)",
            "output tok/s",
            "switches / 100 tok",
            "failed requests",
        ],
        &rows,
    );
}

/// Draws accuracy against large share, one line per family, into
/// `assets/accuracy.svg`; returns the file name. `names` are the legend
/// names of the token-level, query-level, random and challenger curves.
pub fn pareto(
    assets: &Path,
    reports: &[(Family, &EvalReport)],
    names: [&str; 4],
) -> Result<&'static str, PlotError> {
    let mut series = Vec::new();
    let families = [
        Family::TokenLevel,
        Family::QueryLevel,
        Family::Random,
        Family::Challenger,
    ];
    for (family, name) in families.into_iter().zip(names) {
        let mut points: Vec<(f64, f64)> = reports
            .iter()
            .filter(|(f, _)| *f == family)
            .filter_map(|(_, r)| Some((r.large_share?, accuracy(r))))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !points.is_empty() {
            series.push(Series {
                name: name.to_string(),
                points,
            });
        }
    }
    for (_, r) in reports.iter().filter(|(f, _)| *f == Family::Other) {
        if let Some(s) = r.large_share {
            series.push(Series {
                name: r.label.clone(),
                points: vec![(s, accuracy(r))],
            });
        }
    }
    chart(
        &assets.join("accuracy.svg"),
        "Accuracy against cost",
        "large-model token share",
        "accuracy",
        &series,
        Style::Lines,
    )?;
    Ok("accuracy.svg")
}

/// Variance of an accuracy, from Agresti–Caffo's adjusted proportion so
/// that 0/n and n/n still carry their uncertainty.
fn variance(r: &EvalReport) -> f64 {
    let p = (r.correct as f64 + 1.0) / (r.total as f64 + 2.0);
    p * (1.0 - p) / (r.total as f64 + 2.0)
}

/// Token-level minus query-level accuracy at the query-level method's
/// share, with its 95% interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The query-level share.
    pub share: f64,
    /// Token-level accuracy there (linear between its neighbours).
    pub token_level: f64,
    /// The query-level accuracy.
    pub query_level: f64,
    /// 95% interval of the difference.
    pub interval: (f64, f64),
}

impl Comparison {
    /// "above" / "below" when the interval excludes 0, else "level with".
    pub fn verdict(&self) -> &'static str {
        if self.interval.0 > 0.0 {
            "above"
        } else if self.interval.1 < 0.0 {
            "below"
        } else {
            "level with"
        }
    }
}

/// Compares the token-level curve with one query-level result; refused
/// (see [`check_inside`]) unless its share is strictly inside the curve.
/// The interval treats the methods as independent samples (they answer the
/// same items, so it is conservative) and the interpolated accuracy as the
/// weighted sum of its two neighbours.
pub fn compare(token: &[&EvalReport], query: &EvalReport) -> Result<Comparison, FrontierError> {
    let mut pts: Vec<(f64, &EvalReport)> = token
        .iter()
        .filter_map(|r| Some((r.large_share?, *r)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let shares: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let s = check_inside(&shares, query.large_share)?;
    let curve: Vec<(f64, f64)> = pts.iter().map(|(x, r)| (*x, accuracy(r))).collect();
    let outside = || FrontierError::OutsideCurve {
        share: s,
        lo: shares[0],
        hi: shares[shares.len() - 1],
    };
    let t = interpolate(&curve, s).ok_or_else(outside)?;
    let i = pts
        .windows(2)
        .position(|w| s >= w[0].0 && s <= w[1].0)
        .ok_or_else(outside)?;
    let ((s0, a), (s1, b)) = (pts[i], pts[i + 1]);
    let w = if s1 > s0 { (s - s0) / (s1 - s0) } else { 0.5 };
    let var_t = (1.0 - w).powi(2) * variance(a) + w.powi(2) * variance(b);
    let q = accuracy(query);
    let half = Z95 * (var_t + variance(query)).sqrt();
    Ok(Comparison {
        share: s,
        token_level: t,
        query_level: q,
        interval: (t - q - half, t - q + half),
    })
}

/// The verdict paragraph: one sentence per query-level result, then the
/// overall answer.
pub fn verdicts(token: &[&EvalReport], queries: &[&EvalReport]) -> Result<String, FrontierError> {
    verdicts_named(token, queries, "token-level", "query-level")
}

/// [`verdicts`] for any curve (`curve`, named `curve_name`) against any
/// points (named `point_name`), e.g. R-Stitch's sweep against R2R's.
pub fn verdicts_named(
    curve: &[&EvalReport],
    points: &[&EvalReport],
    curve_name: &str,
    point_name: &str,
) -> Result<String, FrontierError> {
    let (token, queries) = (curve, points);
    let mut lines = Vec::new();
    let mut tally = [0usize; 3];
    for q in queries {
        let c = compare(token, q)?;
        tally[match c.verdict() {
            "above" => 0,
            "below" => 1,
            _ => 2,
        }] += 1;
        lines.push(format!(
            "- at `{}`'s share {:.3}: {curve_name} {} against {point_name} {}, difference {:+.1} \
             points (95% CI {:+.1} to {:+.1}): {curve_name} sits **{}** {point_name}.",
            q.label,
            c.share,
            pct(c.token_level),
            pct(c.query_level),
            100.0 * (c.token_level - c.query_level),
            100.0 * c.interval.0,
            100.0 * c.interval.1,
            c.verdict()
        ));
    }
    let overall = match tally {
        [a, 0, 0] if a > 0 => {
            format!("{curve_name} routing sits **above** {point_name} at every compared share")
        }
        [0, b, 0] if b > 0 => {
            format!("{curve_name} routing sits **below** {point_name} at every compared share")
        }
        [a, b, l] => format!(
            "**no single verdict**: {curve_name} is above at {a}, below at {b} and level (the \
             interval crosses 0) at {l} of {} compared shares",
            a + b + l
        ),
    };
    Ok(format!(
        "{} against {point_name} at equal share ({curve_name} accuracy read off the \
         {curve_name} curve by linear interpolation at each {point_name} share; 95% interval of \
         the difference by the normal approximation with Agresti–Caffo proportions): \
         {overall}.\n\n{}",
        capitalized(curve_name),
        lines.join("\n")
    ))
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(label: &str, correct: usize, total: usize, share: f64) -> EvalReport {
        EvalReport {
            label: label.into(),
            correct,
            total,
            accuracy_ci95: None,
            large_share: Some(share),
            wall_s: 1.0,
            output_tokens: 10,
            concurrency: 1,
            output_tok_s: Some(10.0),
            switches_per_100_tokens: Some(3.0),
            items: Vec::new(),
        }
    }

    #[test]
    fn interpolates_the_curve_and_says_above_below_or_level() {
        let small = report("small", 30, 300, 0.0);
        let mid = report("t", 150, 300, 0.5);
        let large = report("large", 180, 300, 1.0);
        let token = [&small, &mid, &large];
        // At 0.25 the curve reads 20%; a query-level point at 10% is below it.
        let q = report("q", 30, 300, 0.25);
        let c = compare(&token, &q).unwrap();
        assert!((c.token_level - 0.3).abs() < 1e-9, "{c:?}");
        assert_eq!(c.verdict(), "above");
        assert_eq!(
            compare(&token, &report("q", 135, 300, 0.25))
                .unwrap()
                .verdict(),
            "below"
        );
        assert_eq!(
            compare(&token, &report("q", 92, 300, 0.25))
                .unwrap()
                .verdict(),
            "level with"
        );
        let text = verdicts(&token, &[&q]).unwrap();
        assert!(
            text.contains("sits **above** query-level at every"),
            "{text}"
        );
        assert!(text.contains("`q`'s share 0.250"), "{text}");
        assert!(
            text.starts_with("Token-level against query-level"),
            "{text}"
        );
        // Any curve against any points, e.g. a heuristic's sweep against a trained router's.
        let r2r = report("r2r", 150, 300, 0.25);
        let text = verdicts_named(&token, &[&r2r], "R-Stitch", "R2R").unwrap();
        assert!(
            text.contains("R-Stitch routing sits **below** R2R at every"),
            "{text}"
        );
        assert!(text.contains("R-Stitch 30.0% against R2R 50.0%"), "{text}");
    }

    #[test]
    fn end_points_and_single_model_points_are_refused() {
        let small = report("small", 30, 300, 0.0);
        let large = report("large", 180, 300, 1.0);
        let token = [&small, &large];
        let e = compare(&token, &report("q", 30, 300, 0.0)).unwrap_err();
        assert!(matches!(e, FrontierError::Degenerate(_)), "{e}");
        let mid = report("t", 150, 300, 0.5);
        let e = compare(&[&mid, &large], &report("q", 150, 300, 0.5)).unwrap_err();
        assert!(matches!(e, FrontierError::OutsideCurve { .. }), "{e}");
        assert!(verdicts(&token, &[&report("q", 1, 3, 1.0)]).is_err());
    }

    #[test]
    fn the_table_carries_the_wilson_interval() {
        let mut page = Page::begin("T", "make t");
        add_eval(&mut page, &[report("large", 81, 263, 1.0)]);
        let text = page.render();
        assert!(
            text.contains("| large | 100.0% | 81/263 | 30.8% | 25.5%–36.6% |"),
            "{text}"
        );
    }
}
