//! An in-process group: one scheduler thread per model, wired by the
//! in-process transport, sharing the group state that delayed batching,
//! lockstep and serial modes need. Benchmarks, tests and `serve` use it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::EngineLimits;
use crate::metrics::SubserverMetrics;
use crate::peer::message::{ModelIdx, Rid};
use crate::peer::tcp::{TcpOptions, TcpTransport};
use crate::peer::transport::{Deliver, PeerSender};
use crate::runner::ModelRunner;
use crate::sampling::SamplingParams;
use crate::scheduler::batching::ExecutionMode;
use crate::scheduler::client::{StreamEvent, SubmitOptions};
use crate::scheduler::core::{Scheduler, SchedulerConfig};
use crate::scheduler::inbox::{inbox, Inbound, InboxSender};
use crate::scheduler::inproc::InProcSender;
use crate::scheduler::shared::GroupShared;
use crate::scheduler::stats::{SchedulerStats, StatsSnapshot};
use crate::tokenizer::TextTokenizer;
use policies::routing::RoutingPolicy;

/// One model of a group, ready to start.
pub struct MemberSpec {
    /// Name in the group (`quick`, `reference`, ...).
    pub name: String,
    /// Its runner (tch or sim).
    pub runner: Box<dyn ModelRunner>,
    /// Its routing policy instance.
    pub policy: Box<dyn RoutingPolicy>,
    /// Tokenizer for stop strings and streamed text (the entry model needs one for text).
    pub tokenizer: Option<TextTokenizer>,
    /// Delayed-batching table (B at concurrency 1, 2, ...).
    pub thresholds: Vec<usize>,
}

/// Group-wide settings.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// Index of the entry model (receives every request).
    pub entry: ModelIdx,
    /// How models take steps.
    pub mode: ExecutionMode,
    /// Bound on a delayed-batching wait.
    pub max_batch_wait: Duration,
    /// Step budgets.
    pub limits: EngineLimits,
    /// Continue on the entry model when a peer fails.
    pub fallback_on_peer_failure: bool,
    /// Pending-at-peer timeout.
    pub peer_timeout: Duration,
    /// How the members reach each other.
    pub transport: GroupTransport,
    /// Steer the policy's threshold so this share of output tokens is
    /// written by models other than the entry (`None`: fixed threshold).
    pub target_large_share: Option<f64>,
    /// The CPU cores an in-process group's models share step by step
    /// (`None`: each keeps the intra-op threads it was given at start).
    pub cpu_cores: Option<usize>,
}

impl GroupSettings {
    /// The scheduler settings of model `model` in a group of `names`.
    pub fn scheduler_config(
        &self,
        model: ModelIdx,
        names: Vec<String>,
        thresholds: Vec<usize>,
    ) -> SchedulerConfig {
        SchedulerConfig {
            model,
            model_names: names,
            mode: self.mode,
            thresholds,
            max_batch_wait: self.max_batch_wait,
            limits: self.limits,
            fallback_on_peer_failure: self.fallback_on_peer_failure,
            peer_timeout: self.peer_timeout,
            target_large_share: self.target_large_share,
        }
    }
}

/// How the members of a group exchange hand-overs.
#[derive(Debug, Clone, Default)]
pub enum GroupTransport {
    /// Straight into each other's inboxes, with shared group state (the
    /// deadlock breaker, lockstep barrier and serial lock).
    #[default]
    InProc,
    /// Over TCP sockets, exactly as separate processes would (no shared
    /// state: delayed batching relies on `max_batch_wait`).
    Tcp {
        /// Listen address of each model, by index.
        addresses: Vec<crate::peer::tcp::PeerAddr>,
        /// Connection tuning.
        options: TcpOptions,
    },
}

