//! The server thread and the handle that owns it.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc as tokio_mpsc, oneshot, watch};
use warp::reply::Response;
use warp::Filter;

use super::access::{ControlAccess, GateKind};
use super::admin::AdminApi;
use super::error::HttpError;
use super::routes::routes;

/// How long a stop waits for open requests before closing their sockets.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of file descriptors) before retrying.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// A running HTTP server. Dropping it stops the server: no new
/// connections, open requests get 5 s to finish, and when
/// `drop` returns the port is closed.
pub struct SubserverHttp {
    local_addr: SocketAddr,
    control_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<bool>>,
}

impl SubserverHttp {
    /// Binds `addr` (port 0 picks a free port, see [`Self::local_addr`]) and
    /// serves the endpoints on a background thread with its own tokio
    /// runtime. Returns once the server accepts connections.
    pub fn start(
        addr: SocketAddr,
        state: Arc<dyn AdminApi>,
        registry: Registry,
    ) -> Result<Self, HttpError> {
        Self::start_with_ingress(addr, state, registry, None)
    }

    /// Like [`Self::start`], also taking requests at `/internal/generate`
    /// (the entry model's process); the control endpoints answer loopback
    /// clients only.
    pub fn start_with_ingress(
        addr: SocketAddr,
        state: Arc<dyn AdminApi>,
        registry: Registry,
        ingress: Option<Arc<dyn super::ingress::Ingress>>,
    ) -> Result<Self, HttpError> {
        Self::start_secured(addr, state, registry, ingress, ControlAccess::default())
    }

    /// Like [`Self::start_with_ingress`], with the control endpoints
    /// exposed as `access` says (token, own listener).
    pub fn start_secured(
        addr: SocketAddr,
        state: Arc<dyn AdminApi>,
        registry: Registry,
        ingress: Option<Arc<dyn super::ingress::Ingress>>,
        access: ControlAccess,
    ) -> Result<Self, HttpError> {
        access.check().map_err(HttpError::Access)?;
        // Bound here, not in the thread, so that the caller gets the exact
        // bind error and no request can race the start.
        let (main, local_addr) = bind(addr)?;
        let control = access.bind.map(bind).transpose()?;
        let control_addr = control.as_ref().map(|c| c.1);
        let token = access.token.clone();
        let servers = [GateKind::Open, GateKind::Bearer, GateKind::Closed].map(|kind| {
            routes(
                state.clone(),
                registry.clone(),
                ingress.clone(),
                kind,
                token.clone(),
            )
        });
        let mut listeners = vec![(main, false)];
        listeners.extend(control.map(|(l, _)| (l, true)));
        let (stop_tx, stop_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("subserver-http".to_string())
            .spawn(move || serve(listeners, access, servers, stop_rx, ready_tx))
            .map_err(|source| HttpError::Runtime { addr, source })?;
        let failure = match ready_rx.recv() {
            Ok(Ok(())) => None,
            Ok(Err(source)) => Some(HttpError::Runtime { addr, source }),
            Err(_) => Some(HttpError::ThreadDied { addr }),
        };
        if let Some(e) = failure {
            // The thread has returned or is returning; reap it.
            let _ = thread.join();
            return Err(e);
        }
        tracing::info!(%local_addr, control = ?control_addr, "subserver HTTP listening");
        Ok(Self {
            local_addr,
            control_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The control endpoints' own address, when they have one.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control_addr
    }

    /// Stops the server like `drop`; true when every open connection ended
    /// on its own (none had to be cut when the grace ran out).
    pub fn stop(mut self) -> bool {
        self.halt()
    }

    fn halt(&mut self) -> bool {
        if let Some(stop) = self.stop.take() {
            // Err: the thread already ended, nothing to stop.
            let _ = stop.send(());
        }
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let clean = thread.join().unwrap_or_else(|_| {
            tracing::error!(addr = %self.local_addr, "subserver HTTP thread panicked");
            false
        });
        tracing::info!(addr = %self.local_addr, "subserver HTTP stopped");
        clean
    }
}

impl Drop for SubserverHttp {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A non-blocking std listener on `addr` and the address it got.
fn bind(addr: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), HttpError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| HttpError::bind(addr, e))?;
    let local = listener
        .local_addr()
        .map_err(|e| HttpError::bind(addr, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| HttpError::bind(addr, e))?;
    Ok((listener, local))
}

/// The server thread: runtime, listeners, one warp server per gate (fed
/// the connections the gate applies to), serve until stopped. Reports on
/// `ready` once it accepts (or why it cannot); returns whether the stop
/// was clean (no connection cut at the grace deadline).
fn serve<F>(
    listeners: Vec<(std::net::TcpListener, bool)>,
    access: ControlAccess,
    servers: [F; 3],
    stop: oneshot::Receiver<()>,
    ready: mpsc::Sender<std::io::Result<()>>,
) -> bool
where
    F: Filter<Extract = (Response,), Error = std::convert::Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e));
            return false;
        }
    };
    let listeners = {
        let _context = runtime.enter();
        let converted: std::io::Result<Vec<_>> = listeners
            .into_iter()
            .map(|(l, on_control)| TcpListener::from_std(l).map(|l| (l, on_control)))
            .collect();
        match converted {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(e));
                return false;
            }
        }
    };
    let (stopped_tx, stopped_rx) = watch::channel(false);
    let mut senders = Vec::new();
    let mut tasks = Vec::new();
    for filter in servers {
        let (tx, rx) = tokio_mpsc::unbounded_channel::<TcpStream>();
        senders.push(tx);
        let incoming = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|s| (Ok::<_, std::io::Error>(s), rx))
        });
        let server = warp::serve(filter)
            .serve_incoming_with_graceful_shutdown(incoming, stopped(stopped_rx.clone()));
        tasks.push(runtime.spawn(server));
    }
    let access = Arc::new(access);
    let acceptors: Vec<_> = listeners
        .into_iter()
        .map(|(listener, on_control)| {
            let (senders, access) = (senders.clone(), access.clone());
            let done = stopped(stopped_rx.clone());
            runtime.spawn(async move {
                tokio::select! {
                    () = accept(listener, on_control, &access, &senders) => {}
                    () = done => {}
                }
            })
        })
        .collect();
    drop(senders);
    let _ = ready.send(Ok(()));
    runtime.block_on(async move {
        // A dropped sender also means stop.
        let _ = stop.await;
        let _ = stopped_tx.send(true);
        for a in acceptors {
            let _ = a.await;
        }
        let all = futures_util::future::join_all(tasks);
        tokio::select! {
            _ = all => true,
            () = tokio::time::sleep(SHUTDOWN_GRACE) => {
                tracing::warn!("requests still open {SHUTDOWN_GRACE:?} after stop; closing them");
                false
            }
        }
    })
    // Dropping the runtime closes any connection still open.
}

/// Resolves once `stopped` turns true (or its sender is gone).
async fn stopped(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Accepts connections and hands each to the server of its gate; a failed
/// accept is logged and retried rather than ending the server.
async fn accept(
    listener: TcpListener,
    on_control: bool,
    access: &ControlAccess,
    servers: &[tokio_mpsc::UnboundedSender<TcpStream>],
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let index = match access.gate_for(peer, on_control) {
                    GateKind::Open => 0,
                    GateKind::Bearer => 1,
                    GateKind::Closed => 2,
                };
                let _ = servers[index].send(stream);
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed; retrying");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}
