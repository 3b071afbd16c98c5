//! TCP transport: each model's subserver listens on its own address and
//! keeps one outbound connection to every peer it writes to.
//!
//! `send` encodes the message and appends it to the peer's unbounded queue;
//! it never touches the network, so a GPU-stepping scheduler thread never
//! waits on a slow or dead peer. One writer thread per peer owns the single
//! connection to it (so its messages arrive in send order), connects on the
//! first message, reconnects with exponential backoff, and delivers each
//! message at most once (see `link`). A `PeerMsg::Release` is an ordinary
//! message, so it always arrives after the hand-overs sent before it.
//!
//! `is_up(to)` is true until a connect to `to` fails or its connection is
//! seen broken (idle connections are probed every `probe_interval`), and
//! true again once a reconnect succeeds; after the first message the writer
//! keeps retrying even with an empty queue, so it recovers within
//! `reconnect_backoff_max` of the peer coming back.

mod link;
mod listener;
pub mod peer_addr;
#[cfg(test)]
mod tests;

pub use peer_addr::{wait_resolvable, PeerAddr};

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{info, warn};

use crate::config::TcpTransport as TcpTransportConfig;
use crate::peer::codec::encode_msg;
use crate::peer::message::{ModelIdx, PeerMsg};
use crate::peer::transport::{Deliver, PeerSender, TransportError};

use link::{Link, LinkTiming};
use listener::Inbound;

/// Tuning of a [`TcpTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpOptions {
    /// Bound on one connect attempt, handshake included (also how long an
    /// accepted connection may take to introduce itself).
    pub connect_timeout: Duration,
    /// Delay before the first retry after a failed connect.
    pub reconnect_backoff_min: Duration,
    /// The retry delay doubles up to this.
    pub reconnect_backoff_max: Duration,
    /// How often an idle connection is checked for a closed peer (so
    /// `is_up` turns false without waiting for the next message).
    pub probe_interval: Duration,
    /// Listen here instead of on our own entry of the addresses (e.g.
    /// `0.0.0.0:port` in a pod whose address is a service name).
    pub bind: Option<SocketAddr>,
    /// How long shutdown waits for threads before leaving the stragglers
    /// (stuck in a connect or in the deliver callback) to exit on their own.
    pub shutdown_grace: Duration,
}

impl Default for TcpOptions {
    fn default() -> Self {
        Self {
            // The config's `connect_timeout_ms` default.
            connect_timeout: Duration::from_secs(2),
            reconnect_backoff_min: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(2),
            probe_interval: Duration::from_millis(200),
            bind: None,
            shutdown_grace: Duration::from_secs(1),
        }
    }
}

impl TcpOptions {
    /// Defaults with the config's connect timeout.
    pub fn from_config(cfg: &TcpTransportConfig) -> Self {
        Self {
            connect_timeout: cfg.connect_timeout(),
            ..Self::default()
        }
    }
}

/// The `host:port` addresses (index = model) as [`PeerAddr`]s, resolved at
/// each connect; an error names an entry that is not `host:port`.
pub fn peer_addresses(addresses: &[String]) -> Result<Vec<PeerAddr>, TransportError> {
    addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let model = ModelIdx::try_from(i).unwrap_or(ModelIdx::MAX);
            match a.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    Ok(PeerAddr::new(a))
                }
                _ => Err(TransportError::Unreachable(
                    model,
                    format!("`{a}` is not host:port"),
                )),
            }
        })
        .collect()
}

/// Resolves `host:port` addresses (index = model) to socket addresses (the
/// first each name resolves to); an error names the address that does not
/// resolve.
pub fn resolve_addresses(addresses: &[String]) -> Result<Vec<SocketAddr>, TransportError> {
    addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let model = ModelIdx::try_from(i).unwrap_or(ModelIdx::MAX);
            a.to_socket_addrs()
                .map_err(|e| e.to_string())
                .and_then(|mut it| it.next().ok_or_else(|| "no address".to_string()))
                .map_err(|e| TransportError::Unreachable(model, format!("cannot resolve {a}: {e}")))
        })
        .collect()
}

/// The TCP transport of one model. Dropping it (or `shutdown`) stops its
/// threads and closes its sockets; messages still queued are dropped.
pub struct TcpTransport {
    me: ModelIdx,
    local_addr: SocketAddr,
    /// Index = model; `None` at our own index.
    links: Vec<Option<Arc<Link>>>,
    inbound: Arc<Inbound>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
    writers: Mutex<Vec<JoinHandle<()>>>,
    grace: Duration,
}

