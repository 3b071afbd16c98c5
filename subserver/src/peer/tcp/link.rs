//! The outbound side of one peer: an unbounded queue of encoded frames and
//! the writer thread that owns the one connection to that peer.
//!
//! Delivery is at most once: a frame taken off the queue is written once.
//! When a write fails, the frames of which no byte was written go back to
//! the front of the queue (in order) and are sent on the next connection;
//! the frame that was cut mid-way, and the ones the kernel had already
//! accepted, are never sent again (the peer may have them). Order is kept:
//! frames leave the queue front first over a single connection at a time.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tracing::{debug, info, warn};

use crate::peer::codec::{read_frame, FrameError, Handshake};
use crate::peer::message::ModelIdx;
use crate::peer::transport::TransportError;

use super::peer_addr::PeerAddr;

/// How often a blocked socket call comes back to check for shutdown.
pub(super) const IO_POLL: Duration = Duration::from_millis(100);

/// Most bytes written per batch (one `write` loop between queue visits).
const MAX_BATCH_BYTES: usize = 1 << 20;

/// No connection attempt yet: assumed reachable.
const STATE_UNKNOWN: u8 = 0;
/// Connected and handshaken.
const STATE_UP: u8 = 1;
/// The last attempt failed, or the connection broke.
const STATE_DOWN: u8 = 2;

/// Timing of a writer thread.
#[derive(Debug, Clone, Copy)]
pub(super) struct LinkTiming {
    /// Bound on a connect and on the handshake answer.
    pub connect_timeout: Duration,
    /// First delay before retrying a failed connect.
    pub backoff_min: Duration,
    /// Largest delay between attempts (the delay doubles up to it).
    pub backoff_max: Duration,
    /// How often an idle connection is checked for a closed peer.
    pub probe_interval: Duration,
}

/// The queue to one peer, shared by `send` and the writer thread.
pub(super) struct Link {
    me: ModelIdx,
    to: ModelIdx,
    /// Resolved again at every connect (a recreated pod has a new IP).
    addr: PeerAddr,
    frames: Mutex<VecDeque<Vec<u8>>>,
    wake: Condvar,
    closed: AtomicBool,
    /// Frames accepted by `push` and not yet written (or dropped).
    queued: AtomicUsize,
    state: AtomicU8,
    /// Successful connects so far, sent on each one.
    connects: tokio::sync::watch::Sender<u64>,
}

