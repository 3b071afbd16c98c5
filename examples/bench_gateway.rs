//! `make bench-gateway`: what the HTTP gateway adds on top of the engine,
//! with the simulated group behind it (config/sim-gateway-bench.yaml).
//!
//! In one process and one run:
//! 1. end-to-end time at concurrency 64, calling the group directly
//!    (`Group::submit`) and through the gateway (streaming HTTP, reqwest),
//!    in alternating rounds so drift hits both sides alike;
//! 2. added latency per streamed token: the backend is wrapped so that each
//!    token is stamped when the engine emits it, and the client subtracts
//!    that stamp when the token's SSE chunk arrives;
//! 3. 1,000 concurrent streaming clients, once against a gateway sized for
//!    them and once against the config's limits (everything over capacity
//!    must be a 429, nothing else may fail).
//!
//! Writes a Markdown report (`--out`) with the command, the measured
//! numbers and a verdict against the targets of `tools/bench/targets.yaml`
//! (added mean end-to-end time, added p99 latency per token, no failure
//! other than a 429).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use gateway::backend::inproc::InProcBackend;
use gateway::backend::{Backend, Submission};
use gateway::{Gateway, GatewayOptions, GatewayServer};
use loadgen::page::Page;
use loadgen::stats::percentile;
use loadgen::verdict::Goal;
use subserver::config::EngineConfig;
use subserver::sampling::SamplingParams;
use subserver::scheduler::client::StreamEvent;
use subserver::service::Service;

#[allow(dead_code)] // Each bench uses its own part of the shared support.
#[path = "support/targets.rs"]
mod targets;

#[derive(Parser)]
struct Args {
    /// Engine config with a sim backend.
    #[arg(long)]
    config: PathBuf,
    /// Markdown report.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Concurrency of the overhead comparison.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Tokens per request.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Alternating rounds (direct, gateway) per side.
    #[arg(long, default_value_t = 12)]
    rounds: usize,
    /// Clients of the many-clients phase.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
}

/// Emission stamps of every token, by the request's first prompt token.
type Stamps = Arc<Mutex<HashMap<u32, Vec<Instant>>>>;

/// Wraps the in-process backend and stamps each token as the engine emits it.
struct Stamping {
    inner: InProcBackend,
    stamps: Stamps,
}

impl Backend for Stamping {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn submit(&self, prompt: Vec<u32>, params: SamplingParams, pin: Option<u16>) -> Submission {
        let key = prompt.first().copied().unwrap_or(0);
        let mut inner = self.inner.submit(prompt, params, pin);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let stamps = self.stamps.clone();
        let task = tokio::spawn(async move {
            while let Some(ev) = inner.next().await {
                if matches!(ev, StreamEvent::Token { .. }) {
                    if let Ok(mut s) = stamps.lock() {
                        s.entry(key).or_default().push(Instant::now());
                    }
                }
                if tx.send(ev).is_err() {
                    break;
                }
            }
        });
        Submission::new(rx, Box::new(move || task.abort()))
    }

    fn healthy(&self) -> bool {
        self.inner.healthy()
    }

