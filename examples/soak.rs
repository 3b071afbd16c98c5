//! `make soak`: overload and leak runs against the gateway in front of the
//! simulated group (config/sim-gateway-bench.yaml), in one process.
//!
//! 1. Overload: closed-loop clients at 5x the gateway's capacity
//!    (`max_inflight + max_queue`) for `--overload-seconds`. The excess must
//!    get 429 with `Retry-After`, every admitted request must finish, RSS is
//!    sampled before, during and after, and the admitted token rate is
//!    compared with an unloaded run at capacity.
//! 2. Leaks: `--requests` requests with random client cancellations,
//!    disconnects mid-stream, stop strings and invalid bodies; afterwards
//!    every KV block and admission slot must be free, every model idle,
//!    and no task or file descriptor left over.
//!
//! Writes a Markdown report (`--out`) with the measured numbers and the
//! load average; the run fails (non-zero exit) when an invariant breaks.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use gateway::backend::inproc::InProcBackend;
use gateway::{Gateway, GatewayOptions, GatewayServer};
use loadgen::page::Page;
use rand::{Rng, SeedableRng};
use subserver::config::EngineConfig;
use subserver::service::Service;

#[derive(Parser)]
struct Args {
    /// Engine config with a sim backend.
    #[arg(long, default_value = "config/sim-gateway-bench.yaml")]
    config: PathBuf,
    /// Markdown report.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Gateway `max_inflight` (the queue is as long).
    #[arg(long, default_value_t = 8)]
    capacity: usize,
    /// Length of the overload phase.
    #[arg(long, default_value_t = 60)]
    overload_seconds: u64,
    /// Length of the unloaded reference phase.
    #[arg(long, default_value_t = 20)]
    unloaded_seconds: u64,
    /// Requests of the leak phase.
    #[arg(long, default_value_t = 10_000)]
    requests: usize,
    /// Clients at once in the leak phase.
    #[arg(long, default_value_t = 64)]
    leak_concurrency: usize,
    /// Seed of the leak phase's mix.
    #[arg(long, default_value_t = 14)]
    seed: u64,
    /// KV pool of every model, in tokens: 12 blocks, less than the gateway's
    /// 8 admitted requests need, so requests preempt each other in both
    /// phases (preemption must not leak either).
    #[arg(long, default_value_t = 192)]
    kv_tokens: usize,
    /// RSS may grow by at most this much over a phase (MiB) before the run fails.
    #[arg(long, default_value_t = 256)]
    rss_growth_mib: u64,
    /// The command a reader reruns to regenerate the page.
    #[arg(long, default_value = "make soak")]
    command: String,
}

/// Deadline for everything to settle after a phase (catches hangs only).
const SETTLE: Duration = Duration::from_secs(120);
/// Tokens per overload request.
const OVERLOAD_TOKENS: usize = 32;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Every model's internal invariant check (run on its scheduler thread
/// between steps); one line per broken one.
async fn invariants(service: &Service) -> Vec<String> {
    let group = service.group().clone();
    tokio::task::spawn_blocking(move || {
        (0..group.names().len())
            .filter_map(|m| group.check_invariants(m as u16, SETTLE).err())
            .collect()
    })
    .await
    .unwrap_or_else(|e| vec![format!("invariant check task: {e}")])
}

/// Gauges that must read 0 when nothing is held: the subservers'
/// (from their registry) and the gateway's (from a `/metrics` scrape).
async fn busy_gauges(service: &Service, metrics_url: &str) -> Vec<String> {
    use subserver::metrics::names as sub;
    let mut left = Vec::new();
    for family in service.registry().gather() {
        let name = family.name();
        if ![
            sub::NUM_REQUESTS_RUNNING,
            sub::NUM_REQUESTS_WAITING,
            sub::NUM_REQUESTS_PENDING,
            sub::KV_CACHE_USAGE_PERC,
        ]
        .contains(&name)
        {
            continue;
        }
        for m in family.get_metric() {
            let v = m.get_gauge().get_value();
            if v != 0.0 {
                let labels: Vec<String> = m
                    .get_label()
                    .iter()
                    .map(|l| format!("{}={}", l.name(), l.value()))
                    .collect();
                left.push(format!("{name}{{{}}} = {v}", labels.join(",")));
            }
        }
    }
    let text = match reqwest::get(metrics_url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => return vec![format!("gateway /metrics: {e}")],
    };
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting"] {
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        if values.is_empty() {
            left.push(format!("gateway /metrics has no {name}"));
        }
        if values.iter().any(|&v| v != 0.0) {
            left.push(format!("gateway {name} = {values:?}"));
        }
    }
    left
}

