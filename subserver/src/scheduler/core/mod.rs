//! The per-model scheduler: one thread that owns a `ModelRunner`, its KV
//! cache and its request table. Code is request-centric (the policy's hooks),
//! execution is model-centric (one forward per step over every runnable
//! request). The thread waits only on its inbox, so peers and clients never
//! block a step and a step never waits for a peer.
//!
//! The thread's loop and its step decision live here; the rest is split by
//! what happens to a request: [`intake`] (new requests, cancels),
//! [`handover`] (the pen moving between models), [`planning`] (which
//! requests run in the next step, through the shared
//! [`Planner`](crate::engine::planner::Planner)), [`stepping`] (forward,
//! sample, route, commit) and [`endings`] (finish, fail, free).

mod endings;
mod handover;
mod intake;
mod invariants;
mod planning;
mod stepping;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use crate::engine::EngineLimits;
use crate::peer::message::{ModelIdx, PeerMsg, Rid};
use crate::peer::transport::PeerSender;
use crate::runner::ModelRunner;
use crate::sampling::HostLogits;
use crate::scheduler::batching::{should_step, threshold, ExecutionMode, StepInputs};
use crate::scheduler::client::RequestError;
use crate::scheduler::inbox::{Inbound, InboxReceiver};
use crate::scheduler::prompt_memo::PromptMemo;
use crate::scheduler::seq::Seq;
use crate::scheduler::share_control::ShareController;
use crate::scheduler::shared::GroupShared;
use crate::scheduler::stats::SchedulerStats;
use crate::tokenizer::TextTokenizer;
use policies::routing::signal_health::SignalHealth;
use policies::routing::RoutingPolicy;

/// Static settings of one model's scheduler.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// This model's index in the group.
    pub model: ModelIdx,
    /// Names of the group's models, by index.
    pub model_names: Vec<String>,
    /// How models take steps.
    pub mode: ExecutionMode,
    /// Delayed-batching table for this model (B at concurrency 1, 2, ...).
    pub thresholds: Vec<usize>,
    /// Bound on any delayed-batching wait.
    pub max_batch_wait: Duration,
    /// Step budgets.
    pub limits: EngineLimits,
    /// Continue on the entry model when a peer fails.
    pub fallback_on_peer_failure: bool,
    /// A request pending at a peer fails (or falls back) after this long.
    pub peer_timeout: Duration,
    /// Target share of output written by non-entry models (steers the
    /// policy's threshold from the home's commits).
    pub target_large_share: Option<f64>,
}

/// Seed for a request at model `m` (peers draw from a derived stream, so runs repeat).
fn derive_seed(seed: u64, m: ModelIdx) -> u64 {
    let mut x = seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(m as u64 + 1));
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}

