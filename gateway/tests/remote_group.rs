//! The gateway as the gateway pod runs it: the `tokenrouter-gateway`
//! binary in front of a remote group (one `tokenrouter subserver` process
//! per model, TCP hand-overs between them), serving a chat completion.
//! Built with `--no-default-features`, the binary must not link libtorch.
//!
//! The subservers come from the workspace's `tokenrouter` binary (built by
//! `make test` before this runs, or `cargo build --release --bin tokenrouter`).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Catches hangs only; every wait below ends on an event.
const HANG: Duration = Duration::from_secs(180);

/// A child process killed when the test ends, however it ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tokenrouter`, beside this test's own directory in the target folder.
fn tokenrouter() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("tokenrouter");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (cargo build --release --bin tokenrouter)",
        bin.display()
    );
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn wait_health(url: &str) {
    let start = Instant::now();
    while curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("{url}/health"),
    ]) != "200"
    {
        assert!(start.elapsed() < HANG, "{url} never became healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let member = |model: &str, admin: Option<u16>| {
        let mut cmd = Command::new(tokenrouter());
        cmd.args(["subserver", "--config"])
            .arg(&cfg)
            .args(["--model", model])
            .env("TOKENROUTER_CACHE", &cache)
            .env("RUST_LOG", "warn");
        if let Some(p) = admin {
            cmd.args(["--admin", &format!("127.0.0.1:{p}")]);
        }
        Proc(cmd.spawn().unwrap())
    };
    let _reference = member("reference", None);
    let _quick = member("quick", Some(admin));
    wait_health(&entry);

    let gw_bin = env!("CARGO_BIN_EXE_tokenrouter-gateway");
    let mut child = Command::new(gw_bin)
        .args(["--config"])
        .arg(&cfg)
        .args(["--port", "0"])
        .env("TOKENROUTER_CACHE", &cache)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _gw = Proc(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(HANG)
        .expect("tokenrouter-gateway did not start");
    wait_health(&url);

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
