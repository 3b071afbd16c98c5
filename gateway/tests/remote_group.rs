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

use test_support::{free_ports, sibling_binary, spawn_subserver, Proc};

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A running remote group (two subservers over TCP), each subserver given
/// `envs`; dropped, its processes are killed.
struct Group {
    dir: tempfile::TempDir,
    cfg: PathBuf,
    cache: String,
    /// The entry subserver's URL (the group's one line in a group list).
    entry: String,
    _procs: [Proc; 2],
}

fn start_group(envs: &[(&str, &str)]) -> Group {
    let cache = textio::test_assets::cache_dir();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(repo.join("config/sim-gateway.yaml")).unwrap();
    let head = text.split("\ngateway:").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let [tq, tr, admin] = free_ports();
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
    let cache = cache.to_str().unwrap().to_string();
    let mut all = vec![("TOKENROUTER_CACHE", cache.as_str())];
    all.extend_from_slice(envs);
    let reference = spawn_subserver(&tokenrouter, &cfg, "reference", None, &all);
    let quick = spawn_subserver(&tokenrouter, &cfg, "quick", Some(admin), &all);
    Group {
        dir,
        cfg,
        cache,
        entry,
        _procs: [reference, quick],
    }
}

/// Starts `tokenrouter-gateway` in front of `group` (with `envs`) and
/// waits until it has seen the group healthy; returns it and its URL.
fn start_gateway(group: &Group, envs: &[(&str, &str)]) -> (Proc, String) {
    let (mut gw, url) = spawn_gateway(group, &group.cfg, envs);
    // Its /health is 200 once it has seen the group healthy.
    gw.wait_line("the gateway sees the group healthy", |l| {
        l.contains("group health changed") && l.contains("up=true")
    });
    (gw, url)
}

/// Starts `tokenrouter-gateway` with config `cfg`; returns it and its URL.
fn spawn_gateway(group: &Group, cfg: &std::path::Path, envs: &[(&str, &str)]) -> (Proc, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenrouter-gateway"));
    cmd.args(["--config"])
        .arg(cfg)
        .args(["--port", "0"])
        .env("TOKENROUTER_CACHE", &group.cache)
        .env("RUST_LOG", "info");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut gw = Proc::spawn("tokenrouter-gateway", cmd);
    let url = gw.wait_after("listening on ");
    (gw, url)
}

/// One chat completion through the gateway at `url`: its JSON answer.
fn chat(url: &str) -> serde_json::Value {
    let body = curl(&[
        "-s",
        "-H",
        "content-type: application/json",
        &format!("{url}/v1/chat/completions"),
        "-d",
        r#"{"model":"tokenrouter","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"seed":1}"#,
    ]);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn assert_completion(v: &serde_json::Value) {
    assert_eq!(v["object"], "chat.completion", "{v}");
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=8).contains(&completion), "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
}

#[test]
fn torch_free_gateway_serves_a_remote_group() {
    let group = start_group(&[]);
    let (_gw, url) = start_gateway(&group, &[]);
    assert_completion(&chat(&url));
    let models = curl(&["-s", &format!("{url}/v1/models")]);
    assert!(models.contains("\"tokenrouter\""), "{models}");
}

/// Subservers with an admin token (as the operator's pods run) require it on
/// `/internal/generate`: a gateway without it sees the group healthy (its
/// `/health` is open) yet every completion fails; with the same token in
/// its env (as the operator's gateway Deployment sets it) it is served.
#[test]
fn gateway_sends_the_admin_token_a_group_requires() {
    let token = ("TOKENROUTER_ADMIN_TOKEN", "s3cret-admin");
    let group = start_group(&[token]);

    let (_without, url) = start_gateway(&group, &[]);
    let refused = chat(&url);
    assert_ne!(refused["object"], "chat.completion", "{refused}");
    assert!(refused["error"].is_object(), "{refused}");

    let (_with, url) = start_gateway(&group, &[token]);
    assert_completion(&chat(&url));
}

fn status_of(url: &str) -> String {
    curl(&["-s", "-o", "/dev/null", "-w", "%{http_code}", url])
}

/// The liveness probe (`/livez`) answers for the gateway process alone: with
/// its only group gone, readiness (`/health`) fails and liveness does not,
/// so an outage of the groups does not crash-loop the gateways.
#[test]
fn livez_stays_up_while_the_groups_are_down() {
    let group = start_group(&[]);
    let (mut gw, url) = start_gateway(&group, &[]);
    assert_eq!(status_of(&format!("{url}/livez")), "200");
    assert_eq!(status_of(&format!("{url}/health")), "200");
    drop(group);
    gw.wait_line("the gateway sees the group down", |l| {
        l.contains("group health changed") && l.contains("up=false")
    });
    assert_eq!(status_of(&format!("{url}/health")), "503");
    assert_eq!(status_of(&format!("{url}/livez")), "200");
}

/// Scaled to zero (an empty group list, as the operator writes at
/// `minGroups: 0`), the gateway stays ready, and a request waits for the
/// first group, counted in `vllm:num_requests_waiting`: the load the
/// operator scales up from. Once the group is listed, it is served.
#[test]
fn at_zero_groups_a_request_waits_for_the_first_one_and_counts_as_load() {
    let group = start_group(&[]);
    let list = group.dir.path().join("groups.txt");
    std::fs::write(
        &list,
        "# Written by tokenrouter-operator: the groups the gateway may use.\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(&group.cfg).unwrap();
    let cfg = group.dir.path().join("from-file.yaml");
    let listed = format!("groups: [\"{}\"]", group.entry);
    assert!(text.contains(&listed), "{text}");
    std::fs::write(
        &cfg,
        text.replace(&listed, &format!("groups_file: {}", list.display())),
    )
    .unwrap();
    let (mut gw, url) = spawn_gateway(&group, &cfg, &[]);
    gw.wait_line("the empty group list", |l| l.contains("group list set"));
    assert_eq!(status_of(&format!("{url}/health")), "200");

    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-H", "content-type: application/json"])
        .arg(format!("{url}/v1/chat/completions"))
        .args(["-d", r#"{"model":"tokenrouter","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"seed":1}"#]);
    let mut waiting = Proc::spawn("curl chat", cmd);
    gw.wait_line("the request waiting", |l| {
        l.contains("the request waits for one")
    });
    let metrics = curl(&["-s", &format!("{url}/metrics")]);
    assert!(
        metrics.contains("vllm:num_requests_waiting{model_name=\"tokenrouter\"} 1"),
        "{metrics}"
    );
    std::fs::write(&list, format!("{}\n", group.entry)).unwrap();
    assert!(waiting.wait_exit().success());
    let v: serde_json::Value = serde_json::from_str(&waiting.stdout())
        .unwrap_or_else(|e| panic!("{e}: {}", waiting.stdout()));
    assert_completion(&v);
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
