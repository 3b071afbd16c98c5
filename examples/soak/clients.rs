//! The soak's clients: closed-loop overload clients, and the leak phase's
//! mix of plain, stop-string, dropped, cancelled and invalid requests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::{Rng, SeedableRng};

use super::{OVERLOAD_TOKENS, SETTLE};

/// Counts of one closed-loop phase.
#[derive(Default)]
pub struct Phase {
    pub ok_tokens: AtomicUsize,
    pub ok: AtomicUsize,
    pub rejected: AtomicUsize,
    pub rejected_without_retry_after: AtomicUsize,
    pub other: AtomicUsize,
    /// Clients that panicked: each sent less traffic than the phase counts,
    /// so any fails the soak.
    pub panicked: AtomicUsize,
}

/// `clients` loops sending non-streaming requests until `until`.
pub async fn closed_loop(url: String, clients: usize, until: Instant) -> Arc<Phase> {
    let phase = Arc::new(Phase::default());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .timeout(SETTLE)
        .build()
        .expect("client");
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, client, phase) = (url.clone(), client.clone(), phase.clone());
        tasks.push(tokio::spawn(async move {
            let mut k = 0u32;
            while Instant::now() < until {
                k += 1;
                let body = serde_json::json!({
                    "model": "tokenrouter",
                    "prompt": [c as u32 + 1, k % 1000 + 1, 7, 8],
                    "max_tokens": OVERLOAD_TOKENS,
                    "ignore_eos": true,
                });
                match client.post(&url).json(&body).send().await {
                    Ok(r) if r.status() == 200 => {
                        let v: serde_json::Value = r.json().await.unwrap_or_default();
                        let n = v["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize;
                        if n == OVERLOAD_TOKENS {
                            phase.ok.fetch_add(1, Ordering::Relaxed);
                            phase.ok_tokens.fetch_add(n, Ordering::Relaxed);
                        } else {
                            phase.other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(r) if r.status() == 429 => {
                        phase.rejected.fetch_add(1, Ordering::Relaxed);
                        let wait = r
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
                        if wait.is_none() {
                            phase
                                .rejected_without_retry_after
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        // A well-behaved client waits what Retry-After says
                        // (one that hammers measures the 429 path instead).
                        tokio::time::sleep(Duration::from_secs(wait.unwrap_or(1))).await;
                    }
                    _ => {
                        phase.other.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let panicked = join_clients(tasks, "overload").await;
    phase.panicked.fetch_add(panicked, Ordering::Relaxed);
    phase
}

/// Awaits every client task; returns how many panicked (or were aborted),
/// each logged with what it said.
pub async fn join_clients(tasks: Vec<tokio::task::JoinHandle<()>>, phase: &str) -> usize {
    let mut failed = 0;
    for t in tasks {
        if let Err(e) = t.await {
            failed += 1;
            eprintln!("soak: a {phase} client failed: {e}");
        }
    }
    failed
}

/// Names of [`Kind`]s, by discriminant.
pub const KIND_NAMES: [&str; 5] = ["plain", "stop string", "disconnect", "cancel", "invalid"];

/// What the leak phase's client did.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Plain,
    StopString,
    Disconnect,
    Cancel,
    Invalid,
}

/// One leak-phase request; `Err` says how its answer differed from what
/// its kind expects.
pub async fn one_leak_request(
    client: &reqwest::Client,
    url: &str,
    kind: Kind,
    seed: u64,
    retries: &AtomicUsize,
) -> Result<(), String> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let max_tokens = rng.random_range(1..48usize);
    let prompt: Vec<u32> = (0..rng.random_range(1..24usize))
        .map(|_| rng.random_range(1..40_000u32))
        .collect();
    let mut body = serde_json::json!({
        "model": "tokenrouter",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": seed,
    });
    match kind {
        Kind::StopString => body["stop"] = serde_json::json!(["e", "a"]),
        Kind::Disconnect => body["stream"] = serde_json::json!(true),
        Kind::Invalid => body["temperature"] = serde_json::json!(-3),
        Kind::Plain | Kind::Cancel => {}
    }
    let timeout = match kind {
        Kind::Cancel => Duration::from_millis(rng.random_range(1..30)),
        _ => SETTLE,
    };
    // More clients than the gateway admits: a refused one retries, as an
    // OpenAI client does on 429 (sooner than Retry-After, to keep the churn up).
    let sent = loop {
        let sent = client.post(url).json(&body).timeout(timeout).send().await;
        match sent {
            Ok(r) if r.status() == 429 => {
                retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => break other,
        }
    };
    let expect = |ok: bool, what: String| if ok { Ok(()) } else { Err(what) };
    match (kind, sent) {
        (Kind::Cancel, _) => Ok(()),
        (Kind::Invalid, Ok(r)) => expect(r.status() == 400, format!("status {}", r.status())),
        (Kind::Disconnect, Ok(r)) => {
            let status = r.status();
            // Read one chunk, then hang up mid-stream.
            let mut s = r.bytes_stream();
            let _ = s.next().await;
            expect(status == 200, format!("status {status}"))
        }
        (_, Ok(r)) => {
            let status = r.status();
            let text = r.text().await.map_err(|e| format!("body: {e}"))?;
            expect(status == 200, format!("status {status}: {text}"))
        }
        (_, Err(e)) => Err(format!("send: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_panicking_client_is_counted() {
        let tasks = vec![
            tokio::spawn(async {}),
            tokio::spawn(async { panic!("client broke") }),
        ];
        assert_eq!(super::join_clients(tasks, "test").await, 1);
    }
}
