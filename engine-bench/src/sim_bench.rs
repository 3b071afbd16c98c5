//! `tokenrouter sim-bench`: the real runtime (schedulers, inter-model loop,
//! in-process transport) over simulated models whose steps take GPU-like
//! times. Closed-loop clients keep N requests active; each request writes a
//! long answer. R2R semantics with a Bernoulli signal: the small model's token
//! goes to the large model with probability p, which writes one token and
//! returns it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use model_files::dtype::StorageDtype;
use model_files::random::Preset;
use model_files::AssetError;
use policies::{build, Placement};
use serde::Serialize;
use subserver::config::LatencyModel;
use subserver::config::{DType, DeviceSpec};
use subserver::cuda::CudaOptions;
use subserver::engine::EngineLimits;
use subserver::error::EngineError;
use subserver::model::decoder::Decoder;
use subserver::model::dir::ModelDir;
use subserver::runner::memory::KvBudget;
use subserver::runner::sim::SimRunner;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::ModelRunner;
use subserver::sampling::SamplingParams;
use subserver::scheduler::batching::ExecutionMode;
use subserver::scheduler::client::StreamEvent;
use subserver::scheduler::group::{Group, GroupSettings, MemberSpec};
use subserver::std_serving::{self, ForwardRule, StdServers};

use crate::options::{answer_tokens, stagger, validate};
pub use crate::options::{BenchMode, SimBenchOptions, TchModels};
use crate::random_init::random_weights;
use crate::stagger::Stagger;

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct SimBenchReport {
    /// The settings.
    pub options: SimBenchOptions,
    /// Committed output tokens per second after warm-up.
    pub throughput_tok_s: f64,
    /// Share of committed tokens written by the large model.
    pub large_share: f64,
    /// Forward steps per model during the measurement.
    pub steps_per_model: Vec<u64>,
    /// Mean batch size per model during the measurement.
    pub mean_batch_per_model: Vec<f64>,
    /// Delayed-batching steps started below `B` per model (wait bound or
    /// deadlock breaker; the chain predicts none).
    pub early_starts_per_model: Vec<u64>,
    /// Committed tokens during the measurement.
    pub tokens: u64,
    /// Measured wall time.
    pub wall_s: f64,
}

/// Model `m`'s runner: simulated (free while `start` says so), or a
/// random-weight model on a device.
fn runner(
    o: &SimBenchOptions,
    m: usize,
    start: &Stagger,
) -> Result<Box<dyn ModelRunner>, EngineError> {
    let Some(t) = &o.tch else {
        return Ok(Box::new(
            sim_runner(o, m)?.with_free_while(start.free_switch()),
        ));
    };
    let bad = |e: String| EngineError::InvalidRequest(e);
    let preset: Preset = t.presets[m]
        .parse()
        .map_err(|e: AssetError| bad(e.to_string()))?;
    let dtype: DType = t.dtype.parse().map_err(|e| bad(format!("--dtype: {e}")))?;
    let device: DeviceSpec = t
        .device
        .parse()
        .map_err(|e| bad(format!("--device: {e}")))?;
    let device: tch::Device = device.into();
    subserver::device::ensure_device(device)?;
    let cfg = preset.config(StorageDtype::Bf16);
    let kind: tch::Kind = dtype.into();
    let weights = random_weights(&cfg, o.seed as i64 + m as i64, kind, device)?;
    let decoder = Decoder::new(&cfg, weights, kind, device)?;
    let dir = ModelDir {
        path: preset.name().into(),
        config: cfg,
    };
    let mut opts = TchRunnerOptions::new(&dir.path);
    opts.device = device;
    opts.dtype = dtype;
    opts.kv_budget =
        KvBudget::Tokens(o.concurrency * (o.prompt_tokens + t.answer_tokens + 64) + 1024);
    // Std. Serving re-sends the sequence each call: let it reuse the prefix.
    opts.enable_prefix_cache = true;
    opts.cuda = CudaOptions {
        graphs: t.cuda_graphs,
        streams: t.cuda_streams,
    };
    Ok(Box::new(TchRunner::with_decoder(decoder, &dir, &opts)?))
}

fn sim_runner(o: &SimBenchOptions, m: usize) -> Result<SimRunner, EngineError> {
    let latency = LatencyModel::linear(
        o.latencies_ms[m],
        o.per_seq_ms.get(m).copied().unwrap_or(0.0),
        o.per_token_ms.get(m).copied().unwrap_or(0.0),
    )
    .and_then(|l| l.with_per_context(o.per_context_ms.get(m).copied().unwrap_or(0.0)))
    .map_err(|e| EngineError::InvalidRequest(format!("--latencies-ms: {e}")))?;
    let kv_tokens = o.concurrency * (o.prompt_tokens + answer_tokens(o) + 64) + 4096;
    SimRunner::new(
        &format!("sim{m}"),
        32_000,
        vec![],
        Box::new(latency),
        kv_tokens,
        16,
        o.seed + m as u64,
    )
}

