//! Comparing labelled runs: tables, charts and agreement with a reference
//! method's outputs, assembled into one results page.

use std::collections::BTreeMap;
use std::path::Path;

use crate::bench::output::{plot_runs, read_summaries, OutputError};
use crate::bench::Summary;
use crate::page::Page;
use crate::plot::{chart, Series, Style};

/// Parses RFC 4180 CSV text into rows of fields.
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => row.push(std::mem::take(&mut field)),
            ('\n', false) => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            ('\r', false) => {}
            (c, _) => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

/// Output text per prompt index, from the lowest concurrency of a run's
/// `requests.csv` (failed requests left out).
pub fn texts_by_index(csv: &str) -> BTreeMap<usize, String> {
    let rows = parse_csv(csv);
    let Some(header) = rows.first() else {
        return BTreeMap::new();
    };
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(c), Some(i), Some(s), Some(t)) =
        (col("concurrency"), col("index"), col("status"), col("text"))
    else {
        return BTreeMap::new();
    };
    let mut best: BTreeMap<usize, (usize, String)> = BTreeMap::new();
    for r in rows
        .iter()
        .skip(1)
        .filter(|r| r.len() == header.len() && r[s] == "200")
    {
        let (Ok(conc), Ok(idx)) = (r[c].parse::<usize>(), r[i].parse::<usize>()) else {
            continue;
        };
        if best.get(&idx).is_none_or(|(bc, _)| conc < *bc) {
            best.insert(idx, (conc, r[t].clone()));
        }
    }
    best.into_iter().map(|(k, (_, v))| (k, v)).collect()
}

/// Agreement of `text` with `reference`: the length of their common word
/// prefix over the reference's word count (1.0: identical up to the
/// reference's end; greedy decoding diverges for good at the first miss).
pub fn prefix_agreement(text: &str, reference: &str) -> f64 {
    let (a, b): (Vec<&str>, Vec<&str>) = (
        text.split_whitespace().collect(),
        reference.split_whitespace().collect(),
    );
    if b.is_empty() {
        return if a.is_empty() { 1.0 } else { 0.0 };
    }
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    common as f64 / b.len() as f64
}

/// Mean prefix agreement and exact-match share over the shared indices.
pub fn agreement(
    texts: &BTreeMap<usize, String>,
    reference: &BTreeMap<usize, String>,
) -> Option<(f64, f64, usize)> {
    let pairs: Vec<(&String, &String)> = texts
        .iter()
        .filter_map(|(k, v)| reference.get(k).map(|r| (v, r)))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let mean = pairs
        .iter()
        .map(|(t, r)| prefix_agreement(t, r))
        .sum::<f64>()
        / n;
    let exact = pairs.iter().filter(|(t, r)| t.trim() == r.trim()).count() as f64 / n;
    Some((mean, exact, pairs.len()))
}

/// A labelled run folder (`summary.json`, `requests.csv`).
#[derive(Debug, Clone)]
pub struct Run {
    /// Name in tables.
    pub label: String,
    /// Its summaries, by concurrency.
    pub summaries: Vec<Summary>,
    /// Output text per prompt index.
    pub texts: BTreeMap<usize, String>,
    /// The large model's perplexity of the outputs (`perplexity.json`
    /// beside the run, written by a scorer), when scored.
    pub perplexity: Option<f64>,
}

