//! The gateway as the gateway pod runs it: the `tokenrouter-gateway`
//! binary in front of a remote group (one `tokenrouter subserver` process
//! per model, TCP hand-overs between them), serving a chat completion.
//! Built with `--no-default-features`, the binary must not link libtorch.
//!
//! The subservers come from the workspace's `tokenrouter` binary (built by
//! `make test` before this runs, or `cargo build --release --bin tokenrouter`).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::path::PathBuf;
use std::process::Command;

use test_support::{free_port, sibling_binary, spawn_subserver, Proc};

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn torch_free_gateway_serves_a_remote_group() {
    let cache = textio::test_assets::cache_dir();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(repo.join("config/sim-gateway.yaml")).unwrap();
    let head = text.split("\ngateway:").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (tq, tr, admin) = (free_port(), free_port(), free_port());
    let entry = format!("http://127.0.0.1:{admin}");
    let cfg = dir.path().join("group.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{head}\ntransport:\n  kind: tcp\n  addresses: {{quick: \"127.0.0.1:{tq}\", reference: \"127.0.0.1:{tr}\"}}\n\
             gateway:\n  port: 0\n  served_model_name: tokenrouter\n  groups: [\"{entry}\"]\n"
        ),
    )
    .unwrap();
    let tokenrouter = sibling_binary("tokenrouter");
    let cache = cache.to_str().unwrap();
    let envs = [("TOKENROUTER_CACHE", cache)];
    let _reference = spawn_subserver(&tokenrouter, &cfg, "reference", None, &envs);
    let _quick = spawn_subserver(&tokenrouter, &cfg, "quick", Some(admin), &envs);

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenrouter-gateway"));
    cmd.args(["--config"])
        .arg(&cfg)
        .args(["--port", "0"])
        .env("TOKENROUTER_CACHE", cache)
        .env("RUST_LOG", "info");
    let mut gw = Proc::spawn("tokenrouter-gateway", cmd);
    let url = gw.wait_after("listening on ");
    // Its /health is 200 once it has seen the group healthy.
    gw.wait_line("the gateway sees the group healthy", |l| {
        l.contains("group health changed") && l.contains("up=true")
    });

    let body = curl(&[
        "-s",
        "-H",
        "content-type: application/json",
        &format!("{url}/v1/chat/completions"),
        "-d",
        r#"{"model":"tokenrouter","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"seed":1}"#,
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(v["object"], "chat.completion", "{body}");
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=8).contains(&completion), "{body}");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{body}");
    let models = curl(&["-s", &format!("{url}/v1/models")]);
    assert!(models.contains("\"tokenrouter\""), "{models}");
}

/// The binary built without `inproc` links no libtorch (what `cargo tree`
/// promises, checked on the artifact).
#[cfg(not(feature = "inproc"))]
#[test]
fn torch_free_binary_links_no_libtorch() {
    let out = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_tokenrouter-gateway"))
        .output()
        .unwrap();
    let libs = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ldd failed: {libs}");
    assert!(!libs.contains("torch"), "links libtorch:\n{libs}");
}
