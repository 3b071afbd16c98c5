//! Threads that a host kernel's tasks run on, as a trait: the engine lends
//! libtorch's OpenMP team (`subserver::openmp`), tests and examples use
//! [`Serial`] or [`ScopedThreads`].

use std::panic::AssertUnwindSafe;

/// Threads to run one step's tasks on.
pub trait Parallel {
    /// Most threads [`Parallel::run`] uses.
    fn threads(&self) -> usize;
    /// Calls `work` on up to [`Parallel::threads`] threads at once (this one
    /// included) and returns once every call has returned: `false` if one
    /// panicked. `work` claims tasks until none are left, so fewer threads
    /// than asked still finish the step.
    fn run(&self, work: &(dyn Fn() + Sync)) -> bool;
}

/// This thread only.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serial;

impl Parallel for Serial {
    fn threads(&self) -> usize {
        1
    }

    fn run(&self, work: &(dyn Fn() + Sync)) -> bool {
        std::panic::catch_unwind(AssertUnwindSafe(work)).is_ok()
    }
}

/// `n` threads spawned for each call (this one among them): for callers
/// without a pool of their own (the engine lends libtorch's OpenMP team).
#[derive(Debug, Clone, Copy)]
pub struct ScopedThreads(pub usize);

impl Parallel for ScopedThreads {
    fn threads(&self) -> usize {
        self.0.max(1)
    }

    fn run(&self, work: &(dyn Fn() + Sync)) -> bool {
        std::thread::scope(|s| {
            let others: Vec<_> = (1..self.threads()).map(|_| s.spawn(work)).collect();
            let mine = std::panic::catch_unwind(AssertUnwindSafe(work)).is_ok();
            // Join every thread before answering, even after a panic here.
            others
                .into_iter()
                .fold(mine, |ok, h| h.join().is_ok() && ok)
        })
    }
}
