//! SIGTERM in `tokenrouter subserver` (a pod's PID 1): it drains, then
//! exits 0 well within the grace period. Real processes: a two-model group
//! over TCP on the sim backend, a streaming `/internal/generate` through
//! curl.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;
use std::process::Command;

use std::time::{Duration, Instant};

use subserver::service::member::DNS_WAIT;
use test_support::{free_ports, spawn_subserver, Proc};

/// A SIGTERM during the DNS wait ends the process within this (generous
/// for a loaded machine, a tenth of the DNS wait).
const AT_ONCE: Duration = Duration::from_secs(30);

/// A group config: every step of either model takes `step_ms`; returns its
/// path and an admin port distinct from its two peer ports.
fn write_config(dir: &Path, step_ms: f64) -> (std::path::PathBuf, u16) {
    let [a, b, admin] = free_ports();
    let path = dir.join("group.yaml");
    std::fs::write(
        &path,
        format!(
            r#"
model:
  quick: {{sim: {{latency_ms: {{base: {step_ms}}}, vocab_size: 5000}}}}
  reference: {{sim: {{latency_ms: {{base: {step_ms}}}, vocab_size: 5000}}}}
system: {{entry_model: quick, kv_cache_tokens: 65536}}
scheduler_class: Random
scheduler_kwargs: {{probability: 0.3, seed: 5}}
backend: sim
transport: {{kind: tcp, addresses: {{quick: "127.0.0.1:{a}", reference: "127.0.0.1:{b}"}}}}
"#
        ),
    )
    .unwrap();
    (path, admin)
}

/// A streaming generate of `max_tokens` at the entry's admin port.
fn stream(admin: u16, max_tokens: usize) -> Proc {
    let mut cmd = Command::new("curl");
    cmd.args(["-sN", "-H", "content-type: application/json", "-d"])
        .arg(format!(
            r#"{{"prompt":[1,2,3],"params":{{"max_tokens":{max_tokens},"ignore_eos":true}}}}"#
        ))
        .arg(format!("http://127.0.0.1:{admin}/internal/generate"));
    Proc::spawn("curl generate", cmd)
}

fn status_of(admin: u16, method: &str, path: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method])
        .args(["-H", "content-type: application/json", "-d"])
        .arg(r#"{"prompt":[1],"params":{"max_tokens":2}}"#)
        .arg(format!("http://127.0.0.1:{admin}{path}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn sigterm_drains_in_flight_work_then_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    // 60 tokens of 20 ms steps: about 1.2 s of work still running at SIGTERM.
    let (cfg, admin) = write_config(dir.path(), 20.0);
    let bin = common::binary();
    let mut reference = spawn_subserver(&bin, &cfg, "reference", None, &[]);
    let mut quick = spawn_subserver(&bin, &cfg, "quick", Some(admin), &[]);

    let mut req = stream(admin, 60);
    req.wait_line("the first token", |l| l.contains("\"token\""));
    quick.terminate();
    quick.wait_line("draining", |l| l.contains("draining"));
    // Draining: not ready, and new work is refused; liveness still holds.
    assert_eq!(status_of(admin, "GET", "/health"), "503");
    assert_eq!(status_of(admin, "GET", "/livez"), "200");
    assert_eq!(status_of(admin, "POST", "/internal/generate"), "503");
    // The request in flight finishes whole, then the process exits 0.
    let end = req.wait_line("the end of the stream", |l| {
        l.contains("\"finished\"") || l.contains("\"failed\"")
    });
    assert!(end.contains("\"finished\""), "{end}");
    assert!(req.wait_exit().success());
    let status = quick.wait_exit();
    assert!(status.success(), "{status:?}:\n{}", quick.output());
    assert!(
        quick.stderr().contains("0 requests cancelled"),
        "{}",
        quick.output()
    );
    // An idle peer exits 0 at once.
    reference.terminate();
    let status = reference.wait_exit();
    assert!(status.success(), "{status:?}:\n{}", reference.output());
}

#[test]
fn sigterm_cancels_what_outlives_the_drain_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, admin) = write_config(dir.path(), 20.0);
    let bin = common::binary();
    let _reference = spawn_subserver(&bin, &cfg, "reference", None, &[]);
    let mut cmd = Command::new(&bin);
    cmd.args(["subserver", "--config"])
        .arg(&cfg)
        .args(["--model", "quick", "--drain-timeout-s", "0.2"])
        .args(["--admin", &format!("127.0.0.1:{admin}")])
        .env("RUST_LOG", "info");
    let mut quick = Proc::spawn("subserver quick", cmd);
    quick.wait_line("running", |l| l.contains("subserver `quick` running"));

    // 60000 tokens of 20 ms (within the KV pool): far longer than the deadline.
    let mut req = stream(admin, 60_000);
    req.wait_line("the first token", |l| l.contains("\"token\""));
    quick.terminate();
    let status = quick.wait_exit();
    assert!(status.success(), "{status:?}:\n{}", quick.output());
    assert!(
        quick.stderr().contains("1 requests cancelled"),
        "{}",
        quick.output()
    );
    // The client sees the end: a failed line or a closed stream, no hang.
    assert!(!req.stdout().contains("\"finished\""));
    req.wait_exit();
}

#[test]
fn sigterm_while_waiting_for_peer_dns_exits_at_once() {
    // A pod deleted before it serves (its peers' names do not resolve yet)
    // must not wait out its grace period: it exits 0 there and then.
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = write_config(dir.path(), 5.0);
    let text = std::fs::read_to_string(&cfg).unwrap();
    let reference = text
        .split("reference: \"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_string();
    std::fs::write(
        &cfg,
        text.replace(&reference, "reference-0.not-yet.invalid:7000"),
    )
    .unwrap();
    let mut cmd = Command::new(common::binary());
    cmd.args(["subserver", "--config"])
        .arg(&cfg)
        .args(["--model", "quick"])
        .env("RUST_LOG", "info");
    let mut quick = Proc::spawn("subserver quick", cmd);
    quick.wait_line("the DNS wait", |l| {
        l.contains("waiting for the peers' DNS names")
    });
    let t0 = Instant::now();
    quick.terminate();
    let status = quick.wait_exit();
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}:\n{}", quick.output());
    // "At once" must be told apart from waiting out the DNS wait: the bound
    // is a tenth of it (the hang bound of `wait_exit` equals the DNS wait,
    // so a process that waited would fail only there, unnamed).
    assert!(
        DNS_WAIT >= 10 * AT_ONCE,
        "the DNS wait must dwarf the bound"
    );
    assert!(
        took < AT_ONCE,
        "exited {took:?} after SIGTERM: it waited for DNS (bound {AT_ONCE:?}, DNS wait {DNS_WAIT:?})"
    );
    assert!(
        quick.stderr().contains("stopped before it served"),
        "{}",
        quick.output()
    );
}
