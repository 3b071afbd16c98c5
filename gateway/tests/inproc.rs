//! The gateway over an in-process simulated group: a client that goes away
//! cancels its request in every subserver and frees its KV; a drain waits
//! for in-flight requests.

#![cfg(feature = "inproc")]
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use subserver::config::EngineConfig;
use subserver::service::Service;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A sim pair without a tokenizer (token-id prompts), every token routed
/// with probability 0.5 so that both models hold KV for each request.
const SIM: &str = "\
model:
  quick: {sim: {latency_ms: {base: 2.0}, vocab_size: 1000}}
  reference: {sim: {latency_ms: {base: 3.0}, vocab_size: 1000}}
system: {entry_model: quick, kv_cache_tokens: 65536}
scheduler_class: Bernoulli
scheduler_kwargs: {probability: 0.5}
backend: sim
max_batch_wait_ms: 5
gateway: {port: 0, served_model_name: tr, max_inflight: 8, max_queue: 8, drain_timeout_ms: 5000}
";

use test_support::HANG;

/// From a client's disconnect to its KV freed in every model.
const CANCEL_BOUND: Duration = Duration::from_secs(2);

async fn start() -> (gateway::GatewayServer, Service) {
    start_with(|_| {}).await
}

/// [`start`] with the gateway's options edited first.
async fn start_with(
    edit: impl FnOnce(&mut gateway::GatewayOptions),
) -> (gateway::GatewayServer, Service) {
    let cfg = EngineConfig::from_yaml_str(SIM, Path::new(".")).unwrap();
    let (mut gw, service) = gateway::app::inproc(&cfg).unwrap();
    edit(&mut Arc::get_mut(&mut gw).expect("not shared yet").options);
    let server = gateway::GatewayServer::bind(gw, "127.0.0.1:0")
        .await
        .unwrap();
    (server, service)
}

