//! `tokenrouter generate` end to end on the real SmolLM2-135M-Instruct.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::process::Command;

fn generate(args: &[&str]) -> (String, String) {
    let model = common::model_dir("smollm2-135m");
    let out = Command::new(common::binary())
        .arg("generate")
        .arg("--model")
        .arg(&model)
        .args(args)
        .output()
        .expect("run tokenrouter");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "generate failed: {stderr}");
    (stdout, stderr)
}

#[test]
fn smollm2_knows_the_capital_of_france() {
    let (text, stats) = generate(&[
        "--chat",
        "--prompt",
        "What is the capital of France?",
        "--max-tokens",
        "32",
    ]);
    assert!(text.contains("Paris"), "answer was: {text}");
    assert!(
        stats.contains("tokens/s"),
        "no throughput on stderr: {stats}"
    );
}

#[test]
fn same_seed_same_sample_and_max_tokens_is_respected() {
    let args = [
        "--prompt",
        "Once upon a time",
        "--temperature",
        "0.9",
        "--seed",
        "42",
        "--max-tokens",
        "12",
    ];
    let (a, stats) = generate(&args);
    let (b, _) = generate(&args);
    assert_eq!(a, b, "same seed gave different samples");
    assert!(stats.contains("generated 12 tokens"), "{stats}");
}

#[test]
fn bad_arguments_are_precise_errors() {
    let model = common::model_dir("smollm2-135m");
    let out = Command::new(common::binary())
        .args(["generate", "--model"])
        .arg(&model)
        .args(["--prompt", "hi", "--device", "tpu:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tpu:0"));

    let out = Command::new(common::binary())
        .args([
            "generate",
            "--model",
            "/nonexistent/model",
            "--prompt",
            "hi",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model"));
}

#[test]
fn gen_random_no_save_builds_a_model_in_memory_and_times_it() {
    let out = Command::new(common::binary())
        .args([
            "gen-random",
            "--preset",
            "tiny",
            "--no-save",
            "--device",
            "cpu",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("decode") && stdout.contains("tok/s"),
        "{stdout}"
    );
    let out = Command::new(common::binary())
        .args(["gen-random", "--preset", "tiny", "--device", "cuda"])
        .arg(std::env::temp_dir().join("tr-never-written"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-save"));
}
