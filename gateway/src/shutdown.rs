//! Graceful shutdown: stop accepting, let in-flight requests finish until a
//! deadline, then cancel what is left.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// Shared shutdown state.
#[derive(Debug)]
pub struct Shutdown {
    draining: AtomicBool,
    cancel: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// Running, not draining.
    pub fn new() -> Self {
        let (cancel, _) = watch::channel(false);
        Self {
            draining: AtomicBool::new(false),
            cancel,
        }
    }

    /// New requests are refused from now on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// True after [`Self::start_draining`].
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Ends every request still running (the drain deadline passed).
    pub fn cancel_all(&self) {
        self.start_draining();
        self.cancel.send_replace(true);
    }

    /// A receiver whose value turns `true` at [`Self::cancel_all`].
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.cancel.subscribe()
    }

    /// Resolves when [`Self::cancel_all`] is called.
    pub fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.cancel.subscribe();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }
}

/// Resolves on SIGTERM or ctrl-c.
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("ctrl-c: draining"),
        _ = term => tracing::info!("SIGTERM: draining"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancel_wakes_waiters() {
        let s = Shutdown::new();
        let fut = s.cancelled();
        assert!(!s.draining());
        s.cancel_all();
        fut.await;
        assert!(s.draining());
        // A waiter that subscribes after the fact resolves at once.
        s.cancelled().await;
    }
}