/// One model's scheduler.
pub struct Scheduler<R: ModelRunner> {
    cfg: SchedulerConfig,
    runner: R,
    policy: Box<dyn RoutingPolicy>,
    tokenizer: Option<TextTokenizer>,
    inbox: InboxReceiver,
    peers: Arc<dyn PeerSender>,
    shared: Option<Arc<GroupShared>>,
    stats: Arc<SchedulerStats>,
    seqs: HashMap<Rid, Seq>,
    /// Active requests as last reported by a home (for models that are never home).
    reported_active: usize,
    home_active: usize,
    shutting_down: bool,
    share: Option<ShareController>,
    /// The policy's signal failure counts, and how many were exported.
    signal_health: Option<(SignalHealth, [u64; 3])>,
    /// Asleep on the inbox as far as the group's shared state knows.
    asleep: bool,
    /// The step's logits on the host, reused across steps.
    host_logits: HostLogits,
    /// Requests removed (their KV freed) since the stats were last published.
    freed_unpublished: u64,
    /// Intra-op threads this thread last set for a step (a CPU share).
    cpu_threads: Option<usize>,
    /// A step of this thread started OpenMP workers that still run.
    holds_cpu_pool: bool,
    /// Whole-prompt entropies, for prompts the prefix cache serves again.
    prompt_memo: PromptMemo,
}
impl<R: ModelRunner> Scheduler<R> {
    /// A scheduler; run it with [`Scheduler::run`] on its own thread.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: SchedulerConfig,
        runner: R,
        policy: Box<dyn RoutingPolicy>,
        tokenizer: Option<TextTokenizer>,
        inbox: InboxReceiver,
        peers: Arc<dyn PeerSender>,
        shared: Option<Arc<GroupShared>>,
        stats: Arc<SchedulerStats>,
    ) -> Self {
        stats.set_threshold_table(cfg.thresholds.clone());
        let share = cfg
            .target_large_share
            .zip(policy.knob())
            .map(|(target, knob)| ShareController::new(target, knob, cfg.model));
        let signal_health = policy.signal_health().map(|h| (h, [0; 3]));
        Self {
            signal_health,
            cfg,
            runner,
            policy,
            tokenizer,
            inbox,
            peers,
            shared,
            stats,
            seqs: HashMap::new(),
            reported_active: 0,
            home_active: 0,
            shutting_down: false,
            share,
            asleep: false,
            host_logits: HostLogits::default(),
            freed_unpublished: 0,
            cpu_threads: None,
            holds_cpu_pool: false,
            prompt_memo: PromptMemo::default(),
        }
    }

    /// Publishes the queue state, then announces the requests freed since
    /// the last call, so a waiter woken by it reads the state they left.
    fn publish(&mut self) {
        self.publish_queue_stats();
        if self.freed_unpublished > 0 {
            self.stats
                .publish_freed(std::mem::take(&mut self.freed_unpublished));
        }
    }

    fn me(&self) -> ModelIdx {
        self.cfg.model
    }

    fn num_models(&self) -> usize {
        self.cfg.model_names.len()
    }

    /// Active requests in the group as this model knows it.
    fn n_active(&self) -> usize {
        match &self.shared {
            Some(s) => s.active(),
            // A peer's figure counts only while this model holds state for
            // some request: once it holds none (the peer died, or its last
            // message was for a request that already ended) it is stale.
            None if self.seqs.is_empty() => self.home_active,
            None => self.home_active.max(self.reported_active),
        }
    }

    /// Exports the signal failures the policy counted since the last call.
    fn report_signal_failures(&mut self) {
        let Some((health, reported)) = self.signal_health.as_mut() else {
            return;
        };
        let now = health.counts();
        if now != *reported {
            let delta = std::array::from_fn(|i| now[i].saturating_sub(reported[i]));
            *reported = now;
            self.stats.count_signal_failures(health.policy(), delta);
        }
    }

    fn runnable(&self) -> usize {
        self.seqs.values().filter(|s| s.runnable()).count()
    }

    fn oldest_runnable(&self) -> Option<Instant> {
        self.seqs
            .values()
            .filter(|s| s.runnable())
            .map(|s| s.runnable_since)
            .min()
    }

    /// The thread body: wait on the inbox, step when the rules say so.
    pub fn run(mut self) {
        let lockstep = self.cfg.mode == ExecutionMode::Lockstep;
        loop {
            let mut timeout = self.wait_timeout(lockstep);
            if !timeout.is_zero() && !self.go_to_sleep() {
                timeout = Duration::ZERO;
            }
            if !timeout.is_zero() {
                self.release_cpu_pool();
            }
            let received = self.inbox.recv_timeout(timeout);
            self.wake_up();
            match received {
                Ok(msg) => self.handle(msg),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.shutting_down = true,
            }
            while let Ok(msg) = self.inbox.try_recv() {
                self.handle(msg);
            }
            if self.shutting_down {
                self.fail_all(RequestError::Shutdown);
                self.publish();
                if let Some(s) = &self.shared {
                    s.barrier.abort();
                    // Gone for good: it holds nothing, so it counts as asleep.
                    s.sleep(self.me() as usize, false);
                }
                return;
            }
            self.check_peer_timeouts();
            if lockstep {
                let Some(shared) = self.shared.clone() else {
                    warn!("lockstep needs an in-process group; stepping asynchronously");
                    self.try_step();
                    continue;
                };
                if !shared.barrier.wait() {
                    self.shutting_down = true;
                    continue;
                }
                if self.runnable() > 0 {
                    self.step();
                }
                if !shared.barrier.wait() {
                    self.shutting_down = true;
                }
            } else {
                self.try_step();
            }
            self.publish();
        }
    }

    /// Tells the group this thread sleeps on its inbox (parked when it
    /// holds runnable requests it waits to batch). `false`: refused, this
    /// thread is the last awake and must break the deadlock by stepping.
    fn go_to_sleep(&mut self) -> bool {
        let parked = self.cfg.mode == ExecutionMode::AsyncDelayed && self.runnable() > 0;
        self.asleep = match &self.shared {
            Some(s) => s.sleep(self.me() as usize, parked),
            None => true,
        };
        self.asleep
    }

    /// Tells the group this thread is awake (before it handles any message).
    fn wake_up(&mut self) {
        if std::mem::take(&mut self.asleep) {
            if let Some(s) = &self.shared {
                s.wake(self.me() as usize);
            }
        }
    }

    fn try_step(&mut self) {
        if self.decide() {
            if self.below_threshold() {
                self.stats.record_early_start();
            }
            self.step();
        }
    }

    /// Delayed batching would start a step with fewer than `B` requests
    /// while more could still come.
    fn below_threshold(&self) -> bool {
        let runnable = self.runnable();
        let n = self.n_active().max(runnable);
        // The threshold is clamped to `n`: below it, more can come.
        self.cfg.mode == ExecutionMode::AsyncDelayed
            && runnable < threshold(&self.cfg.thresholds, n)
    }

    fn wait_timeout(&self, lockstep: bool) -> Duration {
        let runnable = self.runnable();
        if lockstep {
            return if runnable > 0 {
                Duration::ZERO
            } else {
                Duration::from_micros(200)
            };
        }
        if runnable == 0 {
            return Duration::from_millis(50);
        }
        if self.decide() {
            return Duration::ZERO;
        }
        let waited = self
            .oldest_runnable()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        self.cfg
            .max_batch_wait
            .saturating_sub(waited)
            .max(Duration::from_micros(50))
    }

    /// The delayed-batching decision (see [`should_step`]).
    fn decide(&self) -> bool {
        let runnable = self.runnable();
        match self.cfg.mode {
            ExecutionMode::Async | ExecutionMode::Serial | ExecutionMode::Lockstep => runnable > 0,
            // Requests a peer is still handing out belong to the same event:
            // count them all before comparing with B (its nudge re-decides).
            ExecutionMode::AsyncDelayed if self.shared.as_ref().is_some_and(|s| s.delivering()) => {
                false
            }
            ExecutionMode::AsyncDelayed => {
                let n = self.n_active().max(runnable);
                let waited = self
                    .oldest_runnable()
                    .map(|t| t.elapsed())
                    .unwrap_or_default();
                should_step(StepInputs {
                    runnable,
                    n_active: n,
                    threshold: threshold(&self.cfg.thresholds, n),
                    waited_out: waited >= self.cfg.max_batch_wait,
                    group_quiet: self.shared.as_ref().is_some_and(|s| s.quiet()),
                })
            }
        }
    }

    fn handle(&mut self, msg: Inbound) {
        match msg {
            Inbound::Generate(req) => self.on_generate(req),
            Inbound::Cancel(rid) => self.on_cancel(rid),
            Inbound::Peer(m) => {
                if let Some(s) = &self.shared {
                    s.message_received();
                }
                self.stats.count_message(m.from(), self.me(), m.kind());
                match m {
                    PeerMsg::Req(req) => self.on_peer_req(req),
                    PeerMsg::Progress {
                        rid,
                        from,
                        loc,
                        tokens,
                        logprobs,
                    } => self.on_progress(rid, from, loc as usize, &tokens, logprobs),
                    PeerMsg::Release { rid, n_active, .. } => {
                        self.reported_active = n_active as usize;
                        self.on_release(rid)
                    }
                    PeerMsg::Failed { rid, from, reason } => self.on_peer_failed(rid, from, reason),
                }
            }
            Inbound::SetThresholds(t) => {
                if !t.is_empty() && t.iter().all(|&b| b >= 1) {
                    self.stats.set_threshold_table(t.clone());
                    self.cfg.thresholds = t;
                }
            }
            Inbound::Nudge => {}
            Inbound::Shutdown => self.shutting_down = true,
            Inbound::CheckInvariants(reply) => {
                let _ = reply.send(self.check_invariants());
            }
        }
    }
}
