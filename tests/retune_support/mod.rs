//! A live sim group under closed-loop load, shared by the retuning tests and
//! `make bench-retune`: the R2R-style pair (6.0 / 27.9 ms steps) with Random
//! routing, either as one `tokenrouter subserver` process per model over TCP
//! or as one in-process group, each with its real admin HTTP surface; and
//! clients that keep `n` requests in flight through the entry's
//! `/internal/generate` ingress.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use subserver::http::ingress::WireEvent;
use subserver::sampling::SamplingParams;
use tuner::metrics::{MetricSeries, MetricsText};

/// Step latencies of the pair (ms), the example.
pub const LATENCY_MS: [f64; 2] = [6.0, 27.9];
/// The models, entry first.
pub const MODELS: [&str; 2] = ["quick", "reference"];

/// How the pair runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One `tokenrouter subserver` process per model, TCP hand-overs.
    TcpProcesses,
    /// Both models in one group in this process (in-process transport).
    InProcess,
}

use test_support::free_ports;
use test_support::Proc;

/// The group config: Random at `p` on the sim pair, with `transport` YAML.
pub fn config_yaml(p: f64, transport: &str, thresholds: Option<&str>) -> String {
    let thresholds = thresholds
        .map(|t| format!("delayed_batching_threshold: {t}\n"))
        .unwrap_or_default();
    format!(
        "model:\n  \
           quick: {{sim: {{latency_ms: {{base: {}, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}\n  \
           reference: {{sim: {{latency_ms: {{base: {}, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}\n\
         system: {{entry_model: quick, kv_cache_tokens: 262144}}\n\
         scheduler_class: Random\n\
         scheduler_kwargs: {{probability: {p}, seed: 7}}\n\
         backend: sim\n\
         execution_mode: async_delayed\n\
         max_batch_wait_ms: 50\n\
         {thresholds}{transport}",
        LATENCY_MS[0], LATENCY_MS[1]
    )
}

/// A running pair; dropping it stops it.
pub struct SimGroup {
    /// Admin base URLs (`http://host:port`), one per model (the same URL
    /// twice for the in-process group, whose registry holds both models).
    pub admin: Vec<String>,
    /// Bearer token of the control endpoints (`TOKENROUTER_ADMIN_TOKEN` of the processes).
    pub token: Option<String>,
    children: Vec<Proc>,
    service: Option<subserver::service::Service>,
    _dir: tempfile::TempDir,
}

impl SimGroup {
    /// Starts the pair with Random at `p` and waits until it is healthy.
    pub fn start(binary: &Path, topology: Topology, p: f64, thresholds: Option<&str>) -> Self {
        Self::start_with_token(binary, topology, p, thresholds, None)
    }

    /// [`Self::start`] with the control endpoints behind `token` (one process per model only).
    pub fn start_with_token(
        binary: &Path,
        topology: Topology,
        p: f64,
        thresholds: Option<&str>,
        token: Option<&str>,
    ) -> Self {
        assert!(
            token.is_none() || topology == Topology::TcpProcesses,
            "a token is set through the processes' environment"
        );
        let token = token.map(str::to_string);
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg_path = dir.path().join("group.yaml");
        match topology {
            Topology::TcpProcesses => {
                let [p0, p1, a0, a1] = free_ports();
                let (peers, admin) = ([p0, p1], [a0, a1]);
                let transport = format!(
                    "transport: {{kind: tcp, addresses: {{quick: \"127.0.0.1:{}\", reference: \"127.0.0.1:{}\"}}, peer_timeout_ms: 10000}}\n",
                    peers[0], peers[1]
                );
                std::fs::write(&cfg_path, config_yaml(p, &transport, thresholds))
                    .expect("write config");
                let children = MODELS
                    .iter()
                    .zip(admin)
                    .rev()
                    .map(|(model, port)| {
                        spawn_subserver(binary, &cfg_path, model, port, token.as_deref())
                    })
                    .collect();
                let group = SimGroup {
                    admin: admin
                        .iter()
                        .map(|p| format!("http://127.0.0.1:{p}"))
                        .collect(),
                    token,
                    children,
                    service: None,
                    _dir: dir,
                };
                group.check_healthy();
                group
            }
            Topology::InProcess => {
                std::fs::write(&cfg_path, config_yaml(p, "", thresholds)).expect("write config");
                let cfg = subserver::config::EngineConfig::from_file(&cfg_path).expect("config");
                let addr: SocketAddr = "127.0.0.1:0".parse().expect("address");
                let service =
                    subserver::service::Service::start(&cfg, Some(addr)).expect("start the group");
                let url = format!("http://{}", service.admin_addr().expect("admin address"));
                let group = SimGroup {
                    admin: vec![url.clone(), url],
                    token: None,
                    children: Vec::new(),
                    service: Some(service),
                    _dir: dir,
                };
                group.check_healthy();
                group
            }
        }
    }

