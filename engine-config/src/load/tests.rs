use super::*;
use crate::gateway::GatewayConfig;
use crate::latency::LatencyModel;
use crate::model::DEFAULT_SIM_VOCAB_SIZE;
use crate::placement::DType;
use crate::system::{KvBudget, SystemConfig};
use crate::transport::DEFAULT_PEER_TIMEOUT_MS;

const MINIMAL: &str = "\
model:
  quick: {path: q}
  reference: {path: r}
system: {entry_model: quick}
scheduler_class: R2R
";

fn env(name: &str) -> Option<String> {
    (name == "CACHE").then(|| "/cache".to_string())
}

fn load(yaml: &str) -> Result<EngineConfig, ConfigError> {
    parse(yaml, Path::new("/base"), &env)
}

/// Loads `extra` appended to a minimal config and returns the error.
fn error_with(extra: &str) -> ConfigError {
    load(&format!("{MINIMAL}{extra}")).expect_err(extra)
}

/// Asserts error type, key path and a message fragment.
fn assert_error(err: &ConfigError, error_type: &str, key: &str, fragment: &str) {
    assert_eq!(err.error_type(), error_type, "{err}");
    assert_eq!(err.key(), Some(key), "{err}");
    assert!(
        err.to_string().contains(fragment),
        "`{fragment}` not in `{err}`"
    );
}

#[test]
fn minimal_config_gets_documented_defaults() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(c.model_names(), ["quick", "reference"]);
    assert_eq!(c.entry_index(), 0);
    assert_eq!(c.backend(), Backend::Tch);
    assert_eq!(c.device(), DeviceSpec::Cpu);
    // `dtype: auto`: bf16 on a CPU with native bf16, f32 elsewhere.
    let auto = if crate::cpu_bf16_flags().is_empty() {
        DType::F32
    } else {
        DType::Bf16
    };
    assert_eq!(c.dtype(), auto);
    assert_eq!(c.model(0).unwrap().dtype, auto);
    assert_eq!(c.execution_mode(), ExecutionMode::AsyncDelayed);
    assert_eq!(c.max_batch_wait_ms(), 50.0);
    assert_eq!(c.max_batch_wait(), std::time::Duration::from_millis(50));
    assert!(!c.fallback_on_peer_failure());
    assert_eq!(c.target_large_share(), None);
    assert_eq!(c.transport(), &TransportConfig::InProc);
    assert_eq!(c.gateway(), &GatewayConfig::default());
    assert_eq!(c.system(), &SystemConfig::default());
    assert_eq!(c.sim().seed, 0);
    assert_eq!(c.policy().name.as_str(), "R2R");
    assert!(c.policy().kwargs.is_empty());
    assert_eq!(c.thresholds().get(1, 8), 1);
    assert_eq!(c.kv_budget(0), Some(KvBudget::Fraction(0.2)));
    assert_eq!(
        c.model(1).unwrap().path.as_deref(),
        Some(Path::new("/base/r"))
    );
    assert!(c.model(1).unwrap().sim.is_none());
    assert_eq!(c.base_dir(), Path::new("/base"));
    assert_eq!(
        c.resolve_path("routers/x.pt"),
        Path::new("/base/routers/x.pt")
    );
    assert_eq!(c.resolve_path("/abs"), Path::new("/abs"));
}

#[test]
fn model_order_is_file_order_and_entry_is_separate() {
    let c = load(
        "model:\n  zeta: {path: z}\n  alpha: {path: a}\n  mid: {path: m}\n\
             system: {entry_model: mid}\nscheduler_class: ME\n",
    )
    .unwrap();
    assert_eq!(c.model_names(), ["zeta", "alpha", "mid"]);
    assert_eq!(c.entry_index(), 2);
    assert_eq!(c.entry_model().name, "mid");
    assert_eq!(c.model_index("alpha"), Some(1));
    assert_eq!(c.model_index("nope"), None);
    assert_eq!(c.thresholds().num_models(), 3);
}

