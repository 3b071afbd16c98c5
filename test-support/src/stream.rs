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
    // The timer is made inside `block_on`: it needs the runtime's context.
    RT.with(|rt| rt.block_on(async { tokio::time::timeout(HANG, rx.recv()).await }))
        .unwrap_or_else(|_| panic!("hang: {what} within {HANG:?}"))
}

/// Waits for the next change of `rx`; fails naming `what` if its sender is
/// gone or nothing changes within [`HANG`].
pub fn changed<T>(rx: &mut tokio::sync::watch::Receiver<T>, what: &str) {
    RT.with(|rt| rt.block_on(async { tokio::time::timeout(HANG, rx.changed()).await }))
        .unwrap_or_else(|_| panic!("hang: {what} within {HANG:?}"))
        .unwrap_or_else(|_| panic!("{what}: its sender is gone"));
}

#[cfg(test)]
mod tests {
    #[test]
    fn messages_then_the_end_of_the_channel() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(7).unwrap();
        drop(tx);
        assert_eq!(super::recv(&mut rx, "a message"), Some(7));
        assert_eq!(super::recv(&mut rx, "the end"), None);
    }
}