impl TcpTransport {
    /// Listens on `addresses[me]` (or `opts.bind`), hands every message
    /// from a peer to `deliver` (in the order that peer sent them), and
    /// starts one writer per peer. Fails when the address cannot be bound.
    pub fn start<A: Into<PeerAddr>>(
        me: ModelIdx,
        addresses: Vec<A>,
        deliver: Deliver,
        opts: TcpOptions,
    ) -> Result<Self, TransportError> {
        let addresses: Vec<PeerAddr> = addresses.into_iter().map(Into::into).collect();
        let n = addresses.len();
        let Some(own) = addresses.get(usize::from(me)) else {
            return Err(TransportError::Unreachable(
                me,
                format!("no address for this model among the {n} given"),
            ));
        };
        if n > usize::from(ModelIdx::MAX) + 1 {
            return Err(TransportError::Unreachable(
                me,
                format!(
                    "{n} addresses: a group has at most {} models",
                    u32::from(ModelIdx::MAX) + 1
                ),
            ));
        }
        let bind = match opts.bind {
            Some(bind) => bind,
            None => own
                .resolve()
                .map_err(|e| TransportError::Unreachable(me, e))?,
        };
        let listener = TcpListener::bind(bind).map_err(|e| {
            TransportError::Unreachable(me, format!("cannot listen on {bind}: {e}"))
        })?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| TransportError::Unreachable(me, format!("listener on {bind}: {e}")))?;
        let links: Vec<Option<Arc<Link>>> = addresses
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let to = i as ModelIdx; // n checked above
                (to != me).then(|| Arc::new(Link::new(me, to, addr.clone())))
            })
            .collect();
        let transport = Self {
            me,
            local_addr,
            links,
            inbound: Inbound::new(me, n, deliver, opts.connect_timeout),
            acceptor: Mutex::new(None),
            writers: Mutex::new(Vec::new()),
            grace: opts.shutdown_grace,
        };
        // From here on an error drops `transport`, which stops what started.
        let spawn_failed = |e: std::io::Error| {
            TransportError::Unreachable(me, format!("cannot start a thread: {e}"))
        };
        *transport.acceptor.lock() = Some(
            listener::spawn_acceptor(Arc::clone(&transport.inbound), listener)
                .map_err(spawn_failed)?,
        );
        let timing = LinkTiming {
            connect_timeout: opts.connect_timeout,
            backoff_min: opts.reconnect_backoff_min,
            backoff_max: opts.reconnect_backoff_max.max(opts.reconnect_backoff_min),
            probe_interval: opts.probe_interval,
        };
        for link in transport.links.iter().flatten() {
            let writer = link::spawn_writer(Arc::clone(link), timing).map_err(spawn_failed)?;
            transport.writers.lock().push(writer);
        }
        info!(me, addr = %local_addr, peers = n - 1, "TCP peer transport listening");
        Ok(transport)
    }

    /// The model this transport speaks for.
    pub fn me(&self) -> ModelIdx {
        self.me
    }

    /// The address actually listened on (its port is the real one when
    /// port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Messages to `to` accepted by `send` and not yet written to its
    /// socket (0 for an unknown model).
    pub fn queued(&self, to: ModelIdx) -> usize {
        self.link(to).map_or(0, |l| l.queued())
    }

    /// Stops all threads and closes all sockets; queued messages are
    /// dropped. Waits at most `shutdown_grace` for the threads. Idempotent.
    pub fn shutdown(&self) {
        self.stop();
    }

    /// [`Self::shutdown`], returning how many threads were still running
    /// when the grace ran out (0 when every thread noticed the stop).
    fn stop(&self) -> usize {
        for link in self.links.iter().flatten() {
            link.close();
        }
        self.inbound.stop();
        let deadline = Instant::now() + self.grace;
        let mut handles: Vec<JoinHandle<()>> = self.acceptor.lock().take().into_iter().collect();
        // The acceptor first: once it is gone no new reader can appear.
        let mut stragglers = join_by(&mut handles, deadline);
        let mut rest = std::mem::take(&mut *self.writers.lock());
        rest.extend(self.inbound.close());
        stragglers += join_by(&mut rest, deadline);
        if stragglers > 0 {
            warn!(
                me = self.me,
                stragglers,
                "transport threads still busy after shutdown; left to exit on their own"
            );
        }
        stragglers
    }

    /// Fires on every successful (re)connect to model `to` (its count so
    /// far): what a caller waits on for a peer to come back, instead of
    /// retrying on a timer. `None` for this model or one outside the group.
    pub fn connects(&self, to: ModelIdx) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.link(to).map(|l| l.connects())
    }

    fn link(&self, to: ModelIdx) -> Option<&Arc<Link>> {
        self.links.get(usize::from(to)).and_then(Option::as_ref)
    }
}

impl PeerSender for TcpTransport {
    fn send(&self, to: ModelIdx, msg: PeerMsg) -> Result<(), TransportError> {
        if to == self.me {
            return Err(TransportError::Unreachable(
                to,
                "a model does not send messages to itself".into(),
            ));
        }
        let link = self.link(to).ok_or_else(|| {
            TransportError::Unreachable(
                to,
                format!("no such model in a group of {}", self.links.len()),
            )
        })?;
        if msg.from() != self.me {
            // The receiver would refuse it and close the connection.
            return Err(TransportError::Codec(format!(
                "message for request {} is signed by model {}, this is model {}",
                msg.rid(),
                msg.from(),
                self.me
            )));
        }
        link.push(encode_msg(&msg)?)
    }

    fn is_up(&self, to: ModelIdx) -> bool {
        self.link(to).is_some_and(|l| l.is_up())
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Joins the threads that finish before `deadline`; returns how many did not.
fn join_by(handles: &mut Vec<JoinHandle<()>>, deadline: Instant) -> usize {
    for h in std::mem::take(handles) {
        while !h.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
        }
        if h.is_finished() {
            if h.join().is_err() {
                warn!("a transport thread panicked");
            }
        } else {
            handles.push(h);
        }
    }
    handles.len()
}
