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
use gateway::backend::inproc::InProcBackend;
use gateway::{Gateway, GatewayOptions, GatewayServer};
use loadgen::page::Page;
use rand::{Rng, SeedableRng};
use subserver::config::EngineConfig;
use subserver::service::Service;

#[path = "soak/clients.rs"]
mod clients;
#[path = "soak/probes.rs"]
mod probes;
#[path = "soak/report.rs"]
mod report;
// The soak reads one target; the verdict helpers are for the bench pages.
#[allow(dead_code)]
#[path = "support/targets.rs"]
mod targets;

use clients::{closed_loop, join_clients, one_leak_request, Kind, Phase, KIND_NAMES};
use probes::{busy_gauges, invariants, loadavg, open_fds, rss_kib, settle};

/// Command-line settings of one soak run.
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

/// The gateway in front of the in-process group, on an ephemeral port.
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
    let mut soak = Soak {
        url: format!("http://{}/v1/completions", server.local_addr()),
        metrics_url: format!("http://{}/metrics", server.local_addr()),
        gw: server.gateway().clone(),
        page: Page::begin("Reliability soak: overload and leaks", &args.command),
        failures: Vec::new(),
        capacity,
        service,
        args,
    };
    soak.describe();
    let overload = soak.overload_run().await;
    soak.check_overload(&overload).await;
    soak.write_overload(&overload)?;
    let leak = soak.leak_run().await;
    soak.check_leak(&leak).await;
    soak.write_leak(&leak);
    soak.finish()?;
    drop(server);
    anyhow::ensure!(
        soak.failures.is_empty(),
        "{} invariant(s) broken",
        soak.failures.len()
    );
    Ok(())
}

/// One soak run: the group and gateway under test, the page being
/// written, and every broken invariant found so far.
struct Soak {
    args: Args,
    service: Service,
    gw: Arc<Gateway>,
    url: String,
    metrics_url: String,
    /// `max_inflight + max_queue`.
    capacity: usize,
    failures: Vec<String>,
    page: Page,
}

/// What the overload phase measured.
struct OverloadRun {
    unloaded: Arc<Phase>,
    overload: Arc<Phase>,
    unloaded_rate: f64,
    overload_rate: f64,
    load_unloaded: String,
    load_overload: String,
    /// Leftovers after the settle wait.
    left: Vec<String>,
    rss_before: u64,
    rss_peak: u64,
    rss_after: u64,
}

/// What the leak phase measured.
struct LeakRun {
    kinds: [usize; 5],
    served: usize,
    wrong: Vec<(usize, String)>,
    retries: usize,
    checks_during: usize,
    fds: (usize, usize),
    tasks: (usize, usize),
    rss: (u64, u64),
}

fn count(a: &AtomicUsize) -> usize {
    a.load(Ordering::Relaxed)
}