impl Run {
    /// Reads `dir`.
    pub fn load(label: &str, dir: &Path) -> Result<Self, OutputError> {
        let summaries = read_summaries(&dir.join("summary.json"))?;
        let csv = std::fs::read_to_string(dir.join("requests.csv")).unwrap_or_default();
        let perplexity = std::fs::read_to_string(dir.join("perplexity.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["perplexity"].as_f64());
        Ok(Self {
            label: label.into(),
            summaries,
            texts: texts_by_index(&csv),
            perplexity,
        })
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

/// Adds the throughput/latency table and charts of `runs` to `page`; the
/// charts go to `assets` (a folder beside the page, named `rel` in links).
pub fn add_runs(
    page: &mut Page,
    runs: &[Run],
    assets: &Path,
    rel: &str,
) -> Result<(), OutputError> {
    let mut rows = Vec::new();
    for r in runs {
        for s in &r.summaries {
            rows.push(vec![
                r.label.clone(),
                s.concurrency.to_string(),
                format!("{:.1}", s.output_tok_s),
                format!("{:.2}", s.request_s),
                opt(s.ttft_ms.map(|x| x.p50), 0),
                opt(s.itl_ms.map(|x| x.p50), 1),
                opt(s.itl_ms.map(|x| x.p99), 1),
                opt(s.e2e_ms.map(|x| x.p50 / 1e3), 2),
                opt(s.large_model_share, 3),
                opt(s.switches_per_100_tokens, 1),
                format!("{}/{}", s.completed, s.completed + s.failed),
            ]);
        }
    }
    page.table(
        &[
            "method",
            "N",
            "output tok/s",
            "req/s",
            "TTFT p50 (ms)",
            "ITL p50 (ms)",
            "ITL p99 (ms)",
            "e2e p50 (s)",
            "large share",
            "switches / 100 tok",
            "ok",
        ],
        &rows,
    );
    let series: Vec<(String, Vec<Summary>)> = runs
        .iter()
        .map(|r| (r.label.clone(), r.summaries.clone()))
        .collect();
    plot_runs(assets, &series)?;
    page.image(
        "throughput against concurrency",
        &format!("{rel}/throughput.svg"),
    );
    page.image("latency against concurrency", &format!("{rel}/latency.svg"));
    Ok(())
}

/// Cost and quality of `run` against `reference` (share at its lowest
/// concurrency, mean word-prefix agreement, perplexity when scored).
pub fn point(run: &Run, reference: &Run) -> Option<crate::frontier::Point> {
    let (agreement, _, _) = agreement(&run.texts, &reference.texts)?;
    Some(crate::frontier::Point {
        share: run.summaries.first()?.large_model_share?,
        agreement,
        perplexity: run.perplexity,
    })
}

/// Adds the cost/quality table (agreement with `reference`'s outputs, and
/// the large model's perplexity where scored) and a Pareto chart (large
/// share against agreement) to `page`.
pub fn add_quality(
    page: &mut Page,
    runs: &[Run],
    reference: &Run,
    assets: &Path,
    rel: &str,
) -> Result<(), OutputError> {
    let mut rows = Vec::new();
    let mut points = Vec::new();
    for r in runs {
        let Some((mean, exact, n)) = agreement(&r.texts, &reference.texts) else {
            continue;
        };
        let first = r.summaries.first();
        let share = first.and_then(|s| s.large_model_share);
        let tput = first.map(|s| s.output_tok_s);
        rows.push(vec![
            r.label.clone(),
            opt(share, 3),
            format!("{mean:.3}"),
            format!("{exact:.3}"),
            opt(r.perplexity, 2),
            n.to_string(),
            opt(tput, 1),
            first.map_or_else(String::new, |s| s.concurrency.to_string()),
        ]);
        if let Some(x) = share {
            points.push(Series {
                name: r.label.clone(),
                points: vec![(x, mean)],
            });
        }
    }
    page.table(
        &[
            "method",
            "large share",
            "agreement (word prefix)",
            "exact match",
            "large-model perplexity",
            "prompts",
            "output tok/s",
            "at N",
        ],
        &rows,
    );
    chart(
        &assets.join("pareto.svg"),
        "Cost against quality",
        "large-model token share",
        "agreement with large-only greedy output",
        &points,
        Style::Points,
    )?;
    page.image(
        "large share against agreement",
        &format!("{rel}/pareto.svg"),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips_quoted_fields() {
        let rows = parse_csv("a,b,c\n1,\"x, \"\"y\"\"\nz\",3\n");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1], vec!["1", "x, \"y\"\nz", "3"]);
    }

    #[test]
    fn texts_come_from_the_lowest_concurrency_and_ok_rows() {
        let csv = format!(
            "{}\n4,0,1,200,,0,2,,,1,,,,,,late,0\n1,0,1,200,,0,2,,,1,,,,,,early,1\n1,1,1,429,x,0,0,,,1,,,,,,,0\n",
            crate::bench::record::CSV_HEADER
        );
        let t = texts_by_index(&csv);
        assert_eq!(t.len(), 1);
        assert_eq!(t[&0], "early");
    }

    #[test]
    fn agreement_is_the_common_word_prefix() {
        assert_eq!(prefix_agreement("a b c d", "a b c d"), 1.0);
        assert_eq!(prefix_agreement("a b x d", "a b c d"), 0.5);
        assert_eq!(prefix_agreement("", "a"), 0.0);
        let r: BTreeMap<usize, String> = [(0, "a b".into()), (1, "c d".into())].into();
        let t: BTreeMap<usize, String> =
            [(0, "a b".into()), (1, "c e".into()), (2, "z".into())].into();
        let (mean, exact, n) = agreement(&t, &r).unwrap();
        assert_eq!(n, 2);
        assert!((mean - 0.75).abs() < 1e-12);
        assert!((exact - 0.5).abs() < 1e-12);
    }
}
