//! The gateway's shared state: what every request handler reads (groups,
//! text side, catalog, metrics, keys, drain state, settings).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus::Registry;

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
    /// How long a request waits for a group while none is listed.
    pub group_wait: Duration,
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
    pub fn from_config(g: &engine_config::GatewayConfig) -> Self {
        Self {
            max_body_bytes: g.max_body_bytes,
            max_inflight: g.max_inflight,
            max_queue: g.max_queue,
            retry_after_s: g.retry_after_s,
            drain_timeout: Duration::from_millis(g.drain_timeout_ms),
            group_wait: Duration::from_millis(g.group_wait_ms),
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
        let (mut running, mut up) = (0usize, 0usize);
        // Requests waiting for a first group are load too (scale from zero).
        let mut waiting = self.pool.waiting_for_group();
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
