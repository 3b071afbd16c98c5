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

/// `generate --prompts-file` with `--chat`: writes one answer per line of
/// `lines`, returned in input order.
fn generate_file(lines: &[serde_json::Value], extra: &[&str]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("p.jsonl"), dir.path().join("a.jsonl"));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&src, text).unwrap();
    let mut args = vec!["--chat", "--prompts-file"];
    args.push(src.to_str().unwrap());
    args.extend(["--out", dst.to_str().unwrap()]);
    args.extend(extra);
    let (_, stats) = generate(&args);
    assert!(
        stats.contains(&format!("{} prompts", lines.len())),
        "{stats}"
    );
    std::fs::read_to_string(&dst)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_prompts_file_decodes_as_one_batch_and_answers_in_order() {
    let question = "What is the capital of France?";
    let (_, stats) = generate(&[
        "--chat",
        "--prompt",
        question,
        "--max-tokens",
        "16",
        "--print-ids",
    ]);
    let single: serde_json::Value = stats
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap();
    let answers = generate_file(
        &[
            serde_json::json!({"prompt": question}),
            serde_json::json!({"prompt": "Name a color.", "max_tokens": 3}),
            serde_json::json!({"prompt_ids": single["prompt_ids"]}),
            serde_json::json!({"prompt": "Tell me a story.", "temperature": 0.9, "seed": 3}),
        ],
        &["--max-tokens", "16"],
    );
    assert_eq!(answers.len(), 4);
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["index"], i);
    }
    // Greedy in a batch writes what greedy alone writes, from text or ids.
    assert_eq!(answers[0]["prompt_ids"], single["prompt_ids"]);
    assert_eq!(answers[0]["ids"], single["ids"]);
    assert_eq!(answers[2]["ids"], single["ids"]);
    assert!(answers[0]["text"].as_str().unwrap().contains("Paris"));
    // Per-line overrides: max_tokens and a seeded sample.
    assert_eq!(answers[1]["ids"].as_array().unwrap().len(), 3);
    assert_eq!(answers[1]["finish"], "length");
    assert!(!answers[3]["ids"].as_array().unwrap().is_empty());
}

#[test]
fn a_bad_prompts_file_line_is_named_and_nothing_runs() {
    let model = common::model_dir("smollm2-135m");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("p.jsonl"), dir.path().join("a.jsonl"));
    for (bad, why) in [
        (r#"{"prompt": "a", "prompt_ids": [1]}"#, "exactly one of"),
        (r#"{"prompt": "a", "colour": 1}"#, "colour"),
        (r#"{"prompt_ids": []}"#, "empty"),
        (r#"{"prompt": "a", "temperature": -1}"#, "temperature"),
    ] {
        std::fs::write(&src, format!("{{\"prompt\": \"fine\"}}\n{bad}\n")).unwrap();
        let out = Command::new(common::binary())
            .args(["generate", "--model"])
            .arg(&model)
            .arg("--prompts-file")
            .arg(&src)
            .arg("--out")
            .arg(&dst)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} was accepted");
        assert!(
            stderr.contains("p.jsonl:2") && stderr.contains(why),
            "{bad}: {stderr}"
        );
        assert!(!dst.exists(), "{bad}: answers written");
    }
}
