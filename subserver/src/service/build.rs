//! From config to group members: one runner, policy, tokenizer and
//! threshold list per model.

use std::time::Duration;

use tracing::{info, warn};

use crate::config::{Backend, DeviceSpec, EngineConfig, KvBudget, TransportConfig};
use crate::device::cuda_mem_info;
use crate::engine::EngineLimits;
use crate::error::EngineError;
use crate::kv::storage::bytes_per_block;
use crate::model::dir::ModelDir;
use crate::peer::tcp::{peer_addresses, TcpOptions};
use crate::runner::memory::{plan_kv_tokens, ModelFootprint};
use crate::runner::mps_limit;
use crate::runner::sim::SimRunner;
use crate::runner::tch_runner::{TchRunner, TchRunnerOptions};
use crate::runner::ModelRunner;
use crate::scheduler::group::{GroupSettings, GroupTransport, MemberSpec};
use crate::service::{tensor_parallel, ServiceError};
use crate::tokenizer::TextTokenizer;
use model_files::tensor_specs;
use policies::{self as policy, LiveThreshold, ModelFacts, Placement, PolicyEnv};

/// KV tokens a simulated model gets when the config gives a memory fraction
/// (a simulated model has no memory to take a fraction of).
const SIM_DEFAULT_KV_TOKENS: usize = 262_144;

