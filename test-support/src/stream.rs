//! Blocking reads of a tokio channel from a plain test thread, each bounded
//! by [`HANG`] (a hang guard, never the normal path).

use tokio::sync::mpsc::UnboundedReceiver;

use crate::HANG;

thread_local! {
    /// One small runtime per test thread, for the timeouts of [`recv`].
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
}

/// The next message of `rx` (`None` once it is closed); fails naming `what`
/// if nothing arrives within [`HANG`].
pub fn recv<T>(rx: &mut UnboundedReceiver<T>, what: &str) -> Option<T> {
    RT.with(|rt| rt.block_on(tokio::time::timeout(HANG, rx.recv())))
        .unwrap_or_else(|_| panic!("hang: {what} within {HANG:?}"))
}
