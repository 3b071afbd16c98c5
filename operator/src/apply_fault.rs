//! Fault injection for the chaos test: with
//! `TOKENROUTER_OPERATOR_CRASH_AFTER_APPLIES=N` the process aborts (as a
//! `kill -9` would stop it) right before its (N+1)-th server-side apply, i.e.
//! in the middle of a reconcile. Unset (always, outside tests) it does nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The env var that arms the fault.
pub const CRASH_ENV: &str = "TOKENROUTER_OPERATOR_CRASH_AFTER_APPLIES";

static APPLIES: AtomicUsize = AtomicUsize::new(0);

/// Counts one apply; aborts the process when the armed count is reached.
pub fn before_apply() {
    static LIMIT: OnceLock<Option<usize>> = OnceLock::new();
    let limit = *LIMIT.get_or_init(|| std::env::var(CRASH_ENV).ok()?.parse().ok());
    if let Some(limit) = limit {
        if APPLIES.fetch_add(1, Ordering::SeqCst) >= limit {
            eprintln!("{CRASH_ENV}={limit}: aborting mid-reconcile");
            std::process::abort();
        }
    }
}
