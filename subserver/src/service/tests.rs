//! A group from YAML, end to end: sim backend, in-process and TCP
//! transports, Prometheus text and the admin API over HTTP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::EngineConfig;
use crate::sampling::SamplingParams;
use crate::scheduler::client::{RequestError, StreamEvent};
use crate::service::Service;
use test_support::{free_ports, stream, HANG};
use tokio::sync::mpsc::UnboundedReceiver;

fn yaml(transport: &str) -> String {
    format!(
        r#"
model:
  quick: {{sim: {{latency_ms: {{base: 1.0, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}
  reference: {{sim: {{latency_ms: {{base: 3.0, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}
system: {{entry_model: quick, kv_cache_tokens: 65536}}
scheduler_class: Random
scheduler_kwargs: {{probability: 0.4, seed: 1}}
delayed_batching_threshold: {{quick: [1], reference: [1, 2]}}
backend: sim
max_batch_wait_ms: 10
{transport}
"#
    )
}

fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

fn run_requests(svc: &Service, n: usize, max_tokens: usize) -> usize {
    let rxs: Vec<_> = (0..n)
        .map(|i| {
            svc.group()
                .submit(vec![1 + i as u32, 2, 3], SamplingParams::greedy(max_tokens))
                .1
        })
        .collect();
    let mut large = 0;
    for mut rx in rxs {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < deadline, "request did not finish");
            match rx.try_recv() {
                Ok(StreamEvent::Finished { usage, .. }) => {
                    assert_eq!(usage.completion_tokens, max_tokens);
                    assert_eq!(usage.tokens_by_model.iter().sum::<usize>(), max_tokens);
                    large += usage.tokens_by_model[1];
                    break;
                }
                Ok(StreamEvent::Failed(e)) => panic!("request failed: {e}"),
                Ok(_) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
    large
}

#[test]
fn in_process_group_from_yaml_serves_metrics_and_admin() {
    let cfg = EngineConfig::from_yaml_str(&yaml(""), Path::new(".")).unwrap();
    let svc = Service::start(&cfg, Some("127.0.0.1:0".parse().unwrap())).unwrap();
    assert!(run_requests(&svc, 8, 30) > 0);
    let addr = svc.admin_addr().unwrap();

    let (code, text) = http(addr, "GET", "/metrics", "");
    assert_eq!(code, 200);
    for name in [
        "tokenrouter_step_latency_seconds_bucket",
        "tokenrouter_route_transitions_total{from=\"quick\",to=\"reference\"}",
        "tokenrouter_tokens_committed_total{model=\"reference\"}",
        "tokenrouter_num_requests_pending",
        "tokenrouter_kv_cache_usage_perc",
        "tokenrouter_delayed_batching_threshold",
        "tokenrouter_active_concurrency",
    ] {
        assert!(text.contains(name), "missing {name} in /metrics:\n{text}");
    }
    let committed: f64 = text
        .lines()
        .filter(|l| l.starts_with("tokenrouter_tokens_committed_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(committed, 240.0, "tokens committed by all models = 8 x 30");

    assert_eq!(http(addr, "GET", "/health", "").0, 200);
    let (code, body) = http(
        addr,
        "PUT",
        "/admin/thresholds",
        r#"{"delayed_batching_threshold":{"reference":[1,3,3]}}"#,
    );
    assert_eq!(code, 200, "{body}");
    // The PUT queued the table on each scheduler's inbox before answering;
    // an invariant check is answered from the same inbox, in order, so its
    // reply means the table is in force (an event, not a guessed delay).
    for m in 0..2 {
        svc.group()
            .check_invariants(m, Duration::from_secs(60))
            .unwrap();
    }
    let (_, body) = http(addr, "GET", "/admin/thresholds", "");
    assert!(body.contains("[1,3,3]"), "{body}");
    let (code, body) = http(
        addr,
        "PUT",
        "/admin/thresholds",
        r#"{"delayed_batching_threshold":{"nope":[1]}}"#,
    );
    assert_eq!(code, 400, "{body}");
    run_requests(&svc, 4, 10); // still serving after the table changed
}

/// The next event of `rx` (test-support's bounded wait).
fn next_event(rx: &mut UnboundedReceiver<StreamEvent>, what: &str) -> StreamEvent {
    stream::recv(rx, what).unwrap_or_else(|| panic!("{what}: the stream closed without an event"))
}

#[test]
fn tcp_group_routes_and_cancels_like_the_in_process_one() {
    let [a, b] = free_ports();
    let transport = format!("transport: {{kind: tcp, addresses: {{quick: \"127.0.0.1:{a}\", reference: \"127.0.0.1:{b}\"}}}}");
    let cfg = EngineConfig::from_yaml_str(&yaml(&transport), Path::new(".")).unwrap();
    let svc = Service::start(&cfg, None).unwrap();
    assert!(
        run_requests(&svc, 6, 25) > 0,
        "the large model never wrote over TCP"
    );

    let (rid, mut rx) = svc
        .group()
        .submit(vec![7, 7, 7], SamplingParams::greedy(5000));
    // Cancelled once it is running (its first token is the event), far
    // before its 5000 tokens could end it.
    match next_event(&mut rx, "the first token") {
        StreamEvent::Token { .. } => {}
        other => panic!("ended before its first token: {other:?}"),
    }
    let mut freed: Vec<_> = (0..2)
        .map(|m| svc.group().freed(m).expect("an in-process model"))
        .collect();
    svc.group().cancel(rid);
    let end = loop {
        match next_event(&mut rx, "the end after the cancel") {
            StreamEvent::Token { .. } => continue,
            other => break other,
        }
    };
    assert!(
        matches!(end, StreamEvent::Failed(RequestError::Cancelled)),
        "a cancel must end the request as Cancelled, not {end:?}"
    );
    // Each scheduler signals when it has freed requests; wait on that.
    for (m, rx) in freed.iter_mut().enumerate() {
        let deadline = Instant::now() + HANG;
        while svc.group().stats(m as u16).kv_requests > 0 {
            assert!(
                Instant::now() < deadline,
                "hang: KV of model {m} not freed after a cancel over TCP"
            );
            stream::changed(rx, "a scheduler's freed signal");
        }
    }
}

#[test]
fn target_large_share_from_yaml_moves_the_threshold_and_needs_a_knob() {
    let text = yaml("target_large_share: 0.1\n");
    let cfg = EngineConfig::from_yaml_str(&text, Path::new(".")).unwrap();
    let svc = Service::start(&cfg, None).unwrap();
    run_requests(&svc, 16, 64);
    let t = svc.group().stats(0).routing_threshold.expect("steered");
    assert!(
        t < 0.4,
        "probability should fall toward a 10% share, is {t}"
    );
    let mut body = String::new();
    prometheus::TextEncoder::new()
        .encode_utf8(&svc.registry().gather(), &mut body)
        .unwrap();
    assert!(body.contains("tokenrouter_routing_threshold{model=\"quick\"}"));
    drop(svc);

    let me = text.replace("scheduler_class: Random", "scheduler_class: ME");
    let me = me.replace("{probability: 0.4, seed: 1}", "{weights: [0.5, 0.5]}");
    let cfg = EngineConfig::from_yaml_str(&me, Path::new(".")).unwrap();
    let err = Service::start(&cfg, None)
        .err()
        .expect("ME has no threshold");
    assert!(err.to_string().contains("target_large_share"), "{err}");
}