#[test]
fn per_model_overrides_and_kv_defaults_follow_the_device() {
    let c = load(
        "model:\n  quick: {path: q, device: cuda:1, dtype: bf16}\n  reference: {path: r}\n\
             system: {entry_model: reference}\nscheduler_class: citer\ndevice: cpu\ndtype: f16\n",
    )
    .unwrap();
    let (q, r) = (c.model(0).unwrap(), c.model(1).unwrap());
    assert_eq!((q.device, q.dtype), (DeviceSpec::Cuda(1), DType::Bf16));
    assert_eq!((r.device, r.dtype), (DeviceSpec::Cpu, DType::F16));
    assert_eq!(q.kv_budget, KvBudget::Fraction(0.85));
    assert_eq!(r.kv_budget, KvBudget::Fraction(0.2));
    assert_eq!(c.policy().name.as_str(), "CITER");
    // An explicit budget applies to every model.
    let c = load(&format!("{MINIMAL}device: cuda\n").replace(
        "system: {entry_model: quick}",
        "system: {entry_model: quick, kv_cache_tokens: 4096}",
    ))
    .unwrap();
    assert_eq!(c.kv_budget(0), Some(KvBudget::Tokens(4096)));
    assert_eq!(c.kv_budget(1), Some(KvBudget::Tokens(4096)));
    let c = load(&MINIMAL.replace(
        "system: {entry_model: quick}",
        "system: {entry_model: quick, mem_fraction_static: 1.0}",
    ))
    .unwrap();
    assert_eq!(c.kv_budget(1), Some(KvBudget::Fraction(1.0)));
}

#[test]
fn a_models_own_kv_budget_wins_over_the_systems() {
    let c = load(
        "model:\n  quick: {path: q, kv_cache_tokens: 512}\n  reference: {path: r, mem_fraction_static: 0.4}\n\
             system: {entry_model: quick, kv_cache_tokens: 4096}\nscheduler_class: citer\n",
    )
    .unwrap();
    assert_eq!(c.kv_budget(0), Some(KvBudget::Tokens(512)));
    assert_eq!(c.kv_budget(1), Some(KvBudget::Fraction(0.4)));
    for (bad, key) in [
        (
            "kv_cache_tokens: 512, mem_fraction_static: 0.4",
            "model.quick.kv_cache_tokens",
        ),
        ("kv_cache_tokens: 8", "model.quick.kv_cache_tokens"),
        (
            "mem_fraction_static: 1.5",
            "model.quick.mem_fraction_static",
        ),
    ] {
        let err = load(&format!(
            "model:\n  quick: {{path: q, {bad}}}\n  reference: {{path: r}}\n\
                 system: {{entry_model: quick}}\nscheduler_class: citer\n"
        ))
        .unwrap_err();
        assert!(err.to_string().contains(key), "{bad}: {err}");
    }
}

#[test]
fn router_path_kwargs_expand_env_like_model_paths() {
    let c = load(&format!(
        "{MINIMAL}scheduler_kwargs: {{router_path: '${{CACHE}}/routers/r.pt', other_path:          '${{UNSET:-../.cache}}/x', note: '${{CACHE}}', threshold: 0.5}}\n"
    ))
    .unwrap();
    let kwargs = serde_json::Value::Object(c.policy().kwargs.clone());
    assert_eq!(
        kwargs,
        serde_json::json!({"router_path": "/cache/routers/r.pt", "other_path": "../.cache/x",
                           "note": "${CACHE}", "threshold": 0.5}),
        "only *_path arguments expand"
    );
    let err = error_with("scheduler_kwargs: {router_path: '${UNSET}/r.pt'}\n");
    assert_error(
        &err,
        "invalid",
        "scheduler_kwargs.router_path",
        "environment variable UNSET is not set",
    );
}

