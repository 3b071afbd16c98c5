//! One model of a group running in its own process (or pod): its scheduler
//! thread, its TCP transport to the other models, its counters. The entry
//! model's process also takes client requests. With every model in one
//! process, use [`Group`](crate::scheduler::group::Group) instead.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::metrics::SubserverMetrics;
use crate::peer::message::{ModelIdx, Rid};
use crate::peer::tcp::{TcpOptions, TcpTransport};
use crate::peer::transport::{Deliver, PeerSender, TransportError};
use crate::sampling::SamplingParams;
use crate::scheduler::client::StreamEvent;
use crate::scheduler::core::Scheduler;
use crate::scheduler::group::{GroupSettings, MemberSpec};
use crate::scheduler::inbox::{inbox, Inbound, InboxSender};
use crate::scheduler::stats::{SchedulerStats, StatsSnapshot};

/// A single model's subserver, talking TCP to its peers.
pub struct MemberProcess {
    index: ModelIdx,
    names: Vec<String>,
    inbox: InboxSender,
    thread: Option<JoinHandle<()>>,
    stats: Arc<SchedulerStats>,
    transport: Arc<TcpTransport>,
    alive: Arc<AtomicBool>,
    next_rid: AtomicU64,
}

impl MemberProcess {
    /// Starts model `index` of a group whose models listen at `addresses`.
    pub fn start(
        member: MemberSpec,
        index: ModelIdx,
        names: Vec<String>,
        settings: &GroupSettings,
        addresses: Vec<crate::peer::tcp::PeerAddr>,
        options: TcpOptions,
        metrics: Option<&SubserverMetrics>,
    ) -> Result<Self, TransportError> {
        let (tx, rx) = inbox();
        let deliver_tx = tx.clone();
        let deliver: Deliver = Arc::new(move |msg| {
            let _ = deliver_tx.send(Inbound::Peer(msg));
        });
        let transport = Arc::new(TcpTransport::start(index, addresses, deliver, options)?);
        let stats = SchedulerStats::new(names.len());
        let stats = Arc::new(match metrics {
            Some(m) => stats.with_metrics(m, &names, index as usize),
            None => stats,
        });
        let cfg = settings.scheduler_config(index, names.clone(), member.thresholds);
        let sched = Scheduler::new(
            cfg,
            member.runner,
            member.policy,
            member.tokenizer,
            rx,
            transport.clone() as Arc<dyn PeerSender>,
            None,
            stats.clone(),
        );
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sched-{}", member.name))
            .spawn(move || {
                sched.run();
                flag.store(false, Ordering::SeqCst);
            })
            .map_err(|e| {
                TransportError::Unreachable(index, format!("cannot spawn the scheduler: {e}"))
            })?;
        Ok(Self {
            index,
            names,
            inbox: tx,
            thread: Some(thread),
            stats,
            transport,
            alive,
            next_rid: AtomicU64::new(1),
        })
    }

    /// This model's index.
    pub fn index(&self) -> ModelIdx {
        self.index
    }

    /// Names of the group's models.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Submits a request (only the entry model's process takes requests).
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        options: crate::scheduler::client::SubmitOptions,
    ) -> (Rid, UnboundedReceiver<StreamEvent>) {
        let rid = self.next_rid.fetch_add(1, Ordering::Relaxed);
        (
            rid,
            crate::scheduler::inbox::submit(&self.inbox, rid, prompt, params, options),
        )
    }

    /// Cancels a request (client gone): every model frees it.
    pub fn cancel(&self, rid: Rid) {
        let _ = self.inbox.send(Inbound::Cancel(rid));
    }

    /// Replaces this model's delayed-batching table.
    pub fn set_thresholds(&self, table: Vec<usize>) {
        let _ = self.inbox.send(Inbound::SetThresholds(table));
    }

    /// This model's counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// True while the scheduler thread runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Fires each time the scheduler has freed requests and published its
    /// state without them (see [`SchedulerStats::freed`]).
    pub fn freed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.stats.freed()
    }

    /// Fires on every successful (re)connect to peer `m` (see
    /// [`TcpTransport::connects`]).
    pub fn peer_connects(&self, m: ModelIdx) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.transport.connects(m)
    }

    /// Whether a peer is reachable over TCP.
    pub fn peer_up(&self, m: ModelIdx) -> bool {
        m == self.index || self.transport.is_up(m)
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        let _ = self.inbox.send(Inbound::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.transport.shutdown();
    }
}
