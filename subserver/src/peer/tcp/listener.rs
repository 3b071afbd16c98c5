//! The inbound side: the listener, the handshake of each accepted
//! connection, and one reader thread per connection that hands its frames
//! to `deliver` in order.
//!
//! A peer that reconnects opens a new connection while its old one may
//! still hold frames; the old connection is shut down and the new reader
//! waits for the old reader to finish (one "turn" per peer model), so the
//! frames of one peer are always delivered in the order they were sent.

use std::collections::HashMap;
use std::io::{self, BufReader, Write};
use std::mem;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::peer::codec::{decode_msg, read_frame, FrameError, Handshake};
use crate::peer::message::ModelIdx;
use crate::peer::transport::{Deliver, TransportError};

/// How often the acceptor looks for new connections (and for shutdown).
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// Read buffer of a peer connection.
const READ_BUFFER: usize = 64 << 10;

/// What the acceptor and the readers share.
pub(super) struct Inbound {
    me: ModelIdx,
    n_models: usize,
    deliver: Deliver,
    handshake_timeout: Duration,
    stop: AtomicBool,
    conns: Mutex<Conns>,
    /// Held by the reader delivering a model's frames (index = model).
    turns: Vec<Mutex<()>>,
}

/// Open connections, so shutdown can close them and join their readers.
#[derive(Default)]
struct Conns {
    next_id: u64,
    streams: HashMap<u64, TcpStream>,
    /// The current connection of each peer model.
    by_model: HashMap<ModelIdx, u64>,
    readers: Vec<JoinHandle<()>>,
}

impl Inbound {
    /// Inbound state of model `me` in a group of `n_models`.
    pub(super) fn new(
        me: ModelIdx,
        n_models: usize,
        deliver: Deliver,
        handshake_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            me,
            n_models,
            deliver,
            handshake_timeout,
            stop: AtomicBool::new(false),
            conns: Mutex::new(Conns::default()),
            turns: (0..n_models).map(|_| Mutex::new(())).collect(),
        })
    }

    /// Tells the acceptor and the readers to stop (they notice within
    /// `ACCEPT_POLL`, or at their next frame).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Stops reading: every connection is shut down. Returns the reader
    /// threads to join. Call after the acceptor has exited, so no new
    /// reader appears.
    pub(super) fn close(&self) -> Vec<JoinHandle<()>> {
        self.stop();
        let mut conns = self.conns.lock();
        for s in conns.streams.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
        mem::take(&mut conns.readers)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn spawn_reader(self: &Arc<Self>, stream: TcpStream, peer: SocketAddr) -> io::Result<()> {
        // Accepted sockets may inherit the listener's non-blocking mode.
        stream.set_nonblocking(false)?;
        let handle = stream.try_clone()?;
        let mut conns = self.conns.lock();
        let (done, running): (Vec<_>, Vec<_>) = mem::take(&mut conns.readers)
            .into_iter()
            .partition(|h| h.is_finished());
        conns.readers = running;
        for h in done {
            if h.join().is_err() {
                warn!(me = self.me, "a peer reader thread panicked");
            }
        }
        let id = conns.next_id;
        conns.next_id += 1;
        conns.streams.insert(id, handle);
        let inbound = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name(format!("tr-tcp-in-{}-{id}", self.me))
            .spawn(move || inbound.serve(id, stream, peer));
        match spawned {
            Ok(h) => {
                conns.readers.push(h);
                Ok(())
            }
            Err(e) => {
                conns.streams.remove(&id);
                Err(e)
            }
        }
    }

    fn serve(&self, id: u64, stream: TcpStream, peer: SocketAddr) {
        let from = match self.handshake(&stream) {
            Ok(from) => from,
            Err(e) => {
                if !self.stopped() {
                    warn!(me = self.me, %peer, error = %e, "refused a peer connection");
                }
                self.forget(id, None);
                return;
            }
        };
        info!(me = self.me, from, %peer, "peer connected in");
        {
            let mut conns = self.conns.lock();
            if let Some(old) = conns.by_model.insert(from, id) {
                if let Some(s) = conns.streams.get(&old) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
        let turn = self.turns[usize::from(from)].lock();
        let mut reader = BufReader::with_capacity(READ_BUFFER, &stream);
        while !self.stopped() {
            match read_frame(&mut reader) {
                Ok(Some(payload)) => match decode_msg(&payload) {
                    Ok(msg) if msg.from() == from => (self.deliver)(msg),
                    Ok(msg) => {
                        warn!(
                            me = self.me,
                            from,
                            claimed = msg.from(),
                            "peer sent a message signed by another model; closing"
                        );
                        break;
                    }
                    Err(e) => {
                        warn!(me = self.me, from, error = %e, "bad frame from peer; closing");
                        break;
                    }
                },
                Ok(None) => {
                    debug!(me = self.me, from, "peer closed its connection");
                    break;
                }
                Err(e) => {
                    if !self.stopped() {
                        info!(me = self.me, from, error = %e, "peer connection lost");
                    }
                    break;
                }
            }
        }
        drop(turn);
        self.forget(id, Some(from));
    }

    /// Reads the peer's handshake, checks it, answers with ours.
    fn handshake(&self, stream: &TcpStream) -> Result<ModelIdx, FrameError> {
        stream.set_read_timeout(Some(self.handshake_timeout))?;
        stream.set_write_timeout(Some(self.handshake_timeout))?;
        let mut reader = stream;
        let payload = read_frame(&mut reader)?.ok_or_else(|| {
            TransportError::Codec("connection closed before the handshake".into())
        })?;
        let theirs = Handshake::decode(&payload)?;
        if usize::from(theirs.model) >= self.n_models || theirs.model == self.me {
            return Err(TransportError::Codec(format!(
                "model index {} is not a peer of model {} (group of {})",
                theirs.model, self.me, self.n_models
            ))
            .into());
        }
        (&*stream).write_all(&Handshake::new(self.me).encode())?;
        stream.set_read_timeout(None)?;
        stream.set_write_timeout(None)?;
        Ok(theirs.model)
    }

    fn forget(&self, id: u64, model: Option<ModelIdx>) {
        let mut conns = self.conns.lock();
        if let Some(s) = conns.streams.remove(&id) {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(m) = model {
            if conns.by_model.get(&m) == Some(&id) {
                conns.by_model.remove(&m);
            }
        }
    }
}

/// Starts the thread accepting peer connections on `listener`.
pub(super) fn spawn_acceptor(
    inbound: Arc<Inbound>,
    listener: TcpListener,
) -> io::Result<JoinHandle<()>> {
    // Polled, so the thread notices shutdown without a wake-up connection.
    listener.set_nonblocking(true)?;
    thread::Builder::new()
        .name(format!("tr-tcp-accept-{}", inbound.me))
        .spawn(move || {
            while !inbound.stopped() {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        if let Err(e) = inbound.spawn_reader(stream, peer) {
                            warn!(me = inbound.me, %peer, error = %e, "cannot serve a peer connection");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(ACCEPT_POLL)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        warn!(me = inbound.me, error = %e, "accept failed");
                        thread::sleep(ACCEPT_POLL);
                    }
                }
            }
        })
}
