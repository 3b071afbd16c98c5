//! Loopback tests of the TCP transport: real sockets on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::peer::codec::{read_frame, Handshake, PROTOCOL_VERSION};
use crate::peer::message::{PeerReq, Rid};

// Deadline of every wait (test-support's): only a hang reaches it; the
// tests wait on events, never on elapsed time.
use test_support::HANG;

/// Shutdown grace of the tests: a thread still running after it ignored
/// the stop (the tests that check stops give it far longer work than this).
const GRACE: Duration = Duration::from_secs(20);

/// Test timings: short backoff so reconnects happen within a test.
fn opts() -> TcpOptions {
    TcpOptions {
        connect_timeout: Duration::from_millis(500),
        reconnect_backoff_min: Duration::from_millis(10),
        reconnect_backoff_max: Duration::from_millis(100),
        probe_interval: Duration::from_millis(20),
        bind: None,
        shutdown_grace: GRACE,
    }
}

/// A free loopback port: bound then released (the listener sets
/// SO_REUSEADDR, so the transport can take it right after).
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A deliver callback feeding a channel the test reads.
fn collector() -> (Deliver, Receiver<PeerMsg>) {
    let (tx, rx) = mpsc::channel();
    let deliver: Deliver = Arc::new(move |m| {
        let _ = tx.send(m);
    });
    (deliver, rx)
}

/// Message `i` from `from` to `to`: all variants, varied contents.
fn msg(from: ModelIdx, to: ModelIdx, i: u64) -> PeerMsg {
    match i % 3 {
        0 => PeerMsg::Req(PeerReq {
            rid: i,
            from,
            to,
            loc: (i % 1000) as u32,
            tokens: (0..(i % 17) as u32).map(|t| t * 7919 + i as u32).collect(),
            finished: i % 4 < 2,
            budget: (i % 300) as u32,
            n_active: (i % 11) as u32,
            meta: None,
            logprobs: vec![],
            next: None,
        }),
        1 => PeerMsg::Release {
            rid: i,
            from,
            n_active: (i % 5) as u32,
        },
        _ => PeerMsg::Failed {
            rid: i,
            from,
            reason: format!("reason {i}"),
        },
    }
}

/// Receives `n` messages and checks they are `expected(0..n)` in order.
fn expect_in_order(
    rx: &Receiver<PeerMsg>,
    expected: impl Iterator<Item = PeerMsg>,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    for (k, want) in expected.enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let got = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("message #{k} ({:?}) not delivered: {e}", want.rid()));
        assert_eq!(got, want, "message #{k}");
    }
}

