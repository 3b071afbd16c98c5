//! `x · Wᵀ (+ b)` on the CPU for bf16 weights, with f32 FMAs: each weight
//! is widened to f32 in registers (a shift: bf16 is the top half of an
//! f32) and multiplied exactly, and sums are kept in f32.
//!
//! Why not oneDNN's bf16 GEMM, which the decoder otherwise uses: where the
//! CPU has AVX-512 but no AMX tiles, oneDNN multiplies with `vdpbf16ps`,
//! which on the build machine (a Sapphire Rapids VM without AMX) issues at
//! half the rate of f32 FMAs (88 against 175 GFLOP/s on one core, measured
//! with a register-only loop). At decode batches of 8 and more the weight
//! GEMMs are bound by that rate, not by memory, so widening and using
//! FMAs does the same multiply-adds in about half the cycles.
//!
//! Layout: the weight is packed once at load into panels of 16 output
//! columns, `[n_panels][k][16]` ([`PackedWeight`]); a panel's 16 weights at
//! one `k` are one 32-byte load. The input is widened and transposed per
//! block of up to 16 rows, `[k][rows]`, so one `k` step is one weight load
//! and up to 16 broadcast FMAs into 16 accumulators (the micro-kernel,
//! [`micro`]). Panels are split over the threads of a [`Parallel`].

#[cfg(target_arch = "x86_64")]
mod avx512;
pub(crate) mod micro;
mod pack;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::elem::KvElem;
use crate::parallel::Parallel;
pub use pack::PackedWeight;

/// Output columns per panel: one 512-bit vector of f32.
pub const PANEL: usize = 16;
/// Input rows per block: one accumulator per row, 16 of the 32 vector
/// registers.
pub const BLOCK_ROWS: usize = 16;

/// Accumulators of one block: `acc[i][c]`, row `i`, column `c` of the panel.
pub(crate) type Acc = [[f32; PANEL]; BLOCK_ROWS];

/// Arguments that do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gemm: {0}")]
pub struct GemmError(pub String);

/// Whether this CPU runs the vector kernel (AVX-512F); elsewhere
/// [`matmul`] runs a portable loop, correct but slow.
pub fn vectorized() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out = x · Wᵀ (+ bias)`, rounded to `O`.
///
/// - `x`: `[rows, k]` row-major;
/// - `w`: the packed `[n, k]` weight;
/// - `bias`: `[n]` in f32, or none;
/// - `out`: `[rows, n]` row-major;
/// - `scratch`: reused across calls (the widened, transposed input).
pub fn matmul<X: KvElem, O: KvElem>(
    x: &[X],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    out: &mut [O],
    scratch: &mut Vec<f32>,
    parallel: &dyn Parallel,
) -> Result<(), GemmError> {
    let (n, k) = (w.n(), w.k());
    if x.len() != rows * k || out.len() != rows * n {
        return Err(GemmError(format!(
            "{rows} rows of a [{n}, {k}] weight need x of {} (got {}) and out of {} (got {})",
            rows * k,
            x.len(),
            rows * n,
            out.len()
        )));
    }
    if bias.is_some_and(|b| b.len() != n) {
        return Err(GemmError(format!(
            "the bias has {} values for {n} columns",
            bias.map_or(0, <[f32]>::len)
        )));
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    widen_blocks(x, rows, k, scratch);
    let xt: &[f32] = scratch;
    let panels = w.panels();
    // About four tasks per thread so a delayed thread's share is picked up,
    // but never under 4 panels a task (the call and output costs).
    let per_task = panels.div_ceil(parallel.threads().max(1) * 4).max(4);
    let tasks = panels.div_ceil(per_task);
    let next = AtomicUsize::new(0);
    let dst = OutPtr(out.as_mut_ptr());
    let vector = vectorized();
    let done = parallel.run(&|| loop {
        let t = next.fetch_add(1, Ordering::Relaxed);
        if t >= tasks {
            break;
        }
        let range = t * per_task..((t + 1) * per_task).min(panels);
        let dst = &dst;
        for p in range {
            for (b, block) in blocks(rows).enumerate() {
                let xb = &xt[b * BLOCK_ROWS * k..b * BLOCK_ROWS * k + block.len() * k];
                let acc = micro::panel(vector, xb, block.len(), w.panel(p), k);
                store(&acc, block, p, n, bias, dst);
            }
        }
    });
    if done {
        Ok(())
    } else {
        Err(GemmError("a task panicked".into()))
    }
}

/// The row blocks of `rows`: whole blocks of [`BLOCK_ROWS`], then the rest.
pub(crate) fn blocks(rows: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..rows.div_ceil(BLOCK_ROWS)).map(move |b| b * BLOCK_ROWS..((b + 1) * BLOCK_ROWS).min(rows))
}

/// `x` widened to f32 and transposed per row block: block `b` of `r` rows
/// at `scratch[b * 16 * k..]`, laid out `[k][r]`.
pub(crate) fn widen_blocks<X: KvElem>(x: &[X], rows: usize, k: usize, scratch: &mut Vec<f32>) {
    // Every value a block reads is written below: grow, never clear.
    let need = rows.div_ceil(BLOCK_ROWS) * BLOCK_ROWS * k;
    if scratch.len() < need {
        scratch.resize(need, 0.0);
    }
    for (b, block) in blocks(rows).enumerate() {
        let r = block.len();
        let dst = &mut scratch[b * BLOCK_ROWS * k..b * BLOCK_ROWS * k + r * k];
        for (i, row) in block.enumerate() {
            for (kk, v) in x[row * k..(row + 1) * k].iter().enumerate() {
                dst[kk * r + i] = v.widen();
            }
        }
    }
}

/// The output's base pointer, shared by the tasks: each writes only the
/// columns of its own panels, so no two write the same element.
pub(crate) struct OutPtr<O>(pub(crate) *mut O);

// SAFETY: tasks write disjoint elements (see `OutPtr`), and `matmul`
// returns only after every task has finished.
#[allow(unsafe_code)] // a raw output pointer shared by the tasks
unsafe impl<O: Send> Sync for OutPtr<O> {}

/// Writes a block's accumulators (`acc[i]` for row `block.start + i`) to
/// panel `p`'s columns of `out`, adding the bias and rounding.
fn store<O: KvElem>(
    acc: &[[f32; PANEL]],
    block: std::ops::Range<usize>,
    p: usize,
    n: usize,
    bias: Option<&[f32]>,
    out: &OutPtr<O>,
) {
    let c0 = p * PANEL;
    let cols = PANEL.min(n - c0);
    for (i, row) in block.enumerate() {
        for c in 0..cols {
            let v = acc[i][c] + bias.map_or(0.0, |b| b[c0 + c]);
            // SAFETY: `row < rows` and `c0 + c < n`, inside `out` of
            // `rows * n` (checked in `matmul`); only this panel's task
            // writes these columns.
            #[allow(unsafe_code)] // disjoint writes through the shared pointer
            unsafe {
                *out.0.add(row * n + c0 + c) = O::narrow(v);
            }
        }
    }
}
