//! [`super::Method::Tiles`]: panels of 16 weight rows dequantized to bf16
//! in `kernels::gemm`'s panel layout (`[k][16]`) and multiplied by its
//! micro-kernel, every row block of the input against a panel while the
//! panel is in cache.

use half::bf16;

use super::{format, split, Columns, QuantMatrix};
use crate::elem::KvElem;
use crate::gemm::{blocks, micro, OutPtr, BLOCK_ROWS, PANEL};
use crate::parallel::Parallel;

/// `out = x · Wᵀ (+ bias)` with `xt` the input as `gemm::widen_blocks`
/// lays it out, into `cols` of `out`. `false` if a task panicked.
#[allow(clippy::too_many_arguments)] // matmul_columns' arguments, widened
pub(crate) fn run<O: KvElem>(
    xt: &[f32],
    rows: usize,
    w: &QuantMatrix,
    bias: Option<&[f32]>,
    out: &mut [O],
    cols: Columns,
    vector: bool,
    parallel: &dyn Parallel,
) -> bool {
    let (n, k) = (w.n, w.k);
    let dst = OutPtr(out.as_mut_ptr());
    split(n.div_ceil(PANEL), 1, parallel, &|range| {
        let dst = &dst;
        let mut line = vec![0f32; k];
        let mut panel = vec![bf16::ZERO; k * PANEL];
        for p in range {
            for c in 0..PANEL {
                let j = p * PANEL + c;
                if j < n {
                    format::dequantize_row(w.ty, w.row(j), &mut line);
                } else {
                    line.fill(0.0);
                }
                for (kk, v) in line.iter().enumerate() {
                    panel[kk * PANEL + c] = bf16::narrow(*v);
                }
            }
            for (b, block) in blocks(rows).enumerate() {
                let xb = &xt[b * BLOCK_ROWS * k..b * BLOCK_ROWS * k + block.len() * k];
                let acc = micro::panel(vector, xb, block.len(), &panel, k);
                store(&acc, block, p * PANEL, n, bias, cols, dst);
            }
        }
    })
}

/// Writes a block's accumulators (`acc[i]` for row `block.start + i`) to
/// the panel's columns from `c0` (of the product's `n`), placed by `cols`.
fn store<O: KvElem>(
    acc: &[[f32; PANEL]],
    block: std::ops::Range<usize>,
    c0: usize,
    n: usize,
    bias: Option<&[f32]>,
    cols: Columns,
    out: &OutPtr<O>,
) {
    for (i, row) in block.enumerate() {
        for c in 0..PANEL.min(n - c0) {
            let v = acc[i][c] + bias.map_or(0.0, |b| b[c0 + c]);
            // SAFETY: `row < rows` and `first + c0 + c < stride`, inside
            // `out` of `rows * stride` (checked in `matmul_columns`); only
            // this panel's task writes these columns.
            #[allow(unsafe_code)] // disjoint writes through the shared pointer
            unsafe {
                *out.0.add(row * cols.stride + cols.first + c0 + c) = O::narrow(v);
            }
        }
    }
}