fn wait_until(what: &str, within: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

fn pair() -> (
    TcpTransport,
    Receiver<PeerMsg>,
    TcpTransport,
    Receiver<PeerMsg>,
) {
    let addrs = vec![free_addr(), free_addr()];
    let (da, ra) = collector();
    let (db, rb) = collector();
    let a = TcpTransport::start(0, addrs.clone(), da, opts()).unwrap();
    let b = TcpTransport::start(1, addrs, db, opts()).unwrap();
    (a, ra, b, rb)
}

#[test]
fn ten_thousand_messages_arrive_in_order() {
    let (a, _ra, _b, rb) = pair();
    for i in 0..10_000 {
        a.send(1, msg(0, 1, i)).unwrap();
    }
    expect_in_order(&rb, (0..10_000).map(|i| msg(0, 1, i)), HANG);
    assert!(a.is_up(1));
    wait_until("the queue drains", HANG, || a.queued(1) == 0);
    assert!(rb.try_recv().is_err(), "no extra message");
}

#[test]
fn both_directions_at_once() {
    let (a, ra, b, rb) = pair();
    let (a, b) = (Arc::new(a), Arc::new(b));
    let senders: Vec<_> = [(Arc::clone(&a), 0u16, 1u16), (Arc::clone(&b), 1, 0)]
        .into_iter()
        .map(|(t, from, to)| {
            thread::spawn(move || {
                for i in 0..10_000 {
                    t.send(to, msg(from, to, i)).unwrap();
                }
            })
        })
        .collect();
    let at_a = thread::spawn(move || expect_in_order(&ra, (0..10_000).map(|i| msg(1, 0, i)), HANG));
    expect_in_order(&rb, (0..10_000).map(|i| msg(0, 1, i)), HANG);
    at_a.join().unwrap();
    for s in senders {
        s.join().unwrap();
    }
}

#[test]
fn queued_messages_wait_for_a_late_peer() {
    let addrs = vec![free_addr(), free_addr()];
    let (da, _ra) = collector();
    let a = TcpTransport::start(0, addrs.clone(), da, opts()).unwrap();
    // Whether the first connect has failed yet is a race (a loaded machine
    // may fail it before we look), so only the outcome is checked.
    for i in 0..100 {
        a.send(1, msg(0, 1, i)).unwrap();
    }
    wait_until("model 1 is seen down", HANG, || !a.is_up(1));
    assert_eq!(a.queued(1), 100);

    let (db, rb) = collector();
    let b = TcpTransport::start(1, addrs, db, opts()).unwrap();
    expect_in_order(&rb, (0..100).map(|i| msg(0, 1, i)), HANG);
    assert!(a.is_up(1));
    assert_eq!(a.queued(1), 0);
    drop(b);
}

#[test]
fn reconnects_to_a_restarted_peer() {
    let addrs = vec![free_addr(), free_addr()];
    let (da, _ra) = collector();
    let a = TcpTransport::start(0, addrs.clone(), da, opts()).unwrap();
    let (db, rb) = collector();
    let b = TcpTransport::start(1, addrs.clone(), db, opts()).unwrap();
    for i in 0..50 {
        a.send(1, msg(0, 1, i)).unwrap();
    }
    expect_in_order(&rb, (0..50).map(|i| msg(0, 1, i)), HANG);

    drop(b);
    // The idle connection is probed: the restart is noticed without sending.
    wait_until("model 1 is seen down", HANG, || !a.is_up(1));

    let (db, rb) = collector();
    let b = TcpTransport::start(1, addrs, db, opts()).unwrap();
    // Sent while A may still be backing off: queued, then delivered.
    for i in 50..100 {
        a.send(1, msg(0, 1, i)).unwrap();
    }
    expect_in_order(&rb, (50..100).map(|i| msg(0, 1, i)), HANG);
    assert!(a.is_up(1));
    drop(b);
}

#[test]
fn a_slow_peer_never_blocks_send() {
    let addrs = vec![free_addr(), free_addr()];
    let (da, _ra) = collector();
    let a = TcpTransport::start(0, addrs.clone(), da, opts()).unwrap();
    // B's deliver blocks until the gate opens, so B stops reading; the gate
    // opens only after every send below returned, so a send that waited
    // on the network would never return (caught by the deadline).
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    let (tx, rb) = mpsc::channel();
    let deliver: Deliver = Arc::new(move |m| {
        let _ = gate_rx.lock().recv();
        let _ = tx.send(m);
    });
    let b = TcpTransport::start(1, addrs, deliver, opts()).unwrap();

    // ~26 MB of tokens: more than the socket buffers hold, so A's writer
    // is stuck on the unread socket.
    let big = |i: u64| {
        PeerMsg::Req(PeerReq {
            rid: i,
            from: 0,
            to: 1,
            loc: 0,
            tokens: vec![0x0fff_ffff; 1 << 15],
            finished: false,
            budget: 1,
            n_active: 1,
            meta: None,
            logprobs: vec![],
            next: None,
        })
    };
    let a = Arc::new(a);
    let (done_tx, done_rx) = mpsc::channel();
    let sender = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            for i in 0..200 {
                a.send(1, big(i)).unwrap();
            }
            for i in 200..1200 {
                a.send(1, msg(0, 1, i)).unwrap();
            }
            let _ = done_tx.send(());
        })
    };
    done_rx
        .recv_timeout(HANG)
        .expect("send blocked while the peer was not reading");
    sender.join().unwrap();
    // Nothing past the big frames can have left: they fill the buffers.
    assert!(a.queued(1) >= 1000, "queued {}", a.queued(1));

    // Open the gate: everything arrives, in order.
    drop(gate_tx);
    let expected = (0..200).map(big).chain((200..1200).map(|i| msg(0, 1, i)));
    expect_in_order(&rb, expected, HANG);
    drop(b);
}