#[test]
fn paths_expand_env_and_resolve_against_base_dir() {
    let c = load(
        "model:\n  a: {path: '${CACHE}/models/a'}\n  b: {path: '${UNSET:-../.cache}/models/b'}\n  \
             c: {path: /abs/c}\nsystem: {entry_model: a}\nscheduler_class: ME\n\
             gateway: {api_keys_file: keys.txt}\n",
    )
    .unwrap();
    let paths: Vec<_> = c.models().iter().map(|m| m.path.clone().unwrap()).collect();
    assert_eq!(paths[0], Path::new("/cache/models/a"));
    assert_eq!(paths[1], Path::new("/base/../.cache/models/b"));
    assert_eq!(paths[2], Path::new("/abs/c"));
    assert_eq!(
        c.gateway().api_keys_file.as_deref(),
        Some(Path::new("/base/keys.txt"))
    );
    let err = load(&MINIMAL.replace("{path: q}", "{path: '${UNSET}/q'}")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.quick.path",
        "environment variable UNSET is not set",
    );
    let err = load(&MINIMAL.replace("{path: q}", "{path: ''}")).unwrap_err();
    assert_error(&err, "invalid", "model.quick.path", "must not be empty");
}

#[test]
fn unknown_keys_are_reported_with_their_path() {
    let without_system = MINIMAL.replace("system: {entry_model: quick}\n", "");
    let cases = [
        ("bogus: 1\n", "bogus"),
        ("gateway: {hots: x}\n", "gateway.hots"),
        ("sim: {seed: 1, sead: 2}\n", "sim.sead"),
        (
            "transport: {kind: tcp, adresses: {}}\n",
            "transport.adresses",
        ),
        (
            "system: {entry_model: quick, entry: quick}\n",
            "system.entry",
        ),
    ];
    for (extra, key) in cases {
        // `system` may appear once; the last case brings its own.
        let system = if extra.starts_with("system") {
            ""
        } else {
            "system: {entry_model: quick}\n"
        };
        let yaml = format!("{without_system}{system}{extra}");
        let err = load(&yaml).expect_err(extra);
        let leaf = key.rsplit('.').next().unwrap();
        assert_error(&err, "schema", key, &format!("unknown field `{leaf}`"));
        assert!(err.location().is_some(), "{err}");
    }
    let deep = load(&MINIMAL.replace(
        "{path: r}",
        "{path: r, sim: {latency_ms: {base: 1.0, extra: 2}}}",
    ))
    .unwrap_err();
    assert_error(
        &deep,
        "schema",
        "model.reference.sim.latency_ms.extra",
        "unknown field `extra`, expected one of",
    );
    // The location points at the unknown key itself.
    assert_eq!(
        deep.location(),
        Some(Location {
            line: 3,
            column: 54
        })
    );
    let model = load(&MINIMAL.replace("{path: q}", "{path: q, weights: x}")).unwrap_err();
    assert_error(
        &model,
        "schema",
        "model.quick.weights",
        "unknown field `weights`",
    );
    // The message is not doubled up with serde_yaml's own prefix.
    assert!(
        model
            .to_string()
            .starts_with("model.quick.weights: unknown field"),
        "{model}"
    );
}