    /// The entry model's admin URL (its `/internal/generate` takes requests).
    pub fn entry(&self) -> &str {
        &self.admin[0]
    }

    /// Checks every admin `/health` once: the processes said they run (the
    /// in-process group is up once `Service::start` returned).
    fn check_healthy(&self) {
        let client = client();
        for url in &self.admin {
            let r = client
                .get(format!("{url}/health"))
                .send()
                .unwrap_or_else(|e| panic!("GET {url}/health: {e}"));
            assert!(r.status().is_success(), "{url}/health: {}", r.status());
        }
    }

    /// Per model (in [`MODELS`] order), its name and the JSON of `GET {admin}{path}`.
    fn admin_json(&self, path: &str) -> Vec<(&'static str, serde_json::Value)> {
        let client = client();
        MODELS
            .iter()
            .zip(&self.admin)
            .map(|(model, url)| {
                let json = self
                    .authorized(client.get(format!("{url}{path}")))
                    .send()
                    .and_then(|r| r.json())
                    .unwrap_or_else(|e| panic!("GET {url}{path}: {e}"));
                (*model, json)
            })
            .collect()
    }

    /// Per model, the B table its admin API reports (`GET /admin/thresholds`).
    pub fn reported_thresholds(&self) -> Vec<Vec<usize>> {
        self.admin_json("/admin/thresholds")
            .into_iter()
            .map(|(model, json)| {
                serde_json::from_value(json["delayed_batching_threshold"][model].clone())
                    .expect("a B table")
            })
            .collect()
    }

    /// One scrape of every model's `/metrics`, merged.
    pub fn scrape(&self) -> MetricSeries {
        let client = client();
        let texts: Vec<MetricsText> = self
            .admin
            .iter()
            .map(|url| {
                let source = format!("{url}/metrics");
                let text = client
                    .get(&source)
                    .send()
                    .and_then(|r| r.error_for_status())
                    .and_then(|r| r.text())
                    .unwrap_or_else(|e| panic!("GET {source}: {e}"));
                MetricsText { source, text }
            })
            .collect();
        MetricSeries::from_texts(&texts).expect("parse metrics")
    }

    /// Per model, (steps, step seconds) as its scheduler counts them
    /// (`/admin/state`): the latency the group really runs at, which the
    /// machine's load can stretch beyond the configured sleep.
    pub fn step_stats(&self) -> Vec<(f64, f64)> {
        self.admin_json("/admin/state")
            .into_iter()
            .map(|(model, state)| {
                let stats = if state["models"].is_object() {
                    &state["models"][model]
                } else {
                    &state["stats"]
                };
                let f = |k: &str| {
                    stats[k]
                        .as_f64()
                        .unwrap_or_else(|| panic!("{k} in {state}"))
                };
                (f("steps"), f("step_seconds"))
            })
            .collect()
    }

    /// Moves Random's probability through the policy's live knob on every
    /// process (each TCP process holds its own copy).
    pub fn set_probability(&self, p: f64) {
        let client = client();
        for url in &self.admin {
            let r = self
                .authorized(client.put(format!("{url}/admin/routing_threshold")))
                .json(&serde_json::json!({ "routing_threshold": p }))
                .send()
                .unwrap_or_else(|e| panic!("PUT {url}/admin/routing_threshold: {e}"));
            assert!(
                r.status().is_success(),
                "PUT routing_threshold: {}",
                r.status()
            );
        }
    }

    /// Sets the delayed-batching table of every model (`table[m][n - 1]`).
    pub fn set_thresholds(&self, table: &[Vec<usize>]) {
        let client = client();
        let in_process = self.admin.windows(2).all(|w| w[0] == w[1]);
        for (m, url) in self.admin.iter().enumerate() {
            let models: Vec<usize> = match (in_process, m) {
                (true, 0) => (0..MODELS.len()).collect(),
                (true, _) => continue,
                (false, m) => vec![m],
            };
            let body: serde_json::Map<String, serde_json::Value> = models
                .into_iter()
                .map(|m| (MODELS[m].to_string(), serde_json::json!(table[m])))
                .collect();
            let r = self
                .authorized(client.put(format!("{url}/admin/thresholds")))
                .json(&serde_json::json!({ "delayed_batching_threshold": body }))
                .send()
                .unwrap_or_else(|e| panic!("PUT {url}/admin/thresholds: {e}"));
            assert!(r.status().is_success(), "PUT thresholds: {}", r.status());
        }
    }