impl Link {
    /// A link from `me` to model `to` listening at `addr`.
    pub(super) fn new(me: ModelIdx, to: ModelIdx, addr: PeerAddr) -> Self {
        Self {
            me,
            to,
            addr,
            frames: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            state: AtomicU8::new(STATE_UNKNOWN),
            connects: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Fires on every successful (re)connect, handshake done.
    pub(super) fn connects(&self) -> tokio::sync::watch::Receiver<u64> {
        self.connects.subscribe()
    }

    /// Queues one encoded frame; never blocks on the network.
    pub(super) fn push(&self, frame: Vec<u8>) -> Result<(), TransportError> {
        let mut frames = self.frames.lock();
        // Checked under the lock so no frame slips in after `close` drained.
        if self.closed.load(Ordering::Acquire) {
            return Err(TransportError::Closed);
        }
        frames.push_back(frame);
        self.queued.fetch_add(1, Ordering::Relaxed);
        drop(frames);
        self.wake.notify_one();
        Ok(())
    }

    /// False once a connect failed or the connection broke, until the next
    /// successful connect.
    pub(super) fn is_up(&self) -> bool {
        self.state.load(Ordering::Acquire) != STATE_DOWN
    }

    /// Messages accepted and not yet written to the socket.
    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Stops the writer: queued frames are dropped.
    pub(super) fn close(&self) {
        let frames = self.frames.lock();
        self.closed.store(true, Ordering::Release);
        drop(frames);
        self.wake.notify_all();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn set_up(&self) {
        if self.state.swap(STATE_UP, Ordering::AcqRel) != STATE_UP {
            info!(me = self.me, to = self.to, addr = %self.addr, "peer connected");
        }
        self.connects.send_modify(|n| *n += 1);
    }

    fn set_down(&self, reason: &str) {
        if self.state.swap(STATE_DOWN, Ordering::AcqRel) != STATE_DOWN {
            warn!(me = self.me, to = self.to, addr = %self.addr, %reason, "peer down");
        } else {
            debug!(me = self.me, to = self.to, %reason, "peer still down");
        }
    }

    /// Puts unwritten frames back at the front, keeping their order.
    fn requeue(&self, unwritten: Vec<Vec<u8>>) {
        let mut frames = self.frames.lock();
        for f in unwritten.into_iter().rev() {
            frames.push_front(f);
        }
    }

    /// Forgets `n` frames (written or lost) in the `queued` count.
    fn settle(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::Relaxed);
    }

    /// Waits up to `d`, returning early only on `close`.
    fn sleep(&self, d: Duration) {
        let deadline = Instant::now() + d;
        let mut frames = self.frames.lock();
        while !self.is_closed() && !self.wake.wait_until(&mut frames, deadline).timed_out() {}
    }

    /// Blocks until there is something to do.
    fn next_step(&self, connected: bool, active: bool, probe: Duration) -> Step {
        let mut frames = self.frames.lock();
        loop {
            if self.is_closed() {
                let dropped = frames.len();
                frames.clear();
                return Step::Stop { dropped };
            }
            if !frames.is_empty() {
                if !connected {
                    return Step::Connect;
                }
                let mut batch = Vec::new();
                let mut bytes = 0;
                while let Some(f) = frames.front() {
                    if !batch.is_empty() && bytes + f.len() > MAX_BATCH_BYTES {
                        break;
                    }
                    bytes += f.len();
                    batch.extend(frames.pop_front());
                }
                return Step::Write(batch);
            }
            if !connected && active {
                // Keep reconnecting while idle so `is_up` recovers.
                return Step::Connect;
            }
            if connected {
                if self.wake.wait_for(&mut frames, probe).timed_out() && frames.is_empty() {
                    return Step::Probe;
                }
            } else {
                self.wake.wait(&mut frames);
            }
        }
    }
}

enum Step {
    Stop { dropped: usize },
    Connect,
    Probe,
    Write(Vec<Vec<u8>>),
}

/// Starts the writer thread of `link`.
pub(super) fn spawn_writer(link: Arc<Link>, timing: LinkTiming) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("tr-tcp-out-{}-{}", link.me, link.to))
        .spawn(move || run_writer(&link, timing))
}