#[test]
fn wrong_types_and_bad_names_are_schema_errors() {
    let cases = [
        (
            "backend: gpu\n",
            "backend",
            "unknown backend `gpu` (expected one of: tch, sim)",
        ),
        ("device: tpu\n", "device", "unknown device `tpu`"),
        ("dtype: fp8\n", "dtype", "unknown dtype `fp8`"),
        (
            "execution_mode: eager\n",
            "execution_mode",
            "unknown execution_mode `eager`",
        ),
        (
            "transport: udp\n",
            "transport",
            "unknown transport kind `udp`",
        ),
        (
            "transport: {kind: quic}\n",
            "transport.kind",
            "unknown transport kind `quic`",
        ),
        (
            "transport: 3\n",
            "transport",
            "expected `inproc`, `tcp`, or a map with `kind`",
        ),
        (
            "max_batch_wait_ms: soon\n",
            "max_batch_wait_ms",
            "invalid type: string \"soon\"",
        ),
        (
            "fallback_on_peer_failure: 2\n",
            "fallback_on_peer_failure",
            "expected a boolean",
        ),
        (
            "tp_size: -1\n",
            "tp_size",
            "invalid type: integer `-1`, expected usize",
        ),
        ("gateway: {port: 70000}\n", "gateway.port", "expected u16"),
        ("sim: {seed: x}\n", "sim.seed", "invalid type"),
    ];
    for (extra, key, fragment) in cases {
        let err = error_with(extra);
        assert_eq!(err.error_type(), "schema", "{extra}: {err}");
        assert!(err.key().unwrap().starts_with(key), "{extra}: {err}");
        assert!(
            err.to_string().contains(fragment),
            "{extra}: `{fragment}` not in `{err}`"
        );
    }
    let err = load(&MINIMAL.replace(
        "{path: q}",
        "{path: q, sim: {latency_ms: {table: [[1, 2.0], [2, 3, 4]]}}}",
    ))
    .unwrap_err();
    assert_error(
        &err,
        "schema",
        "model.quick.sim.latency_ms.table[1]",
        "invalid length 3",
    );
    let err = load(&MINIMAL.replace("{path: q}", "{path: q, tp_size: 1.5}")).unwrap_err();
    assert_error(
        &err,
        "schema",
        "model.quick.tp_size",
        "floating point `1.5`",
    );
    let err = load(&MINIMAL.replace("{path: q}", "[q]")).unwrap_err();
    assert_error(&err, "schema", "model.quick", "invalid type: sequence");
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let err = load("model: {quick: {path: q}\nsystem: x\n").unwrap_err();
    assert_eq!(err.error_type(), "syntax");
    assert_eq!(err.key(), None);
    let at = err.location().unwrap();
    assert_eq!((at.line, at.column), (2, 1));
    assert_eq!(
        err.to_string(),
        "YAML syntax error (at line 2, column 1): did not find expected ',' or '}', \
             while parsing a flow mapping at line 1 column 8"
    );
    let dup = load(&format!("{MINIMAL}backend: sim\nbackend: tch\n")).unwrap_err();
    assert_eq!(dup.error_type(), "syntax");
    assert!(
        dup.to_string()
            .contains("duplicate entry with key \"backend\""),
        "{dup}"
    );
    let docs = load(&format!("{MINIMAL}---\n{MINIMAL}")).unwrap_err();
    assert_eq!(docs.error_type(), "syntax");
    assert!(
        docs.to_string().contains("more than one document"),
        "{docs}"
    );
}

#[test]
fn document_level_problems() {
    assert_error(
        &load("").unwrap_err(),
        "invalid",
        "model",
        "required (the config is empty)",
    );
    assert_error(
        &load("# nothing\n").unwrap_err(),
        "invalid",
        "model",
        "config is empty",
    );
    assert_error(
        &load("- a\n").unwrap_err(),
        "invalid",
        "(root)",
        "must be a map of keys",
    );
    assert_error(
        &load("system: {entry_model: q}\nscheduler_class: R2R\n").unwrap_err(),
        "invalid",
        "model",
        "required: a map of model name to settings",
    );
    assert_error(
        &load("model: {}\nsystem: {entry_model: q}\nscheduler_class: R2R\n").unwrap_err(),
        "invalid",
        "model",
        "must name at least one model",
    );
    assert_error(
        &load("model: []\nsystem: {entry_model: q}\nscheduler_class: R2R\n").unwrap_err(),
        "schema",
        "model",
        "expected a map keyed by name",
    );
}

#[test]
fn entry_model_must_name_a_model() {
    let err = load(&MINIMAL.replace("entry_model: quick", "entry_model: big")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "system.entry_model: \"big\" is not a model (models: quick, reference)"
    );
    assert_eq!(err.error_type(), "invalid");
    let err = load(&MINIMAL.replace("system: {entry_model: quick}\n", "")).unwrap_err();
    assert_error(&err, "invalid", "system.entry_model", "required");
}

#[test]
fn tensor_parallel_widths_are_accepted_per_model() {
    let c = load(&format!("{MINIMAL}tp_size: 2\n")).unwrap();
    assert_eq!(
        (c.model(0).unwrap().tp_size, c.model(1).unwrap().tp_size),
        (2, 2)
    );
    let c = load(&MINIMAL.replace("{path: r}", "{path: r, tp_size: 4}")).unwrap();
    assert_eq!(
        (c.model(0).unwrap().tp_size, c.model(1).unwrap().tp_size),
        (1, 4)
    );
    assert_error(
        &error_with("tp_size: 0\n"),
        "invalid",
        "tp_size",
        "must be >= 1",
    );
    let err = load(&MINIMAL.replace("{path: r}", "{path: r, tp_size: 0}")).unwrap_err();
    assert_error(&err, "invalid", "model.reference.tp_size", "must be >= 1");
}

