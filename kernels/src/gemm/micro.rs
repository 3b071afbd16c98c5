//! One panel of one row block: 16 output columns of up to 16 rows, summed
//! over `k`. The AVX-512 build is [`super::avx512`]; this file dispatches
//! to it and holds the portable loop (CPUs without it, and the tests'
//! reference for it).

use half::bf16;

use super::{Acc, BLOCK_ROWS, PANEL};
use crate::elem::KvElem;

/// Sums `xt` (`[k][rows]`, f32) against `panel` (`[k][16]`, bf16):
/// `acc[i][c] = Σ_k xt[k][i] · panel[k][c]`.
pub(crate) fn panel(vector: bool, xt: &[f32], rows: usize, panel: &[bf16], k: usize) -> Acc {
    #[cfg(target_arch = "x86_64")]
    if vector {
        return super::avx512::panel(xt, rows, panel, k);
    }
    let _ = vector;
    portable(xt, rows, panel, k)
}

/// The portable loop.
pub(crate) fn portable(xt: &[f32], rows: usize, panel: &[bf16], k: usize) -> Acc {
    let mut acc = [[0f32; PANEL]; BLOCK_ROWS];
    for kk in 0..k {
        let w = &panel[kk * PANEL..(kk + 1) * PANEL];
        for (i, a) in acc.iter_mut().enumerate().take(rows) {
            let xv = xt[kk * rows + i];
            for (a, w) in a.iter_mut().zip(w) {
                *a = xv.mul_add(w.widen(), *a);
            }
        }
    }
    acc
}