#[test]
fn drop_with_a_dead_peer_is_prompt() {
    let addrs = vec![free_addr(), free_addr(), free_addr()];
    let (da, _ra) = collector();
    // Backing off far longer than the grace: a writer that slept through
    // the stop would be left running.
    let long_backoff = TcpOptions {
        reconnect_backoff_min: 3 * GRACE,
        reconnect_backoff_max: 3 * GRACE,
        ..opts()
    };
    let a = TcpTransport::start(0, addrs, da, long_backoff).unwrap();
    for i in 0..1000 {
        a.send(1, msg(0, 1, i)).unwrap();
        a.send(2, msg(0, 2, i)).unwrap();
    }
    wait_until("both peers are seen down", HANG, || {
        !a.is_up(1) && !a.is_up(2)
    });
    assert_eq!(a.stop(), 0, "a thread ignored the stop");
}

#[test]
fn drop_while_a_peer_never_answers_the_handshake_is_prompt() {
    // A socket that accepts connections but never speaks.
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = vec![free_addr(), mute.local_addr().unwrap()];
    let (da, _ra) = collector();
    // The handshake wait is far longer than the grace.
    let slow = TcpOptions {
        connect_timeout: 3 * GRACE,
        ..opts()
    };
    let a = TcpTransport::start(0, addrs, da, slow).unwrap();
    a.send(1, msg(0, 1, 0)).unwrap();
    // The writer is connected and waits for the answer.
    let (_conn, _) = mute.accept().unwrap();
    assert_eq!(a.stop(), 0, "the writer ignored the stop in its handshake");
}

#[test]
fn send_errors_are_precise() {
    let (a, _ra, b, _rb) = pair();
    assert!(matches!(
        a.send(0, msg(0, 0, 1)),
        Err(TransportError::Unreachable(0, _))
    ));
    assert!(matches!(
        a.send(7, msg(0, 7, 1)),
        Err(TransportError::Unreachable(7, _))
    ));
    assert!(!a.is_up(7) && !a.is_up(0));
    assert_eq!(a.queued(7), 0);
    assert!(matches!(
        a.send(1, msg(1, 1, 1)),
        Err(TransportError::Codec(_))
    ));
    let huge = PeerMsg::Failed {
        rid: 3,
        from: 0,
        reason: "x".repeat(65 << 20),
    };
    assert!(matches!(a.send(1, huge), Err(TransportError::Codec(_))));
    a.shutdown();
    assert_eq!(a.send(1, msg(0, 1, 2)), Err(TransportError::Closed));
    drop(b);
}

#[test]
fn address_in_use_is_named() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let (d, _r) = collector();
    let err = TcpTransport::start(0, vec![addr, free_addr()], d, opts())
        .err()
        .unwrap();
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    let (d, _r) = collector();
    let err = TcpTransport::start(2, vec![addr], d, opts()).err().unwrap();
    assert!(matches!(err, TransportError::Unreachable(2, _)), "{err}");
}