#[test]
fn system_rules() {
    let system = |body: &str| {
        load(&MINIMAL.replace(
            "system: {entry_model: quick}",
            &format!("system: {{entry_model: quick, {body}}}"),
        ))
    };
    let err = system("mem_fraction_static: 0.5, kv_cache_tokens: 1024").unwrap_err();
    assert_error(
        &err,
        "invalid",
        "system.kv_cache_tokens",
        "mutually exclusive",
    );
    for bad in ["0", "0.0", "-0.1", "1.5", ".nan"] {
        let err = system(&format!("mem_fraction_static: {bad}")).unwrap_err();
        assert_error(
            &err,
            "invalid",
            "system.mem_fraction_static",
            "must be in (0, 1]",
        );
    }
    let err = system("kv_cache_tokens: 8").unwrap_err();
    assert_error(
        &err,
        "invalid",
        "system.kv_cache_tokens",
        "at least one block of 16 tokens",
    );
    for key in [
        "block_size",
        "max_batched_tokens",
        "max_batch_size",
        "threads",
    ] {
        let err = system(&format!("{key}: 0")).unwrap_err();
        assert_error(&err, "invalid", &format!("system.{key}"), "must be > 0");
    }
    let c = system(
        "kv_cache_tokens: null, block_size: 32, max_batched_tokens: 512, max_batch_size: 8, \
             enable_prefix_cache: false, threads: 2, cuda_graphs: true",
    )
    .unwrap();
    let expected = SystemConfig {
        block_size: 32,
        max_batched_tokens: 512,
        max_batch_size: 8,
        enable_prefix_cache: false,
        threads: Some(2),
        cuda_graphs: true,
    };
    assert_eq!(c.system(), &expected);
}

#[test]
fn backend_requirements() {
    let err = load(&MINIMAL.replace("{path: q}", "{}")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.quick.model_path",
        "required for backend tch",
    );
    let err = error_with("backend: sim\n");
    assert_error(
        &err,
        "invalid",
        "model.quick.sim",
        "required for backend sim",
    );
    let sim = "model:\n  quick: {sim: {latency_ms: {base: 6}}}\n  reference: {sim: {latency_ms: {base: 27.9}, vocab_size: 100}}\n\
                   system: {entry_model: quick}\nscheduler_class: bernoulli\nbackend: sim\nsim: {seed: 7}\n";
    let c = load(sim).unwrap();
    assert_eq!(c.backend(), Backend::Sim);
    assert_eq!(c.sim().seed, 7);
    let q = c.model(0).unwrap().sim.as_ref().unwrap();
    assert_eq!(q.vocab_size, DEFAULT_SIM_VOCAB_SIZE);
    assert_eq!(q.latency_ms.step_ms(4, 4), 6.0);
    let r = c.model(1).unwrap().sim.as_ref().unwrap();
    assert_eq!((r.vocab_size, r.latency_ms.step_ms(1, 1)), (100, 27.9));
    assert!(c.model(0).unwrap().path.is_none());
    let err = load(&sim.replace("vocab_size: 100", "vocab_size: 0")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.sim.vocab_size",
        "must be > 0",
    );
    let err = load(&sim.replace("{sim: {latency_ms: {base: 6}}}", "{sim: {}}")).unwrap_err();
    assert_error(&err, "invalid", "model.quick.sim.latency_ms", "required");
}

