//! The HTTP server that serves the gateway's [`Gateway`] state.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{HeaderValue, CONNECTION};
use hyper::service::Service;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::conn::OpenConnections;

pub use crate::state::{Gateway, GatewayOptions};

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// What was asked.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A running HTTP server. Dropping it stops the server at once (use
/// [`GatewayServer::drain`] for a graceful stop).
pub struct GatewayServer {
    gateway: Arc<Gateway>,
    local_addr: SocketAddr,
    open: Arc<OpenConnections>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    gauges: JoinHandle<()>,
}

impl GatewayServer {
    /// Binds `addr` and serves on the current tokio runtime.
    pub async fn bind(gateway: Arc<Gateway>, addr: &str) -> Result<Self, ServerError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let routes = crate::routes::routes(gateway.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let open = Arc::new(OpenConnections::default());
        let incoming = tokio_stream_listener(listener);
        // hyper directly (warp's `serve` has no header timeout): the
        // header timer runs from the first byte a request is awaited on.
        let service = warp::service(routes);
        let gw = gateway.clone();
        let conns = open.clone();
        let make = hyper::service::make_service_fn(move |_| {
            let service = service.clone();
            let gw = gw.clone();
            // Dropped with the connection's service, when it closes.
            let guard = conns.opened();
            async move {
                Ok::<_, std::convert::Infallible>(hyper::service::service_fn(move |req| {
                    let _open = &guard;
                    let mut service = service.clone();
                    let gw = gw.clone();
                    async move {
                        let mut resp = service.call(req).await?;
                        // While closing, each answer tells its client to
                        // reconnect (see `shutdown`): hyper then closes
                        // the connection once the response is written.
                        if gw.shutdown.closing() {
                            resp.headers_mut()
                                .insert(CONNECTION, HeaderValue::from_static("close"));
                        }
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                }))
            }
        });
        let server = hyper::Server::builder(hyper::server::accept::from_stream(incoming))
            .http1_header_read_timeout(gateway.options.header_timeout)
            .serve(make)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            });
        let server = async move {
            if let Err(e) = server.await {
                tracing::warn!(error = %e, "gateway server stopped with an error");
            }
        };
        let task = tokio::spawn(server);
        let g = gateway.clone();
        let gauges = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                g.refresh_gauges();
            }
        });
        tracing::info!(%local_addr, "gateway listening");
        Ok(Self {
            gateway,
            local_addr,
            open,
            stop: Some(stop_tx),
            task: Some(task),
            gauges,
        })
    }

    /// Where the server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The shared state.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Graceful stop (the phases of [`crate::shutdown`]): for the close
    /// notice, serve on but answer with `Connection: close` (ended early
    /// once no connection is open); then refuse new requests (503), close
    /// the listener and idle connections, and let in-flight requests
    /// finish; at the drain deadline (counted from the start, notice
    /// included) cancel the rest and wait for the connections to close.
    pub async fn drain(mut self) {
        let gw = self.gateway.clone();
        let deadline = tokio::time::Instant::now() + gw.options.drain_timeout;
        gw.shutdown.start_closing();
        let notice = gw.options.close_notice.min(gw.options.drain_timeout);
        if !notice.is_zero() {
            tracing::info!(
                open = self.open.count(),
                notice_ms = notice.as_millis() as u64,
                "closing: answering with Connection: close"
            );
            if tokio::time::timeout(notice, self.open.none_open())
                .await
                .is_ok()
            {
                tracing::info!("closing: no connection left open");
            }
        }
        gw.shutdown.start_draining();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        while gw.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = gw.in_flight();
        if left > 0 {
            tracing::warn!(left, "drain deadline passed: cancelling");
        }
        gw.shutdown.cancel_all();
        if let Some(task) = self.task.take() {
            // Streams end right after cancel_all; bound the wait anyway.
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        tracing::info!("gateway stopped");
    }
}

impl Drop for GatewayServer {
    fn drop(&mut self) {
        self.gauges.abort();
        self.gateway.shutdown.cancel_all();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Accepted connections of `listener` as a stream (with `TCP_NODELAY`, so
/// small SSE frames leave at once).
fn tokio_stream_listener(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> + Send {
    futures_util::stream::unfold(listener, move |listener| {
        async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        return Some((Ok(stream), listener));
                    }
                    Err(e) => {
                        // Out of descriptors and the like: wait and retry.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    })
}