fn run_writer(link: &Link, timing: LinkTiming) {
    let mut conn: Option<TcpStream> = None;
    // Lazy: the first connect waits for the first message.
    let mut active = false;
    let mut backoff = timing.backoff_min;
    loop {
        match link.next_step(conn.is_some(), active, timing.probe_interval) {
            Step::Stop { dropped } => {
                link.settle(dropped);
                if dropped > 0 {
                    warn!(
                        me = link.me,
                        to = link.to,
                        dropped,
                        "transport shut down with messages still queued"
                    );
                }
                break;
            }
            Step::Connect => {
                active = true;
                match connect(link, timing.connect_timeout) {
                    Ok(stream) => {
                        conn = Some(stream);
                        backoff = timing.backoff_min;
                        link.set_up();
                    }
                    Err(_) if link.is_closed() => {}
                    Err(e) => {
                        link.set_down(&e.to_string());
                        link.sleep(backoff);
                        backoff = (backoff * 2).min(timing.backoff_max);
                    }
                }
            }
            Step::Probe => {
                if let Some(reason) = conn.as_ref().and_then(broken) {
                    conn = None;
                    link.set_down(&reason);
                }
            }
            Step::Write(batch) => {
                let Some(stream) = conn.as_ref() else {
                    link.requeue(batch);
                    continue;
                };
                // A peer that closed (restarted) is caught before writing
                // into a dead socket, so nothing is lost in that case.
                if let Some(reason) = broken(stream) {
                    link.requeue(batch);
                    conn = None;
                    link.set_down(&reason);
                    continue;
                }
                let n = batch.len();
                match write_batch(stream, &batch, &link.closed) {
                    Ok(()) => link.settle(n),
                    Err(WriteFailure {
                        first_unwritten,
                        error,
                    }) => {
                        let unwritten: Vec<Vec<u8>> =
                            batch.into_iter().skip(first_unwritten).collect();
                        link.settle(n - unwritten.len());
                        if link.is_closed() {
                            link.settle(unwritten.len());
                            break;
                        }
                        // Frames before `first_unwritten` reached the kernel
                        // (or partly did): they may or may not arrive.
                        debug!(to = link.to, maybe_lost = first_unwritten, "write failed");
                        link.requeue(unwritten);
                        let _ = stream.shutdown(Shutdown::Both);
                        conn = None;
                        link.set_down(&format!("write failed: {error}"));
                    }
                }
            }
        }
    }
    if let Some(stream) = conn {
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// Connects to the peer and exchanges handshakes; the answer must come
/// from the expected model in our protocol version.
fn connect(link: &Link, timeout: Duration) -> Result<TcpStream, TransportError> {
    let to = link.to;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        TransportError::Unreachable(to, format!("{what} {}: {e}", link.addr))
    };
    let addr = link
        .addr
        .resolve()
        .map_err(|e| TransportError::Unreachable(to, e))?;
    let stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| fail("cannot connect to", &e))?;
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(timeout))?;
        (&*s).write_all(&Handshake::new(link.me).encode())?;
        // Short slices so `close` is noticed while waiting for the answer.
        s.set_read_timeout(Some(IO_POLL))?;
        s.set_write_timeout(Some(IO_POLL))
    };
    setup(&stream).map_err(|e| fail("handshake with", &e))?;
    let answer = wait_handshake(link, &stream, Instant::now() + timeout)?;
    if answer.model != to {
        let _ = stream.shutdown(Shutdown::Both);
        return Err(fail(
            "wrong peer at",
            &format!("it is model {}, expected model {to}", answer.model),
        ));
    }
    Ok(stream)
}

/// Bytes of a handshake frame.
const HANDSHAKE_FRAME: usize = 12;

