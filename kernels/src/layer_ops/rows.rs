//! Rows of a layer op split over a [`Parallel`]'s threads: only where the
//! work is large enough to pay for waking them (prefill steps, not decode).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::parallel::Parallel;

/// Elements a step must have before its rows are split over threads.
const PARALLEL_MIN_ELEMS: usize = 1 << 16;

/// Rows of `n` in tasks for `parallel`: whole rows, about two tasks per
/// thread; a single task where the work (`n * width` elements) is small.
pub(crate) fn row_chunk(parallel: &dyn Parallel, n: usize, width: usize) -> usize {
    let threads = parallel.threads();
    if threads <= 1 || n * width < PARALLEL_MIN_ELEMS {
        return n.max(1);
    }
    n.div_ceil(threads * 2).max(1)
}

/// Calls `f` once per part, on `parallel`'s threads; `false` if a call
/// panicked. A part is whatever a task owns (its rows' output slices).
pub(crate) fn run_parts<A: Send>(
    parallel: &dyn Parallel,
    parts: Vec<A>,
    f: impl Fn(A) + Sync,
) -> bool {
    if parts.len() <= 1 {
        return parts
            .into_iter()
            .all(|p| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(p))).is_ok());
    }
    let cells: Vec<Mutex<Option<A>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let next = AtomicUsize::new(0);
    parallel.run(&|| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(cell) = cells.get(i) else { break };
        // Each cell is taken once, by the thread that claimed its index.
        let part = cell.lock().ok().and_then(|mut p| p.take());
        if let Some(part) = part {
            f(part);
        }
    })
}