/// The prompt of request `k` of closed-loop client `client`, with the
/// client's staggered history after it on its first request: distinct per
/// request, so no request rides on another's prefix-cache entry.
fn prompt(o: &SimBenchOptions, start: &Stagger, client: usize, k: u64) -> Vec<u32> {
    let history = if k == 0 { start.history(client) } else { 0 };
    (0..o.prompt_tokens.max(1) + history)
        .map(|i| ((i * 31 + client * 7919 + k as usize * 104_729) % 30_000 + 1) as u32)
        .collect()
}

/// Joins the client threads. A client that panicked sent less traffic than
/// the run would count, so each is logged and the run fails naming how many.
fn join_clients(clients: Vec<std::thread::JoinHandle<()>>) -> Result<(), EngineError> {
    let total = clients.len();
    let mut panicked = 0usize;
    for c in clients {
        if let Err(e) = c.join() {
            panicked += 1;
            let what = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("a non-text panic");
            tracing::error!(panic = what, "a sim-bench client panicked");
        }
    }
    if panicked > 0 {
        return Err(EngineError::InvalidRequest(format!(
            "{panicked} of {total} sim-bench clients panicked: the run sent less traffic than it would count"
        )));
    }
    Ok(())
}

/// The seed of request `k` of client `client`: every request its own, so
/// the routing draws (seeded per request) differ from request to request
/// instead of replaying one fixed sequence per client.
pub fn request_seed(run_seed: u64, client: usize, k: u64) -> u64 {
    run_seed
        .wrapping_mul(1_000_003)
        .wrapping_add(((client as u64) << 40) | (k & ((1 << 40) - 1)))
}

/// Runs one measurement.
pub fn run(o: &SimBenchOptions) -> Result<SimBenchReport, EngineError> {
    validate(o)?;
    match o.mode {
        BenchMode::StdServing => run_std(o),
        BenchMode::LargeOnly => run_group(o, &[1]),
        BenchMode::SmallOnly => run_group(o, &[0]),
        _ => run_group(o, &[0, 1]),
    }
}

/// The models `models` (indices into the options' small, large) as one
/// group: routed when there are two, alone when one.
fn run_group(o: &SimBenchOptions, models: &[usize]) -> Result<SimBenchReport, EngineError> {
    let mode = match o.mode {
        BenchMode::AsyncDelayed => ExecutionMode::AsyncDelayed,
        BenchMode::Async => ExecutionMode::Async,
        BenchMode::Lockstep => ExecutionMode::Lockstep,
        _ => ExecutionMode::Serial,
    };
    let kwargs =
        serde_json::json!({"probability": o.route_probability, "seed": o.seed, "target": 1});
    let n = models.len();
    let (policy_name, kwargs) = if n == 1 {
        ("Single", serde_json::Value::Null)
    } else {
        ("Random", kwargs)
    };
    let start = stagger(o);
    let mut members = Vec::new();
    for (i, &m) in models.iter().enumerate() {
        let at = Placement {
            model: i as u16,
            num_models: n,
            entry: 0,
        };
        let policy = build(policy_name, &kwargs, at)
            .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        members.push(MemberSpec {
            name: ["small", "large"][m].to_string(),
            runner: runner(o, m, &start)?,
            policy,
            tokenizer: None,
            thresholds: vec![o.thresholds[m]],
        });
    }
    let settings = GroupSettings {
        entry: 0,
        mode,
        max_batch_wait: Duration::from_secs_f64(o.max_batch_wait_ms / 1e3),
        limits: EngineLimits {
            max_batched_tokens: 8192,
            max_batch_size: 512,
        },
        peer_timeout: Duration::from_secs(60),
        ..GroupSettings::default()
    };
    let group = Arc::new(Group::start(members, settings));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..o.concurrency)
        .map(|c| {
            let (group, stop, o, start) = (group.clone(), stop.clone(), o.clone(), start.clone());
            std::thread::spawn(move || {
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut params =
                        SamplingParams::greedy(start.max_tokens(c, k, answer_tokens(&o)));
                    params.seed = Some(request_seed(o.seed, c, k));
                    let (_rid, mut rx) = group.submit(prompt(&o, &start, c, k), params);
                    k += 1;
                    while let Some(ev) = rx.blocking_recv() {
                        match ev {
                            StreamEvent::Token { .. } => start.committed(c),
                            StreamEvent::Finished { .. } | StreamEvent::Failed(_) => break,
                        }
                    }
                }
            })
        })
        .collect();
    let started = start.wait_started();
    std::thread::sleep(Duration::from_secs_f64(o.warmup_s));
    group.reset_counters();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(o.duration_s));
    let stats: Vec<_> = (0..n as u16).map(|m| group.stats(m)).collect();
    let wall = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    drop(group_shutdown(group));
    join_clients(clients)?;
    started?;
    let by_writer = &stats[0].committed_by_writer;
    let tokens: u64 = by_writer.iter().sum();
    Ok(SimBenchReport {
        options: o.clone(),
        throughput_tok_s: tokens as f64 / wall,
        large_share: match (n, tokens) {
            (1, _) => f64::from(u8::from(models[0] == 1)),
            (_, 0) => 0.0,
            _ => by_writer[1] as f64 / tokens as f64,
        },
        steps_per_model: stats.iter().map(|s| s.steps).collect(),
        mean_batch_per_model: stats
            .iter()
            .map(|s| {
                if s.steps > 0 {
                    s.batch_sum as f64 / s.steps as f64
                } else {
                    0.0
                }
            })
            .collect(),
        early_starts_per_model: stats.iter().map(|s| s.early_starts).collect(),
        tokens,
        wall_s: wall,
    })
}