#[test]
fn latency_rules_name_the_field() {
    let with = |latency: &str| {
        load(&MINIMAL.replace(
            "{path: q}",
            &format!("{{path: q, sim: {{latency_ms: {latency}}}}}"),
        ))
    };
    let key = "model.quick.sim.latency_ms";
    assert_error(
        &with("{base: -1.0}").unwrap_err(),
        "invalid",
        &format!("{key}.base"),
        "must be a finite number >= 0 (got -1)",
    );
    assert_error(
        &with("{base: 1, per_seq: -0.5}").unwrap_err(),
        "invalid",
        &format!("{key}.per_seq"),
        ">= 0",
    );
    assert_error(
        &with("{base: 1, per_token: .inf}").unwrap_err(),
        "invalid",
        &format!("{key}.per_token"),
        "finite",
    );
    assert_error(
        &with("{per_seq: 1}").unwrap_err(),
        "invalid",
        key,
        "needs `base`",
    );
    assert_error(&with("{}").unwrap_err(), "invalid", key, "needs `base`");
    assert_error(
        &with("{base: 1, table: [[1, 2.0]]}").unwrap_err(),
        "invalid",
        &format!("{key}.table"),
        "cannot be combined",
    );
    assert_error(
        &with("{table: []}").unwrap_err(),
        "invalid",
        &format!("{key}.table"),
        "at least one",
    );
    assert_error(
        &with("{table: [[1, 2.0], [1, 3.0]]}").unwrap_err(),
        "invalid",
        &format!("{key}.table[1]"),
        "strictly increasing",
    );
    assert_error(
        &with("{table: [[0, 2.0]]}").unwrap_err(),
        "invalid",
        &format!("{key}.table[0]"),
        ">= 1",
    );
    assert_error(
        &with("{table: [[1, 2.0], [4, -3.0]]}").unwrap_err(),
        "invalid",
        &format!("{key}.table[1]"),
        "got -3",
    );
    let c = with("{table: [[1, 6.0], [8, 6.4], [64, 9.0]]}").unwrap();
    let m = &c.model(0).unwrap().sim.as_ref().unwrap().latency_ms;
    assert_eq!(
        m,
        &LatencyModel::table(vec![(1, 6.0), (8, 6.4), (64, 9.0)]).unwrap()
    );
    let c = with("{base: 6.0, per_seq: 0.1, per_token: 0.01}").unwrap();
    let m = &c.model(0).unwrap().sim.as_ref().unwrap().latency_ms;
    assert!((m.step_ms(10, 100) - 8.0).abs() < 1e-12);
    let c = with("{base: 6.0, per_context: 0.001}").unwrap();
    let m = &c.model(0).unwrap().sim.as_ref().unwrap().latency_ms;
    assert!((m.step_ms_in_context(1, 1, 2000) - 8.0).abs() < 1e-12);
    assert_error(
        &with("{table: [[1, 2.0]], per_context: 0.1}").unwrap_err(),
        "invalid",
        &format!("{key}.table"),
        "per_context",
    );
    assert_error(
        &with("{base: 1.0, per_context: -1}").unwrap_err(),
        "invalid",
        &format!("{key}.per_context"),
        "got -1",
    );
}

#[test]
fn threshold_forms_load_equally() {
    let forms = [
        "delayed_batching_threshold: [[1, 1], [1, 2], [1, 3]]\n",
        "delayed_batching_threshold: {quick: [1, 1, 1], reference: [1, 2, 3]}\n",
        "delayed_batching_threshold: {reference: [1, 2, 3]}\n",
    ];
    let tables: Vec<_> = forms
        .iter()
        .map(|f| load(&format!("{MINIMAL}{f}")).unwrap().thresholds().clone())
        .collect();
    assert_eq!(tables[0], tables[1]);
    assert_eq!(tables[1].for_model(0), Some(&[1, 1, 1][..]));
    assert_eq!(tables[2].for_model(0), Some(&[1][..]));
    assert_eq!(tables[1].get(1, 2), tables[2].get(1, 2));
    let flat = load(&format!("{MINIMAL}delayed_batching_threshold: [1, 3]\n")).unwrap();
    assert_eq!(flat.thresholds().for_model(0), Some(&[1, 3][..]));
    assert_eq!(flat.thresholds().for_model(1), Some(&[1, 3][..]));
    let err = error_with("delayed_batching_threshold: {big: [2]}\n");
    assert_error(
        &err,
        "invalid",
        "delayed_batching_threshold.big",
        "\"big\" is not a model (models: quick, reference)",
    );
    let err = error_with("delayed_batching_threshold: [1, 0]\n");
    assert_error(&err, "invalid", "delayed_batching_threshold[1]", ">= 1");
    let err = error_with("delayed_batching_threshold: [[1, 2, 3]]\n");
    assert_error(
        &err,
        "invalid",
        "delayed_batching_threshold[0]",
        "one per model",
    );
    let err = error_with("delayed_batching_threshold: []\n");
    assert_error(
        &err,
        "invalid",
        "delayed_batching_threshold",
        "must not be empty",
    );
}

