//! One model per process: the large model runs as a separate
//! `tokenrouter subserver` process; the entry model runs here; hand-overs
//! cross the process boundary as TCP frames.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use common::finish;
use subserver::config::EngineConfig;
use subserver::sampling::SamplingParams;
use subserver::scheduler::client::RequestError;
use subserver::service::member::MemberService;
use test_support::{free_ports, spawn_subserver, HANG};

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

#[test]
fn hand_overs_cross_the_process_boundary_and_a_dead_peer_fails_cleanly() {
    let [a, b, admin] = free_ports();
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
    // Its "running" line: its peer listener and admin port are up.
    let child = spawn_subserver(&common::binary(), &cfg_path, "reference", Some(admin), &[]);

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
    // Kept a poll: a metric value is the only sign of that count.
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
            "hang: still active: entry {}, reference metrics:\n{}",
            entry.member().stats().active,
            metrics
                .lines()
                .filter(|l| l.contains("active_concurrency"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        // Spaces the scrapes only; no outcome rides on its length.
        std::thread::sleep(std::time::Duration::from_millis(20));
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
    // Bounded by the peer timeout (2 s here): the request would otherwise
    // wait for `finish`'s hang bound. The slack covers a loaded machine.
    let took = t0.elapsed();
    let peer_timeout = std::time::Duration::from_secs(2);
    assert!(
        took < peer_timeout + std::time::Duration::from_secs(3),
        "failed only {took:?} after the peer died (peer timeout {peer_timeout:?})"
    );
}
