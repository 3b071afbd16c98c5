//! The tune loop in the operator: a second kube `Controller` over TokenRouterDeployments
//! whose reconcile is one tune round and which requeues itself after `tuning.interval`.
//!
//! Why a Controller and not a task per resource: the runtime already gives what such tasks
//! would need by hand: one reconcile per resource at a time (rounds never overlap), a
//! reconcile on every change of the resource (a spec that turns tuning off, a new interval),
//! requeues, and shutdown on SIGTERM. Its watch also sees the status writes of both
//! controllers; those wake it early, so each resource remembers when its next round is due
//! and an early wake-up only requeues for the rest of the interval.
//!
//! Per resource, one round:
//! 1. discovers the serving pods from the EndpointSlices of the headless Services
//!    ([`discover`]) and reads the admin token from the Secret the reconciler created;
//! 2. runs [`GroupTuner::tick`] over all of them: every group of a resource runs the same
//!    models, policy and config, so their counters are pooled into one estimate and one
//!    table, which the engine ConfigMap and `status.thresholds` can hold (a pod restarted in
//!    any group comes back with it);
//! 3. writes `status.tuning` (and, once it pushed, `status.thresholds` with `source: tuned`)
//!    by server-side apply with its own field manager ([`status`]), counts the round in
//!    `tokenrouter_operator_tune_total{result}`, and publishes an Event on a push. That status
//!    write wakes the reconciler, which renders the tuned table into the engine ConfigMap.
//!
//! `delayedBatching.mode: fixed` (or no `spec.tuning`) stops the rounds; if the loop had run,
//! the spec's table (B = 1 when it has none) is pushed back to the pods once, and
//! `status.tuning.lastResult` says `disabled`. A deleted resource is forgotten.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crds::v1alpha1::{AppliedThresholds, ThresholdSource, TuningStatus};
use crds::TokenRouterDeployment;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::watcher::Config;
use kube::{Client, Resource, ResourceExt};
use prometheus::Registry;
use tracing::{debug, info, warn};

use super::settings::{self, LoopSettings};
use super::{discover, status};
use crate::build;
use crate::context::key;
use crate::names;
use crate::retune::{
    push_thresholds, GroupTuner, GroupView, MetricsSource, PodTarget, RetuneMetrics, TuneOutcome,
};

/// Result label of a round that found no pod to read.
pub const NO_PODS: &str = "no_pods";
/// Result label of a round without the admin token.
pub const NO_TOKEN: &str = "no_token";
/// `status.tuning.lastResult` once tuning was turned off.
pub const DISABLED: &str = "disabled";

/// Why a reconcile of the tune loop failed (a failed round is a status, not an error).
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Reading pods or the Secret, or writing the status, failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// The tune loop's memory of one resource.
struct Tracked {
    tuner: GroupTuner,
    next_due: Instant,
    settings_key: String,
    /// The table this loop put in force (re-applied with every status write).
    pushed: Option<AppliedThresholds>,
}

/// What every round shares.
pub struct TuneContext {
    client: Client,
    recorder: Recorder,
    metrics: RetuneMetrics,
    http: reqwest::Client,
    state: Mutex<HashMap<String, Tracked>>,
}

impl TuneContext {
    fn take(&self, key: &str) -> Option<Tracked> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
    }

    fn put(&self, key: String, tracked: Tracked) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, tracked);
    }

    async fn publish(
        &self,
        trd: &TokenRouterDeployment,
        kind: EventType,
        reason: &str,
        note: String,
    ) {
        crate::events::publish(&self.recorder, trd, "Tune", kind, reason, note).await;
    }
}

/// What identifies the settings a tuner's memory is valid for.
fn settings_key(s: &LoopSettings) -> String {
    let source = match &s.source {
        MetricsSource::Pods => "pods".to_string(),
        MetricsSource::Prometheus { url, .. } => url.clone(),
    };
    format!("{:?}/{source}/{}", s.models, s.max_concurrency)
}

