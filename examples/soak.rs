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

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use gateway::backend::inproc::InProcBackend;
use gateway::{Gateway, GatewayOptions, GatewayServer};
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

async fn serve(cfg: &EngineConfig, service: &Service, options: GatewayOptions) -> GatewayServer {
    let gw = Gateway::new(
        gateway::app::catalog(cfg),
        gateway::app::text_side(cfg).expect("tokenizer"),
        gateway::auth::ApiKeys::default(),
        options,
        vec![],
    )
    .expect("gateway");
    gw.pool.set_backends(vec![Arc::new(InProcBackend::new(
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
                        if r.headers().get("retry-after").is_none() {
                            phase
                                .rejected_without_retry_after
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        // Back off briefly (a real client waits Retry-After;
                        // the soak keeps the pressure on).
                        tokio::time::sleep(Duration::from_millis(5)).await;
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

/// What the leak phase's client did.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    StopString,
    Disconnect,
    Cancel,
    Invalid,
}

async fn one_leak_request(client: &reqwest::Client, url: &str, kind: Kind, seed: u64) -> bool {
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
    let mut req = client.post(url).json(&body);
    if let Kind::Cancel = kind {
        req = req.timeout(Duration::from_millis(rng.random_range(1..30)));
    }
    match (kind, req.send().await) {
        (Kind::Cancel, _) => true,
        (Kind::Invalid, Ok(r)) => r.status() == 400,
        (Kind::Disconnect, Ok(r)) => {
            // Read one chunk, then hang up mid-stream.
            let mut s = r.bytes_stream();
            let _ = s.next().await;
            true
        }
        (_, Ok(r)) => r.status() == 200 && r.bytes().await.is_ok(),
        (_, Err(_)) => false,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cfg = EngineConfig::from_file(&args.config)?;
    let service = Service::start(&cfg, None)?;
    let options = GatewayOptions {
        max_inflight: args.capacity,
        max_queue: args.capacity,
        ..GatewayOptions::from_config(cfg.gateway())
    };
    let capacity = options.max_inflight + options.max_queue;
    let server = serve(&cfg, &service, options).await;
    let url = format!("http://{}/v1/completions", server.local_addr());
    let gw = server.gateway().clone();
    let mut failures: Vec<String> = Vec::new();
    let mut md = String::new();
    writeln!(md, "# Reliability soak (sim backend)\n")?;
    writeln!(
        md,
        "Command: `make soak` (`soak --config {} --capacity {} --overload-seconds {} \
         --unloaded-seconds {} --requests {} --leak-concurrency {}`), one process, {} CPU cores; \
         load average at the start: {}.\n",
        args.config.display(),
        args.capacity,
        args.overload_seconds,
        args.unloaded_seconds,
        args.requests,
        args.leak_concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    )?;

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
            "overload: {} requests failed otherwise",
            get(&overload.other) + get(&unloaded.other)
        ));
    }
    failures.extend(left.iter().map(|l| format!("after overload: {l}")));
    writeln!(
        md,
        "## Overload: 5x capacity for {} s\n",
        args.overload_seconds
    )?;
    writeln!(
        md,
        "Capacity = max_inflight {} + max_queue {} = {capacity}; closed-loop clients, \
         {OVERLOAD_TOKENS} tokens per request (`ignore_eos`).\n",
        args.capacity, args.capacity
    )?;
    writeln!(md, "| phase | clients | admitted and finished | 429 (all with Retry-After) | other errors | admitted tokens/s |")?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    writeln!(
        md,
        "| unloaded ({} s) | {capacity} | {} | {} | {} | {unloaded_rate:.0} |",
        args.unloaded_seconds,
        get(&unloaded.ok),
        get(&unloaded.rejected),
        get(&unloaded.other)
    )?;
    writeln!(
        md,
        "| overload ({} s) | {} | {} | {} ({}) | {} | {overload_rate:.0} |",
        args.overload_seconds,
        5 * capacity,
        get(&overload.ok),
        get(&overload.rejected),
        if get(&overload.rejected_without_retry_after) == 0 {
            "yes"
        } else {
            "NO"
        },
        get(&overload.other)
    )?;
    writeln!(
        md,
        "\nAdmitted throughput under overload: **{:.1}%** of the unloaded rate \
         (target: within 10%). RSS: {} MiB before, {} MiB peak during, {} MiB after. \
         Load average after the phase: {}.\n",
        ratio * 100.0,
        rss_before / 1024,
        peak.load(Ordering::Relaxed) / 1024,
        rss_after / 1024,
        loadavg()
    )?;

    // 2. Leaks.
    let fds_before = open_fds();
    let tasks_before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let mut kinds = [0usize; 5];
    let served = Arc::new(AtomicUsize::new(0));
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
            let (client, url, next, plan, served) = (
                client.clone(),
                url.clone(),
                next.clone(),
                plan.clone(),
                served.clone(),
            );
            let seed = args.seed;
            workers.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&kind) = plan.get(i) else { break };
                    if one_leak_request(&client, &url, kind, seed ^ i as u64).await {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for w in workers {
            let _ = w.await;
        }
    }
    let left = settle(&gw, &service).await;
    failures.extend(left.iter().map(|l| format!("after the leak run: {l}")));
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
    let served = served.load(Ordering::Relaxed);
    if served != args.requests {
        failures.push(format!(
            "{} of {} leak-phase requests did not get their expected answer",
            args.requests - served,
            args.requests
        ));
    }
    writeln!(md, "## Leaks: {} requests\n", args.requests)?;
    writeln!(
        md,
        "{} at once; mix: {} plain, {} with stop strings, {} streams the client drops \
         after the first chunk, {} cancelled by a 1-30 ms client timeout, {} invalid (400). \
         {served} got the answer their kind expects.\n",
        args.leak_concurrency, kinds[0], kinds[1], kinds[2], kinds[3], kinds[4]
    )?;
    let models = service.group().names().len();
    for m in 0..models {
        let s = service.group().stats(m as u16);
        writeln!(
            md,
            "- model {}: {} of {} KV blocks free, {} requests holding KV, running/waiting/pending {}/{}/{}",
            service.group().names()[m],
            s.kv_available_blocks,
            s.kv_blocks,
            s.kv_requests,
            s.running,
            s.waiting,
            s.pending
        )?;
    }
    writeln!(
        md,
        "- gateway slots in use: {}; file descriptors {fds_before} before, {fds_after} after; \
         tokio tasks {tasks_before} before, {tasks_after} after\n",
        gw.in_flight()
    )?;
    if failures.is_empty() {
        writeln!(md, "**Result: every invariant held.**")?;
    } else {
        writeln!(md, "**Result: FAILED**\n")?;
        for f in &failures {
            writeln!(md, "- {f}")?;
        }
    }
    print!("{md}");
    if let Some(out) = &args.out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(out, &md)?;
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