#[test]
fn policy_rules() {
    let err = load(&MINIMAL.replace("scheduler_class: R2R\n", "")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "scheduler_class",
        "required, at the top level or on every model (built-in: R2R, CITER, CoLLM",
    );
    let err = load(&MINIMAL.replace("scheduler_class: R2R", "scheduler_class: ''")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "scheduler_class",
        "unknown scheduler_class \"\"",
    );
    let err = error_with("scheduler_kwargs: [1]\n");
    assert_error(&err, "invalid", "scheduler_kwargs", "must be a map");
    let c = load(&format!(
        "{}scheduler_kwargs: {{router_path: r.pt, threshold: 0.5, nested: {{a: [1, 2]}}}}\n",
        MINIMAL.replace("R2R", "r_stitch")
    ))
    .unwrap();
    assert_eq!(c.policy().name.as_str(), "RStitch");
    let kwargs = serde_json::Value::Object(c.policy().kwargs.clone());
    assert_eq!(
        kwargs,
        serde_json::json!({"router_path": "r.pt", "threshold": 0.5, "nested": {"a": [1, 2]}})
    );
    // Unknown names fail at load, listing the known ones.
    let err = load(&MINIMAL.replace("R2R", "MyPolicy")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "scheduler_class",
        "\"MyPolicy\" (built-in: R2R,",
    );
    assert!(load(&format!("{MINIMAL}scheduler_kwargs: null\n"))
        .unwrap()
        .policy()
        .kwargs
        .is_empty());
}

#[test]
fn top_level_ranges() {
    for bad in ["0", "-5", ".inf"] {
        assert_error(
            &error_with(&format!("max_batch_wait_ms: {bad}\n")),
            "invalid",
            "max_batch_wait_ms",
            "> 0",
        );
    }
    for bad in ["0", "1", "1.2", "-0.1"] {
        assert_error(
            &error_with(&format!("target_large_share: {bad}\n")),
            "invalid",
            "target_large_share",
            "(0, 1)",
        );
    }
    let c = load(&format!(
            "{MINIMAL}target_large_share: 0.05\nmax_batch_wait_ms: 2.5\nexecution_mode: lockstep\nfallback_on_peer_failure: true\n"
        ))
        .unwrap();
    assert_eq!(c.target_large_share(), Some(0.05));
    assert_eq!(c.max_batch_wait(), std::time::Duration::from_micros(2500));
    assert_eq!(c.execution_mode(), ExecutionMode::Lockstep);
    assert!(c.fallback_on_peer_failure());
}

#[test]
fn transport_addresses_expand_env() {
    let c = load(&format!(
        "{MINIMAL}transport: {{kind: tcp, addresses: {{quick: 'q-${{CACHE}}:1', reference: 'r-${{GROUP:-0}}.svc:2'}}}}\n"
    ))
    .unwrap();
    let TransportConfig::Tcp(tcp) = c.transport() else {
        panic!("tcp")
    };
    assert_eq!(tcp.addresses, vec!["q-/cache:1", "r-0.svc:2"]);
    let err = load(&format!(
        "{MINIMAL}transport: {{kind: tcp, addresses: {{quick: 'q-${{NOPE}}:1', reference: 'r:2'}}}}\n"
    ))
    .unwrap_err();
    assert_error(
        &err,
        "invalid",
        "transport.addresses.quick",
        "NOPE is not set",
    );
}

