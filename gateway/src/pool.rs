//! The groups a gateway fronts: pick the healthy one with the fewest
//! requests in flight; replace the list without a restart.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::admission::Admission;
use crate::backend::Backend;

/// One group: its backend and its admission state.
pub struct GroupEntry {
    /// How to reach it.
    pub backend: Arc<dyn Backend>,
    /// Its slots and queue.
    pub admission: Admission,
}

/// The current list of groups.
pub struct Pool {
    groups: RwLock<Vec<Arc<GroupEntry>>>,
    max_inflight: usize,
    max_queue: usize,
    /// Requests waiting for a group while none is listed.
    awaiting: Arc<AtomicUsize>,
}

/// How often a request waiting for a first group looks again (groups come
/// from a file reload and a health check, neither of which signals here).
const GROUP_POLL: Duration = Duration::from_millis(100);

/// One request counted in [`Pool::waiting_for_group`] while it lives.
struct Awaiting(Arc<AtomicUsize>);

impl Awaiting {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pool {
    /// A pool whose groups each get `max_inflight` slots and `max_queue` places.
    pub fn new(max_inflight: usize, max_queue: usize) -> Self {
        Self {
            groups: RwLock::new(Vec::new()),
            max_inflight,
            max_queue,
            awaiting: Arc::default(),
        }
    }

    /// Replaces the list. Groups whose id is unchanged keep their admission
    /// state (and their running requests); removed ones finish what they run.
    pub fn set_backends(&self, backends: Vec<Arc<dyn Backend>>) {
        let mut groups = match self.groups.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let old = std::mem::take(&mut *groups);
        *groups = backends
            .into_iter()
            .map(|b| {
                old.iter()
                    .find(|g| g.backend.id() == b.id())
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(GroupEntry {
                            backend: b,
                            admission: Admission::new(self.max_inflight, self.max_queue),
                        })
                    })
            })
            .collect();
        tracing::info!(groups = groups.len(), "group list set");
    }

    /// A snapshot of the list.
    pub fn groups(&self) -> Vec<Arc<GroupEntry>> {
        match self.groups.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The healthy group with the least load (in flight + queued here,
    /// then what the group itself reports active); `None` when no group is
    /// healthy.
    pub fn pick(&self) -> Option<Arc<GroupEntry>> {
        self.groups()
            .into_iter()
            .filter(|g| g.backend.healthy())
            .min_by_key(|g| (g.admission.load(), g.backend.active()))
    }

    /// [`Self::pick`], except that while no group is listed at all (scaled
    /// to zero, or none ready yet) the request waits up to `wait` for one to
    /// be listed and healthy, counted in [`Self::waiting_for_group`] (the
    /// load the operator scales up from). A listed group that is down is
    /// not waited for: `None` at once.
    pub async fn pick_or_wait(&self, wait: Duration) -> Option<Arc<GroupEntry>> {
        if let Some(g) = self.pick() {
            return Some(g);
        }
        if !self.groups().is_empty() || wait.is_zero() {
            return None;
        }
        let _counted = Awaiting::new(&self.awaiting);
        tracing::info!(?wait, "no group listed: the request waits for one");
        let end = Instant::now() + wait;
        while Instant::now() < end {
            tokio::time::sleep(GROUP_POLL.min(end.saturating_duration_since(Instant::now()))).await;
            if let Some(g) = self.pick() {
                return Some(g);
            }
        }
        None
    }

    /// Requests waiting in [`Self::pick_or_wait`].
    pub fn waiting_for_group(&self) -> usize {
        self.awaiting.load(Ordering::SeqCst)
    }

    /// True when at least one group is healthy.
    pub fn any_healthy(&self) -> bool {
        self.groups().iter().any(|g| g.backend.healthy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Submission;
    use protocol::sampling::SamplingParams;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Fixed {
        id: String,
        up: AtomicBool,
    }

    impl Backend for Fixed {
        fn id(&self) -> &str {
            &self.id
        }
        fn submit(&self, _: Vec<u32>, _: SamplingParams, _: Option<u16>) -> Submission {
            let (_tx, rx) = tokio::sync::mpsc::unbounded_channel();
            Submission::new(rx, Box::new(|| {}))
        }
        fn healthy(&self) -> bool {
            self.up.load(Ordering::SeqCst)
        }
        fn active(&self) -> usize {
            0
        }
    }

    fn fixed(id: &str, up: bool) -> Arc<Fixed> {
        Arc::new(Fixed {
            id: id.into(),
            up: AtomicBool::new(up),
        })
    }

    #[tokio::test]
    async fn picks_the_least_loaded_healthy_group_and_reloads() {
        let pool = Pool::new(4, 0);
        let (a, b, c) = (fixed("a", true), fixed("b", true), fixed("c", false));
        pool.set_backends(vec![a.clone(), b.clone(), c.clone()]);
        let first = pool.pick().unwrap();
        let _slot = first.admission.acquire(2).await.unwrap();
        let second = pool.pick().unwrap();
        assert_ne!(first.backend.id(), second.backend.id());
        assert_ne!(second.backend.id(), "c", "unhealthy groups are skipped");
        // Reload keeps the state of a group that stays.
        pool.set_backends(vec![fixed(first.backend.id(), true), c.clone()]);
        let kept = pool.pick().unwrap();
        assert_eq!(kept.admission.inflight(), 2);
        a.up.store(false, Ordering::SeqCst);
        b.up.store(false, Ordering::SeqCst);
        pool.set_backends(vec![a, b, c]);
        assert!(pool.pick().is_none());
        assert!(!pool.any_healthy());
    }
}
