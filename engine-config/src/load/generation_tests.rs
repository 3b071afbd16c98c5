//! `generation_config:` and the models' `generation_config.json`: the
//! defaults read, the override winning, bad values refused by key path.

use super::parse;
use crate::{ConfigError, EngineConfig, GenerationDefaults, GENERATION_CONFIG_FILE};

fn no_env(_: &str) -> Option<String> {
    None
}

/// A pair whose entry model `quick` has `quick_file` as its
/// generation_config.json (none when `None`) and whose `reference` has none.
fn pair(quick_file: Option<&str>, extra: &str) -> Result<EngineConfig, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("q")).unwrap();
    std::fs::create_dir_all(dir.path().join("r")).unwrap();
    if let Some(text) = quick_file {
        std::fs::write(dir.path().join("q").join(GENERATION_CONFIG_FILE), text).unwrap();
    }
    let yaml = format!(
        "model:\n  quick: {{path: q}}\n  reference: {{path: r}}\n\
         system: {{entry_model: quick}}\nscheduler_class: RStitch\n{extra}"
    );
    parse(&yaml, dir.path(), &no_env)
}

#[test]
fn no_file_and_no_override_leave_the_engine_defaults() {
    let c = pair(None, "").unwrap();
    assert!(c.generation_defaults().is_empty());
    assert!(c.model_generation_defaults(1).is_empty());
}

#[test]
fn the_entry_models_file_gives_the_groups_defaults() {
    let c = pair(
        Some(r#"{"eos_token_id": 2, "temperature": 0.6, "top_p": 0.95, "top_k": 20}"#),
        "",
    )
    .unwrap();
    let file = GenerationDefaults {
        temperature: Some(0.6),
        top_p: Some(0.95),
        top_k: Some(20),
        min_p: None,
    };
    assert_eq!(c.generation_defaults(), file);
    assert_eq!(c.model_generation_defaults(0), file);
    // The other member has no file of its own.
    assert!(c.model_generation_defaults(1).is_empty());
}

#[test]
fn the_override_wins_field_by_field() {
    let c = pair(
        Some(r#"{"temperature": 0.6, "top_k": 20}"#),
        "generation_config: {temperature: 0.2, top_p: 0.9}\n",
    )
    .unwrap();
    let want = GenerationDefaults {
        temperature: Some(0.2),
        top_p: Some(0.9),
        top_k: Some(20),
        min_p: None,
    };
    assert_eq!(c.generation_defaults(), want);
    assert_eq!(
        c.model_generation_defaults(1),
        GenerationDefaults {
            temperature: Some(0.2),
            top_p: Some(0.9),
            ..Default::default()
        }
    );
    // vLLM's -1 turns top_k off; an explicit null leaves the file's value.
    let c = pair(
        Some(r#"{"top_k": 20}"#),
        "generation_config: {top_k: -1, min_p: null}\n",
    )
    .unwrap();
    assert_eq!(c.generation_defaults().top_k, Some(0));
    assert_eq!(c.generation_defaults().min_p, None);
}

#[test]
fn bad_override_values_are_refused_naming_the_key_path() {
    for (extra, key, error_type) in [
        (
            "generation_config: {temperature: -1}",
            "generation_config.temperature",
            "invalid",
        ),
        (
            "generation_config: {temperature: 101}",
            "generation_config.temperature",
            "invalid",
        ),
        (
            "generation_config: {top_p: 2}",
            "generation_config.top_p",
            "invalid",
        ),
        (
            "generation_config: {top_p: 0}",
            "generation_config.top_p",
            "invalid",
        ),
        (
            "generation_config: {min_p: 1.5}",
            "generation_config.min_p",
            "invalid",
        ),
        (
            "generation_config: {top_k: -2}",
            "generation_config.top_k",
            "invalid",
        ),
        (
            "generation_config: {top_k: 1.5}",
            "generation_config.top_k",
            "schema",
        ),
        (
            "generation_config: {temprature: 0.2}",
            "generation_config.temprature",
            "schema",
        ),
        (
            "generation_config: {repetition_penalty: 1.1}",
            "generation_config.repetition_penalty",
            "unsupported",
        ),
    ] {
        let err = pair(None, &format!("{extra}\n")).expect_err(extra);
        assert_eq!(err.key(), Some(key), "{extra}: {err}");
        assert_eq!(err.error_type(), error_type, "{extra}: {err}");
    }
}

#[test]
fn a_bad_models_file_is_refused_naming_the_file_and_key() {
    let err = pair(Some(r#"{"top_p": 1.5}"#), "").unwrap_err();
    assert_eq!(err.key(), Some("top_p"), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(GENERATION_CONFIG_FILE), "{msg}");
}

#[test]
fn the_official_layout_carries_it_too() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "model:\n  quick:\n    model_path: q\n    port: 30000\n    tp_size: 1\n  \
                reference:\n    model_path: r\n    tp_size: 1\n\
                system: {entry_model: quick, mem_fraction_static: 0.5}\nscheduler_class: RStitch\n\
                generation_config: {temperature: 0.7, top_p: 0.8, top_k: 20, min_p: 0.0}\n";
    let c = parse(yaml, dir.path(), &no_env).unwrap();
    assert_eq!(
        c.generation_defaults(),
        GenerationDefaults {
            temperature: Some(0.7),
            top_p: Some(0.8),
            top_k: Some(20),
            min_p: Some(0.0),
        }
    );
}