impl Default for GroupSettings {
    fn default() -> Self {
        Self {
            entry: 0,
            mode: ExecutionMode::AsyncDelayed,
            max_batch_wait: Duration::from_millis(50),
            limits: EngineLimits::default(),
            fallback_on_peer_failure: false,
            peer_timeout: Duration::from_secs(30),
            transport: GroupTransport::InProc,
            target_large_share: None,
            cpu_cores: None,
        }
    }
}

/// A running group. Dropping it stops every scheduler thread.
pub struct Group {
    inboxes: Vec<InboxSender>,
    threads: Vec<JoinHandle<()>>,
    stats: Vec<Arc<SchedulerStats>>,
    names: Vec<String>,
    entry: ModelIdx,
    next_rid: AtomicU64,
    shared: Arc<GroupShared>,
    alive: Arc<[AtomicBool]>,
    /// TCP transports (kept alive with the group; closed after the threads).
    tcp: Vec<Arc<TcpTransport>>,
}

impl Group {
    /// Starts one scheduler thread per member.
    pub fn start(members: Vec<MemberSpec>, settings: GroupSettings) -> Self {
        Self::start_with_metrics(members, settings, None)
    }

    /// Like [`Group::start`], counting into Prometheus collectors.
    pub fn start_with_metrics(
        members: Vec<MemberSpec>,
        settings: GroupSettings,
        metrics: Option<&SubserverMetrics>,
    ) -> Self {
        let n = members.len();
        let shared = Arc::new(GroupShared::new(n).with_cpu_cores(settings.cpu_cores));
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| inbox()).unzip();
        shared.set_inboxes(senders.clone());
        let alive: Arc<[AtomicBool]> = (0..n).map(|_| AtomicBool::new(true)).collect();
        let inproc: Arc<dyn PeerSender> =
            Arc::new(InProcSender::new(senders.clone(), alive.clone()));
        let mut tcp = Vec::new();
        let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
        let mut threads = Vec::with_capacity(n);
        let mut stats = Vec::with_capacity(n);
        for (i, (member, rx)) in members.into_iter().zip(receivers).enumerate() {
            let st = SchedulerStats::new(n);
            let st = Arc::new(match metrics {
                Some(m) => st.with_metrics(m, &names, i),
                None => st,
            });
            stats.push(st.clone());
            let cfg = settings.scheduler_config(i as ModelIdx, names.clone(), member.thresholds);
            let (transport, group_state) = match &settings.transport {
                GroupTransport::InProc => (inproc.clone(), Some(shared.clone())),
                GroupTransport::Tcp { addresses, options } => {
                    let inbox_tx = senders[i].clone();
                    let deliver: Deliver = Arc::new(move |msg| {
                        let _ = inbox_tx.send(Inbound::Peer(msg));
                    });
                    match TcpTransport::start(
                        i as ModelIdx,
                        addresses.clone(),
                        deliver,
                        options.clone(),
                    ) {
                        Ok(t) => {
                            let t = Arc::new(t);
                            tcp.push(t.clone());
                            (t as Arc<dyn PeerSender>, None)
                        }
                        Err(e) => {
                            tracing::error!(model = %member.name, error = %e, "TCP transport did not start");
                            (inproc.clone(), None)
                        }
                    }
                }
            };
            let sched = Scheduler::new(
                cfg,
                member.runner,
                member.policy,
                member.tokenizer,
                rx,
                transport,
                group_state,
                st,
            );
            let alive = alive.clone();
            let handle = std::thread::Builder::new()
                .name(format!("sched-{}", member.name))
                .spawn(move || {
                    sched.run();
                    alive[i].store(false, Ordering::SeqCst);
                });
            match handle {
                Ok(h) => threads.push(h),
                Err(e) => tracing::error!(error = %e, "cannot spawn a scheduler thread"),
            }
        }
        Self {
            inboxes: senders,
            threads,
            stats,
            names,
            entry: settings.entry,
            next_rid: AtomicU64::new(1),
            shared,
            alive,
            tcp,
        }
    }

    /// Model names by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Submits a request to the entry model; events arrive on the receiver.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
    ) -> (Rid, UnboundedReceiver<StreamEvent>) {
        self.submit_with(prompt, params, SubmitOptions::default())
    }

    /// Like [`Group::submit`], with request-level options (pinning).
    pub fn submit_with(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        options: SubmitOptions,
    ) -> (Rid, UnboundedReceiver<StreamEvent>) {
        let rid = self.next_rid.fetch_add(1, Ordering::Relaxed);
        (
            rid,
            crate::scheduler::inbox::submit(
                &self.inboxes[self.entry as usize],
                rid,
                prompt,
                params,
                options,
            ),
        )
    }

    /// Cancels a request (client gone): every model frees it.
    pub fn cancel(&self, rid: Rid) {
        let _ = self.inboxes[self.entry as usize].send(Inbound::Cancel(rid));
    }

    /// Replaces model `m`'s delayed-batching table without dropping requests.
    pub fn set_thresholds(&self, m: ModelIdx, table: Vec<usize>) {
        if let Some(tx) = self.inboxes.get(m as usize) {
            let _ = tx.send(Inbound::SetThresholds(table));
        }
    }

    /// Runs model `m`'s internal invariant check on its scheduler thread
    /// (between steps): the KV pool's own consistency, and the request
    /// table and the KV bookkeeping agreeing on who holds blocks. `Err`
    /// names the first broken invariant, or says the scheduler did not
    /// answer within `timeout`.
    pub fn check_invariants(&self, m: ModelIdx, timeout: Duration) -> Result<(), String> {
        let tx = self
            .inboxes
            .get(m as usize)
            .ok_or_else(|| format!("no model {m}"))?;
        let (reply, rx) = std::sync::mpsc::channel();
        tx.send(Inbound::CheckInvariants(reply))
            .map_err(|_| format!("model {m}: scheduler gone"))?;
        rx.recv_timeout(timeout)
            .map_err(|e| format!("model {m}: no answer to the invariant check ({e})"))?
    }

    /// Counters of model `m`.
    pub fn stats(&self, m: ModelIdx) -> StatsSnapshot {
        self.stats
            .get(m as usize)
            .map(|s| s.snapshot())
            .unwrap_or_default()
    }

    /// Fires each time model `m`'s scheduler has freed requests and
    /// published its state without them (see [`SchedulerStats::freed`]);
    /// `None` for a model this group does not run.
    pub fn freed(&self, m: ModelIdx) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.stats.get(m as usize).map(|s| s.freed())
    }

    /// Zeroes the rate counters of every model (after a warm-up).
    pub fn reset_counters(&self) {
        for s in &self.stats {
            s.reset_counters();
        }
    }

    /// Tells every scheduler to fail what it holds and exit (the threads are
    /// joined when the group drops).
    pub fn shutdown_requests(&self) {
        for tx in &self.inboxes {
            let _ = tx.send(Inbound::Shutdown);
        }
        self.shared.barrier.abort();
    }

    /// True while model `m`'s scheduler thread runs.
    pub fn is_alive(&self, m: ModelIdx) -> bool {
        self.alive
            .get(m as usize)
            .is_some_and(|a| a.load(Ordering::SeqCst))
    }

    /// Stops one model's scheduler (tests of a peer that goes away).
    pub fn stop_model(&self, m: ModelIdx) {
        if let Some(tx) = self.inboxes.get(m as usize) {
            let _ = tx.send(Inbound::Shutdown);
        }
    }

    /// Active requests in the group.
    pub fn active(&self) -> usize {
        if self.tcp.is_empty() {
            self.shared.active()
        } else {
            self.stats(self.entry).active
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for tx in &self.inboxes {
            let _ = tx.send(Inbound::Shutdown);
        }
        self.shared.barrier.abort();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
        for t in self.tcp.drain(..) {
            t.shutdown();
        }
    }
}