/// Loads every model of `cfg` (in config order) with its policy. The
/// members share one live threshold cell (what `target_large_share` steers).
pub fn members(cfg: &EngineConfig) -> Result<Vec<MemberSpec>, ServiceError> {
    let all: Vec<usize> = (0..cfg.models().len()).collect();
    apply_cpu_threads(cfg, &all);
    check_shared_vocabulary(cfg)?;
    let cell = LiveThreshold::new(0.0);
    let members = (0..cfg.models().len())
        .map(|i| member(cfg, i, Some(cell.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    // This thread steps no model; its OpenMP workers would only crowd the cores.
    crate::device::release_cpu_workers();
    Ok(members)
}

/// Refuses a group whose models' tokenizers differ, before any weights
/// load: a token written by one model would be read as another token (or
/// out of range) by the next. The vocabularies, the added (special)
/// tokens, the merges and the text splitting must all be equal; the error
/// says which differs and for which two models. Models without a tokenizer
/// on disk (simulated ones) are not compared.
pub fn check_shared_vocabulary(cfg: &EngineConfig) -> Result<(), ServiceError> {
    let loaded: Vec<(&str, TextTokenizer)> = cfg
        .models()
        .iter()
        .filter_map(|m| {
            let dir = m.path.as_ref()?;
            dir.join("tokenizer.json").is_file().then_some(())?;
            // An unreadable tokenizer is reported when the model loads.
            Some((m.name.as_str(), TextTokenizer::from_dir(dir).ok()?))
        })
        .collect();
    let Some((first, reference)) = loaded.first() else {
        return Ok(());
    };
    for (name, tok) in &loaded[1..] {
        if let Some(what) = reference.difference(tok) {
            return Err(ServiceError::Unsupported(format!(
                "models `{first}` and `{name}` do not share a tokenizer: {what} \
                 (first: {}, second: {}); token-level routing needs one tokenizer \
                 for the whole group",
                reference.path().display(),
                tok.path().display()
            )));
        }
    }
    Ok(())
}

/// Sets libtorch's intra-op threads for a process that runs models
/// `hosted` of `cfg` (see [`cpu_threads`]). The cores are what
/// `available_parallelism` sees: the cgroup CPU quota (a pod's CPU limit)
/// and affinity mask, not every core of the node.
pub fn apply_cpu_threads(cfg: &EngineConfig, hosted: &[usize]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(t) = cpu_threads(cfg, hosted, cores) {
        info!(threads = t, cores, "libtorch intra-op threads");
        crate::device::set_cpu_threads(t as i32);
    }
}

/// libtorch intra-op threads for a process running models `hosted`:
/// `system.threads` when set; otherwise, with tch models on the CPU, each
/// model's share of the cores (`cores / models`, at least 1). The models
/// step at the same time, each on its own scheduler thread; libtorch's
/// default (every core of the machine per step) oversubscribes the cores
/// and slowed the SmolLM2 pair from 8.9 to 5.2 tok/s at N=1, and in a pod
/// it ignores the CPU limit. `None`: leave libtorch's default.
pub fn cpu_threads(cfg: &EngineConfig, hosted: &[usize], cores: usize) -> Option<usize> {
    if let Some(t) = cfg.system().threads {
        return Some(t);
    }
    if cfg.backend() != Backend::Tch {
        return None;
    }
    let on_cpu = hosted
        .iter()
        .filter_map(|&i| cfg.models().get(i))
        .filter(|m| !m.device.is_cuda())
        .count();
    (on_cpu >= 1).then(|| (cores / on_cpu).max(1))
}

/// `target_large_share` needs the entry's policy to have a threshold to steer.
fn check_steerable(cfg: &EngineConfig, spec: &MemberSpec) -> Result<(), ServiceError> {
    match (cfg.target_large_share(), spec.policy.knob()) {
        (Some(_), None) => Err(ServiceError::Unsupported(format!(
            "target_large_share needs a policy with a threshold; {} has none",
            cfg.policy().name
        ))),
        _ => Ok(()),
    }
}

/// Model `i` of `cfg`, ready to start: runner, tokenizer, policy, thresholds.
/// `threshold` is the group's live threshold cell (`None`: its own).
pub fn member(
    cfg: &EngineConfig,
    i: usize,
    threshold: Option<LiveThreshold>,
) -> Result<MemberSpec, ServiceError> {
    let spec = &cfg.models()[i];
    let entry = cfg.entry_index();
    let (runner, tokenizer) = runner(cfg, i, true)?;
    let kwargs = serde_json::Value::Object(cfg.policy().kwargs.clone());
    let at = Placement::member(cfg, i);
    let env = PolicyEnv {
        base_dir: cfg.base_dir().to_path_buf(),
        device: spec.device.into(),
        tokenizer: tokenizer.clone(),
        threshold,
        model: Some(model_facts(cfg, i, runner.as_ref())),
    };
    let policy = policy::build_in(cfg.policy().name.as_str(), &kwargs, at, &env)?;
    let member = MemberSpec {
        name: spec.name.clone(),
        runner,
        policy,
        tokenizer,
        thresholds: cfg
            .thresholds()
            .for_model(i)
            .map(<[usize]>::to_vec)
            .unwrap_or_else(|| vec![1]),
    };
    if i == entry {
        // The controller runs where tokens are committed: the entry.
        check_steerable(cfg, &member)?;
    }
    Ok(member)
}

/// Model `i`'s KV budget. On CUDA a memory fraction is planned over every
/// model of the group on that device (weights first, then equal KV tokens:
/// see `plan_kv_tokens`), so co-located models do not each claim the
/// fraction of what is free when they load. On the CPU the runner sizes it
/// (see `runner::memory`).
fn planned_budget(cfg: &EngineConfig, i: usize) -> Result<KvBudget, EngineError> {
    let spec = &cfg.models()[i];
    let (KvBudget::Fraction(fraction), DeviceSpec::Cuda(index)) = (spec.kv_budget, spec.device)
    else {
        return Ok(spec.kv_budget);
    };
    let models = device_footprints(cfg, i)?;
    let (_, device_total) = cuda_mem_info(index)?;
    let limits = mps_limit::from_env()?;
    if let Some(l) = limits.as_ref().filter(|l| !l.by_uuid.is_empty()) {
        warn!(
            devices = ?l.by_uuid,
            "{} names devices by UUID; only ordinals cap the KV plan",
            mps_limit::ENV
        );
    }
    let total = mps_limit::capped_total(device_total, limits.as_ref(), index);
    let tokens = plan_kv_tokens(total, fraction, &models)?;
    info!(
        model = %spec.name,
        fraction,
        models = models.len(),
        tokens,
        device_total_mib = device_total >> 20,
        planned_total_mib = total >> 20,
        "KV planned from mem_fraction_static over the models on {} \
         (total capped by {} when set)",
        spec.device,
        mps_limit::ENV
    );
    Ok(KvBudget::Tokens(tokens))
}

/// The footprints of the models that share model `i`'s device: its own,
/// and those of the others whose weights this process can see. The operator
/// mounts only a pod's own model and the entry's (under MPS each pod is its
/// own client with its own cap, which the operator's rendered fraction
/// reflects), so a directory that is not there is not on this device; an
/// in-process group fails on it when that model loads. A non-entry pod
/// counts the entry's weights too: a conservative error of one small model.
fn device_footprints(cfg: &EngineConfig, i: usize) -> Result<Vec<ModelFootprint>, EngineError> {
    let spec = &cfg.models()[i];
    let mut models = Vec::new();
    for (j, m) in cfg.models().iter().enumerate() {
        let Some(path) = &m.path else { continue };
        if m.device != spec.device || (j != i && !path.is_dir()) {
            continue;
        }
        let c = ModelDir::open(path)?.config;
        let kind: tch::Kind = m.dtype.into();
        let params: usize = tensor_specs(&c)
            .iter()
            .map(|t| t.shape.iter().product::<usize>())
            .sum();
        models.push(ModelFootprint {
            weight_bytes: (params * kind.elt_size_in_bytes()) as u64,
            kv_bytes_per_token: bytes_per_block(
                c.num_hidden_layers,
                1,
                c.kv_heads(),
                c.head_dim(),
                kind,
            ) as u64,
        });
    }
    Ok(models)
}

/// What model `i`'s steps give a policy: the tch backend gives logits,
/// hidden states and embeddings; the sim backend gives logits only when
/// `sim.logits` is set.
fn model_facts(cfg: &EngineConfig, i: usize, runner: &dyn ModelRunner) -> ModelFacts {
    let info = runner.info();
    match cfg.backend() {
        Backend::Tch => ModelFacts {
            hidden_size: Some(info.hidden_size),
            embed_size: runner
                .embeddings()
                .and_then(|e| e.size().get(1).map(|&w| w as usize)),
            logits_width: Some(info.vocab_size),
        },
        Backend::Sim => ModelFacts {
            hidden_size: None,
            embed_size: None,
            logits_width: cfg.models()[i]
                .sim
                .as_ref()
                .filter(|s| s.logits)
                .map(|_| info.vocab_size),
        },
    }
}

/// The runner of model `i` (and its tokenizer when asked and the backend has one).
pub fn runner(
    cfg: &EngineConfig,
    i: usize,
    with_tokenizer: bool,
) -> Result<(Box<dyn ModelRunner>, Option<TextTokenizer>), ServiceError> {
    let spec = &cfg.models()[i];
    let model_err = |source| ServiceError::Model {
        model: spec.name.clone(),
        source,
    };
    let (runner, tokenizer): (Box<dyn ModelRunner>, Option<TextTokenizer>) = match cfg.backend() {
        Backend::Tch => {
            let path = spec.path.clone().ok_or_else(|| {
                ServiceError::Unsupported(format!(
                    "model `{}` has no path (backend tch)",
                    spec.name
                ))
            })?;
            tensor_parallel::check(spec, &path, |i| {
                crate::device::cuda_mem_info(i).ok().map(|(_, total)| total)
            })?;
            let opts = TchRunnerOptions {
                model_dir: path.clone(),
                device: spec.device.into(),
                dtype: spec.dtype,
                keep_quantized: spec.dtype_auto,
                block_size: cfg.system().block_size,
                kv_budget: planned_budget(cfg, i).map_err(model_err)?,
                enable_prefix_cache: cfg.system().enable_prefix_cache,
                cuda: crate::cuda::CudaOptions {
                    graphs: cfg.system().cuda_graphs,
                    ..Default::default()
                },
            };
            let runner = TchRunner::load(&opts).map_err(model_err)?;
            let tokenizer = if with_tokenizer {
                Some(TextTokenizer::from_dir(&path).map_err(|e| model_err(e.into()))?)
            } else {
                None
            };
            (Box::new(runner), tokenizer)
        }
        Backend::Sim => {
            let sim = spec.sim.clone().ok_or_else(|| {
                ServiceError::Unsupported(format!(
                    "model `{}` has no sim settings (backend sim)",
                    spec.name
                ))
            })?;
            let kv_tokens = match spec.kv_budget {
                KvBudget::Tokens(t) => t,
                KvBudget::Fraction(_) => SIM_DEFAULT_KV_TOKENS,
            };
            let runner = SimRunner::new(
                &spec.name,
                sim.vocab_size,
                vec![],
                Box::new(sim.latency_ms),
                kv_tokens,
                cfg.system().block_size,
                cfg.sim().seed.wrapping_add(i as u64),
            )
            .map_err(model_err)?
            .with_logits(sim.logits);
            // With a `path`, the simulated model speaks that model's
            // tokenizer (text, stop strings), so an HTTP front end works.
            let tokenizer = match (&spec.path, with_tokenizer) {
                (Some(path), true) => {
                    Some(TextTokenizer::from_dir(path).map_err(|e| model_err(e.into()))?)
                }
                _ => None,
            };
            (Box::new(runner), tokenizer)
        }
    };
    Ok((runner, tokenizer))
}

/// Group-wide settings from `cfg`.
pub fn settings(cfg: &EngineConfig) -> Result<GroupSettings, ServiceError> {
    let (peer_timeout, transport) = match cfg.transport() {
        TransportConfig::Tcp(t) => {
            let addresses = peer_addresses(&t.addresses)
                .map_err(|e| ServiceError::Unsupported(format!("transport.addresses: {e}")))?;
            let options = TcpOptions::from_config(t);
            (
                Duration::from_millis(t.peer_timeout_ms),
                GroupTransport::Tcp { addresses, options },
            )
        }
        TransportConfig::InProc => (Duration::from_secs(60), GroupTransport::InProc),
    };
    let inproc = matches!(transport, GroupTransport::InProc);
    Ok(GroupSettings {
        entry: cfg.entry_index() as u16,
        mode: cfg.execution_mode(),
        max_batch_wait: cfg.max_batch_wait(),
        limits: EngineLimits {
            max_batched_tokens: cfg.system().max_batched_tokens,
            max_batch_size: cfg.system().max_batch_size,
        },
        fallback_on_peer_failure: cfg.fallback_on_peer_failure(),
        peer_timeout,
        transport,
        target_large_share: cfg.target_large_share(),
        cpu_cores: inproc.then(|| shared_cpu_cores(cfg)).flatten(),
    })
}

/// The cores an in-process group's models share step by step: two or more
/// models, every one a tch model on the CPU, and no `system.threads` (which
/// fixes the threads). A step then gets every core while the other models
/// sleep (they mostly take turns at low concurrency) and `cores / models`
/// while any is awake (see `scheduler::cpu_share`).
fn shared_cpu_cores(cfg: &EngineConfig) -> Option<usize> {
    let all_cpu = cfg.models().iter().all(|m| !m.device.is_cuda());
    let several = cfg.models().len() > 1;
    (cfg.system().threads.is_none() && cfg.backend() == Backend::Tch && all_cpu && several)
        .then(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod thread_tests {
    use super::*;
    use std::path::Path;

    fn cfg(extra: &str) -> EngineConfig {
        let yaml = format!(
            "model:\n  quick:\n    path: a\n  reference:\n    path: b\nsystem:\n  entry_model: quick\nscheduler_class: Random\n{extra}"
        );
        EngineConfig::from_yaml_str(&yaml, Path::new(".")).unwrap()
    }

    #[test]
    fn each_cpu_model_gets_its_share_of_the_cores_by_default() {
        let tch = cfg("backend: tch\ndevice: cpu\n");
        assert_eq!(cpu_threads(&tch, &[0, 1], 2), Some(1));
        assert_eq!(cpu_threads(&tch, &[0, 1], 16), Some(8));
        assert_eq!(cpu_threads(&tch, &[0, 1], 1), Some(1));
        // A process with one model (a pod per model) uses its cores (the
        // pod's CPU limit as `available_parallelism` reads it), not libtorch's
        // every-core default.
        assert_eq!(cpu_threads(&tch, &[1], 4), Some(4));
        let gpu = cfg("backend: tch\ndevice: cuda\n");
        assert_eq!(cpu_threads(&gpu, &[0], 4), None);
    }

    #[test]
    fn system_threads_wins_and_sim_is_left_alone() {
        let yaml = "model:\n  quick:\n    path: a\n  reference:\n    path: b\nsystem:\n  entry_model: quick\n  threads: 3\nscheduler_class: Random\nbackend: tch\ndevice: cpu\n";
        let set = EngineConfig::from_yaml_str(yaml, Path::new(".")).unwrap();
        assert_eq!(cpu_threads(&set, &[0, 1], 16), Some(3));
        let sim = "model:\n  quick:\n    path: a\n    sim: {latency_ms: {base: 1.0}}\n  reference:\n    path: b\n    sim: {latency_ms: {base: 1.0}}\nsystem:\n  entry_model: quick\nscheduler_class: Random\nbackend: sim\n";
        let sim = EngineConfig::from_yaml_str(sim, Path::new(".")).unwrap();
        assert_eq!(cpu_threads(&sim, &[0, 1], 16), None);
    }

    #[test]
    fn an_in_process_cpu_group_shares_its_cores_step_by_step() {
        let cpu = cfg("backend: tch\ndevice: cpu\n");
        assert!(shared_cpu_cores(&cpu).is_some_and(|c| c >= 1));
        assert_eq!(settings(&cpu).unwrap().cpu_cores, shared_cpu_cores(&cpu));
        // Fixed threads, GPUs and the simulator keep what they have.
        let yaml = "model:\n  quick:\n    path: a\n  reference:\n    path: b\nsystem:\n  entry_model: quick\n  threads: 2\nscheduler_class: Random\nbackend: tch\ndevice: cpu\n";
        let set = EngineConfig::from_yaml_str(yaml, Path::new(".")).unwrap();
        assert_eq!(shared_cpu_cores(&set), None);
        assert_eq!(shared_cpu_cores(&cfg("backend: tch\ndevice: cuda\n")), None);
        let sim = "model:\n  quick:\n    path: a\n    sim: {latency_ms: {base: 1.0}}\n  reference:\n    path: b\n    sim: {latency_ms: {base: 1.0}}\nsystem:\n  entry_model: quick\nscheduler_class: Random\nbackend: sim\n";
        let sim = EngineConfig::from_yaml_str(sim, Path::new(".")).unwrap();
        assert_eq!(shared_cpu_cores(&sim), None);
    }

    /// A podPerModel pod mounts only its own weights: planning its CUDA
    /// budget must not open the other models' directories.
    #[test]
    fn a_pod_per_model_plans_over_the_models_it_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let quick = dir.path().join("quick");
        std::fs::create_dir(&quick).unwrap();
        let config = serde_json::to_string(&crate::runner::testing::tiny_config()).unwrap();
        std::fs::write(quick.join("config.json"), config).unwrap();
        let yaml = "model:\n  quick:\n    path: quick\n  reference:\n    path: reference\n\
                    system:\n  entry_model: quick\nscheduler_class: Random\nbackend: tch\ndevice: cuda\n";
        let cfg = EngineConfig::from_yaml_str(yaml, dir.path()).unwrap();
        let own = device_footprints(&cfg, 0).unwrap();
        assert_eq!(own.len(), 1, "only the mounted model");
        assert!(own[0].weight_bytes > 0 && own[0].kv_bytes_per_token > 0);
        // Its own directory missing is still an error (nothing to load).
        let err = device_footprints(&cfg, 1).unwrap_err();
        assert!(err.to_string().contains("reference"), "{err}");
    }
}
