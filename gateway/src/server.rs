//! The HTTP server that serves the gateway's [`Gateway`] state.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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
        let incoming = tokio_stream_listener(listener);
        // hyper directly (warp's `serve` has no header timeout): the
        // header timer runs from the first byte a request is awaited on.
        let service = warp::service(routes);
        let make = hyper::service::make_service_fn(move |_| {
            let service = service.clone();
            async move { Ok::<_, std::convert::Infallible>(service) }
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

    /// Graceful stop: refuse new requests (503) and close the listener,
    /// let in-flight requests finish until the drain deadline, then cancel
    /// the rest and wait for the connections to close.
    pub async fn drain(mut self) {
        let gw = self.gateway.clone();
        gw.shutdown.start_draining();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let deadline = tokio::time::Instant::now() + gw.options.drain_timeout;
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
    futures_util::stream::unfold(listener, |listener| async move {
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
    })
}