fn fresh(trd: &TokenRouterDeployment, s: &LoopSettings) -> Tracked {
    let thresholds = trd.status.as_ref().and_then(|st| st.thresholds.clone());
    // After an operator restart: the table in force is the one in status (else the spec's).
    let applied = thresholds
        .as_ref()
        .and_then(|t| status::in_model_order(&s.models, &t.table))
        .or_else(|| status::in_model_order(&s.models, &build::spec_thresholds(trd)));
    Tracked {
        tuner: GroupTuner::with_applied(applied),
        next_due: Instant::now(),
        settings_key: settings_key(s),
        pushed: thresholds.filter(|t| t.source == ThresholdSource::Tuned),
    }
}

/// One reconcile: a round when one is due.
pub async fn reconcile(
    trd: Arc<TokenRouterDeployment>,
    ctx: Arc<TuneContext>,
) -> Result<Action, TuneError> {
    let ns = trd.namespace().unwrap_or_default();
    let key = key(&trd);
    if trd.meta().deletion_timestamp.is_some() {
        ctx.take(&key);
        return Ok(Action::await_change());
    }
    let Some(settings) = settings::resolve(&trd, &ns) else {
        ctx.take(&key);
        return disabled(&trd, &ctx, &ns).await;
    };
    let mut tracked = ctx
        .take(&key)
        .filter(|t| t.settings_key == settings_key(&settings))
        .unwrap_or_else(|| fresh(&trd, &settings));
    let started = Instant::now();
    if started < tracked.next_due {
        let wait = tracked.next_due - started;
        ctx.put(key, tracked);
        return Ok(Action::requeue(wait));
    }
    tracked.next_due = started + settings.interval;
    let result = round(&trd, &ctx, &ns, &settings, &mut tracked).await;
    ctx.put(key, tracked);
    result?;
    Ok(Action::requeue(settings.interval))
}

/// Retries a failed reconcile (reading the cluster or writing the status) soon.
pub fn error_policy(
    trd: Arc<TokenRouterDeployment>,
    err: &TuneError,
    _: Arc<TuneContext>,
) -> Action {
    warn!(resource = %key(&trd), error = %err, "tune round failed");
    Action::requeue(Duration::from_secs(10))
}

async fn pods(
    ctx: &TuneContext,
    trd: &TokenRouterDeployment,
    ns: &str,
) -> Result<Vec<PodTarget>, TuneError> {
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    let slices = api
        .list(&ListParams::default().labels(&discover::slice_selector(trd)))
        .await?;
    Ok(discover::pods(trd, &slices.items))
}

