//! Draining before exit (SIGTERM, as a pod's PID 1 gets it): from the
//! moment it starts, readiness (`/health`) fails so the gateway and the
//! endpoints stop sending work, and new `/internal/generate` calls get a
//! 503; what is in flight finishes until a deadline, then is cancelled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::http::{AdminApi, Ingress, ThresholdTable};
use crate::peer::message::Rid;
use crate::sampling::SamplingParams;
use crate::scheduler::client::{StreamEvent, SubmitOptions};

/// Why readiness fails and new requests are refused while draining.
pub const DRAINING: &str = "draining: the process is shutting down";

/// Whether the process is draining; shared by its HTTP surface.
#[derive(Debug, Clone, Default)]
pub struct Drain(Arc<AtomicBool>);

impl Drain {
    /// Starts draining (idempotent).
    pub fn start(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// True once [`Self::start`] was called.
    pub fn draining(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Starts draining, then waits until `inflight()` is 0 or `deadline`
    /// passed; returns what was still in flight (0: all finished).
    pub fn wait_idle(&self, deadline: Duration, inflight: impl Fn() -> usize) -> usize {
        self.start();
        let end = Instant::now() + deadline;
        loop {
            let n = inflight();
            if n == 0 || Instant::now() >= end {
                return n;
            }
            // The schedulers publish their queue sizes with each step; a
            // short sleep between reads keeps this loop off their cores.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An [`AdminApi`] whose readiness fails while draining.
pub struct DrainingAdmin {
    inner: Arc<dyn AdminApi>,
    drain: Drain,
}

impl DrainingAdmin {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn AdminApi>, drain: Drain) -> Self {
        Self { inner, drain }
    }
}

impl AdminApi for DrainingAdmin {
    fn alive(&self) -> Result<(), String> {
        self.inner.alive()
    }
    fn healthy(&self) -> Result<(), String> {
        if self.drain.draining() {
            return Err(DRAINING.into());
        }
        self.inner.healthy()
    }
    fn thresholds(&self) -> ThresholdTable {
        self.inner.thresholds()
    }
    fn set_thresholds(&self, t: ThresholdTable) -> Result<ThresholdTable, String> {
        self.inner.set_thresholds(t)
    }
    fn snapshot(&self) -> serde_json::Value {
        self.inner.snapshot()
    }
    fn routing_threshold(&self) -> Option<f64> {
        self.inner.routing_threshold()
    }
    fn set_routing_threshold(&self, value: f64) -> Result<f64, String> {
        self.inner.set_routing_threshold(value)
    }
    fn text_dir(&self) -> Option<&crate::http::TextDir> {
        // Static files: still served while draining.
        self.inner.text_dir()
    }
}

/// An [`Ingress`] that refuses new requests while draining.
pub struct DrainingIngress {
    inner: Arc<dyn Ingress>,
    drain: Drain,
}

impl DrainingIngress {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Ingress>, drain: Drain) -> Self {
        Self { inner, drain }
    }
}

impl Ingress for DrainingIngress {
    fn accepting(&self) -> Result<(), String> {
        if self.drain.draining() {
            Err(DRAINING.into())
        } else {
            Ok(())
        }
    }
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        options: SubmitOptions,
    ) -> (Rid, UnboundedReceiver<StreamEvent>) {
        self.inner.submit(prompt, params, options)
    }
    fn cancel(&self, rid: Rid) {
        self.inner.cancel(rid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn waits_for_the_work_to_end_or_the_deadline() {
        let drain = Drain::default();
        let left = Arc::new(AtomicUsize::new(3));
        let l = left.clone();
        // Each look finds one request fewer: all finish before the deadline.
        let n = drain.wait_idle(Duration::from_secs(600), move || {
            l.fetch_sub(1, Ordering::SeqCst).saturating_sub(1)
        });
        assert_eq!(n, 0);
        assert!(drain.draining());
        // Work that never ends is left to cancel at the deadline.
        assert_eq!(drain.wait_idle(Duration::ZERO, || 2), 2);
    }
}
