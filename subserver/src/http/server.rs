//! The server thread and the handle that owns it.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use futures_util::Stream;
use prometheus::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use warp::reply::Response;
use warp::Filter;

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
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
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
    /// (the entry model's process).
    pub fn start_with_ingress(
        addr: SocketAddr,
        state: Arc<dyn AdminApi>,
        registry: Registry,
        ingress: Option<Arc<dyn super::ingress::Ingress>>,
    ) -> Result<Self, HttpError> {
        // Bound here, not in the thread, so that the caller gets the exact
        // bind error and no request can race the start.
        let listener = std::net::TcpListener::bind(addr).map_err(|e| HttpError::bind(addr, e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| HttpError::bind(addr, e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HttpError::bind(addr, e))?;
        let routes = routes(state, registry, ingress);
        let (stop_tx, stop_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("subserver-http".to_string())
            .spawn(move || serve(listener, routes, stop_rx, ready_tx))
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
        tracing::info!(%local_addr, "subserver HTTP listening");
        Ok(Self {
            local_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for SubserverHttp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // Err: the thread already ended, nothing to stop.
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!(addr = %self.local_addr, "subserver HTTP thread panicked");
            }
        }
        tracing::info!(addr = %self.local_addr, "subserver HTTP stopped");
    }
}

/// The server thread: runtime, listener, serve until stopped. Reports on
/// `ready` once it accepts (or why it cannot).
fn serve<F>(
    listener: std::net::TcpListener,
    routes: F,
    stop: oneshot::Receiver<()>,
    ready: mpsc::Sender<std::io::Result<()>>,
) where
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
            return;
        }
    };
    let listener = {
        let _context = runtime.enter();
        match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        }
    };
    let (draining_tx, draining_rx) = oneshot::channel::<()>();
    let signal = async move {
        // A dropped sender also means stop.
        let _ = stop.await;
        let _ = draining_tx.send(());
    };
    let server =
        warp::serve(routes).serve_incoming_with_graceful_shutdown(accept(listener), signal);
    let _ = ready.send(Ok(()));
    runtime.block_on(async move {
        let deadline = async {
            if draining_rx.await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = server => {}
            () = deadline => {
                tracing::warn!("requests still open {SHUTDOWN_GRACE:?} after stop; closing them");
            }
        }
    });
    // Dropping the runtime here closes any connection still open.
}

/// Accepted connections; a failed accept is logged and retried rather than
/// ending the server.
fn accept(listener: TcpListener) -> impl Stream<Item = std::io::Result<TcpStream>> + Send {
    futures_util::stream::unfold(listener, |listener| async move {
        loop {
            match listener.accept().await {
                Ok((stream, _peer)) => return Some((Ok(stream), listener)),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; retrying");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
        }
    })
}