async fn serve(cfg: &EngineConfig, service: &Service, options: GatewayOptions) -> GatewayServer {
    let gw = Gateway::new(
        gateway::app::catalog(cfg),
        gateway::app::text_side(cfg).expect("tokenizer"),
        gateway::auth::ApiKeys::default(),
        options,
        vec![],
    )
    .expect("gateway");
    gw.primary()
        .pool
        .set_backends(vec![Arc::new(InProcBackend::new(
            service.group().clone(),
            "inproc",
        ))]);
    GatewayServer::bind(Arc::new(gw), "127.0.0.1:0")
        .await
        .expect("bind")
}

/// Counts of one closed-loop phase.
#[derive(Default)]
struct Phase {
    ok_tokens: AtomicUsize,
    ok: AtomicUsize,
    rejected: AtomicUsize,
    rejected_without_retry_after: AtomicUsize,
    other: AtomicUsize,
}

/// `clients` loops sending non-streaming requests until `until`.
async fn closed_loop(url: String, clients: usize, until: Instant) -> Arc<Phase> {
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
    for t in tasks {
        let _ = t.await;
    }
    phase
}

/// Waits until the gateway and every model hold nothing; the leftovers
/// when `SETTLE` runs out.
async fn settle(gw: &Gateway, service: &Service) -> Vec<String> {
    let models = service.group().names().len();
    let t0 = Instant::now();
    loop {
        let mut left = Vec::new();
        if gw.in_flight() != 0 {
            left.push(format!("gateway slots in use: {}", gw.in_flight()));
        }
        for m in 0..models {
            let s = service.group().stats(m as u16);
            if s.kv_requests != 0 || s.kv_available_blocks != s.kv_blocks {
                left.push(format!(
                    "model {m}: {} requests hold KV, {} of {} blocks free",
                    s.kv_requests, s.kv_available_blocks, s.kv_blocks
                ));
            }
            if s.running + s.waiting + s.pending != 0 || s.active != 0 {
                left.push(format!(
                    "model {m}: running {} waiting {} pending {} active {}",
                    s.running, s.waiting, s.pending, s.active
                ));
            }
        }
        if service.group().active() != 0 {
            left.push(format!("group active: {}", service.group().active()));
        }
        if left.is_empty() || t0.elapsed() > SETTLE {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Names of [`Kind`]s, by discriminant.
const KIND_NAMES: [&str; 5] = ["plain", "stop string", "disconnect", "cancel", "invalid"];

/// What the leak phase's client did.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    StopString,
    Disconnect,
    Cancel,
    Invalid,
}

/// One leak-phase request; `Err` says how its answer differed from what
/// its kind expects.
async fn one_leak_request(
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

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut cfg = EngineConfig::from_file(&args.config)?;
    cfg.override_kv_tokens(args.kv_tokens)?;
    let service = Service::start(&cfg, None)?;
    let options = GatewayOptions {
        max_inflight: args.capacity,
        max_queue: args.capacity,
        ..GatewayOptions::from_config(cfg.gateway())
    };
    let capacity = options.max_inflight + options.max_queue;
    let server = serve(&cfg, &service, options).await;
    let url = format!("http://{}/v1/completions", server.local_addr());
    let metrics_url = format!("http://{}/metrics", server.local_addr());
    let gw = server.gateway().clone();
    let mut failures: Vec<String> = Vec::new();
    let mut page = Page::begin("Reliability soak: overload and leaks", &args.command);
    page.para(&format!(
        "One process: the gateway in front of the simulated group of `{}` (sim backend: \
         fixed step latencies, no model compute, so the numbers measure admission, \
         scheduling and bookkeeping). Settings: capacity {} (max_inflight) + {} (max_queue), \
         overload {} s, unloaded reference {} s, leak run {} requests with {} clients at \
         once, seed {}, a KV pool of {} tokens per model (so that requests preempt each \
         other). The machine is a shared development host: other builds and tests \
         ran at the same time (see the load average), so rates are noisy; the invariants \
         are not.",
        args.config.file_name().map_or_else(
            || args.config.display().to_string(),
            |f| f.to_string_lossy().into()
        ),
        args.capacity,
        args.capacity,
        args.overload_seconds,
        args.unloaded_seconds,
        args.requests,
        args.leak_concurrency,
        args.seed,
        args.kv_tokens,
    ));

    // 1. Overload.
    let warm = closed_loop(url.clone(), 2, Instant::now() + Duration::from_secs(2)).await;
    drop(warm);
    let rss_before = rss_kib();
    let t0 = Instant::now();
    let unloaded = closed_loop(
        url.clone(),
        capacity,
        t0 + Duration::from_secs(args.unloaded_seconds),
    )
    .await;
    let unloaded_rate =
        unloaded.ok_tokens.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
    let load_unloaded = loadavg();
    let peak = Arc::new(AtomicUsize::new(rss_before as usize));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib() as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let t0 = Instant::now();
    let overload = closed_loop(
        url.clone(),
        5 * capacity,
        t0 + Duration::from_secs(args.overload_seconds),
    )
    .await;
    let overload_rate =
        overload.ok_tokens.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
    sampler.abort();
    let load_overload = loadavg();
    let left = settle(&gw, &service).await;
    let rss_after = rss_kib();
    let ratio = overload_rate / unloaded_rate;
    let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    if get(&overload.rejected) == 0 {
        failures.push("overload: no request was refused with 429".into());
    }
    if get(&overload.rejected_without_retry_after) > 0 {
        failures.push("overload: a 429 came without Retry-After".into());
    }
    if get(&overload.other) + get(&unloaded.other) > 0 {
        failures.push(format!(
            "overload: {} admitted requests did not finish with all their tokens",
            get(&overload.other) + get(&unloaded.other)
        ));
    }
    let rss_peak = peak.load(Ordering::Relaxed) as u64;
    if rss_peak.saturating_sub(rss_before) > args.rss_growth_mib * 1024 {
        failures.push(format!(
            "overload: RSS grew from {} MiB to a {} MiB peak",
            rss_before / 1024,
            rss_peak / 1024
        ));
    }
    failures.extend(left.iter().map(|l| format!("after overload: {l}")));
    failures.extend(
        invariants(&service)
            .await
            .into_iter()
            .map(|l| format!("after overload, invariant: {l}")),
    );
    failures.extend(
        busy_gauges(&service, &metrics_url)
            .await
            .into_iter()
            .map(|l| format!("after overload, metric: {l}")),
    );
    page.section(&format!(
        "Overload: 5x capacity for {} s",
        args.overload_seconds
    ));
    page.para(&format!(
        "Capacity = max_inflight {} + max_queue {} = {capacity}; closed-loop clients, \
         {OVERLOAD_TOKENS} tokens per request (`ignore_eos`); a refused client waits the \
         `Retry-After` seconds and tries again, as the OpenAI clients do.",
        args.capacity, args.capacity
    ));
    let yes_no = |ok: bool| if ok { "yes" } else { "NO" };
    page.table(
        &[
            "phase",
            "clients",
            "admitted, finished with every token",
            "429",
            "429 with Retry-After",
            "other outcomes",
            "admitted tokens/s",
            "load average after",
        ],
        &[
            vec![
                format!("unloaded ({} s)", args.unloaded_seconds),
                capacity.to_string(),
                get(&unloaded.ok).to_string(),
                get(&unloaded.rejected).to_string(),
                "-".into(),
                get(&unloaded.other).to_string(),
                format!("{unloaded_rate:.0}"),
                load_unloaded,
            ],
            vec![
                format!("overload ({} s)", args.overload_seconds),
                (5 * capacity).to_string(),
                get(&overload.ok).to_string(),
                get(&overload.rejected).to_string(),
                yes_no(get(&overload.rejected_without_retry_after) == 0).into(),
                get(&overload.other).to_string(),
                format!("{overload_rate:.0}"),
                load_overload,
            ],
        ],
    );
    page.para(&format!(
        "Admitted throughput under overload: **{:.1}%** of the unloaded rate (target: \
         within 10%: {}). RSS: {} MiB before, {} MiB peak during, {} MiB after (bound: \
         +{} MiB).",
        ratio * 100.0,
        if (ratio - 1.0).abs() <= 0.10 {
            "met"
        } else {
            "not met in this run"
        },
        rss_before / 1024,
        rss_peak / 1024,
        rss_after / 1024,
        args.rss_growth_mib
    ));

    // 2. Leaks.
    let fds_before = open_fds();
    let tasks_before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let rss_leak_before = rss_kib();
    let mut kinds = [0usize; 5];
    let served = Arc::new(AtomicUsize::new(0));
    let wrong: Arc<std::sync::Mutex<Vec<(usize, String)>>> = Arc::default();
    let retries = Arc::new(AtomicUsize::new(0));
    let mut checks_during = 0usize;
    {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(args.leak_concurrency)
            .timeout(SETTLE)
            .build()?;
        let next = Arc::new(AtomicUsize::new(0));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
        let plan: Arc<Vec<Kind>> = Arc::new(
            (0..args.requests)
                .map(|_| match rng.random_range(0..100) {
                    0..40 => Kind::Plain,
                    40..55 => Kind::StopString,
                    55..70 => Kind::Disconnect,
                    70..85 => Kind::Cancel,
                    _ => Kind::Invalid,
                })
                .collect(),
        );
        for k in plan.iter() {
            kinds[*k as usize] += 1;
        }
        let mut workers = Vec::new();
        for _ in 0..args.leak_concurrency {
            let (client, url, next, plan, served, wrong, retries) = (
                client.clone(),
                url.clone(),
                next.clone(),
                plan.clone(),
                served.clone(),
                wrong.clone(),
                retries.clone(),
            );
            let seed = args.seed;
            workers.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&kind) = plan.get(i) else { break };
                    match one_leak_request(&client, &url, kind, seed ^ i as u64, &retries).await {
                        Ok(()) => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(why) => {
                            if let Ok(mut w) = wrong.lock() {
                                w.push((kind as usize, why));
                            }
                        }
                    }
                }
            }));
        }
        // The invariant check also runs while requests come and go: the
        // bookkeeping must agree between any two steps, not only at rest.
        while workers.iter().any(|w| !w.is_finished()) {
            for l in invariants(&service).await {
                failures.push(format!("during the leak run, invariant: {l}"));
            }
            checks_during += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        for w in workers {
            let _ = w.await;
        }
    }
    let left = settle(&gw, &service).await;
    failures.extend(left.iter().map(|l| format!("after the leak run: {l}")));
    failures.extend(
        invariants(&service)
            .await
            .into_iter()
            .map(|l| format!("after the leak run, invariant: {l}")),
    );
    failures.extend(
        busy_gauges(&service, &metrics_url)
            .await
            .into_iter()
            .map(|l| format!("after the leak run, metric: {l}")),
    );
    // Closed connections and finished tasks go away shortly after the
    // requests; wait for them (bounded), then compare.
    let t0 = Instant::now();
    let (mut fds_after, mut tasks_after);
    loop {
        fds_after = open_fds();
        tasks_after = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        if (fds_after <= fds_before && tasks_after <= tasks_before) || t0.elapsed() > SETTLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss_leak_after = rss_kib();
    if fds_after > fds_before {
        failures.push(format!(
            "file descriptors: {fds_before} before, {fds_after} after"
        ));
    }
    if tasks_after > tasks_before {
        failures.push(format!(
            "tokio tasks: {tasks_before} before, {tasks_after} after"
        ));
    }
    if rss_leak_after.saturating_sub(rss_leak_before) > args.rss_growth_mib * 1024 {
        failures.push(format!(
            "leak run: RSS grew from {} MiB to {} MiB",
            rss_leak_before / 1024,
            rss_leak_after / 1024
        ));
    }
    let served = served.load(Ordering::Relaxed);
    if served != args.requests {
        failures.push(format!(
            "{} of {} leak-phase requests did not get their expected answer",
            args.requests - served,
            args.requests
        ));
        let wrong = wrong.lock().map(|w| w.clone()).unwrap_or_default();
        for (k, name) in KIND_NAMES.iter().enumerate() {
            let of_kind: Vec<&String> = wrong
                .iter()
                .filter(|(w, _)| *w == k)
                .map(|(_, why)| why)
                .collect();
            if let Some(first) = of_kind.first() {
                let first: String = first.chars().take(300).collect();
                failures.push(format!("{} {name}: first: {first}", of_kind.len()));
            }
        }
    }
    page.section(&format!("Leaks: {} requests", args.requests));
    page.para(&format!(
        "{} clients at once; mix: {} plain, {} with stop strings, {} streams the client \
         drops after the first chunk, {} cancelled by a 1-30 ms client timeout, {} invalid \
         (400 expected); a client refused with 429 retried after 10 ms ({} retries). \
         {served} got the answer their kind expects. The internal invariant \
         check (KV pool consistency; request table and KV bookkeeping agree; home count) \
         ran {checks_during} times on every model during the run and once after it; the \
         gauges `tokenrouter_num_requests_{{running,waiting,pending}}`, \
         `tokenrouter_kv_cache_usage_perc` and the gateway's `vllm:num_requests_{{running,waiting}}` \
         were read after it.",
        args.leak_concurrency,
        kinds[0],
        kinds[1],
        kinds[2],
        kinds[3],
        kinds[4],
        retries.load(Ordering::Relaxed)
    ));
    let models = service.group().names().len();
    let mut rows = Vec::new();
    for m in 0..models {
        let s = service.group().stats(m as u16);
        rows.push(vec![
            service.group().names()[m].clone(),
            format!("{} of {}", s.kv_available_blocks, s.kv_blocks),
            s.kv_requests.to_string(),
            format!("{}/{}/{}", s.running, s.waiting, s.pending),
            s.preemptions.to_string(),
        ]);
    }
    page.table(
        &[
            "model",
            "KV blocks free (or cached)",
            "requests holding KV",
            "running/waiting/pending",
            "preemptions",
        ],
        &rows,
    );
    page.para(&format!(
        "Gateway slots in use: {}; file descriptors {fds_before} before, {fds_after} after; \
         tokio tasks {tasks_before} before, {tasks_after} after; RSS {} MiB before, {} MiB \
         after.",
        gw.in_flight(),
        rss_leak_before / 1024,
        rss_leak_after / 1024
    ));
    page.section("Result");
    if failures.is_empty() {
        page.para("**Every invariant held.**");
    } else {
        let list: Vec<String> = failures.iter().map(|f| format!("- {f}")).collect();
        page.para(&format!("**FAILED**\n\n{}", list.join("\n")));
    }
    print!("{}", page.render());
    if let Some(out) = &args.out {
        page.write(out)?;
        eprintln!("wrote {}", out.display());
    }
    drop(server);
    anyhow::ensure!(
        failures.is_empty(),
        "{} invariant(s) broken",
        failures.len()
    );
    Ok(())
}
