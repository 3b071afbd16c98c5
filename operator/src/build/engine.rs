//! The engine config (`subserver::config::EngineConfig` YAML) a resource
//! renders to. The operator crate does not link the engine; the root
//! package's `tests/k8s_engine_config.rs` loads this output with it.

use crds::v1alpha1::{Backend, ExecutionMode, ModelSpec, Placement, TokenRouterDeploymentSpec};
use crds::TokenRouterDeployment;
use serde_json::{json, Map, Value};

use crate::names;

/// Where model `name`'s weights are mounted in a pod.
pub fn model_mount(name: &str) -> String {
    format!("/models/{name}")
}

/// The model directory a pod sees, if the model has one.
pub fn model_path(model: &ModelSpec) -> Option<String> {
    let source = model.source.as_ref()?;
    if let Some(path) = &source.image_path {
        return Some(path.clone());
    }
    (source.pvc.is_some() || source.host_path.is_some()).then(|| model_mount(&model.name))
}

/// `host:port` of model `model`'s peer listener in the pod's own group: the
/// stable DNS name of ordinal `${TOKENROUTER_GROUP}` behind the model's
/// headless Service (the engine expands the variable at load).
pub fn peer_address(trd: &TokenRouterDeployment, namespace: &str, model: &str) -> String {
    let set = names::model_set(trd, model);
    format!(
        "{set}-${{{}:-0}}.{set}.{namespace}.svc:{}",
        names::GROUP_ENV,
        trd.spec.ports.peer
    )
}

/// Whether `m`'s weights live on a GPU (real weights on a `cuda` device).
pub fn on_cuda(spec: &TokenRouterDeploymentSpec, m: &ModelSpec) -> bool {
    spec.backend != Some(Backend::Sim)
        && m.device
            .as_deref()
            .or(spec.device.as_deref())
            .is_some_and(|d| d.starts_with("cuda"))
}