#[test]
fn transport_rules() {
    let tcp = |body: &str| load(&format!("{MINIMAL}transport: {{kind: tcp{body}}}\n"));
    assert_error(
        &tcp("").unwrap_err(),
        "invalid",
        "transport.addresses",
        "required for kind tcp",
    );
    let err = tcp(", addresses: {quick: '127.0.0.1:1'}").unwrap_err();
    assert_error(
        &err,
        "invalid",
        "transport.addresses",
        "missing an address for model(s): reference",
    );
    let err = tcp(", addresses: {quick: 'h:1', reference: 'h:2', big: 'h:3'}").unwrap_err();
    assert_error(
        &err,
        "invalid",
        "transport.addresses.big",
        "\"big\" is not a model",
    );
    let err = tcp(", addresses: {quick: 'h:1', reference: 'h'}").unwrap_err();
    assert_error(
        &err,
        "invalid",
        "transport.addresses.reference",
        "is not host:port",
    );
    let err = tcp(", addresses: {quick: 'h:1', reference: 'h:1'}").unwrap_err();
    assert_error(
        &err,
        "invalid",
        "transport.addresses.reference",
        "also the address of model \"quick\"",
    );
    let err = tcp(", addresses: {quick: 'h:1', reference: 'h:2'}, peer_timeout_ms: 0").unwrap_err();
    assert_error(&err, "invalid", "transport.peer_timeout_ms", "> 0");
    let err = error_with("transport: {addresses: {quick: 'h:1'}}\n");
    assert_error(&err, "invalid", "transport.kind", "required");
    let err = error_with("transport: {kind: inproc, addresses: {quick: 'h:1'}}\n");
    assert_error(
        &err,
        "invalid",
        "transport.addresses",
        "only applies to kind tcp",
    );
    // Addresses may be listed in any order; they are stored by model index.
    let c = tcp(", addresses: {reference: 'r:2', quick: 'q:1'}, connect_timeout_ms: 5").unwrap();
    let TransportConfig::Tcp(t) = c.transport() else {
        panic!("expected tcp")
    };
    assert_eq!(t.addresses, ["q:1", "r:2"]);
    assert_eq!(
        (t.connect_timeout_ms, t.peer_timeout_ms),
        (5, DEFAULT_PEER_TIMEOUT_MS)
    );
    assert_eq!(
        load(&format!("{MINIMAL}transport: inproc\n"))
            .unwrap()
            .transport(),
        &TransportConfig::InProc
    );
    assert_eq!(
        load(&format!("{MINIMAL}transport: {{kind: inproc}}\n"))
            .unwrap()
            .transport(),
        &TransportConfig::InProc
    );
}

#[test]
fn gateway_rules() {
    for (body, key) in [
        ("max_inflight: 0", "gateway.max_inflight"),
        ("max_body_bytes: 0", "gateway.max_body_bytes"),
        ("host: ''", "gateway.host"),
        ("served_model_name: ' '", "gateway.served_model_name"),
    ] {
        assert_error(
            &error_with(&format!("gateway: {{{body}}}\n")),
            "invalid",
            key,
            "",
        );
    }
    let c = load(&format!(
        "{MINIMAL}gateway: {{host: 0.0.0.0, port: 8080, max_inflight: 4, max_queue: 0, \
             max_body_bytes: 1024, served_model_name: tr, api_keys_file: null}}\n"
    ))
    .unwrap();
    let expected = GatewayConfig {
        host: "0.0.0.0".into(),
        port: 8080,
        api_keys_file: None,
        max_inflight: 4,
        max_queue: 0,
        max_body_bytes: 1024,
        served_model_name: "tr".into(),
        ..GatewayConfig::default()
    };
    assert_eq!(c.gateway(), &expected);
    let c = load(&format!(
        "{MINIMAL}gateway: {{api_keys_env: TR_KEYS, drain_timeout_ms: 2500, retry_after_s: 3, \
             group_wait_ms: 0, groups: ['http://a:1', 'http://b:2'], groups_file: groups.txt}}\n"
    ))
    .unwrap();
    let g = c.gateway();
    assert_eq!(g.api_keys_env.as_deref(), Some("TR_KEYS"));
    assert_eq!((g.drain_timeout_ms, g.retry_after_s), (2500, 3));
    assert_eq!(g.group_wait_ms, 0);
    assert_eq!(
        g.groups,
        vec!["http://a:1".to_string(), "http://b:2".into()]
    );
    assert!(g
        .groups_file
        .as_ref()
        .is_some_and(|p| p.ends_with("groups.txt")));
    for body in ["groups: ['']", "api_keys_env: ''"] {
        assert_eq!(
            error_with(&format!("gateway: {{{body}}}\n")).error_type(),
            "invalid",
            "{body}"
        );
    }
}