async fn admin_token(
    ctx: &TuneContext,
    trd: &TokenRouterDeployment,
    ns: &str,
) -> Result<Option<String>, TuneError> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    Ok(api.get_opt(&names::admin_secret(trd)).await?.and_then(|s| {
        let data = s
            .data
            .and_then(|d| d.get(names::ADMIN_TOKEN_KEY).map(|b| b.0.clone()));
        // An API server turns `stringData` into `data`; a store that keeps objects as sent
        // (the k8s test kit's stand-ins) still has the former.
        let text = data
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .or_else(|| s.string_data?.get(names::ADMIN_TOKEN_KEY).cloned())?;
        Some(text.trim().to_string())
    }))
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One round of one resource; records its outcome in status, metrics and Events.
async fn round(
    trd: &TokenRouterDeployment,
    ctx: &TuneContext,
    ns: &str,
    settings: &LoopSettings,
    tracked: &mut Tracked,
) -> Result<(), TuneError> {
    let pods = pods(ctx, trd, ns).await?;
    let token = admin_token(ctx, trd, ns).await?;
    let previous = trd
        .status
        .as_ref()
        .and_then(|s| s.tuning.clone())
        .unwrap_or_default();
    let mut tuning = TuningStatus {
        last_round_time: Some(status::now()),
        pods: i32::try_from(pods.len()).unwrap_or(i32::MAX),
        estimate: previous.estimate.clone(),
        ..TuningStatus::default()
    };
    let outcome = if pods.is_empty() {
        Err((
            NO_PODS,
            format!(
                "no ready endpoint in the EndpointSlices of {}",
                discover::slice_selector(trd)
            ),
        ))
    } else if let Some(token) = token.as_deref() {
        let view = GroupView {
            models: &settings.models,
            pods: &pods,
            token: Some(token),
            max_concurrency: settings.max_concurrency,
            source: &settings.source,
        };
        tracked
            .tuner
            .tick(&ctx.http, &view, &settings.tune)
            .await
            .map_err(|e| (e.error_type(), e.to_string()))
    } else {
        Err((
            NO_TOKEN,
            format!("no admin token in Secret {}", names::admin_secret(trd)),
        ))
    };
    let mut pushed_note = None;
    match outcome {
        Ok(outcome) => {
            tuning.last_result = outcome.result().to_string();
            match outcome {
                TuneOutcome::Baseline => {
                    tuning.message = Some(format!(
                        "first scrape of {} pods: the baseline of the next window",
                        pods.len()
                    ));
                }
                TuneOutcome::TooFewSamples(reason) => tuning.message = Some(reason),
                TuneOutcome::Kept(k) => {
                    let (e, p) = *k;
                    tuning.message = Some(format!(
                        "kept the applied table: the best one gains {:.2}% at concurrency {} (hysteresis {:.2}%)",
                        p.gain_percent, p.gain_at, settings.tune.min_gain_percent
                    ));
                    tuning.estimate = Some(status::estimate(&e, &p));
                }
                TuneOutcome::Pushed(pushed) => {
                    let (e, p) = *pushed;
                    let table = status::by_model(&settings.models, &p.table);
                    let note = push_note(&settings.models, &table, &e.transition, &p, pods.len());
                    tuning.message = Some(note.clone());
                    tuning.estimate = Some(status::estimate(&e, &p));
                    tracked.pushed = Some(super::tuned(table));
                    pushed_note = Some(note);
                }
            }
        }
        Err((result, message)) => {
            tuning.last_result = result.to_string();
            tuning.message = Some(message);
        }
    }
    // The tuner ran this round (pods and a token): what it skipped is this round's.
    let ticked = !pods.is_empty() && token.is_some();
    let skipped = tracked.tuner.skipped();
    if ticked && !skipped.is_empty() {
        ctx.metrics.skip_pods(skipped.len());
        warn!(resource = %key(trd), ?skipped, "tune round skipped pods");
        let note = format!("; skipped {} pods: {}", skipped.len(), skipped.join("; "));
        tuning.message = Some(tuning.message.unwrap_or_default() + &note);
    }
    ctx.metrics.count(&tuning.last_result, unix_now());
    let api: Api<TokenRouterDeployment> = Api::namespaced(ctx.client.clone(), ns);
    status::write(&api, &trd.name_any(), &tuning, tracked.pushed.as_ref()).await?;
    let failed = !matches!(
        tuning.last_result.as_str(),
        "pushed" | "kept" | "too_few_samples" | "baseline"
    );
    if let Some(note) = pushed_note {
        info!(resource = %key(trd), "{note}");
        ctx.publish(trd, EventType::Normal, "Retuned", note).await;
    } else if failed && previous.last_result != tuning.last_result {
        let message = tuning.message.clone().unwrap_or_default();
        warn!(resource = %key(trd), result = %tuning.last_result, "{message}");
        ctx.publish(trd, EventType::Warning, "TuneFailed", message)
            .await;
    }
    Ok(())
}

/// What a push did, for the Event and `status.tuning.message`.
fn push_note(
    models: &[String],
    table: &BTreeMap<String, Vec<i64>>,
    routing: &[Vec<f64>],
    p: &crate::retune::Proposal,
    pods: usize,
) -> String {
    let i = p.gain_at.saturating_sub(1);
    let gain = if p.gain_percent.is_finite() {
        format!("+{:.1}% over the applied table", p.gain_percent)
    } else {
        "no comparable table applied before".to_string()
    };
    let handover = match (models.first(), models.get(1), routing.first()) {
        (Some(a), Some(b), Some(row)) => format!(
            "; estimated P({a}->{b}) = {:.3}",
            row.get(1).copied().unwrap_or(0.0)
        ),
        _ => String::new(),
    };
    format!(
        "pushed B table {} to {pods} pods: predicted {:.1} tok/s at concurrency {} ({gain}){handover}",
        serde_json::to_string(table).unwrap_or_default(),
        p.predicted_tok_s.get(i).copied().unwrap_or(0.0),
        p.gain_at,
    )
}

