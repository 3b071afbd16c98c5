//! The tune loop: live retuning of the delayed-batching thresholds B of serving groups.
//!
//! Every `tuning.interval` the operator ([`crate::tune::driver`]) calls [`GroupTuner::tick`]
//! over the pods of a resource's groups (which run the same models and config, so their
//! counters pool into one estimate and one table):
//!
//! 1. **gather** the series: the pods' `/metrics` (addresses from the EndpointSlices of the
//!    models' headless Services), or Prometheus when `tuning.prometheusUrl` is set;
//! 2. **window** them: per pod, the increase since the last accepted estimate, summed over the
//!    pods ([`SampleWindow`]), so a
//!    change of routing shows within one window instead of being averaged into the process
//!    lifetime (Prometheus answers `increase(...[interval])` directly);
//! 3. **estimate** P, C and L(b) ([`tuner::metrics::estimate`]); too few samples is an
//!    outcome, not an error: the window grows and the status says so;
//! 4. **decide** with hysteresis ([`decide::decide`]): the B table for concurrency
//!    1..=the group's admission limit, pushed only when its predicted gain over the applied
//!    table exceeds the hysteresis (`tuning.hysteresis`, 2% by default);
//! 5. **push** it to every pod's admin endpoint with the operator's bearer token
//!    ([`sources::push_thresholds`]). A pod that fails its scrape or push is skipped and
//!    reported ([`GroupTuner::skipped`]); the round fails only when no pod answers. The caller then writes the ConfigMap (so a restarted
//!    pod starts with it), the status and an Event from the returned [`TuneOutcome`].
//!
//! The subservers apply a new table between two steps; no request is dropped or stalled.

pub mod decide;
pub mod metrics;
pub mod sources;
pub mod window;

pub use decide::{decide, threshold_at, Decision, Proposal, TuneSettings};
pub use metrics::RetuneMetrics;
pub use sources::{push_thresholds, query_prometheus, scrape_pods, PodTarget};
pub use window::{SampleWindow, Scrape};

use std::collections::BTreeMap;
use tuner::metrics::{estimate, EstimateOptions, MetricsEstimate};
use tuner::TunerError;

/// Why a tune failed (a too-small sample is not a failure: see [`TuneOutcome`]).
#[derive(Debug, thiserror::Error)]
pub enum RetuneError {
    /// Estimating or solving the chain failed.
    #[error(transparent)]
    Tuner(#[from] TunerError),
    /// A pod's admin endpoint failed or refused.
    #[error("{url}: {reason}")]
    Http {
        /// The URL.
        url: String,
        /// Transport error or status and body.
        reason: String,
    },
    /// Prometheus failed or answered something else than a vector.
    #[error("Prometheus query `{query}`: {reason}")]
    Prometheus {
        /// The PromQL query.
        query: String,
        /// What went wrong.
        reason: String,
    },
    /// The solver thread panicked or was cancelled.
    #[error("tuner task: {0}")]
    Task(String),
}

impl RetuneError {
    /// The `result` label of `tokenrouter_operator_tune_total` for this error.
    pub fn error_type(&self) -> &'static str {
        match self {
            RetuneError::Tuner(_) => "tuner_error",
            RetuneError::Http { .. } => "pod_error",
            RetuneError::Prometheus { .. } => "prometheus_error",
            RetuneError::Task(_) => "tuner_error",
        }
    }
}

/// Where a group's series come from.
#[derive(Debug, Clone)]
pub enum MetricsSource {
    /// Scrape the pods directly.
    Pods,
    /// Query Prometheus at `url` over the series matching `selector` (PromQL label matchers).
    Prometheus {
        /// Base URL of the Prometheus HTTP API.
        url: String,
        /// Label matchers without braces.
        selector: String,
        /// Window of `increase()`, seconds (the tuning interval).
        window_s: u64,
    },
}

/// One group as the tune loop sees it.
#[derive(Debug, Clone)]
pub struct GroupView<'a> {
    /// Model names, entry model first (the chain's model order).
    pub models: &'a [String],
    /// The pods of the group (gather and push targets).
    pub pods: &'a [PodTarget],
    /// Bearer token of the pods' admin endpoints.
    pub token: Option<&'a str>,
    /// Largest concurrency of the table (the group's admission limit).
    pub max_concurrency: usize,
    /// Where the series come from.
    pub source: &'a MetricsSource,
}

