//! Graceful shutdown, as a state machine shared by every handler:
//!
//! ```text
//! Serving --SIGTERM--> Closing --notice over, or no connection open--> Draining --deadline--> Cancelled
//! ```
//!
//! - **Closing**: requests are still served, but every response carries
//!   `Connection: close` and readiness fails. A client holding a kept-alive
//!   connection to this replica (a Service keeps established connections on
//!   the old pod) sends its next request here, gets its answer, and opens
//!   a new connection, which lands on a replica that is staying. Closing an
//!   idle connection instead races a client that is just sending on it, and
//!   that client sees a connection error for a request that never arrived.
//! - **Draining**: new requests are refused (503), the listener closes, and
//!   idle connections close: those left were idle for the whole notice,
//!   longer than a client keeps an idle connection (httpx: 5 s).
//! - **Cancelled**: the drain deadline passed; what still runs is ended.

use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::watch;

const SERVING: u8 = 0;
const CLOSING: u8 = 1;
const DRAINING: u8 = 2;

/// Shared shutdown state.
#[derive(Debug)]
pub struct Shutdown {
    phase: AtomicU8,
    cancel: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// Serving.
    pub fn new() -> Self {
        let (cancel, _) = watch::channel(false);
        Self {
            phase: AtomicU8::new(SERVING),
            cancel,
        }
    }

    fn advance(&self, to: u8) {
        self.phase.fetch_max(to, Ordering::SeqCst);
    }

    /// Responses carry `Connection: close` and readiness fails from now on;
    /// requests are still served.
    pub fn start_closing(&self) {
        self.advance(CLOSING);
    }

    /// New requests are refused from now on.
    pub fn start_draining(&self) {
        self.advance(DRAINING);
    }

    /// True after [`Self::start_closing`] (and in every later phase).
    pub fn closing(&self) -> bool {
        self.phase.load(Ordering::SeqCst) >= CLOSING
    }

    /// True after [`Self::start_draining`].
    pub fn draining(&self) -> bool {
        self.phase.load(Ordering::SeqCst) >= DRAINING
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
        assert!(s.draining() && s.closing());
        // A waiter that subscribes after the fact resolves at once.
        s.cancelled().await;
    }

    #[test]
    fn phases_only_move_forward() {
        let s = Shutdown::new();
        assert!(!s.closing() && !s.draining());
        s.start_closing();
        assert!(s.closing() && !s.draining());
        s.start_draining();
        s.start_closing();
        assert!(
            s.closing() && s.draining(),
            "a late start_closing keeps Draining"
        );
    }
}
