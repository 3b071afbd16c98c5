//! The official per-model layout: classes, kwargs, thresholds, ports,
//! Hugging Face ids, and the rules between them.

use std::path::{Path, PathBuf};

use super::parse;
use crate::{ConfigError, EngineConfig};

const OFFICIAL: &str = r#"model:
  quick:
    model_path: "Qwen/Qwen3-0.6B"
    port: 30000
    tp_size: 1
    scheduler_class: "r2r_slm"
    scheduler_kwargs:
      switching_strategy: "neural"
      model_path: "nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt"
  reference:
    model_path: "Qwen/Qwen3-32B"
    tp_size: 2
    delayed_batching_threshold: [1,2,2,3,4,5,5,6,7,8,9,10,10,11,12,13]
    scheduler_class: "r2r_llm"
system:
  entry_model: "quick"
  mem_fraction_static: 0.85
"#;

/// A hub cache with both models; returns (tempdir, hub, snapshot of Qwen3-32B).
fn hub() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let hub = tmp.path().join("hub");
    let mut snaps = Vec::new();
    for id in ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-32B"] {
        let folder = hub.join(format!("models--{}", id.replace('/', "--")));
        let snap = folder.join("snapshots/abc123");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(folder.join("refs")).unwrap();
        std::fs::write(folder.join("refs/main"), "abc123").unwrap();
        snaps.push(snap);
    }
    let big = snaps.pop().unwrap();
    (tmp, hub, big)
}

fn load_in(yaml: &str, base: &Path, hub: &Path) -> Result<EngineConfig, ConfigError> {
    let hub = hub.to_string_lossy().into_owned();
    parse(yaml, base, &move |name| {
        (name == "HF_HUB_CACHE").then(|| hub.clone())
    })
}

fn assert_error(err: &ConfigError, error_type: &str, key: &str, fragment: &str) {
    assert_eq!(err.error_type(), error_type, "{err}");
    assert_eq!(err.key(), Some(key), "{err}");
    assert!(
        err.to_string().contains(fragment),
        "`{fragment}` not in `{err}`"
    );
}

#[test]
fn the_official_file_loads_with_ids_classes_ports_and_per_model_lists() {
    let (tmp, hub, big) = hub();
    let c = load_in(OFFICIAL, tmp.path(), &hub).unwrap();
    assert_eq!(c.model_names(), ["quick", "reference"]);
    let (q, r) = (c.model(0).unwrap(), c.model(1).unwrap());
    assert_eq!(r.path.as_deref(), Some(big.as_path()));
    assert_eq!(q.hub_id.as_deref(), Some("Qwen/Qwen3-0.6B"));
    assert_eq!((q.tp_size, r.tp_size), (1, 2));
    assert_eq!((q.port, r.port), (Some(30000), None));
    assert_eq!(c.gateway().port, 30000);
    assert_eq!(c.policy().name.as_str(), "R2R");
    let kwargs = serde_json::Value::Object(c.policy().kwargs.clone());
    assert_eq!(
        kwargs,
        serde_json::json!({"router_path": "nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt"})
    );
    // The list applies to `reference` only; `quick` never waits.
    assert_eq!(c.thresholds().for_model(0), Some(&[1][..]));
    assert_eq!(c.thresholds().get(1, 16), 13);
    assert_eq!(c.thresholds().get(1, 4), 3);
    // An explicit gateway port wins over the entry model's.
    let c = load_in(
        &format!("{OFFICIAL}gateway: {{port: 8080}}\n"),
        tmp.path(),
        &hub,
    )
    .unwrap();
    assert_eq!(c.gateway().port, 8080);
}

#[test]
fn a_missing_id_names_every_path_tried() {
    let (tmp, hub, _) = hub();
    let yaml = OFFICIAL.replace("Qwen/Qwen3-32B", "Qwen/Qwen3-8B");
    let err = load_in(&yaml, tmp.path(), &hub).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.model_path",
        "Qwen/Qwen3-8B",
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&tmp.path().join("Qwen/Qwen3-8B").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("models--Qwen--Qwen3-8B/snapshots"), "{msg}");
}

