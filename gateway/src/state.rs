//! The gateway's shared state: what every request handler reads (the
//! routed groups served, each with its catalog, text side and replicas;
//! metrics, keys, drain state, settings).

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
    /// How long a drain waits for in-flight requests (from SIGTERM, the
    /// close notice included).
    pub drain_timeout: Duration,
    /// The drain's first part, in which requests are still served and
    /// every answer carries `Connection: close` (see [`crate::shutdown`]).
    pub close_notice: Duration,
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
            close_notice: Duration::from_millis(g.close_notice_ms),
            group_wait: Duration::from_millis(g.group_wait_ms),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// One routed group the gateway serves: its names and sampling defaults,
/// its tokenizer, and the replicas (backends) that run it.
pub struct Served {
    /// Served model names and their sampling defaults.
    pub catalog: Catalog,
    /// Tokenizer and chat template.
    pub text: TextSide,
    /// The replicas of this group.
    pub pool: Pool,
}

/// Everything a request handler needs.
pub struct Gateway {
    /// The routed groups, in configuration order (at least one; the first
    /// also answers to `default` and names the metrics).
    pub served: Vec<Served>,
    /// Collectors.
    pub metrics: GatewayMetrics,
    /// Accepted API keys.
    pub keys: ApiKeys,
    /// Drain state.
    pub shutdown: Shutdown,
    /// Settings.
    pub options: GatewayOptions,
    /// Registries appended to `/metrics` (in-process subservers), each
    /// with the name of the group it counts for.
    pub extra_registries: Vec<(String, Registry)>,
    next_id: AtomicU64,
}

impl Gateway {
    /// The group whose text side is still pending (`gateway.text_side:
    /// backend`, not yet loaded from a group), if any.
    pub fn pending_text(&self) -> Option<&Served> {
        self.served.iter().find(|s| !s.text.is_loaded())
    }

    /// A gateway serving one routed group, with no replicas yet (see
    /// [`Pool::set_backends`] on [`Self::primary`]'s pool).
    pub fn new(
        catalog: Catalog,
        text: TextSide,
        keys: ApiKeys,
        options: GatewayOptions,
        extra_registries: Vec<(String, Registry)>,
    ) -> Result<Self, prometheus::Error> {
        Self::with_groups(vec![(catalog, text)], keys, options, extra_registries)
    }

    /// A gateway serving one routed group per `(catalog, text)`, in that
    /// order, with no replicas yet (see [`Pool::set_backends`]). The
    /// caller checks that group names differ (see `app::check_names`); an
    /// empty `groups` is refused.
    pub fn with_groups(
        groups: Vec<(Catalog, TextSide)>,
        keys: ApiKeys,
        options: GatewayOptions,
        extra_registries: Vec<(String, Registry)>,
    ) -> Result<Self, prometheus::Error> {
        let Some((first, _)) = groups.first() else {
            return Err(prometheus::Error::Msg("a gateway needs a group".into()));
        };
        Ok(Self {
            metrics: GatewayMetrics::new(&first.served)?,
            served: groups
                .into_iter()
                .map(|(catalog, text)| Served {
                    catalog,
                    text,
                    pool: Pool::new(options.max_inflight, options.max_queue),
                })
                .collect(),
            keys,
            shutdown: Shutdown::new(),
            options,
            extra_registries,
            next_id: AtomicU64::new(1),
        })
    }

    /// The first group (the one `default` names; a remote gateway's only one).
    pub fn primary(&self) -> &Served {
        &self.served[0]
    }

    /// The group serving `model`, by index: a group's name, then `default`
    /// (the first group), then a member's name (the first group that has
    /// a member of that name).
    pub fn group_of(&self, model: &str) -> Result<usize, ApiError> {
        let named = self.served.iter().position(|g| g.catalog.served == model);
        let by_member = || {
            self.served
                .iter()
                .position(|g| g.catalog.members.iter().any(|m| m == model))
        };
        named
            .or((model == "default").then_some(0))
            .or_else(by_member)
            .ok_or_else(|| ApiError::ModelNotFound(model.to_string()))
    }

    /// Every replica of every group.
    pub fn all_replicas(&self) -> Vec<std::sync::Arc<crate::pool::GroupEntry>> {
        self.served.iter().flat_map(|g| g.pool.groups()).collect()
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
        let groups = self.all_replicas();
        let (mut running, mut up) = (0usize, 0usize);
        // Requests waiting for a first group are load too (scale from zero).
        let mut waiting: usize = self.served.iter().map(|g| g.pool.waiting_for_group()).sum();
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
        self.all_replicas()
            .iter()
            .map(|g| g.admission.running_requests() + g.admission.queued())
            .sum()
    }
}