    fn active(&self) -> usize {
        self.inner.active()
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    percentile(v, p).unwrap_or(f64::NAN)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Distinct prompts: the first token identifies the request.
fn prompt(key: u32) -> Vec<u32> {
    vec![key, 11, 12, 13, 14, 15, 16, 17]
}

async fn direct_round(service: &Service, c: usize, max_tokens: usize, base: u32) -> Vec<f64> {
    let mut tasks = Vec::new();
    for i in 0..c {
        let group = service.group().clone();
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let (_rid, mut rx) = group.submit(
                prompt(base + i as u32),
                SamplingParams {
                    ignore_eos: true,
                    ..SamplingParams::greedy(max_tokens)
                },
            );
            let mut n = 0;
            while let Some(ev) = rx.recv().await {
                match ev {
                    StreamEvent::Token { .. } => n += 1,
                    StreamEvent::Finished { .. } => break,
                    StreamEvent::Failed(e) => panic!("direct request failed: {e}"),
                }
            }
            assert_eq!(n, max_tokens);
            t0.elapsed().as_secs_f64()
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("direct task"));
    }
    out
}

/// Outcome of one streaming HTTP request.
struct Streamed {
    status: u16,
    e2e_s: f64,
    /// Arrival of each chunk and the number of tokens it closes.
    chunks: Vec<(Instant, usize)>,
    done: bool,
}

async fn stream_one(client: &reqwest::Client, url: &str, key: u32, max_tokens: usize) -> Streamed {
    let t0 = Instant::now();
    let body = serde_json::json!({
        "model": "tokenrouter",
        "prompt": prompt(key),
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
    });
    let resp = match client.post(url).json(&body).send().await {
        Ok(r) => r,
        Err(_) => {
            return Streamed {
                status: 0,
                e2e_s: t0.elapsed().as_secs_f64(),
                chunks: vec![],
                done: false,
            }
        }
    };
    let status = resp.status().as_u16();
    let mut chunks = Vec::new();
    let mut done = false;
    let mut buf = String::new();
    let mut bytes = resp.bytes_stream();
    while let Some(piece) = bytes.next().await {
        let Ok(piece) = piece else { break };
        let now = Instant::now();
        buf.push_str(&String::from_utf8_lossy(&piece));
        while let Some(cut) = buf.find("\n\n") {
            let frame: String = buf.drain(..cut + 2).collect();
            let data = frame.trim().trim_start_matches("data: ");
            if data == "[DONE]" {
                done = true;
                continue;
            }
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(data) {
                let n = v["choices"][0]["token_sources"]
                    .as_array()
                    .map_or(0, Vec::len);
                if n > 0 {
                    chunks.push((now, n));
                }
            }
        }
    }
    Streamed {
        status,
        e2e_s: t0.elapsed().as_secs_f64(),
        chunks,
        done,
    }
}

async fn gateway_round(
    client: &reqwest::Client,
    url: &str,
    c: usize,
    max_tokens: usize,
    base: u32,
) -> Vec<(u32, Streamed)> {
    let mut tasks = Vec::new();
    for i in 0..c {
        let client = client.clone();
        let url = url.to_string();
        let key = base + i as u32;
        tasks.push(tokio::spawn(async move {
            (key, stream_one(&client, &url, key, max_tokens).await)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("gateway task"));
    }
    out
}

async fn serve(
    cfg: &EngineConfig,
    service: &Service,
    options: GatewayOptions,
    stamps: Option<Stamps>,
) -> GatewayServer {
    let gw = Gateway::new(
        gateway::app::catalog(cfg),
        gateway::app::text_side(cfg).expect("tokenizer"),
        gateway::auth::ApiKeys::default(),
        options,
        vec![],
    )
    .expect("gateway");
    let inner = InProcBackend::new(service.group().clone(), "inproc");
    let backend: Arc<dyn Backend> = match stamps {
        Some(stamps) => Arc::new(Stamping { inner, stamps }),
        None => Arc::new(inner),
    };
    gw.primary().pool.set_backends(vec![backend]);
    GatewayServer::bind(Arc::new(gw), "127.0.0.1:0")
        .await
        .expect("bind")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Started before measuring: the page records the load at start and end.
    let mut page = Page::begin("Gateway overhead (sim backend)", "make bench-gateway");
    let cfg = EngineConfig::from_file(&args.config)?;
    let service = Service::start(&cfg, None)?;
    let bench = Bench {
        base_opts: GatewayOptions::from_config(cfg.gateway()),
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(2048)
            .build()?,
        args,
        cfg,
        service,
    };
    let e2e = bench.end_to_end().await;
    let per_token_ms = bench.per_token(e2e.next_key).await;
    let many = bench.many_clients().await?;
    bench.write_page(&mut page, &e2e, &per_token_ms, &many)?;
    print!("{}", page.render());
    if let Some(out) = &bench.args.out {
        page.write(out)?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

/// The group under test and what every phase shares.
struct Bench {
    args: Args,
    cfg: EngineConfig,
    service: Service,
    /// The config's gateway options.
    base_opts: GatewayOptions,
    client: reqwest::Client,
}

/// End-to-end times (s) of the direct path and through the gateway.
struct EndToEnd {
    direct: Vec<f64>,
    via: Vec<f64>,
    /// The next unused prompt key.
    next_key: u32,
}

/// One row of the many-clients phase.
struct ManyRow {
    label: String,
    ok: usize,
    too_many: usize,
    other: usize,
    /// The distinct other outcomes.
    what: String,
    wall_s: f64,
}

impl Bench {
    /// Options sized so the overhead phases never queue.
    fn sized(&self) -> GatewayOptions {
        GatewayOptions {
            max_inflight: self.args.concurrency.max(self.base_opts.max_inflight),
            ..self.base_opts.clone()
        }
    }

    /// 1. End-to-end: the plain in-process backend, as `serve` runs it,
    ///    alternating direct and gateway rounds.
    async fn end_to_end(&self) -> EndToEnd {
        let (args, c) = (&self.args, self.args.concurrency);
        let server = serve(&self.cfg, &self.service, self.sized(), None).await;
        let url = format!("http://{}/v1/completions", server.local_addr());
        // Warm-up (connections, allocator, scheduler).
        direct_round(&self.service, c, 8, 1).await;
        gateway_round(&self.client, &url, c, 8, 1).await;
        let mut direct = Vec::new();
        let mut via = Vec::new();
        let mut key = 1000u32;
        for _ in 0..args.rounds {
            direct.extend(direct_round(&self.service, c, args.max_tokens, key).await);
            key += c as u32;
            for (_, s) in gateway_round(&self.client, &url, c, args.max_tokens, key).await {
                assert!(
                    s.status == 200 && s.done,
                    "gateway request failed: {}",
                    s.status
                );
                via.push(s.e2e_s);
            }
            key += c as u32;
        }
        EndToEnd {
            direct,
            via,
            next_key: key,
        }
    }

    /// 2. Per token: the same backend wrapped to stamp each token at
    ///    emission; each streamed token's delay from its own stamp (ms).
    async fn per_token(&self, mut key: u32) -> Vec<f64> {
        let (args, c) = (&self.args, self.args.concurrency);
        let stamps: Stamps = Arc::default();
        let server = serve(&self.cfg, &self.service, self.sized(), Some(stamps.clone())).await;
        let url = format!("http://{}/v1/completions", server.local_addr());
        gateway_round(&self.client, &url, c, 8, 1).await;
        let mut per_token_ms = Vec::new();
        for _ in 0..args.rounds {
            stamps.lock().map(|mut s| s.clear()).ok();
            for (k, s) in gateway_round(&self.client, &url, c, args.max_tokens, key).await {
                assert!(
                    s.status == 200 && s.done,
                    "gateway request failed: {}",
                    s.status
                );
                let emitted = stamps
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&k).cloned())
                    .unwrap_or_default();
                // Every token of a chunk arrives with the chunk: each is timed
                // from its own emission (not only the chunk's last token, which
                // would drop the earlier ones and bias the percentiles low).
                let mut seen = 0usize;
                for (at, n) in s.chunks {
                    for e in emitted.iter().skip(seen).take(n) {
                        per_token_ms.push(at.saturating_duration_since(*e).as_secs_f64() * 1e3);
                    }
                    seen += n;
                }
            }
            key += c as u32;
        }
        per_token_ms
    }

    /// 3. Many clients at once: a gateway sized for all of them, then the
    ///    config's limits.
    async fn many_clients(&self) -> anyhow::Result<Vec<ManyRow>> {
        let (args, base_opts) = (&self.args, &self.base_opts);
        let mut many = Vec::new();
        for (label, opts) in [
            (
                format!(
                    "sized for them (max_inflight {}, max_queue 0)",
                    args.clients
                ),
                GatewayOptions {
                    max_inflight: args.clients,
                    max_queue: 0,
                    ..base_opts.clone()
                },
            ),
            (
                format!(
                    "config limits (max_inflight {}, max_queue {})",
                    base_opts.max_inflight, base_opts.max_queue
                ),
                base_opts.clone(),
            ),
        ] {
            let server = serve(&self.cfg, &self.service, opts, None).await;
            let url = format!("http://{}/v1/completions", server.local_addr());
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(4096)
                .timeout(Duration::from_secs(300))
                .build()?;
            let t0 = Instant::now();
            let res = gateway_round(&client, &url, args.clients, 32, 5_000).await;
            let wall_s = t0.elapsed().as_secs_f64();
            let ok = res
                .iter()
                .filter(|(_, s)| s.status == 200 && s.done)
                .count();
            let too_many = res.iter().filter(|(_, s)| s.status == 429).count();
            let mut other: Vec<String> = res
                .iter()
                .filter(|(_, s)| !(s.status == 200 && s.done) && s.status != 429)
                .map(|(_, s)| {
                    format!(
                        "status {}{}",
                        s.status,
                        if s.done { "" } else { " (no [DONE])" }
                    )
                })
                .collect();
            other.sort();
            other.dedup();
            many.push(ManyRow {
                label,
                ok,
                too_many,
                other: res.len() - ok - too_many,
                what: other.join(", "),
                wall_s,
            });
        }
        Ok(many)
    }

    /// The page: the settings, each phase's table, and the verdicts.
    fn write_page(
        &self,
        page: &mut Page,
        e2e: &EndToEnd,
        per_token_ms: &[f64],
        many: &[ManyRow],
    ) -> anyhow::Result<()> {
        let (args, c) = (&self.args, self.args.concurrency);
        let (direct, via) = (&e2e.direct, &e2e.via);
        let (d_mean, g_mean) = (mean(direct), mean(via));
        let overhead = (g_mean - d_mean) / d_mean * 100.0;
        let (d_p50, g_p50) = (pct(direct, 50.0), pct(via, 50.0));
        let tok_p50 = pct(per_token_ms, 50.0);
        let tok_p99 = pct(per_token_ms, 99.0);
        let tok_max = pct(per_token_ms, 100.0);
        page.para(&format!(
            "`bench_gateway --config config/sim-gateway-bench.yaml --concurrency {c} --max-tokens {} \
             --rounds {} --clients {}`: one run, one process. The group is the simulated pair of \
             `config/sim-gateway-bench.yaml` (quick 2 ms/step, reference 4 ms/step, Bernoulli \
             hand-over 0.35); clients and gateway share the machine with it.",
            args.max_tokens, args.rounds, args.clients
        ));
        page.section(&format!("End-to-end time at concurrency {c}"));
        page.para(&format!(
            "{} requests per side of {} tokens each (greedy, `ignore_eos`), alternating rounds. \
             Direct = `Group::submit` in process; gateway = streaming `POST /v1/completions` \
             over loopback HTTP with reqwest.",
            direct.len(),
            args.max_tokens
        ));
        page.table(
            &["path", "mean e2e (s)", "p50 e2e (s)"],
            &[
                vec![
                    "direct".to_string(),
                    format!("{d_mean:.4}"),
                    format!("{d_p50:.4}"),
                ],
                vec![
                    "gateway".to_string(),
                    format!("{g_mean:.4}"),
                    format!("{g_p50:.4}"),
                ],
            ],
        );
        page.para(&format!(
            "Added by the gateway: **{overhead:+.2}%** of the mean end-to-end time."
        ));
        page.section("Added latency per streamed token");
        page.para(&format!(
            "A separate phase ({} rounds at concurrency {c}): a wrapper backend stamps each \
             token as its event leaves the scheduler's channel; when the SSE chunk carrying it \
             arrives, the client subtracts that token's own stamp (every token of a multi-token \
             chunk is counted, each from its own emission). Covers HTTP, SSE framing and JSON both \
             ways. {} tokens: p50 **{tok_p50:.3} ms**, p99 **{tok_p99:.3} ms**, max {tok_max:.3} ms.",
            args.rounds,
            per_token_ms.len()
        ));
        page.section(&format!("{} concurrent streaming clients", args.clients));
        page.para("32 tokens each, all started at once.");
        let rows: Vec<Vec<String>> = many
            .iter()
            .map(|m| {
                let what = if m.what.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", m.what)
                };
                vec![
                    m.label.clone(),
                    m.ok.to_string(),
                    m.too_many.to_string(),
                    format!("{}{what}", m.other),
                    format!("{:.2}", m.wall_s),
                ]
            })
            .collect();
        page.table(
            &["gateway", "completed", "429", "other errors", "wall (s)"],
            &rows,
        );
        let other_errors = many.iter().map(|m| m.other as f64).sum::<f64>();
        let verdicts = [
            (
                "Mean end-to-end time the gateway adds (%)",
                "gateway.overhead_pct_max",
                overhead,
            ),
            (
                "Added latency per streamed token, p99 (ms)",
                "gateway.token_p99_ms_max",
                tok_p99,
            ),
            (
                "Answers other than a stream or a 429",
                "gateway.other_errors_max",
                other_errors,
            ),
        ]
        .into_iter()
        .map(|(name, key, v)| targets::verdict(name, key, Goal::AtMost, vec![v]))
        .collect::<anyhow::Result<Vec<_>>>()?;
        targets::section(page, &verdicts);
        Ok(())
    }
}