/// Opens a streaming completion and reads until `frames` SSE frames arrived.
async fn open_stream(addr: std::net::SocketAddr, max_tokens: usize, frames: usize) -> TcpStream {
    let body = format!(
        r#"{{"model":"tr","prompt":[1,2,3,4,5,6,7,8],"max_tokens":{max_tokens},"stream":true}}"#
    );
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while seen.matches("data: ").count() < frames {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "stream closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    }
    s
}

fn kv_free(service: &Service) -> Vec<usize> {
    (0..2)
        .map(|m| service.group().stats(m).kv_available_blocks)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_cancels_everywhere_and_frees_kv() {
    let (server, service) = start().await;
    let s = open_stream(server.local_addr(), 50_000, 20).await;
    assert_eq!(service.group().active(), 1);
    assert!(
        (0..2).all(|m| service.group().stats(m).kv_requests == 1),
        "both models hold KV for the request"
    );
    // Subscribed before the disconnect, so no freeing can be missed.
    let mut freed: Vec<_> = (0..2)
        .map(|m| service.group().freed(m).expect("an in-process model"))
        .collect();
    drop(s);
    // Each scheduler signals when it has freed requests and published the
    // state without them; the deadline only catches a hang.
    let t0 = Instant::now();
    let gone = |service: &Service| {
        service.group().active() == 0 && (0..2).all(|m| service.group().stats(m).kv_requests == 0)
    };
    let (first, rest) = freed.split_at_mut(1);
    tokio::time::timeout(HANG, async {
        while !gone(&service) {
            tokio::select! {
                r = first[0].changed() => r.expect("the small scheduler is gone"),
                r = rest[0].changed() => r.expect("the large scheduler is gone"),
            }
        }
    })
    .await
    .expect("hang: the request was not cancelled");
    // "Cancelled within milliseconds": the steps take 2-3 ms, so a cancel
    // that waited for the request's end (50,000 tokens, minutes), the
    // drain timeout (5 s) or a peer timeout would be far above this bound;
    // the bound itself is generous for a loaded 2-core machine.
    let took = t0.elapsed();
    assert!(
        took < CANCEL_BOUND,
        "cancelled everywhere only {took:?} after the disconnect"
    );
    // Freed blocks may stay in the prefix cache as evictable: available again.
    let total: Vec<usize> = (0..2).map(|m| service.group().stats(m).kv_blocks).collect();
    assert!(total.iter().all(|&t| t > 0));
    assert_eq!(kv_free(&service), total, "every block is available again");
    let gw = server.gateway().clone();
    assert_eq!(gw.in_flight(), 0, "the admission slot is back");
    drop(server);
    drop(service);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_waits_for_in_flight_requests_and_refuses_new_ones() {
    // No close notice: the drain's refusing phase at once (the notice has
    // its own test below).
    let (server, service) = start_with(|o| o.close_notice = Duration::ZERO).await;
    let addr = server.local_addr();
    let mut s = open_stream(addr, 200, 2).await;
    let gw: Arc<gateway::Gateway> = server.gateway().clone();
    let drain = tokio::spawn(server.drain());
    while !gw.shutdown.draining() {
        tokio::task::yield_now().await;
    }
    // While the stream is still in flight, new requests are refused: the
    // connection is refused or closed unanswered, or answered 503; never
    // served. Once the listener is closed a connect fails outright.
    // Real requests retried back to back (no sleep) until a connect fails.
    let t0 = Instant::now();
    let mut refusals = 0;
    loop {
        assert!(
            t0.elapsed() < HANG,
            "hang: the listener stayed open during the drain"
        );
        match try_request(addr).await {
            None => break,
            Some(answer) => {
                assert!(
                    answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
                    "a request was served during the drain: {answer}"
                );
                refusals += 1;
            }
        }
    }
    assert!(gw.in_flight() <= 1, "nothing new was admitted");
    // The in-flight stream runs to its end.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    drain.await.unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
    assert_eq!(service.group().active(), 0);
    // Exactly one request reached the group: every one of the `refusals`
    // answers above was refused, none served (a served request would end
    // here as a second finished one, whatever `in_flight` said).
    let entry = service.group().stats(0);
    assert_eq!(
        (entry.finished, entry.failed),
        (1, 0),
        "after {refusals} refusals"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_gateway_answers_429_to_exactly_the_requests_over_its_limit() {
    // Admission limits are the group's (its pool is built from the config).
    let yaml = SIM.replace(
        "max_inflight: 8, max_queue: 8",
        "max_inflight: 1, max_queue: 0",
    );
    let cfg = EngineConfig::from_yaml_str(&yaml, Path::new(".")).unwrap();
    let (gw, service) = gateway::app::inproc(&cfg).unwrap();
    let server = gateway::GatewayServer::bind(gw, "127.0.0.1:0")
        .await
        .unwrap();
    let addr = server.local_addr();
    // The stream holds the only slot while it is open (50,000 tokens: far
    // longer than the refusals below take).
    let s = open_stream(addr, 50_000, 2).await;
    let extra = 5;
    for _ in 0..extra {
        let answer = try_request(addr).await.expect("the listener is open");
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after:"),
            "{answer}"
        );
    }
    // The gateway's own counters, not this loop's passes: exactly `extra`
    // answers were 429s, each counted once as an over-capacity failure.
    let gw = server.gateway();
    let counted_429 = gw
        .metrics
        .http
        .with_label_values(&["/v1/completions", "429"])
        .get();
    let over_capacity = gw
        .metrics
        .errors
        .with_label_values(&["over_capacity"])
        .get();
    assert_eq!((counted_429, over_capacity), (extra, extra));
    // The client leaves; its cancel frees the slot.
    drop(s);
    let deadline = Instant::now() + HANG;
    while server.gateway().in_flight() > 0 || service.group().active() > 0 {
        assert!(
            Instant::now() < deadline,
            "hang: the cancel never freed the slot"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Only the stream reached the group, and its cancel ends it as failed: a
    // refused request that had been served would end here as a finished one.
    let entry = service.group().stats(0);
    assert_eq!((entry.finished, entry.failed), (0, 1));
    assert_eq!(server.gateway().in_flight(), 0);
    let answer = try_request(addr).await.expect("the listener is open");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Sends a small completion request on a new connection: `None` when the
/// connect is refused, else what came back before the server closed (may
/// be empty).
/// Sends one short completion on the kept-alive connection `c` and reads
/// its whole answer (headers lower-cased, body by its content-length).
async fn request_on(c: &mut TcpStream) -> (String, String) {
    let body = r#"{"model":"tr","prompt":[1,2,3],"max_tokens":2}"#;
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .expect("a content-length")
                .trim()
                .parse()
                .unwrap();
            if got.len() >= end + 4 + len {
                return (head, text[end + 4..end + 4 + len].to_string());
            }
        }
        let n = tokio::time::timeout(HANG, c.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed before a whole answer: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// SIGTERM's first phase: a client that kept a connection gets its next
/// request served, with `Connection: close`, and the connection closes
/// after it; readiness fails; once no connection is open the notice ends
/// (here long before its 10 minutes) and the drain refuses new requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_notice_serves_kept_alive_clients_then_lets_them_go() {
    let (server, _service) = start_with(|o| {
        o.close_notice = Duration::from_secs(600);
        o.drain_timeout = Duration::from_secs(600);
    })
    .await;
    let addr = server.local_addr();
    let gw: Arc<gateway::Gateway> = server.gateway().clone();
    let mut kept = TcpStream::connect(addr).await.unwrap();
    let (head, _) = request_on(&mut kept).await;
    assert!(
        head.starts_with("http/1.1 200") && !head.contains("connection: close"),
        "{head}"
    );
    let mut stream = open_stream(addr, 400, 2).await;
    let drain = tokio::spawn(server.drain());
    while !gw.shutdown.closing() {
        tokio::task::yield_now().await;
    }
    let (head, body) = request_on(&mut kept).await;
    assert!(
        head.starts_with("http/1.1 200"),
        "served while closing: {head} {body}"
    );
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(
        read_until_closed(&mut kept).await,
        "",
        "closed after the answer"
    );
    let health = try_get(addr, "/health").await;
    assert!(
        health.starts_with("HTTP/1.1 503") && health.contains(r#""draining":true"#),
        "{health}"
    );
    assert!(
        !gw.shutdown.draining(),
        "the stream's connection is still open"
    );
    // The stream runs to its end; its client then hangs up, and with no
    // connection left the notice ends and the drain completes.
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("data: [DONE]") {
        let n = tokio::time::timeout(HANG, stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "stream cut while closing: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("\"finish_reason\":\"length\""), "{seen}");
    drop(stream);
    tokio::time::timeout(HANG, drain)
        .await
        .expect("the notice did not end")
        .unwrap();
    assert!(gw.shutdown.draining());
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer accepting"
    );
}

/// A GET on a fresh connection (closed after the answer); what came back.
async fn try_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    c.write_all(req.as_bytes()).await.unwrap();
    read_until_closed(&mut c).await
}

async fn try_request(addr: std::net::SocketAddr) -> Option<String> {
    let mut c = TcpStream::connect(addr).await.ok()?;
    let body = r#"{"model":"tr","prompt":[1,2,3],"max_tokens":2}"#;
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = c.write_all(req.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(HANG, c.read_to_end(&mut answer)).await;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// Reads until the server closes the connection; what it sent.
async fn read_until_closed(c: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    tokio::time::timeout(HANG, c.read_to_end(&mut answer))
        .await
        .expect("the server kept a stalled connection open")
        .ok();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_clients_are_disconnected() {
    let (server, _service) = start_with(|o| {
        o.header_timeout = Duration::from_millis(300);
        o.body_timeout = Duration::from_millis(300);
    })
    .await;
    let addr = server.local_addr();

    // Half a header line, then nothing: closed, unanswered or with a 408.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"POST /v1/completions HTT").await.unwrap();
    let answer = read_until_closed(&mut half).await;
    assert!(answer.is_empty() || answer.contains(" 408 "), "{answer}");

    // Connected and silent: closed too.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let answer = read_until_closed(&mut silent).await;
    assert!(answer.is_empty() || answer.contains(" 408 "), "{answer}");

    // Headers sent, body stalled: a 408 in the OpenAI error shape.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\"",
        )
        .await
        .unwrap();
    let answer = read_until_closed(&mut stalled).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");

    // The server still serves a prompt client.
    let answer = try_request(addr).await.expect("the listener is open");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(server.gateway().in_flight(), 0);
}