fn wait_handshake(
    link: &Link,
    stream: &TcpStream,
    deadline: Instant,
) -> Result<Handshake, TransportError> {
    let to = link.to;
    let fail =
        |e: String| TransportError::Unreachable(to, format!("handshake with {}: {e}", link.addr));
    // Peek until the whole answer is there, so the read below cannot time
    // out half-way through it.
    let mut probe = [0u8; HANDSHAKE_FRAME];
    loop {
        if link.is_closed() {
            return Err(TransportError::Closed);
        }
        if Instant::now() >= deadline {
            return Err(fail("no answer in time".into()));
        }
        match stream.peek(&mut probe) {
            Ok(0) => {
                return Err(fail(
                    "the peer closed the connection (protocol version or model index refused?)"
                        .into(),
                ))
            }
            Ok(n) if n >= HANDSHAKE_FRAME => break,
            Ok(_) => thread::sleep(Duration::from_millis(1)),
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    let mut reader = stream;
    match read_frame(&mut reader) {
        Ok(Some(payload)) => Handshake::decode(&payload).map_err(|e| fail(e.to_string())),
        Ok(None) => Err(fail("connection closed".into())),
        Err(FrameError::Io(e)) => Err(fail(e.to_string())),
        Err(FrameError::Bad(e)) => Err(fail(e.to_string())),
    }
}

/// Why an established connection is unusable, if it is: the peer never
/// writes after its handshake, so readable means closed (or misbehaving).
fn broken(stream: &TcpStream) -> Option<String> {
    if let Err(e) = stream.set_nonblocking(true) {
        return Some(e.to_string());
    }
    let mut byte = [0u8; 1];
    let verdict = match stream.peek(&mut byte) {
        Ok(0) => Some("the peer closed the connection".to_string()),
        Ok(_) => Some("the peer sent unexpected bytes".to_string()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(e.to_string()),
    };
    if let Err(e) = stream.set_nonblocking(false) {
        return Some(e.to_string());
    }
    verdict
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

struct WriteFailure {
    /// Index of the first frame of which no byte was written.
    first_unwritten: usize,
    error: io::Error,
}

/// Writes the frames back to back. The socket's write timeout is short, so
/// a peer that stops reading keeps us here only until `closed`.
fn write_batch(
    mut stream: &TcpStream,
    batch: &[Vec<u8>],
    closed: &AtomicBool,
) -> Result<(), WriteFailure> {
    let buf = batch.concat();
    let mut off = 0;
    let fail = |off: usize, error: io::Error| {
        // Frames starting at or after `off` were not touched.
        let mut start = 0;
        let mut first_unwritten = batch.len();
        for (i, f) in batch.iter().enumerate() {
            if start >= off {
                first_unwritten = i;
                break;
            }
            start += f.len();
        }
        WriteFailure {
            first_unwritten,
            error,
        }
    };
    while off < buf.len() {
        if closed.load(Ordering::Acquire) {
            return Err(fail(off, io::Error::other("transport closed")));
        }
        match stream.write(&buf[off..]) {
            Ok(0) => return Err(fail(off, io::ErrorKind::WriteZero.into())),
            Ok(n) => off += n,
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(fail(off, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn failed_write_keeps_only_untouched_frames() {
        // A connection whose far end is gone: the write fails at byte 0 or
        // after what the kernel took; either way untouched frames survive.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (far, _) = listener.accept().unwrap();
        drop(far);
        stream.shutdown(Shutdown::Write).unwrap();
        let batch = vec![vec![1u8; 10], vec![2u8; 10], vec![3u8; 10]];
        let closed = AtomicBool::new(false);
        let err = write_batch(&stream, &batch, &closed).err().unwrap();
        assert_eq!(err.first_unwritten, 0, "{}", err.error);
    }

    // Deadline that only a hang reaches (test-support's).
    use test_support::HANG;

    #[test]
    fn closed_flag_stops_a_blocked_write() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (far, _) = listener.accept().unwrap(); // never reads
        stream.set_write_timeout(Some(IO_POLL)).unwrap();
        // 64 MB: more than the socket buffers take, so the write blocks
        // until the flag is seen (a write that ignored it never returns).
        let batch: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 1 << 20]).collect();
        let closed = Arc::new(AtomicBool::new(false));
        let flag = closed.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = thread::spawn(move || {
            let _ = tx.send(write_batch(&stream, &batch, &flag).err());
        });
        // Close only once bytes flow.
        far.set_read_timeout(Some(HANG)).unwrap();
        assert!(far.peek(&mut [0u8; 1]).unwrap() > 0);
        closed.store(true, Ordering::Release);
        let err = rx
            .recv_timeout(HANG)
            .expect("the write did not notice the closed flag")
            .expect("the write cannot finish: nothing reads");
        writer.join().unwrap();
        // The kernel took a prefix; the frames after it are intact.
        assert!(err.first_unwritten > 0 && err.first_unwritten < 64);
    }

    #[test]
    fn broken_sees_a_closed_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (far, _) = listener.accept().unwrap();
        assert_eq!(broken(&stream), None);
        drop(far);
        let deadline = Instant::now() + HANG;
        while broken(&stream).is_none() {
            assert!(Instant::now() < deadline, "close not seen");
            thread::sleep(Duration::from_millis(5));
        }
    }
}
