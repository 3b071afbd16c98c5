//! One row of the per-request CSV.

use std::io::Write;
use std::time::Instant;

use crate::client::Outcome;

/// A finished request, as the CSV records it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// Index in the run (selects the prompt and the seed).
    pub index: usize,
    /// Concurrency of the run.
    pub concurrency: usize,
    /// The request's seed.
    pub seed: u64,
    /// Tokens asked for.
    pub max_tokens: usize,
    /// When it was sent.
    pub started: Instant,
    /// What came back.
    pub outcome: Outcome,
}

impl RequestRecord {
    /// Bundles a request's identity and outcome.
    pub fn new(
        index: usize,
        concurrency: usize,
        seed: u64,
        max_tokens: usize,
        started: Instant,
        outcome: Outcome,
    ) -> Self {
        Self {
            index,
            concurrency,
            seed,
            max_tokens,
            started,
            outcome,
        }
    }
}

/// Header of the per-request CSV.
pub const CSV_HEADER: &str = "concurrency,index,seed,status,error,prompt_tokens,completion_tokens,\
ttft_ms,tpot_ms,e2e_ms,itl_p50_ms,itl_max_ms,switches,tokens_by_model,finish_reason,text,client_retries";

/// Quotes a CSV field when it needs it (RFC 4180).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| format!("{x:.3}"))
}

impl RequestRecord {
    /// The record as one CSV line (no newline).
    pub fn csv_line(&self) -> String {
        let o = &self.outcome;
        let itl = o.itl_ms();
        let by_model = o
            .tokens_by_model
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        [
            self.concurrency.to_string(),
            self.index.to_string(),
            self.seed.to_string(),
            o.status.to_string(),
            csv_field(o.error.as_deref().unwrap_or("")),
            o.prompt_tokens.to_string(),
            o.completion_tokens.to_string(),
            ms(o.ttft.map(|t| t.as_secs_f64() * 1e3)),
            ms(o.tpot_ms()),
            format!("{:.3}", o.e2e.as_secs_f64() * 1e3),
            ms(crate::stats::percentile(&itl, 50.0)),
            ms(crate::stats::percentile(&itl, 100.0)),
            o.switches.map_or_else(String::new, |s| s.to_string()),
            csv_field(&by_model),
            csv_field(o.finish_reason.as_deref().unwrap_or("")),
            csv_field(&o.text),
            o.client_retries.to_string(),
        ]
        .join(",")
    }
}

/// Writes the header and every record.
pub fn write_csv(mut w: impl Write, records: &[RequestRecord]) -> std::io::Result<()> {
    writeln!(w, "{CSV_HEADER}")?;
    for r in records {
        writeln!(w, "{}", r.csv_line())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn csv_quotes_text_and_keeps_columns() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\"\n"), "\"say \"\"hi\"\"\n\"");
        let mut o = Outcome {
            status: 200,
            completion_tokens: 2,
            ttft: Some(Duration::from_millis(5)),
            e2e: Duration::from_millis(15),
            token_times: vec![Duration::from_millis(5), Duration::from_millis(15)],
            text: "x, \"y\"".into(),
            switches: Some(0),
            ..Outcome::default()
        };
        o.tokens_by_model.insert("quick".into(), 2);
        let r = RequestRecord::new(3, 4, 99, 2, Instant::now(), o);
        let mut buf = Vec::new();
        write_csv(&mut buf, &[r]).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_HEADER);
        assert_eq!(
            lines[1],
            "4,3,99,200,,0,2,5.000,10.000,15.000,10.000,10.000,0,quick=2,,\"x, \"\"y\"\"\",0"
        );
    }
}