#[test]
fn bind_override_and_resolution() {
    let listen = free_addr();
    let addrs = resolve_addresses(&["localhost:1".into(), listen.to_string()]).unwrap();
    assert_eq!(addrs[1], listen);
    assert_eq!(addrs[0].port(), 1);
    let err = resolve_addresses(&["no port".into()]).unwrap_err();
    assert!(peer_addresses(&["no port".into()]).is_err());
    assert!(peer_addresses(&["a-0.a.ns.svc:7000".into(), "[::1]:7".into()]).is_ok());
    assert!(err.to_string().contains("no port"), "{err}");

    // Model 0 listens on the bind address, not on its (unusable) entry.
    let (d0, r0) = collector();
    let a = TcpTransport::start(
        0,
        vec!["127.0.0.1:1".parse().unwrap(), free_addr()],
        d0,
        TcpOptions {
            bind: Some(listen),
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(a.local_addr(), listen);
    let (d1, _r1) = collector();
    let b = TcpTransport::start(1, vec![listen, free_addr()], d1, opts()).unwrap();
    b.send(0, msg(1, 0, 9)).unwrap();
    expect_in_order(&r0, std::iter::once(msg(1, 0, 9)), HANG);
}

/// Connects as a raw client, sends `hello`, returns what the server answers
/// before closing (the handshake, or nothing).
fn raw_hello(addr: SocketAddr, hello: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    s.write_all(hello).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    answer
}

#[test]
fn strangers_and_other_versions_are_refused() {
    let (a, _ra, b, rb) = pair();
    let at = b.local_addr();

    let mut other_version = Handshake::new(0).encode();
    other_version[8..10].copy_from_slice(&(PROTOCOL_VERSION + 1).to_be_bytes());
    for hello in [
        other_version,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        Handshake::new(1).encode(), // B's own index
        Handshake::new(5).encode(), // not in the group
        vec![0, 0, 0, 2, 1],        // truncated
    ] {
        assert!(raw_hello(at, &hello).is_empty(), "{hello:?} was answered");
    }

    // A proper handshake is answered with B's, and a garbage frame after it
    // closes the connection without delivering anything.
    let mut hello = Handshake::new(0).encode();
    hello.extend([0, 0, 0, 3, 0xff, 0xff, 0xff]);
    let answer = raw_hello(at, &hello);
    let payload = read_frame(&mut answer.as_slice()).unwrap().unwrap();
    assert_eq!(Handshake::decode(&payload).unwrap().model, 1);

    // B still serves its real peer, and nothing else was delivered.
    a.send(1, msg(0, 1, 1)).unwrap();
    expect_in_order(&rb, std::iter::once(msg(0, 1, 1)), HANG);
    assert!(rb.try_recv().is_err());
}

#[test]
fn a_wrong_model_at_an_address_is_down() {
    // A believes model 2 lives where model 1 listens.
    let (a_addr, b_addr) = (free_addr(), free_addr());
    let (da, _ra) = collector();
    let a = TcpTransport::start(0, vec![a_addr, b_addr, b_addr], da, opts()).unwrap();
    let (db, rb) = collector();
    let _b = TcpTransport::start(1, vec![a_addr, b_addr, free_addr()], db, opts()).unwrap();
    a.send(2, msg(0, 2, 1)).unwrap();
    wait_until("model 2 is seen down", HANG, || !a.is_up(2));
    assert_eq!(a.queued(2), 1);
    assert!(rb.recv_timeout(Duration::from_millis(100)).is_err());
}

#[test]
fn release_follows_the_hand_overs_before_it() {
    let (a, _ra, _b, rb) = pair();
    let rids: Vec<Rid> = (0..200).collect();
    let mut sent = Vec::new();
    for &rid in &rids {
        let m = msg(0, 1, rid * 3); // a Req
        a.send(1, m.clone()).unwrap();
        sent.push(m);
        let release = PeerMsg::Release {
            rid: rid * 3,
            from: 0,
            n_active: 1,
        };
        a.send(1, release.clone()).unwrap();
        sent.push(release);
    }
    expect_in_order(&rb, sent.into_iter(), HANG);
}

#[test]
fn shutdown_joins_every_thread_promptly() {
    // Connections both ways, so each side has a writer and a reader busy.
    let (a, ra, b, rb) = pair();
    a.send(1, msg(0, 1, 1)).unwrap();
    b.send(0, msg(1, 0, 2)).unwrap();
    expect_in_order(&rb, std::iter::once(msg(0, 1, 1)), HANG);
    expect_in_order(&ra, std::iter::once(msg(1, 0, 2)), HANG);
    let b_addr = b.local_addr();
    // Every thread noticed the stop: none was left for the grace to cut.
    for t in [a, b] {
        assert_eq!(t.stop(), 0, "threads left running");
    }
    // The listener is closed: its address can be taken again.
    TcpListener::bind(b_addr).unwrap();
}
