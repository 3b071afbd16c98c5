//! One model per process: the large model runs as a separate
//! `tokenrouter subserver` process; the entry model runs here; hand-overs
//! cross the process boundary as TCP frames.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use subserver::config::EngineConfig;
use subserver::sampling::SamplingParams;
use subserver::scheduler::client::{RequestError, StreamEvent, Usage};
use subserver::service::member::MemberService;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Deadline of every wait: only a hang reaches it, even on a loaded machine.
const HANG: Duration = Duration::from_secs(90);

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(HANG)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn finish(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
) -> Result<Usage, RequestError> {
    let deadline = Instant::now() + HANG;
    loop {
        assert!(Instant::now() < deadline, "request did not end");
        match rx.try_recv() {
            Ok(StreamEvent::Finished { usage, .. }) => return Ok(usage),
            Ok(StreamEvent::Failed(e)) => return Err(e),
            _ => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

#[test]
fn hand_overs_cross_the_process_boundary_and_a_dead_peer_fails_cleanly() {
    let (a, b, admin) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("group.yaml");
    std::fs::write(
        &cfg_path,
        format!(
            r#"
model:
  quick: {{sim: {{latency_ms: {{base: 1.0, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}
  reference: {{sim: {{latency_ms: {{base: 3.0, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}
system: {{entry_model: quick, kv_cache_tokens: 65536}}
scheduler_class: Random
scheduler_kwargs: {{probability: 0.4, seed: 5}}
backend: sim
transport: {{kind: tcp, addresses: {{quick: "127.0.0.1:{a}", reference: "127.0.0.1:{b}"}}, peer_timeout_ms: 2000}}
"#
        ),
    )
    .unwrap();
    let child = Command::new(common::binary())
        .args(["subserver", "--config"])
        .arg(&cfg_path)
        .args([
            "--model",
            "reference",
            "--admin",
            &format!("127.0.0.1:{admin}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = Killed(child);
    let deadline = Instant::now() + HANG;
    while get(admin, "/health").is_none() {
        assert!(
            Instant::now() < deadline,
            "the reference subserver did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let cfg = EngineConfig::from_file(&cfg_path).unwrap();
    let entry = MemberService::start(&cfg, "quick", None).unwrap();
    let rxs: Vec<_> = (0..6)
        .map(|i| {
            entry
                .member()
                .submit(
                    vec![i + 1, 2, 3],
                    SamplingParams::greedy(30),
                    Default::default(),
                )
                .1
        })
        .collect();
    let mut large = 0;
    for mut rx in rxs {
        let usage = finish(&mut rx).unwrap();
        assert_eq!(usage.tokens_by_model.iter().sum::<usize>(), 30);
        large += usage.tokens_by_model[1];
    }
    assert!(large > 0, "no token was written by the other process");
    // Once idle, both processes report zero active requests: the entry
    // counts its own, the reference hears the count with each release.
    let deadline = Instant::now() + HANG;
    loop {
        let metrics = get(admin, "/metrics").unwrap();
        let idle = metrics
            .lines()
            .any(|l| l == "tokenrouter_active_concurrency{model=\"reference\"} 0");
        if idle && entry.member().stats().active == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still active: entry {}, reference metrics:\n{}",
            entry.member().stats().active,
            metrics
                .lines()
                .filter(|l| l.contains("active_concurrency"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let metrics = get(admin, "/metrics").unwrap();
    let steps: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("tokenrouter_step_latency_seconds_count{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(steps > 0.0, "the reference process reports no steps");

    drop(child);
    let t0 = Instant::now();
    let mut rx = entry
        .member()
        .submit(vec![9, 9], SamplingParams::greedy(200), Default::default())
        .1;
    let out = finish(&mut rx);
    assert!(
        matches!(out, Err(RequestError::PeerFailed { model: 1, .. })),
        "{out:?}"
    );
    // Bounded by the peer timeout (2 s here); `finish` catches a hang.
    println!("failed {:?} after the peer died", t0.elapsed());
}