    /// `request` with the group's bearer token, if it has one.
    pub fn authorized(
        &self,
        request: reqwest::blocking::RequestBuilder,
    ) -> reqwest::blocking::RequestBuilder {
        match &self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        }
    }
}

/// Model `model` as a `tokenrouter subserver` process, once it runs (its
/// "running" line: admin port bound, scheduler started).
fn spawn_subserver(
    binary: &Path,
    cfg: &Path,
    model: &str,
    admin: u16,
    token: Option<&str>,
) -> Proc {
    let envs: Vec<(&str, &str)> = token
        .map(|t| (subserver::http::access::TOKEN_ENV, t))
        .into_iter()
        .collect();
    test_support::spawn_subserver(binary, cfg, model, Some(admin), &envs)
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("HTTP client")
}

/// What the clients saw.
#[derive(Debug, Default, Clone)]
pub struct LoadCounts {
    /// Requests finished.
    pub finished: u64,
    /// Requests that failed (a dropped request is a failure).
    pub failed: u64,
    /// Output tokens by writer model.
    pub tokens_by_writer: [u64; 2],
}

/// `clients` closed-loop clients, each with one request of `max_tokens` in flight.
pub struct Load {
    stop: Arc<AtomicBool>,
    tokens: Arc<AtomicU64>,
    handles: Vec<JoinHandle<LoadCounts>>,
}

impl Load {
    /// Starts the clients against `entry` (an admin base URL).
    pub fn start(entry: &str, clients: usize, max_tokens: usize) -> Self {
        Self::start_with_token(entry, clients, max_tokens, None)
    }

    /// [`Self::start`] with a bearer token on every request.
    pub fn start_with_token(
        entry: &str,
        clients: usize,
        max_tokens: usize,
        token: Option<&str>,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tokens = Arc::new(AtomicU64::new(0));
        let handles = (0..clients)
            .map(|c| {
                let (stop, tokens, url, token) = (
                    stop.clone(),
                    tokens.clone(),
                    format!("{entry}/internal/generate"),
                    token.map(str::to_string),
                );
                std::thread::spawn(move || {
                    client_loop(&url, token.as_deref(), c as u32, max_tokens, &stop, &tokens)
                })
            })
            .collect();
        Self {
            stop,
            tokens,
            handles,
        }
    }

    /// Output tokens streamed so far (all clients).
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }

    /// Stops the clients after their current request and sums what they saw.
    pub fn stop(self) -> LoadCounts {
        self.stop.store(true, Ordering::Relaxed);
        let mut sum = LoadCounts::default();
        for h in self.handles {
            let c = h.join().expect("client thread");
            sum.finished += c.finished;
            sum.failed += c.failed;
            for m in 0..2 {
                sum.tokens_by_writer[m] += c.tokens_by_writer[m];
            }
        }
        sum
    }
}

fn client_loop(
    url: &str,
    token: Option<&str>,
    id: u32,
    max_tokens: usize,
    stop: &AtomicBool,
    tokens: &AtomicU64,
) -> LoadCounts {
    use std::io::BufRead;
    let client = client();
    let mut counts = LoadCounts::default();
    let mut k = 0u32;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let body = serde_json::json!({
            "prompt": [1 + id % 97, 2 + k % 89, 3, 4, 5, 6, 7, 8],
            "params": SamplingParams::greedy(max_tokens),
        });
        let request = match token {
            Some(t) => client.post(url).bearer_auth(t),
            None => client.post(url),
        };
        let response = match request.json(&body).send() {
            Ok(r) if r.status().is_success() => r,
            _ => {
                counts.failed += 1;
                continue;
            }
        };
        let mut ended = false;
        for line in std::io::BufReader::new(response).lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<WireEvent>(&line) {
                Ok(WireEvent::Token { writer, .. }) => {
                    counts.tokens_by_writer[writer.min(1) as usize] += 1;
                    tokens.fetch_add(1, Ordering::Relaxed);
                }
                Ok(WireEvent::Finished { .. }) => {
                    counts.finished += 1;
                    ended = true;
                }
                _ => {
                    counts.failed += 1;
                    ended = true;
                }
            }
        }
        if !ended {
            counts.failed += 1;
        }
    }
    counts
}

/// Re-checks `probe` until it holds. Kept a poll: a table applied by a
/// scheduler thread shows only on the admin API and `/metrics`, with no
/// event to wait on; [`test_support::HANG`] only catches a hang.
pub fn wait_until(what: &str, mut probe: impl FnMut() -> bool) {
    let start = Instant::now();
    while !probe() {
        assert!(
            start.elapsed() < test_support::HANG,
            "hang: {what} never happened"
        );
        // Spaces the reads only; no outcome rides on its length.
        std::thread::sleep(Duration::from_millis(20));
    }
}