#[test]
fn per_model_classes_must_agree_and_sit_on_the_right_model() {
    let (tmp, hub, _) = hub();
    let load = |yaml: &str| load_in(yaml, tmp.path(), &hub);
    let err = load(&OFFICIAL.replace("\"r2r_llm\"", "\"citer_llm\"")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.scheduler_class",
        "a group runs one policy",
    );
    let err = load(&OFFICIAL.replace("entry_model: \"quick\"", "entry_model: \"reference\""))
        .unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.quick.scheduler_class",
        "small (entry) model's class",
    );
    let err = load(&OFFICIAL.replace("    scheduler_class: \"r2r_llm\"\n", "")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.scheduler_class",
        "required",
    );
    let err = load(&format!("{OFFICIAL}scheduler_class: R2R\n")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.quick.scheduler_class",
        "also set at the top level",
    );
    let err = load(&OFFICIAL.replace("\"r2r_llm\"", "\"r2r_xlm\"")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.scheduler_class",
        "unknown scheduler_class",
    );
    // Plain names per model work too.
    let c = load(
        &OFFICIAL
            .replace("\"r2r_slm\"", "R2R")
            .replace("\"r2r_llm\"", "r2r"),
    )
    .unwrap();
    assert_eq!(c.policy().name.as_str(), "R2R");
}

#[test]
fn official_kwargs_translate_and_conflicts_are_errors() {
    let (tmp, hub, _) = hub();
    let load = |yaml: &str| load_in(yaml, tmp.path(), &hub);
    let err = load(&OFFICIAL.replace("\"neural\"", "\"entropy\"")).unwrap_err();
    assert_error(
        &err,
        "unsupported",
        "scheduler_kwargs.switching_strategy",
        "`neural`",
    );
    let both = OFFICIAL.replace(
        "      switching_strategy: \"neural\"\n",
        "      switching_strategy: \"neural\"\n      router_path: r.pt\n",
    );
    let err = load(&both).unwrap_err();
    assert_error(&err, "invalid", "scheduler_kwargs.model_path", "set one");
    let conflict = OFFICIAL
        .replace(
            "    scheduler_class: \"r2r_llm\"\n",
            "    scheduler_class: \"r2r_llm\"\n    scheduler_kwargs: {threshold: 0.3}\n",
        )
        .replace(
            "      switching_strategy: \"neural\"\n",
            "      switching_strategy: \"neural\"\n      threshold: 0.4\n",
        );
    let err = load(&conflict).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.scheduler_kwargs.threshold",
        "conflicts",
    );
    let err = load(&format!("{OFFICIAL}delayed_batching_threshold: [1, 2]\n")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.delayed_batching_threshold",
        "also set at the top level",
    );
    let err =
        load(&OFFICIAL.replace("[1,2,2,3,4,5,5,6,7,8,9,10,10,11,12,13]", "[1, 0]")).unwrap_err();
    assert_error(
        &err,
        "invalid",
        "model.reference.delayed_batching_threshold[1]",
        ">= 1",
    );
    let err = load(&OFFICIAL.replace("    tp_size: 2\n", "    tp_size: 2\n    path: elsewhere\n"))
        .unwrap_err();
    assert_error(&err, "invalid", "model.reference.model_path", "set one");
}

#[test]
fn serial_and_lockstep_over_tcp_are_config_errors() {
    let base = "model:\n  quick: {path: q}\n  reference: {path: r}\nsystem: {entry_model: quick}\n\
                scheduler_class: R2R\ntransport: {kind: tcp, addresses: {quick: 'h:1', reference: 'h:2'}}\n";
    for mode in ["serial", "lockstep"] {
        let err = parse(
            &format!("{base}execution_mode: {mode}\n"),
            Path::new("/b"),
            &|_| None,
        )
        .unwrap_err();
        assert_error(&err, "invalid", "execution_mode", "transport inproc");
    }
    for mode in ["async", "async_delayed"] {
        assert!(parse(
            &format!("{base}execution_mode: {mode}\n"),
            Path::new("/b"),
            &|_| None
        )
        .is_ok());
    }
}