/// Stops the group even while client threads still hold references.
fn group_shutdown(group: Arc<Group>) -> Option<Group> {
    // Clients exit once their request fails with Shutdown; wait for the last
    // reference so the Group (and its threads) drop here.
    let mut g = group;
    loop {
        match Arc::try_unwrap(g) {
            Ok(inner) => return Some(inner),
            Err(shared) => {
                shared.shutdown_requests();
                std::thread::sleep(Duration::from_millis(5));
                g = shared;
            }
        }
    }
}

/// The two single-model servers of the Std. Serving run (small, then
/// large), each a one-member group running `Single` with eager steps.
fn std_servers(o: &SimBenchOptions, start: &Stagger) -> Result<StdServers, EngineError> {
    let mut servers = Vec::new();
    for m in 0..2usize {
        let at = Placement {
            model: 0,
            num_models: 1,
            entry: 0,
        };
        let policy = build("Single", &serde_json::Value::Null, at)
            .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        let member = MemberSpec {
            name: ["small", "large"][m].to_string(),
            runner: runner(o, m, start)?,
            policy,
            tokenizer: None,
            thresholds: vec![1],
        };
        let settings = GroupSettings {
            mode: ExecutionMode::Async,
            limits: EngineLimits {
                max_batched_tokens: 1 << 20,
                max_batch_size: 512,
            },
            ..GroupSettings::default()
        };
        servers.push(Group::start(vec![member], settings));
    }
    Ok(StdServers {
        servers,
        eos_ids: Vec::new(),
    })
}

fn run_std(o: &SimBenchOptions) -> Result<SimBenchReport, EngineError> {
    let start = stagger(o);
    let servers = Arc::new(std_servers(o, &start)?);
    let rule = ForwardRule {
        probability: o.route_probability,
        seed: o.seed,
        small: 0,
        large: 1,
    };
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let clients: Vec<_> = (0..o.concurrency)
        .map(|c| {
            let (servers, measuring, stop, counts, start, o) = (
                servers.clone(),
                measuring.clone(),
                stop.clone(),
                counts.clone(),
                start.clone(),
                o.clone(),
            );
            std::thread::spawn(move || {
                let params = SamplingParams::greedy(1);
                // Closed loop: a new request (its own prompt and routing
                // draws) when one reaches its length.
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _ = std_serving::generate(
                        &servers,
                        rule,
                        request_seed(o.seed, c, k),
                        &prompt(&o, &start, c, k),
                        start.max_tokens(c, k, answer_tokens(&o)),
                        &params,
                        |_, writer| {
                            start.committed(c);
                            if measuring.load(Ordering::Relaxed) {
                                counts[writer].fetch_add(1, Ordering::Relaxed);
                            }
                            !stop.load(Ordering::Relaxed)
                        },
                    );
                    k += 1;
                }
            })
        })
        .collect();
    let started = start.wait_started();
    std::thread::sleep(Duration::from_secs_f64(o.warmup_s));
    let before: Vec<_> = servers.servers.iter().map(|s| s.stats(0)).collect();
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(o.duration_s));
    measuring.store(false, Ordering::Relaxed);
    let wall = t0.elapsed().as_secs_f64();
    let after: Vec<_> = servers.servers.iter().map(|s| s.stats(0)).collect();
    stop.store(true, Ordering::Relaxed);
    join_clients(clients)?;
    started?;
    let per: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let tokens: u64 = per.iter().sum();
    let steps: Vec<u64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| a.steps - b.steps)
        .collect();
    let batch: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            let s = a.steps - b.steps;
            if s > 0 {
                (a.batch_sum - b.batch_sum) as f64 / s as f64
            } else {
                0.0
            }
        })
        .collect();
    Ok(SimBenchReport {
        options: o.clone(),
        throughput_tok_s: tokens as f64 / wall,
        large_share: if tokens > 0 {
            per[1] as f64 / tokens as f64
        } else {
            0.0
        },
        steps_per_model: steps,
        mean_batch_per_model: batch,
        early_starts_per_model: vec![0; 2],
        tokens,
        wall_s: wall,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_client_fails_the_run() {
        let clients = vec![
            std::thread::spawn(|| {}),
            std::thread::spawn(|| panic!("client 1 broke")),
            std::thread::spawn(|| {}),
        ];
        let err = join_clients(clients).unwrap_err().to_string();
        assert!(err.contains("1 of 3 sim-bench clients panicked"), "{err}");
        join_clients(vec![std::thread::spawn(|| {})]).unwrap();
    }
}
