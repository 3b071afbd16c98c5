//! Peer faults between processes: the large model runs as a `tokenrouter
//! subserver` process, the entry model here, and the entry reaches it
//! through a TCP proxy the test controls. Delayed frames slow requests
//! down; dropped frames and a killed process fail the requests pending on
//! the peer with a clear error within the peer timeout; no request hangs,
//! no KV stays held, and a restarted peer rejoins without restarting the
//! entry. With `fallback_on_peer_failure`, a killed peer's requests finish
//! on the entry model instead, marked in their usage and in the entry's
//! `tokenrouter_peer_fallbacks_total`.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use subserver::config::EngineConfig;
use subserver::sampling::SamplingParams;
use subserver::scheduler::client::{RequestError, StreamEvent, Usage};
use subserver::service::member::MemberService;

use common::finish;
use test_support::{free_ports, spawn_subserver, stream, Proc, HANG};

/// What the proxy does with the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Pass,
    /// Holds every chunk this long before forwarding it.
    Delay(Duration),
    /// Reads and discards: frames vanish, the connection stays open.
    Drop,
}

/// A TCP proxy from its own loopback port to `to`, both directions.
struct Proxy {
    /// Where it listens (bound by the proxy itself: no port to race for).
    port: u16,
    mode: Arc<Mutex<Mode>>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(to: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (mode, conns, stop) = (mode.clone(), conns.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((client, _)) = listener.accept() else {
                        thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    client.set_nonblocking(false).unwrap();
                    let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                        continue; // the peer is down: the client sees a close
                    };
                    for s in [&client, &server] {
                        conns.lock().unwrap().push(s.try_clone().unwrap());
                    }
                    for (from, into) in [
                        (client.try_clone().unwrap(), server.try_clone().unwrap()),
                        (server, client),
                    ] {
                        let (mode, stop) = (mode.clone(), stop.clone());
                        thread::spawn(move || pump(from, into, &mode, &stop));
                    }
                }
            })
        };
        Self {
            port,
            mode,
            conns,
            stop,
            acceptor: Some(acceptor),
        }
    }

    fn set(&self, m: Mode) {
        *self.mode.lock().unwrap() = m;
    }

    /// Resets every open connection (frames in flight are lost).
    fn cut(&self) {
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut();
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn pump(mut from: TcpStream, mut into: TcpStream, mode: &Mutex<Mode>, stop: &AtomicBool) {
    from.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        };
        let m = *mode.lock().unwrap();
        match m {
            Mode::Pass => {}
            Mode::Delay(d) => thread::sleep(d),
            Mode::Drop => continue,
        }
        if into.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = into.shutdown(Shutdown::Write);
}

/// The group: quick (here) and reference (a child process); `reference_at`
/// is where quick dials the reference (the proxy), `listen_at` where the
/// reference listens.
fn config(dir: &Path, name: &str, quick: u16, reference_at: u16) -> std::path::PathBuf {
    config_with(dir, name, quick, reference_at, false)
}