impl Soak {
    /// 1. Overload: an unloaded reference at capacity, then 5x capacity,
    ///    RSS sampled throughout, then the settle wait.
    async fn overload_run(&mut self) -> OverloadRun {
        let (url, capacity) = (self.url.clone(), self.capacity);
        let warm = closed_loop(url.clone(), 2, Instant::now() + Duration::from_secs(2)).await;
        if count(&warm.panicked) > 0 {
            self.failures
                .push("warm-up: a client panicked (less traffic than counted)".into());
        }
        let rss_before = rss_kib();
        let t0 = Instant::now();
        let unloaded = closed_loop(
            url.clone(),
            capacity,
            t0 + Duration::from_secs(self.args.unloaded_seconds),
        )
        .await;
        let unloaded_rate = count(&unloaded.ok_tokens) as f64 / t0.elapsed().as_secs_f64();
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
            url,
            5 * capacity,
            t0 + Duration::from_secs(self.args.overload_seconds),
        )
        .await;
        let overload_rate = count(&overload.ok_tokens) as f64 / t0.elapsed().as_secs_f64();
        sampler.abort();
        let load_overload = loadavg();
        let left = settle(&self.gw, &self.service).await;
        OverloadRun {
            unloaded,
            overload,
            unloaded_rate,
            overload_rate,
            load_unloaded,
            load_overload,
            left,
            rss_before,
            rss_peak: peak.load(Ordering::Relaxed) as u64,
            rss_after: rss_kib(),
        }
    }

    /// Every 429 carries Retry-After, every admitted request finishes,
    /// RSS stays bounded, and nothing is held afterwards.
    async fn check_overload(&mut self, run: &OverloadRun) {
        let failures = &mut self.failures;
        if count(&run.overload.rejected) == 0 {
            failures.push("overload: no request was refused with 429".into());
        }
        if count(&run.overload.rejected_without_retry_after) > 0 {
            failures.push("overload: a 429 came without Retry-After".into());
        }
        let panicked = count(&run.overload.panicked) + count(&run.unloaded.panicked);
        if panicked > 0 {
            failures.push(format!(
                "overload: {panicked} client(s) panicked (less traffic than counted)"
            ));
        }
        let unfinished = count(&run.overload.other) + count(&run.unloaded.other);
        if unfinished > 0 {
            failures.push(format!(
                "overload: {unfinished} admitted requests did not finish with all their tokens"
            ));
        }
        if run.rss_peak.saturating_sub(run.rss_before) > self.args.rss_growth_mib * 1024 {
            failures.push(format!(
                "overload: RSS grew from {} MiB to a {} MiB peak",
                run.rss_before / 1024,
                run.rss_peak / 1024
            ));
        }
        failures.extend(run.left.iter().map(|l| format!("after overload: {l}")));
        self.check_idle("after overload").await;
    }

    /// The invariant check and the busy gauges, once everything settled.
    async fn check_idle(&mut self, when: &str) {
        let broken = invariants(&self.service).await;
        (self.failures).extend(
            broken
                .into_iter()
                .map(|l| format!("{when}, invariant: {l}")),
        );
        let busy = busy_gauges(&self.service, &self.metrics_url).await;
        (self.failures).extend(busy.into_iter().map(|l| format!("{when}, metric: {l}")));
    }

    /// 2. Leaks: the seeded mix of requests from `leak_concurrency`
    ///    workers, the invariant check running between them, then the
    ///    settle wait and the process's descriptors, tasks and RSS.
    async fn leak_run(&mut self) -> LeakRun {
        let fds_before = open_fds();
        let tasks_before = alive_tasks();
        let rss_before = rss_kib();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(self.args.seed);
        let plan: Arc<Vec<Kind>> = Arc::new(
            (0..self.args.requests)
                .map(|_| match rng.random_range(0..100) {
                    0..40 => Kind::Plain,
                    40..55 => Kind::StopString,
                    55..70 => Kind::Disconnect,
                    70..85 => Kind::Cancel,
                    _ => Kind::Invalid,
                })
                .collect(),
        );
        let mut kinds = [0usize; 5];
        for k in plan.iter() {
            kinds[*k as usize] += 1;
        }
        let tally = Arc::new(LeakTally::default());
        let workers = self.spawn_leak_workers(plan, tally.clone());
        // The invariant check also runs while requests come and go: the
        // bookkeeping must agree between any two steps, not only at rest.
        let mut checks_during = 0usize;
        while workers.iter().any(|w| !w.is_finished()) {
            for l in invariants(&self.service).await {
                self.failures
                    .push(format!("during the leak run, invariant: {l}"));
            }
            checks_during += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let panicked = join_clients(workers, "leak").await;
        if panicked > 0 {
            self.failures.push(format!(
                "during the leak run: {panicked} client(s) panicked (less traffic than counted)"
            ));
        }
        let left = settle(&self.gw, &self.service).await;
        self.failures
            .extend(left.iter().map(|l| format!("after the leak run: {l}")));
        self.check_idle("after the leak run").await;
        // Closed connections and finished tasks go away shortly after the
        // requests; wait for them (bounded), then compare.
        let t0 = Instant::now();
        let (mut fds_after, mut tasks_after);
        loop {
            fds_after = open_fds();
            tasks_after = alive_tasks();
            if (fds_after <= fds_before && tasks_after <= tasks_before) || t0.elapsed() > SETTLE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        LeakRun {
            kinds,
            served: count(&tally.served),
            wrong: tally.wrong.lock().map(|w| w.clone()).unwrap_or_default(),
            retries: count(&tally.retries),
            checks_during,
            fds: (fds_before, fds_after),
            tasks: (tasks_before, tasks_after),
            rss: (rss_before, rss_kib()),
        }
    }

    /// Workers that take the plan's requests in order until none is left.
    fn spawn_leak_workers(
        &self,
        plan: Arc<Vec<Kind>>,
        tally: Arc<LeakTally>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(self.args.leak_concurrency)
            .timeout(SETTLE)
            .build()
            .expect("client");
        let next = Arc::new(AtomicUsize::new(0));
        let seed = self.args.seed;
        (0..self.args.leak_concurrency)
            .map(|_| {
                let (client, url, next, plan, tally) = (
                    client.clone(),
                    self.url.clone(),
                    next.clone(),
                    plan.clone(),
                    tally.clone(),
                );
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&kind) = plan.get(i) else { break };
                        let seed = seed ^ i as u64;
                        match one_leak_request(&client, &url, kind, seed, &tally.retries).await {
                            Ok(()) => {
                                tally.served.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(why) => {
                                if let Ok(mut w) = tally.wrong.lock() {
                                    w.push((kind as usize, why));
                                }
                            }
                        }
                    }
                })
            })
            .collect()
    }

    /// No descriptor, task or RSS growth, and every request got the answer
    /// its kind expects (the first wrong answer of each kind is listed).
    async fn check_leak(&mut self, run: &LeakRun) {
        let failures = &mut self.failures;
        let ((fds_before, fds_after), (tasks_before, tasks_after)) = (run.fds, run.tasks);
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
        if run.rss.1.saturating_sub(run.rss.0) > self.args.rss_growth_mib * 1024 {
            failures.push(format!(
                "leak run: RSS grew from {} MiB to {} MiB",
                run.rss.0 / 1024,
                run.rss.1 / 1024
            ));
        }
        let requests = self.args.requests;
        if run.served != requests {
            failures.push(format!(
                "{} of {requests} leak-phase requests did not get their expected answer",
                requests - run.served,
            ));
            for (k, name) in KIND_NAMES.iter().enumerate() {
                let of_kind: Vec<&String> = run
                    .wrong
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
    }
}

/// The leak workers' shared counts.
#[derive(Default)]
struct LeakTally {
    served: AtomicUsize,
    retries: AtomicUsize,
    wrong: std::sync::Mutex<Vec<(usize, String)>>,
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}
