//! `tokenrouter bench --query-level` end to end: the load generator against
//! a served sim pair whose query-level policy routes nothing (refused, with
//! the reason) and one that routes queries (accepted).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use test_support::Proc;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tokenrouter serve` of the sim pair of `config/sim-gateway.yaml` under
/// `QueryLevel` with `kwargs`; returns the process and its URL.
fn serve_query_level(dir: &tempfile::TempDir, kwargs: &str) -> (Proc, String) {
    let text = std::fs::read_to_string(repo().join("config/sim-gateway.yaml")).unwrap();
    let text = text
        .replace("scheduler_class: Bernoulli", "scheduler_class: QueryLevel")
        .replace("  probability: 0.35\n", &format!("  {kwargs}\n"));
    assert!(text.contains("QueryLevel"), "the sim config changed shape");
    let cfg = dir.path().join("query-level.yaml");
    std::fs::write(&cfg, text).unwrap();
    let mut cmd = Command::new(common::binary());
    cmd.args(["serve", "--config", cfg.to_str().unwrap(), "--port", "0"])
        .env("TOKENROUTER_CACHE", common::cache_dir());
    let mut proc = Proc::spawn("tokenrouter serve (query-level)", cmd);
    let url = proc.wait_after("listening on ");
    (proc, url)
}

/// `tokenrouter bench --query-level` against `url`: 16 prompts, 4 tokens each.
fn bench(url: &str, out: &std::path::Path) -> Output {
    Command::new(common::binary())
        .args(["bench", "--url", url, "--model", "tokenrouter"])
        .args([
            "--large-model",
            "reference",
            "--query-level",
            "--no-progress",
        ])
        .args([
            "--concurrency",
            "2",
            "--num-prompts",
            "16",
            "--max-tokens",
            "4",
        ])
        .args(["--warmup", "0", "--ignore-eos"])
        .arg("--dataset")
        .arg(repo().join("data/eval/math30.jsonl"))
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn bench_refuses_a_query_level_run_that_routes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Kwargs that keep every query on the entry model: share 0.
    let (_server, url) = serve_query_level(&dir, "always_large_above_prompt_tokens: 100000");
    let out = bench(&url, &dir.path().join("none"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(
        stderr.contains("--query-level: the query-level method's large share is 0.000")
            && stderr.contains("single-model serving"),
        "{stderr}"
    );
    // The run's output is still written, for the user to look at.
    assert!(dir.path().join("none/summary.json").exists());
}

#[test]
fn bench_accepts_a_query_level_run_that_routes_queries() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = serve_query_level(&dir, "random_share: 0.5");
    let out = bench(&url, &dir.path().join("half"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("half/summary.json")).unwrap(),
    )
    .unwrap();
    let share = summary[0]["large_model_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "share {share}: {summary}");
}
