//! The summary of one run: throughput, latency spreads, and the routing
//! figures when the server reports them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::RequestRecord;
use crate::stats::Spread;

/// What `summary.json` holds per concurrency.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Active requests.
    pub concurrency: usize,
    /// Measured requests that completed.
    pub completed: usize,
    /// Measured requests that failed.
    pub failed: usize,
    /// First failure message, if any.
    pub first_error: Option<String>,
    /// Sends the load generator retried because they provably never reached
    /// the server (a reused keep-alive connection closed before any response
    /// byte; see `loadgen::conn`): the client's, not counted as failures.
    #[serde(default)]
    pub client_retries: usize,
    /// Wall time of the measured part (s).
    pub duration_s: f64,
    /// Output tokens per second (completed requests).
    pub output_tok_s: f64,
    /// Completed requests per second.
    pub request_s: f64,
    /// Output tokens of completed requests.
    pub output_tokens: usize,
    /// Time to first token (ms).
    pub ttft_ms: Option<Spread>,
    /// Inter-token latency, one sample per token after the first (ms).
    pub itl_ms: Option<Spread>,
    /// Time per output token after the first, one sample per request (ms).
    pub tpot_ms: Option<Spread>,
    /// End-to-end latency per request (ms).
    pub e2e_ms: Option<Spread>,
    /// Output tokens by writer, when the server reports writers.
    pub tokens_by_model: BTreeMap<String, usize>,
    /// Share of output tokens written by `large_model`, when reported.
    pub large_model_share: Option<f64>,
    /// Writer switches per 100 output tokens, when reported.
    pub switches_per_100_tokens: Option<f64>,
    /// Each model's compute over the measured part, when the server
    /// exposes our step counters on `/metrics` (see [`super::work`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub work_by_model: super::work::WorkByModel,
}

impl Summary {
    /// Summarizes `records` measured over `wall`.
    pub fn of(
        records: &[RequestRecord],
        concurrency: usize,
        wall: Duration,
        large_model: Option<&str>,
    ) -> Self {
        let ok: Vec<_> = records.iter().filter(|r| r.outcome.ok()).collect();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let ttft: Vec<f64> = ok.iter().filter_map(|r| r.outcome.ttft.map(ms)).collect();
        let itl: Vec<f64> = ok.iter().flat_map(|r| r.outcome.itl_ms()).collect();
        let tpot: Vec<f64> = ok.iter().filter_map(|r| r.outcome.tpot_ms()).collect();
        let e2e: Vec<f64> = ok.iter().map(|r| ms(r.outcome.e2e)).collect();
        let output_tokens: usize = ok.iter().map(|r| r.outcome.completion_tokens).sum();
        let mut by_model = BTreeMap::new();
        for r in &ok {
            for (k, v) in &r.outcome.tokens_by_model {
                *by_model.entry(k.clone()).or_insert(0) += v;
            }
        }
        let attributed: usize = by_model.values().sum();
        let large_model_share = large_model
            .filter(|_| attributed > 0)
            .map(|m| by_model.get(m).copied().unwrap_or(0) as f64 / attributed as f64);
        let reported: Vec<_> = ok
            .iter()
            .filter_map(|r| r.outcome.switches.map(|s| (s, r.outcome.completion_tokens)))
            .collect();
        let switch_tokens: usize = reported.iter().map(|x| x.1).sum();
        let switches_per_100_tokens = (switch_tokens > 0).then(|| {
            reported.iter().map(|x| x.0).sum::<usize>() as f64 * 100.0 / switch_tokens as f64
        });
        let secs = wall.as_secs_f64().max(1e-9);
        Self {
            concurrency,
            completed: ok.len(),
            failed: records.len() - ok.len(),
            first_error: records.iter().find_map(|r| r.outcome.error.clone()),
            client_retries: records.iter().map(|r| r.outcome.client_retries).sum(),
            duration_s: wall.as_secs_f64(),
            output_tok_s: output_tokens as f64 / secs,
            request_s: ok.len() as f64 / secs,
            output_tokens,
            ttft_ms: Spread::of(&ttft),
            itl_ms: Spread::of(&itl),
            tpot_ms: Spread::of(&tpot),
            e2e_ms: Spread::of(&e2e),
            tokens_by_model: by_model,
            large_model_share,
            switches_per_100_tokens,
            work_by_model: super::work::WorkByModel::new(),
        }
    }

    /// One line for the terminal.
    pub fn line(&self) -> String {
        let p = |s: &Option<Spread>| {
            s.map_or_else(|| "-".into(), |s| format!("{:.1}/{:.1}", s.p50, s.p99))
        };
        let share = self
            .large_model_share
            .map_or_else(String::new, |s| format!(", large share {:.3}", s));
        let sw = self
            .switches_per_100_tokens
            .map_or_else(String::new, |s| format!(", {s:.1} switches/100 tok"));
        format!(
            "N={}: {:.1} tok/s, {:.2} req/s, TTFT p50/p99 {} ms, ITL p50/p99 {} ms, e2e p50/p99 {} ms, {} ok, {} failed, {} client retries{share}{sw}",
            self.concurrency,
            self.output_tok_s,
            self.request_s,
            p(&self.ttft_ms),
            p(&self.itl_ms),
            p(&self.e2e_ms),
            self.completed,
            self.failed,
            self.client_retries
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Outcome;
    use std::time::Instant;

    fn rec(i: usize, tokens: usize, large: usize, switches: usize, ok: bool) -> RequestRecord {
        let d = Duration::from_millis;
        let mut o = Outcome {
            status: if ok { 200 } else { 429 },
            error: (!ok).then(|| "HTTP 429".to_string()),
            ttft: Some(d(10)),
            e2e: d(10 + 10 * tokens as u64),
            token_times: (0..tokens as u64).map(|k| d(10 + 10 * k)).collect(),
            completion_tokens: tokens,
            switches: Some(switches),
            ..Outcome::default()
        };
        o.tokens_by_model.insert("quick".into(), tokens - large);
        o.tokens_by_model.insert("reference".into(), large);
        RequestRecord::new(i, 2, 0, tokens, Instant::now(), o)
    }

    #[test]
    fn summary_counts_only_completed_requests() {
        let records = vec![
            rec(0, 10, 3, 2, true),
            rec(1, 30, 7, 4, true),
            rec(2, 50, 50, 0, false),
        ];
        let s = Summary::of(&records, 2, Duration::from_secs(2), Some("reference"));
        assert_eq!((s.completed, s.failed), (2, 1));
        assert_eq!(s.first_error.as_deref(), Some("HTTP 429"));
        assert_eq!(s.client_retries, 0);
        assert_eq!(s.output_tokens, 40);
        assert!((s.output_tok_s - 20.0).abs() < 1e-9);
        assert!((s.request_s - 1.0).abs() < 1e-9);
        assert!((s.large_model_share.unwrap() - 0.25).abs() < 1e-12);
        assert!((s.switches_per_100_tokens.unwrap() - 15.0).abs() < 1e-12);
        // 9 + 29 gaps of 10 ms each.
        assert_eq!(s.itl_ms.unwrap().count, 38);
        assert_eq!(s.itl_ms.unwrap().p50, 10.0);
        assert!(s.line().contains("large share 0.250"));
        // Without a named large model, or with no writer data, no share.
        assert!(Summary::of(&records, 2, Duration::from_secs(1), None)
            .large_model_share
            .is_none());
    }
}