/// [`config`], with `fallback_on_peer_failure` as given.
fn config_with(
    dir: &Path,
    name: &str,
    quick: u16,
    reference_at: u16,
    fallback: bool,
) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            r#"
model:
  quick: {{sim: {{latency_ms: {{base: 1.0, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}
  reference: {{sim: {{latency_ms: {{base: 2.0, per_seq: 0.0, per_token: 0.0}}, vocab_size: 5000}}}}
system: {{entry_model: quick, kv_cache_tokens: 65536}}
scheduler_class: Random
scheduler_kwargs: {{probability: 0.4, seed: 5}}
backend: sim
transport: {{kind: tcp, addresses: {{quick: "127.0.0.1:{quick}", reference: "127.0.0.1:{reference_at}"}}, peer_timeout_ms: 2000}}
fallback_on_peer_failure: {fallback}
"#
        ),
    )
    .unwrap();
    path
}

/// The reference as a `tokenrouter subserver` process, once it runs.
fn spawn_reference(cfg: &Path) -> Proc {
    spawn_subserver(&common::binary(), cfg, "reference", None, &[])
}

/// Runs `n` requests at once; their outcomes.
fn burst(entry: &MemberService, n: u32, max_tokens: usize) -> Vec<Result<Usage, RequestError>> {
    let rxs: Vec<_> = (0..n)
        .map(|i| {
            entry
                .member()
                .submit(
                    vec![i + 1, 2, 3],
                    SamplingParams::greedy(max_tokens),
                    Default::default(),
                )
                .1
        })
        .collect();
    rxs.into_iter().map(|mut rx| finish(&mut rx)).collect()
}

/// Submits 6 greedy requests of `max_tokens` at once; their streams.
fn submit_long(
    entry: &MemberService,
    max_tokens: usize,
) -> Vec<tokio::sync::mpsc::UnboundedReceiver<StreamEvent>> {
    (0..6u32)
        .map(|i| {
            entry
                .member()
                .submit(
                    vec![i + 7, 2],
                    SamplingParams::greedy(max_tokens),
                    Default::default(),
                )
                .1
        })
        .collect()
}

/// Every request succeeded with both models writing.
fn all_served(outcomes: &[Result<Usage, RequestError>], max_tokens: usize) {
    let mut large = 0;
    for o in outcomes {
        let u = o.as_ref().unwrap_or_else(|e| panic!("failed: {e}"));
        assert_eq!(u.tokens_by_model.iter().sum::<usize>(), max_tokens);
        large += u.tokens_by_model[1];
    }
    assert!(large > 0, "the reference wrote nothing");
}

/// The peer timeout of `config_with`.
const PEER_TIMEOUT: Duration = Duration::from_millis(2000);

/// Waits for the next value of `rx` (one not yet seen); `what` names the
/// event in the hang message. The deadline only catches a hang.
fn next_change(rx: &mut tokio::sync::watch::Receiver<u64>, what: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async { tokio::time::timeout(HANG, rx.changed()).await })
        .unwrap_or_else(|_| panic!("hang: {what}"))
        .unwrap_or_else(|_| panic!("{what}: the sender is gone"));
}

/// Submits a burst; when not all of it is served (the peer is not back),
/// waits for the entry's link to the peer to (re)connect and tries again.
fn until_served(entry: &MemberService, what: &str) {
    let t0 = Instant::now();
    let mut connects = entry.member().peer_connects(1).expect("a link to model 1");
    loop {
        // A connect during the burst leaves its change unseen: no wait then.
        connects.borrow_and_update();
        let outcomes = burst(entry, 4, 20);
        if outcomes
            .iter()
            .all(|o| o.as_ref().is_ok_and(|u| u.peer_fallbacks == 0))
        {
            all_served(&outcomes, 20);
            println!("{what}: rejoined after {:?}", t0.elapsed());
            return;
        }
        next_change(
            &mut connects,
            &format!("{what}: the peer never reconnected"),
        );
    }
}

/// Pending requests failed with the peer named; the entry holds no KV.
fn failed_cleanly(
    outcomes: &[Result<Usage, RequestError>],
    entry: &MemberService,
    freed: &mut tokio::sync::watch::Receiver<u64>,
) {
    let failed = outcomes
        .iter()
        .filter(|o| matches!(o, Err(RequestError::PeerFailed { model: 1, .. })))
        .count();
    assert!(
        failed > 0,
        "no request failed on the dead peer: {outcomes:?}"
    );
    for o in outcomes {
        assert!(
            matches!(o, Ok(_) | Err(RequestError::PeerFailed { model: 1, .. })),
            "{o:?}"
        );
    }
    idle(entry, freed);
}

/// Waits until the entry holds no request and no KV, woken by its
/// scheduler each time it has freed requests and published the state
/// without them. `freed` was subscribed before the requests could end.
fn idle(entry: &MemberService, freed: &mut tokio::sync::watch::Receiver<u64>) {
    loop {
        let s = entry.member().stats();
        if s.kv_requests == 0 && s.active == 0 {
            return;
        }
        next_change(
            freed,
            &format!(
                "KV or requests still held after the failures: {} requests hold KV, active {}, \
                 running {} waiting {} pending {}",
                s.kv_requests, s.active, s.running, s.waiting, s.pending
            ),
        );
    }
}

#[test]
fn delayed_dropped_and_killed_peers_fail_cleanly_and_rejoin() {
    let dir = tempfile::tempdir().unwrap();
    let [quick, reference] = free_ports();
    // The entry dials the proxy; the reference listens behind it.
    let proxy = Proxy::start(reference);
    let entry_cfg = config(dir.path(), "entry.yaml", quick, proxy.port);
    let reference_cfg = config(dir.path(), "reference.yaml", quick, reference);
    let mut child = spawn_reference(&reference_cfg);
    let cfg = EngineConfig::from_file(&entry_cfg).unwrap();
    let entry = MemberService::start(&cfg, "quick", None).unwrap();
    until_served(&entry, "start");

    // Delayed frames: slower, still correct.
    proxy.set(Mode::Delay(Duration::from_millis(20)));
    all_served(&burst(&entry, 4, 20), 20);

    // A peer far slower than the timeout (every frame held 5x the peer
    // timeout): only the timeout can end the requests waiting on it.
    proxy.set(Mode::Delay(5 * PEER_TIMEOUT));
    let mut freed = entry.member().freed();
    let t0 = Instant::now();
    let outcomes = burst(&entry, 4, 40);
    let took = t0.elapsed();
    for o in &outcomes {
        match o {
            Err(RequestError::PeerFailed { model: 1, reason }) => assert!(
                reason.contains("no answer within"),
                "ended by something other than the peer timeout: {reason}"
            ),
            other => panic!("a request on the slow peer ended otherwise: {other:?}"),
        }
    }
    // Not a timing assert: the timeout cannot fire before it has elapsed.
    assert!(
        took >= PEER_TIMEOUT,
        "ended after {took:?}, before the timeout"
    );
    idle(&entry, &mut freed);
    println!("slow peer: every request ended by the peer timeout after {took:?}");
    proxy.set(Mode::Pass);
    proxy.cut();
    until_served(&entry, "after the slow peer");

    // Dropped frames: the requests waiting on the peer fail, none hangs.
    proxy.set(Mode::Drop);
    let mut freed = entry.member().freed();
    let t0 = Instant::now();
    let outcomes = burst(&entry, 6, 40);
    println!(
        "dropped frames: {:?} until every request ended",
        t0.elapsed()
    );
    failed_cleanly(&outcomes, &entry, &mut freed);
    proxy.set(Mode::Pass);
    proxy.cut();
    until_served(&entry, "after dropped frames");

    // The process dies mid-generation.
    let mut freed = entry.member().freed();
    let rxs = submit_long(&entry, 400);
    drop(child);
    let outcomes: Vec<_> = rxs.into_iter().map(|mut rx| finish(&mut rx)).collect();
    failed_cleanly(&outcomes, &entry, &mut freed);

    // Restarted on the same address: it rejoins, the entry was never restarted.
    child = spawn_reference(&reference_cfg);
    until_served(&entry, "after the restart");
    drop(child);
    drop(entry);
    drop(proxy);
}

/// `GET /metrics` of the entry's HTTP surface.
fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

#[test]
fn a_killed_peer_process_falls_back_to_the_entry_marked_in_usage_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let [quick, reference] = free_ports();
    let cfg_path = config_with(dir.path(), "fallback.yaml", quick, reference, true);
    let mut child = spawn_reference(&cfg_path);
    let cfg = EngineConfig::from_file(&cfg_path).unwrap();
    let entry = MemberService::start(&cfg, "quick", Some("127.0.0.1:0".parse().unwrap())).unwrap();
    until_served(&entry, "start");
    let before = entry.member().stats();
    let mut freed = entry.member().freed();

    // Long requests; the reference dies once it has written some of them.
    let max_tokens = 400;
    let mut rxs = submit_long(&entry, max_tokens);
    // Read the first stream up to a token the reference wrote.
    loop {
        match stream::recv(&mut rxs[0], "a token from the reference") {
            Some(StreamEvent::Token { writer: 1, .. }) => break,
            Some(StreamEvent::Token { .. }) => {}
            other => panic!("the first request ended before the reference wrote: {other:?}"),
        }
    }
    drop(child);
    let outcomes: Vec<_> = rxs.into_iter().map(|mut rx| finish(&mut rx)).collect();

    // Every request finished, each token written once, and the ones that
    // were with the dead peer say so.
    let mut fallbacks = 0;
    for o in &outcomes {
        let u = o
            .as_ref()
            .unwrap_or_else(|e| panic!("failed despite the fallback: {e}"));
        assert_eq!(u.completion_tokens, max_tokens);
        assert_eq!(u.tokens_by_model.iter().sum::<usize>(), max_tokens);
        assert!(u.peer_fallbacks <= 1, "{u:?}");
        fallbacks += u.peer_fallbacks;
    }
    assert!(
        fallbacks > 0,
        "no request was with the peer when it died: {outcomes:?}"
    );
    let counted = entry.member().stats().peer_fallbacks[1] - before.peer_fallbacks[1];
    assert_eq!(counted, fallbacks as u64);
    let metrics = scrape(entry.admin_addr().unwrap());
    let series = "tokenrouter_peer_fallbacks_total{model=\"quick\",peer=\"reference\"}";
    let line = metrics
        .lines()
        .find(|l| l.starts_with(series))
        .unwrap_or_else(|| panic!("{series} missing:\n{metrics}"));
    assert_eq!(
        line,
        format!("{series} {}", counted + before.peer_fallbacks[1])
    );
    idle(&entry, &mut freed);

    // With the peer gone, new requests are written by the entry alone and
    // marked too; a restarted peer is used again.
    let u = burst(&entry, 2, 20);
    for o in &u {
        let u = o.as_ref().unwrap();
        assert_eq!(u.tokens_by_model, vec![20, 0]);
    }
    child = spawn_reference(&cfg_path);
    until_served(&entry, "after the restart");
    drop(child);
}
