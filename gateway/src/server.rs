//! The gateway's shared state and the HTTP server that serves it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus::Registry;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::ApiKeys;
use crate::error::ApiError;
use crate::metrics::GatewayMetrics;
use crate::pool::Pool;
use crate::shutdown::Shutdown;
use crate::text::TextSide;
use crate::validate::Catalog;

/// Settings of the HTTP front door.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// Largest accepted body.
    pub max_body_bytes: usize,
    /// Sequences generating at once per group.
    pub max_inflight: usize,
    /// Requests waiting per group.
    pub max_queue: usize,
    /// `Retry-After` of a 429.
    pub retry_after_s: u64,
    /// How long a drain waits for in-flight requests.
    pub drain_timeout: Duration,
    /// How long a client may take to send a request's headers (also how
    /// long an idle kept-alive connection stays open); a slow-loris client
    /// is disconnected after it.
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body (408 after it).
    pub body_timeout: Duration,
}

/// Default of [`GatewayOptions::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`GatewayOptions::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

impl GatewayOptions {
    /// From the config's `gateway:` block.
    pub fn from_config(g: &subserver::config::GatewayConfig) -> Self {
        Self {
            max_body_bytes: g.max_body_bytes,
            max_inflight: g.max_inflight,
            max_queue: g.max_queue,
            retry_after_s: g.retry_after_s,
            drain_timeout: Duration::from_millis(g.drain_timeout_ms),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// Everything a request handler needs.
pub struct Gateway {
    /// The groups.
    pub pool: Pool,
    /// Tokenizer and chat template.
    pub text: TextSide,
    /// Served model names.
    pub catalog: Catalog,
    /// Collectors.
    pub metrics: GatewayMetrics,
    /// Accepted API keys.
    pub keys: ApiKeys,
    /// Drain state.
    pub shutdown: Shutdown,
    /// Settings.
    pub options: GatewayOptions,
    /// Registries appended to `/metrics` (in-process subservers).
    pub extra_registries: Vec<Registry>,
    next_id: AtomicU64,
}

impl Gateway {
    /// A gateway with no groups yet (see [`Pool::set_backends`]).
    pub fn new(
        catalog: Catalog,
        text: TextSide,
        keys: ApiKeys,
        options: GatewayOptions,
        extra_registries: Vec<Registry>,
    ) -> Result<Self, prometheus::Error> {
        Ok(Self {
            pool: Pool::new(options.max_inflight, options.max_queue),
            metrics: GatewayMetrics::new(&catalog.served)?,
            text,
            catalog,
            keys,
            shutdown: Shutdown::new(),
            options,
            extra_registries,
            next_id: AtomicU64::new(1),
        })
    }

    /// A fresh request id.
    pub fn next_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        format!("{t:x}{n:x}")
    }

    /// Counts a failed request by type.
    pub fn count_error(&self, e: &ApiError) {
        self.metrics
            .errors
            .with_label_values(&[e.error_type()])
            .inc();
    }

    /// Refreshes the running/waiting gauges and group counts.
    pub fn refresh_gauges(&self) {
        let groups = self.pool.groups();
        let (mut running, mut waiting, mut up) = (0usize, 0usize, 0usize);
        for g in &groups {
            running += g.admission.running_requests();
            waiting += g.admission.queued();
            up += usize::from(g.backend.healthy());
        }
        let name = self.metrics.model_name().to_string();
        self.metrics
            .running
            .with_label_values(&[&name])
            .set(running as i64);
        self.metrics
            .waiting
            .with_label_values(&[&name])
            .set(waiting as i64);
        self.metrics
            .groups
            .with_label_values(&["healthy"])
            .set(up as f64);
        self.metrics
            .groups
            .with_label_values(&["unhealthy"])
            .set((groups.len() - up) as f64);
    }

    /// Requests holding slots in any group.
    pub fn in_flight(&self) -> usize {
        self.pool
            .groups()
            .iter()
            .map(|g| g.admission.running_requests() + g.admission.queued())
            .sum()
    }
}

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
