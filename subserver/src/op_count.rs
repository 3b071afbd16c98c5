//! A count of the libtorch calls (ATen ops, views included) the decoder
//! makes, per thread: each call site wraps its result in [`op`]. The
//! decoder reads it around one forward, so `bench-engine` can report the
//! ops of a decode step (the per-op dispatch cost is what a small model at
//! small batch pays most on a CPU).

use std::cell::Cell;

thread_local! {
    static OPS: Cell<u64> = const { Cell::new(0) };
}

/// Counts one libtorch call and passes its result through.
#[inline]
pub fn op<T>(r: T) -> T {
    OPS.with(|c| c.set(c.get() + 1));
    r
}

/// Calls counted on this thread so far.
pub fn ops_so_far() -> u64 {
    OPS.with(Cell::get)
}
