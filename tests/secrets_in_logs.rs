//! Keys and prompts never reach the logs at info level: a full `serve` run
//! (gateway and in-process subservers, the default `info` filter) takes
//! requests with a unique API key, a wrong key, unique prompts and a stop
//! string, answers them, drains on SIGTERM, and its whole log is searched.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::process::Command;

use test_support::Proc;

const KEY: &str = "sk-h14-never-logged-7f3a9c";
const WRONG_KEY: &str = "sk-h14-wrong-key-51bd02";
const PROMPT: &str = "zebra-quartz-h14 private prompt text";
const CHAT: &str = "platypus-h14 private chat message";
const STOP: &str = "marmot-h14-stop";

fn curl(url: &str, key: &str, body: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            "-H",
            "content-type: application/json",
        ])
        .args(["-H", &format!("authorization: Bearer {key}")])
        .args(["-d", body])
        .arg(url)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_full_run_logs_no_key_and_no_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(repo.join("config/sim-gateway.yaml")).unwrap();
    let head = text.split("\ngateway:").next().unwrap();
    let cfg = dir.path().join("sim.yaml");
    std::fs::write(
        &cfg,
        format!("{head}\ngateway:\n  port: 0\n  served_model_name: tokenrouter\n  api_keys_file: keys.txt\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("keys.txt"), format!("{KEY}\n")).unwrap();
    let mut cmd = Command::new(common::binary());
    cmd.args(["serve", "--config"])
        .arg(&cfg)
        .args(["--port", "0"])
        .env("TOKENROUTER_CACHE", common::cache_dir())
        .env("RUST_LOG", "info");
    let mut child = Proc::spawn("tokenrouter serve", cmd);
    // The bound address is on stdout's "listening on" line.
    let url = child.wait_after("listening on ");

    let completions = format!("{url}/v1/completions");
    let chat = format!("{url}/v1/chat/completions");
    let ok = curl(
        &completions,
        KEY,
        &format!(
            r#"{{"model":"tokenrouter","prompt":"{PROMPT}","max_tokens":8,"stop":["{STOP}"]}}"#
        ),
    );
    assert!(ok.ends_with("200"), "{ok}");
    let ok = curl(
        &chat,
        KEY,
        &format!(
            r#"{{"model":"tokenrouter","messages":[{{"role":"user","content":"{CHAT}"}}],"max_tokens":8,"stream":true}}"#
        ),
    );
    assert!(ok.ends_with("200"), "{ok}");
    let refused = curl(
        &completions,
        WRONG_KEY,
        &format!(r#"{{"model":"tokenrouter","prompt":"{PROMPT}"}}"#),
    );
    assert!(refused.ends_with("401"), "{refused}");
    // A bad request whose error might echo the body.
    let bad = curl(
        &chat,
        KEY,
        &format!(r#"{{"model":"tokenrouter","messages":[{{"role":"robot","content":"{CHAT}"}}]}}"#),
    );
    assert!(bad.ends_with("400"), "{bad}");

    child.terminate();
    child.wait_exit();
    // Both streams: the log (stderr) and the "listening" line (stdout).
    let log = child.output();
    assert!(
        log.contains("gateway listening"),
        "the info log was not captured:\n{log}"
    );
    for secret in [KEY, WRONG_KEY, PROMPT, CHAT, STOP, "zebra", "platypus"] {
        assert!(
            !log.contains(secret),
            "`{secret}` appears in the info log:\n{log}"
        );
    }
}
