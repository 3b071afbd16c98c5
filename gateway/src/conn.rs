//! Open client connections, counted: a drain's close notice ends early
//! once no client holds a connection (nothing is left to tell to go).
//! hyper gives each connection its own service and drops it when the
//! connection closes, so a guard inside that service counts it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// How many accepted connections are open.
#[derive(Debug, Default)]
pub struct OpenConnections {
    count: AtomicUsize,
    closed: Notify,
}

impl OpenConnections {
    /// Connections open now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Resolves once no connection is open.
    pub async fn none_open(&self) {
        loop {
            let closed = self.closed.notified();
            if self.count() == 0 {
                return;
            }
            closed.await;
        }
    }

    /// One more open connection, until the guard is dropped.
    pub fn opened(self: &Arc<Self>) -> ConnectionGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        ConnectionGuard { open: self.clone() }
    }
}

/// Counts one connection open while it lives.
#[derive(Debug)]
pub struct ConnectionGuard {
    open: Arc<OpenConnections>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if self.open.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.open.closed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_until_dropped_and_wakes_on_the_last() {
        let open = Arc::new(OpenConnections::default());
        let (a, b) = (open.opened(), open.opened());
        assert_eq!(open.count(), 2);
        let waiter = tokio::spawn({
            let open = open.clone();
            async move { open.none_open().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one is still open");
        drop(b);
        waiter.await.unwrap();
        assert_eq!(open.count(), 0);
        open.none_open().await; // at once when none is open
    }
}