fn execution_mode(mode: ExecutionMode) -> &'static str {
    match mode {
        ExecutionMode::AsyncDelayed => "async_delayed",
        ExecutionMode::Async => "async",
        ExecutionMode::Lockstep => "lockstep",
        ExecutionMode::Serial => "serial",
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// `kwargs` with `over`'s top-level keys replacing its own.
fn merged_kwargs(base: Option<&Value>, over: Option<&Value>) -> Value {
    let mut out = base.and_then(Value::as_object).cloned().unwrap_or_default();
    if let Some(over) = over.and_then(Value::as_object) {
        out.extend(over.clone());
    }
    Value::Object(out)
}

/// The engine config of `trd` as seen by model `model`'s pods (its
/// `policyKwargs` merged), or by the whole group (`None`: the gateway and
/// `podPerGroup` pods). `thresholds` is the B table in force.
pub fn render(
    trd: &TokenRouterDeployment,
    namespace: &str,
    model: Option<&str>,
    thresholds: &std::collections::BTreeMap<String, Vec<i64>>,
) -> Value {
    let spec = &trd.spec;
    let mut models = Map::new();
    for m in &spec.models {
        let mut entry = Map::new();
        if let Some(path) = model_path(m) {
            entry.insert("path".into(), json!(path));
        }
        if let Some(device) = &m.device {
            entry.insert("device".into(), json!(device));
        }
        if let Some(dtype) = &m.dtype {
            entry.insert("dtype".into(), to_value(dtype));
        }
        if let Some(sim) = &m.sim {
            entry.insert("sim".into(), sim.clone());
        }
        let tokens = m.kv_cache.as_ref().and_then(|kv| kv.tokens);
        let mut fraction = m.kv_cache.as_ref().and_then(|kv| kv.memory_fraction);
        if on_cuda(spec, m) {
            // Under MPS the fraction is of this client's share of the GPU.
            fraction = super::mps::kv_fraction(spec, fraction);
        }
        if let Some(tokens) = tokens {
            entry.insert("kv_cache_tokens".into(), json!(tokens));
        } else if let Some(f) = fraction {
            entry.insert("mem_fraction_static".into(), json!(f));
        }
        models.insert(m.name.clone(), Value::Object(entry));
    }
    let entry = spec
        .models
        .iter()
        .find(|m| m.entry)
        .map(|m| m.name.clone())
        .unwrap_or_default();
    let own_kwargs = model
        .and_then(|name| spec.models.iter().find(|m| m.name == name))
        .and_then(|m| m.policy_kwargs.as_ref());
    let mut cfg = Map::new();
    cfg.insert("model".into(), Value::Object(models));
    let mut system = Map::new();
    system.insert("entry_model".into(), json!(entry));
    if let Some(threads) = threads(trd, model) {
        system.insert("threads".into(), json!(threads));
    }
    cfg.insert("system".into(), Value::Object(system));
    cfg.insert("scheduler_class".into(), json!(spec.policy.class));
    cfg.insert(
        "scheduler_kwargs".into(),
        merged_kwargs(spec.policy.kwargs.as_ref(), own_kwargs),
    );
    if !thresholds.is_empty() {
        cfg.insert("delayed_batching_threshold".into(), to_value(thresholds));
    }
    if let Some(backend) = spec.backend {
        let name = match backend {
            Backend::Tch => "tch",
            Backend::Sim => "sim",
        };
        cfg.insert("backend".into(), json!(name));
    }
    if let Some(device) = &spec.device {
        cfg.insert("device".into(), json!(device));
    }
    if let Some(dtype) = &spec.dtype {
        cfg.insert("dtype".into(), to_value(dtype));
    }
    if let Some(mode) = spec.execution_mode {
        cfg.insert("execution_mode".into(), json!(execution_mode(mode)));
    }
    if let Some(wait) = spec
        .delayed_batching
        .as_ref()
        .and_then(|d| d.max_batch_wait_ms)
    {
        cfg.insert("max_batch_wait_ms".into(), json!(wait));
    }
    if let Some(share) = spec.policy.target_large_share {
        cfg.insert("target_large_share".into(), json!(share));
    }
    let transport = match spec.placement {
        Placement::PodPerGroup => json!({"kind": "inproc"}),
        Placement::PodPerModel => {
            let addresses: Map<String, Value> = spec
                .models
                .iter()
                .map(|m| (m.name.clone(), json!(peer_address(trd, namespace, &m.name))))
                .collect();
            json!({"kind": "tcp", "addresses": addresses})
        }
    };
    cfg.insert("transport".into(), transport);
    cfg.insert("gateway".into(), gateway_section(trd));
    if let Some(g) = generation_section(trd) {
        cfg.insert("generation_config".into(), g);
    }
    Value::Object(cfg)
}

/// The engine config's `generation_config` (sampling defaults) from
/// `spec.generationConfig`, in the engine's spelling; `None` when unset.
fn generation_section(trd: &TokenRouterDeployment) -> Option<Value> {
    let g = trd.spec.generation_config.as_ref()?;
    let mut out = Map::new();
    let fields = [
        ("temperature", g.temperature.map(Value::from)),
        ("top_p", g.top_p.map(Value::from)),
        ("top_k", g.top_k.map(Value::from)),
        ("min_p", g.min_p.map(Value::from)),
    ];
    for (key, value) in fields {
        if let Some(v) = value {
            out.insert(key.to_string(), v);
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// libtorch threads of the process that reads the config: model `model`'s
/// own (a pod per model), or the largest its models set (`None`: one
/// process runs them all).
fn threads(trd: &TokenRouterDeployment, model: Option<&str>) -> Option<i32> {
    let models = trd.spec.models.iter();
    match model {
        Some(name) => models.filter(|m| m.name == name).find_map(|m| m.threads),
        None => models.filter_map(|m| m.threads).max(),
    }
}

fn gateway_section(trd: &TokenRouterDeployment) -> Value {
    let g = &trd.spec.gateway;
    let mut out = Map::new();
    out.insert("host".into(), json!("0.0.0.0"));
    out.insert("port".into(), json!(g.port));
    if let Some(name) = &g.served_model_name {
        out.insert("served_model_name".into(), json!(name));
    }
    if g.api_key_secret_ref.is_some() {
        out.insert("api_keys_env".into(), json!(names::API_KEYS_ENV));
    }
    if let Some(n) = g.max_inflight {
        out.insert("max_inflight".into(), json!(n));
    }
    if let Some(n) = g.max_queue {
        out.insert("max_queue".into(), json!(n));
    }
    out.insert(
        "groups_file".into(),
        json!(format!("{}/{}", names::GROUPS_DIR, names::GROUPS_KEY)),
    );
    // The gateway pod mounts no model volume: its tokenizer comes from a
    // group. An entry without weights (a sim model) has none to serve: the
    // gateway then takes token-id prompts only, as it always did.
    let entry_has_files = trd
        .spec
        .models
        .iter()
        .find(|m| m.entry)
        .and_then(model_path)
        .is_some();
    let text_side = if entry_has_files { "backend" } else { "local" };
    out.insert("text_side".into(), json!(text_side));
    Value::Object(out)
}

/// [`render`] as YAML text.
pub fn render_yaml(
    trd: &TokenRouterDeployment,
    namespace: &str,
    model: Option<&str>,
    thresholds: &std::collections::BTreeMap<String, Vec<i64>>,
) -> String {
    serde_yaml::to_string(&render(trd, namespace, model, thresholds)).unwrap_or_default()
}
