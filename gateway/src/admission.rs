//! Admission per group: at most `max_inflight` sequences generate at once,
//! at most `max_queue` requests wait for a slot; beyond that the answer is
//! 429. Slots and queue places are RAII guards, so a client that leaves
//! while queued or running gives its place back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// Every slot and every queue place is taken.
    #[error("over capacity: {inflight} in flight, {queued} queued")]
    Full {
        /// Sequences in flight.
        inflight: usize,
        /// Requests queued.
        queued: usize,
    },
    /// The request needs more slots than the group has.
    #[error("the request needs {need} slots, the group has {max}")]
    TooLarge {
        /// Slots asked for (prompts × n).
        need: usize,
        /// `max_inflight`.
        max: usize,
    },
}

impl AdmissionError {
    /// Stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Full { .. } => "full",
            Self::TooLarge { .. } => "too_large",
        }
    }
}

/// Slots and queue of one group.
#[derive(Debug)]
pub struct Admission {
    slots: Arc<Semaphore>,
    max_inflight: usize,
    max_queue: usize,
    queued: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

/// Slots held by one running request.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    requests: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A queue place; released when dropped (admitted or client gone).
struct QueuePlace(Arc<AtomicUsize>);

impl Drop for QueuePlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    /// `max_inflight` slots (> 0) and `max_queue` waiting places.
    pub fn new(max_inflight: usize, max_queue: usize) -> Self {
        let max_inflight = max_inflight.max(1);
        Self {
            slots: Arc::new(Semaphore::new(max_inflight)),
            max_inflight,
            max_queue,
            queued: Arc::new(AtomicUsize::new(0)),
            requests: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Takes `need` slots: at once, after waiting in the queue, or not at all.
    pub async fn acquire(&self, need: usize) -> Result<Slot, AdmissionError> {
        if need > self.max_inflight {
            return Err(AdmissionError::TooLarge {
                need,
                max: self.max_inflight,
            });
        }
        let need32 = need as u32;
        let permit = match self.slots.clone().try_acquire_many_owned(need32) {
            Ok(p) => p,
            Err(_) => {
                let before = self.queued.fetch_add(1, Ordering::SeqCst);
                let place = QueuePlace(self.queued.clone());
                if before >= self.max_queue {
                    drop(place);
                    return Err(AdmissionError::Full {
                        inflight: self.inflight(),
                        queued: self.queued(),
                    });
                }
                let permit = self
                    .slots
                    .clone()
                    .acquire_many_owned(need32)
                    .await
                    .map_err(|_| AdmissionError::Full {
                        inflight: self.inflight(),
                        queued: self.queued(),
                    })?;
                drop(place);
                permit
            }
        };
        self.requests.fetch_add(1, Ordering::SeqCst);
        Ok(Slot {
            _permit: permit,
            requests: self.requests.clone(),
        })
    }

    /// Sequences generating now.
    pub fn inflight(&self) -> usize {
        self.max_inflight - self.slots.available_permits()
    }

    /// Requests holding slots now.
    pub fn running_requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Requests waiting for slots.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// The load used to pick a group: in flight plus queued.
    pub fn load(&self) -> usize {
        self.inflight() + self.queued()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_then_queue_then_429() {
        let a = Arc::new(Admission::new(2, 1));
        let s1 = a.acquire(1).await.unwrap();
        let s2 = a.acquire(1).await.unwrap();
        assert_eq!((a.inflight(), a.running_requests()), (2, 2));
        // The third waits in the queue ...
        let a2 = a.clone();
        let waiter = tokio::spawn(async move { a2.acquire(1).await.map(|_| ()) });
        while a.queued() == 0 {
            tokio::task::yield_now().await;
        }
        // ... and the fourth is refused.
        assert!(matches!(
            a.acquire(1).await,
            Err(AdmissionError::Full { .. })
        ));
        assert_eq!(a.queued(), 1);
        drop(s1);
        waiter.await.unwrap().unwrap();
        assert_eq!(a.queued(), 0);
        drop(s2);
        assert_eq!((a.inflight(), a.running_requests()), (0, 0));
        assert!(matches!(
            a.acquire(3).await,
            Err(AdmissionError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_queued_client_that_leaves_frees_its_place() {
        let a = Arc::new(Admission::new(1, 1));
        let _s = a.acquire(1).await.unwrap();
        let a2 = a.clone();
        let waiter = tokio::spawn(async move { a2.acquire(1).await.map(|_| ()) });
        while a.queued() == 0 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(a.queued(), 0);
    }
}
