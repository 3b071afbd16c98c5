//! The CLI and the group start-up, tried as a hostile user would: each bad
//! input gets one precise error (printed once), nothing half-written is
//! left behind, and checks that need no model run before any model loads.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use subserver::assets::random::{gen_random, GenRandomOptions, Preset};
use subserver::assets::{derive_early_exit, StorageDtype, DEFAULT_MAX_SHARD_BYTES};
use subserver::config::EngineConfig;
use subserver::service::Service;

/// Runs the binary; returns (success, stderr).
fn run(args: &[&str]) -> (bool, String) {
    let out: Output = Command::new(common::binary())
        .args(args)
        .env("TOKENROUTER_CACHE", common::cache_dir())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one `error:` line of a failed run; it names `fragment`, and no
/// part of the error chain is printed twice.
fn error_line(args: &[&str], fragment: &str) -> String {
    let (ok, stderr) = run(args);
    assert!(!ok, "{args:?} succeeded:\n{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one error line:\n{stderr}");
    let line = lines[0].to_string();
    assert!(
        line.contains(fragment),
        "{args:?}: `{fragment}` not in {line:?}"
    );
    let parts: Vec<&str> = line.split(": ").filter(|p| p.len() > 12).collect();
    for (i, p) in parts.iter().enumerate() {
        assert!(
            !parts[i + 1..].contains(p),
            "{args:?}: `{p}` printed twice in {line:?}"
        );
    }
    line
}

#[test]
fn io_and_config_errors_are_printed_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.yaml");
    let line = error_line(
        &["serve", "--config", missing.to_str().unwrap()],
        "No such file or directory",
    );
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{line}"
    );
    assert!(line.contains("missing.yaml"), "{line}");
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(&bad, "model: {quick: {path: x}}\nsurprise_key: 1\n").unwrap();
    error_line(
        &["serve", "--config", bad.to_str().unwrap()],
        "surprise_key",
    );
}

#[test]
fn generate_checks_arguments_before_loading_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let nowhere = tmp.path().join("nowhere");
    let line = error_line(
        &[
            "generate",
            "--model",
            nowhere.to_str().unwrap(),
            "--prompt",
            "x",
        ],
        "no such directory",
    );
    assert!(!line.contains("tokenizer.json"), "{line}");
    // Sampling values are refused with the model folder still missing: no
    // model was needed to find them wrong.
    for (flag, value, fragment) in [
        ("--temperature", "-1", "temperature"),
        ("--top-p", "1.5", "top_p"),
        ("--kv-cache-fraction", "0", "--kv-cache-fraction"),
        ("--dtype", "f8", "f8"),
    ] {
        let model = tmp.path();
        let arg = format!("{flag}={value}");
        let line = error_line(
            &[
                "generate",
                "--model",
                model.to_str().unwrap(),
                "--prompt",
                "x",
                &arg,
            ],
            fragment,
        );
        assert!(!line.contains("tokenizer"), "{flag}: {line}");
    }
}

#[test]
fn max_tokens_near_the_integer_limit_is_refused() {
    let model = common::model_dir("smollm2-135m-l12");
    let line = error_line(
        &[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            "Hello",
            "--max-tokens",
            &usize::MAX.to_string(),
        ],
        "exceeds the context",
    );
    assert!(line.contains("max_tokens"), "{line}");
}

#[test]
fn tune_refuses_a_huge_concurrency_range_before_allocating() {
    for spec in ["1..18446744073709551615", "1..=4000000000", "99999999999"] {
        let line = error_line(
            &[
                "tune",
                "--latencies-ms",
                "6.0,27.9",
                "--transition",
                "[[0.65,0.35],[1,0]]",
                "--credit",
                "[[1,0],[1,0]]",
                "--delta-ms",
                "0.1",
                "--concurrency",
                spec,
            ],
            "1024",
        );
        assert!(line.contains("--concurrency"), "{line}");
    }
}

/// A random tiny Qwen3 at `dir` (real Qwen3 tokenizer).
fn tiny(dir: &Path, layers: usize) {
    let mut cfg = Preset::Tiny.config(StorageDtype::F32);
    cfg.num_hidden_layers = layers;
    let opts = GenRandomOptions::new(
        common::cache_dir().join("assets/qwen3-tokenizer"),
        Preset::Tiny.generation_eos(),
    );
    gen_random(&cfg, dir, &opts).unwrap();
}

#[test]
fn a_failed_derive_leaves_nothing_and_the_rerun_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, broken, out) = (
        tmp.path().join("src"),
        tmp.path().join("broken"),
        tmp.path().join("out"),
    );
    tiny(&src, 2);
    // The same model with its weights cut short, as an interrupted copy.
    std::fs::create_dir(&broken).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, broken.join(p.file_name().unwrap())).unwrap();
    }
    let weights = broken.join("model.safetensors");
    let full = std::fs::metadata(&weights).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .unwrap();
    f.set_len(full - 1000).unwrap();
    drop(f);

    let err = derive_early_exit(&broken, &out, 1, DEFAULT_MAX_SHARD_BYTES)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "truncated: expected {full} bytes, file has {}",
            full - 1000
        )),
        "{err}"
    );
    assert!(!out.exists(), "a failed derive left {}", out.display());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");

    // The rerun into the same folder is not refused.
    derive_early_exit(&src, &out, 1, DEFAULT_MAX_SHARD_BYTES).unwrap();
    assert!(out.join("model.safetensors").is_file());
    assert!(out.join("config.json").is_file());
}

#[test]
fn a_group_without_a_shared_vocabulary_is_refused_at_start_up() {
    // The SmolLM2 pair's small model with a Qwen3 model: different tokenizers.
    let small = common::model_dir("smollm2-135m-l12");
    let qwen = common::model_dir("qwen3-tiny");
    let yaml = format!(
        "model:\n  quick: {{path: {}}}\n  reference: {{path: {}}}\n\
         system: {{entry_model: quick, kv_cache_tokens: 4096}}\n\
         scheduler_class: Random\nscheduler_kwargs: {{probability: 0.5}}\nbackend: tch\ndevice: cpu\n",
        small.display(),
        qwen.display()
    );
    let cfg = EngineConfig::from_yaml_str(&yaml, Path::new(".")).unwrap();
    let e = Service::start(&cfg, None)
        .err()
        .expect("a mixed group started");
    let e = e.to_string();
    assert!(
        e.contains("do not share a tokenizer") && e.contains("vocabularies differ"),
        "{e}"
    );
    assert!(e.contains("`quick`") && e.contains("`reference`"), "{e}");
}
