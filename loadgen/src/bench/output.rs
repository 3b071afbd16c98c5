//! What `tokenrouter bench --out DIR` leaves behind: `requests.csv` (one row
//! per request), `summary.json` (one object per concurrency) and two SVG
//! charts against concurrency.

use std::path::Path;

use super::record::write_csv;
use super::{RequestRecord, Summary};
use crate::plot::{chart, Series, Style};
use crate::stats::Spread;

/// Why the outputs could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// File system.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// JSON encoding.
    #[error("summary.json: {0}")]
    Json(#[from] serde_json::Error),
    /// Plotting.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes the CSV, the summary and the charts into `dir`.
pub fn write_all(
    dir: &Path,
    records: &[RequestRecord],
    summaries: &[Summary],
    label: &str,
) -> Result<(), OutputError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let csv = dir.join("requests.csv");
    let file = std::fs::File::create(&csv).map_err(io(&csv))?;
    write_csv(std::io::BufWriter::new(file), records).map_err(io(&csv))?;
    let json = dir.join("summary.json");
    std::fs::write(&json, serde_json::to_vec_pretty(summaries)?).map_err(io(&json))?;
    plot_runs(dir, &[(label.to_string(), summaries.to_vec())])?;
    Ok(())
}

/// Throughput and latency against concurrency, one line per labelled run,
/// into `dir/throughput.svg` and `dir/latency.svg`.
pub fn plot_runs(dir: &Path, runs: &[(String, Vec<Summary>)]) -> Result<(), OutputError> {
    let line = |name: String, f: &dyn Fn(&Summary) -> Option<f64>, s: &[Summary]| Series {
        name,
        points: s
            .iter()
            .filter_map(|x| f(x).map(|y| (x.concurrency as f64, y)))
            .collect(),
    };
    let tput: Vec<Series> = runs
        .iter()
        .map(|(l, s)| line(l.clone(), &|x| Some(x.output_tok_s), s))
        .collect();
    chart(
        &dir.join("throughput.svg"),
        "Output throughput",
        "concurrency (active requests)",
        "output tokens / s",
        &tput,
        Style::Lines,
    )?;
    let p = |f: fn(&Spread) -> f64, s: Option<Spread>| s.map(|s| f(&s));
    let mut lat = Vec::new();
    for (l, s) in runs {
        lat.push(line(
            format!("{l} TTFT p50"),
            &|x| p(|s| s.p50, x.ttft_ms),
            s,
        ));
        lat.push(line(format!("{l} ITL p50"), &|x| p(|s| s.p50, x.itl_ms), s));
        lat.push(line(format!("{l} ITL p99"), &|x| p(|s| s.p99, x.itl_ms), s));
    }
    chart(
        &dir.join("latency.svg"),
        "Latency",
        "concurrency (active requests)",
        "ms",
        &lat,
        Style::Lines,
    )?;
    Ok(())
}

/// Reads a `summary.json` written by `write_all`.
pub fn read_summaries(path: &Path) -> Result<Vec<Summary>, OutputError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    Ok(serde_json::from_str(&text)?)
}