/// What one tick did.
#[derive(Debug, Clone, PartialEq)]
pub enum TuneOutcome {
    /// First scrape of the group: it is the baseline of the first window.
    Baseline,
    /// The window holds too few samples; it grows until the next tick.
    TooFewSamples(String),
    /// Estimated; the applied table is within the hysteresis of the best one.
    Kept(Box<(MetricsEstimate, Proposal)>),
    /// Estimated and pushed to every pod.
    Pushed(Box<(MetricsEstimate, Proposal)>),
}

impl TuneOutcome {
    /// The `result` label of `tokenrouter_operator_tune_total`.
    pub fn result(&self) -> &'static str {
        match self {
            TuneOutcome::Baseline => "baseline",
            TuneOutcome::TooFewSamples(_) => "too_few_samples",
            TuneOutcome::Kept(_) => "kept",
            TuneOutcome::Pushed(_) => "pushed",
        }
    }
}

/// The tune loop's memory of one group: its sample window and the table it last applied.
#[derive(Debug, Clone, Default)]
pub struct GroupTuner {
    window: SampleWindow,
    applied: Option<Vec<Vec<usize>>>,
    /// Why each pod the last tick skipped failed.
    skipped: Vec<String>,
}

impl GroupTuner {
    /// A tuner that knows `applied` is in force (from the resource's status, after a restart
    /// of the operator), in model order.
    pub fn with_applied(applied: Option<Vec<Vec<usize>>>) -> Self {
        GroupTuner {
            window: SampleWindow::default(),
            applied,
            skipped: Vec::new(),
        }
    }

    /// The pods the last tick skipped (their scrape or push failed) and why.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// The table last pushed (or known to be applied), in model order.
    pub fn applied(&self) -> Option<&[Vec<usize>]> {
        self.applied.as_deref()
    }

    /// One round: gather, window, estimate, decide, push.
    pub async fn tick(
        &mut self,
        client: &reqwest::Client,
        group: &GroupView<'_>,
        settings: &TuneSettings,
    ) -> Result<TuneOutcome, RetuneError> {
        self.skipped.clear();
        let (now, window) = match group.source {
            MetricsSource::Pods => {
                let (now, failed) = scrape_pods(client, group.pods, group.token).await?;
                self.skipped = failed.iter().map(ToString::to_string).collect();
                match self.window.observe(&now) {
                    Some(window) => (Some(now), window),
                    None => return Ok(TuneOutcome::Baseline),
                }
            }
            MetricsSource::Prometheus {
                url,
                selector,
                window_s,
            } => (
                None,
                query_prometheus(client, url, selector, *window_s).await?,
            ),
        };
        let options = EstimateOptions {
            models: group.models.to_vec(),
            min_decisions: settings.min_decisions,
            min_latency_samples: settings.min_latency_samples,
        };
        let estimate = match estimate(&window, &options) {
            Ok(e) => e,
            Err(e @ TunerError::TooFewSamples { .. }) => {
                return Ok(TuneOutcome::TooFewSamples(e.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(now) = now {
            self.window.accept(now);
        }
        let (e, applied, settings_, n) = (
            estimate.clone(),
            self.applied.clone(),
            settings.clone(),
            group.max_concurrency,
        );
        // The chain solves take up to seconds: off the async workers.
        let decision =
            tokio::task::spawn_blocking(move || decide(&e, n, applied.as_deref(), &settings_))
                .await
                .map_err(|e| RetuneError::Task(e.to_string()))??;
        match decision {
            Decision::Keep(proposal) => Ok(TuneOutcome::Kept(Box::new((estimate, proposal)))),
            Decision::Push(proposal) => {
                let table: BTreeMap<String, Vec<usize>> = group
                    .models
                    .iter()
                    .cloned()
                    .zip(proposal.table.iter().cloned())
                    .collect();
                let mut failed = push_thresholds(client, group.pods, group.token, &table).await;
                if failed.len() == group.pods.len() && !failed.is_empty() {
                    return Err(failed.swap_remove(0));
                }
                self.skipped.extend(failed.iter().map(ToString::to_string));
                self.applied = Some(proposal.table.clone());
                Ok(TuneOutcome::Pushed(Box::new((estimate, proposal))))
            }
        }
    }
}