/// Tuning is off: once, put the spec's table back on the pods (they may run a tuned one;
/// pods that restart read the spec's from the ConfigMap anyway).
async fn disabled(
    trd: &TokenRouterDeployment,
    ctx: &TuneContext,
    ns: &str,
) -> Result<Action, TuneError> {
    let Some(previous) = trd.status.as_ref().and_then(|s| s.tuning.clone()) else {
        return Ok(Action::await_change());
    };
    if previous.last_result == DISABLED {
        return Ok(Action::await_change());
    }
    let models = settings::model_order(trd);
    let spec = build::spec_thresholds(trd);
    let table: BTreeMap<String, Vec<usize>> = match status::in_model_order(&models, &spec) {
        Some(t) => models.iter().cloned().zip(t).collect(),
        // No table in the spec: no delayed batching.
        None => models.iter().map(|m| (m.clone(), vec![1])).collect(),
    };
    let pods = pods(ctx, trd, ns).await?;
    let token = admin_token(ctx, trd, ns).await?;
    let failed = push_thresholds(&ctx.http, &pods, token.as_deref(), &table).await;
    let mut tuning = TuningStatus {
        last_round_time: Some(status::now()),
        pods: i32::try_from(pods.len()).unwrap_or(i32::MAX),
        estimate: previous.estimate,
        ..TuningStatus::default()
    };
    let (action, kind, reason) = match failed.first() {
        None => {
            tuning.last_result = DISABLED.into();
            tuning.message = Some(format!(
                "tuning is off (delayedBatching.mode: fixed, or no spec.tuning): the spec's table {} is back on {} pods",
                serde_json::to_string(&table).unwrap_or_default(),
                pods.len()
            ));
            (Action::await_change(), EventType::Normal, "TuningDisabled")
        }
        Some(e) => {
            // Retried (the pods that took it take it again, harmlessly).
            tuning.last_result = e.error_type().into();
            let why: Vec<String> = failed.iter().map(ToString::to_string).collect();
            tuning.message = Some(format!(
                "tuning is off, but the spec's table could not be restored on {} of {} pods: {}",
                failed.len(),
                pods.len(),
                why.join("; ")
            ));
            (
                Action::requeue(Duration::from_secs(30)),
                EventType::Warning,
                "TuneFailed",
            )
        }
    };
    let api: Api<TokenRouterDeployment> = Api::namespaced(ctx.client.clone(), ns);
    status::write(&api, &trd.name_any(), &tuning, None).await?;
    ctx.publish(
        trd,
        kind,
        reason,
        tuning.message.clone().unwrap_or_default(),
    )
    .await;
    Ok(action)
}

/// Runs the tune loop's controller until the watch ends (on shutdown). Its metrics go into
/// `registry` (the operator's `/metrics`).
pub async fn run(
    client: Client,
    reporter: Reporter,
    registry: &Registry,
    namespace: Option<String>,
) {
    let metrics = RetuneMetrics::new(registry).or_else(|e| {
        warn!(error = %e, "tune metrics not registered");
        RetuneMetrics::new(&Registry::new())
    });
    let Ok(metrics) = metrics else {
        warn!("tune loop off: cannot create its metrics");
        return;
    };
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "tune loop off: no HTTP client");
            return;
        }
    };
    let ctx = Arc::new(TuneContext {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        metrics,
        http,
        state: Mutex::new(HashMap::new()),
    });
    let api = match &namespace {
        Some(ns) => Api::<TokenRouterDeployment>::namespaced(client, ns),
        None => Api::all(client),
    };
    Controller::new(api, Config::default())
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "tune reconcile error");
            }
        })
        .await;
}
