//! The seam between a task's driver ([`super::task`]) and its per-head
//! arithmetic: the [`HeadMath`] trait, the tile width both sides agree on,
//! and the portable implementation (the AVX-512 one is [`super::avx512`]).

use super::KvElem;

/// Positions scored together (one vector of scores).
pub(crate) const TILE: usize = 16;

/// The per-head arithmetic of a task in one instruction set, for a block
/// of `B` query heads that share a kv head (so each key or value row is
/// loaded once per block). `bases` are the tile's element offsets of its
/// rows in the pool (`keys` and `values` alike), at most [`TILE`]; every
/// `base + head_dim` is in bounds.
pub(crate) trait HeadMath {
    /// `p[i][j] = (q[i] . k_j) * scale` for each `j < bases.len()`.
    fn scores<E: KvElem, const B: usize>(
        q: [&[f32]; B],
        keys: &[E],
        bases: &[usize],
        scale: f32,
        p: &mut [[f32; TILE]; B],
    );
    /// For each head `i` of the block, with `acc_i` the weighted sum of
    /// partial `i` (`states[i * (hd + 2) + 2..][..hd]`):
    /// `acc_i = acc_i * correction[i] + sum_j p[i][j] v_j`.
    fn accumulate<E: KvElem, const B: usize>(
        states: &mut [f32],
        correction: [f32; B],
        p: &[[f32; TILE]; B],
        values: &[E],
        bases: &[usize],
    );
}

/// Folds 16 lanes pairwise (8, 4, 2, 1 apart): four vector steps instead of
/// a chain of fifteen dependent scalar operations.
#[inline(always)]
pub(super) fn tree(mut v: [f32; TILE], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = TILE / 2;
    while w > 0 {
        for i in 0..w {
            v[i] = f(v[i], v[i + w]);
        }
        w /= 2;
    }
    v[0]
}

/// Plain loops the compiler vectorizes as it can.
pub(crate) struct Portable;

/// Independent accumulators of a dot product, so it vectorizes without
/// reassociating one sum.
const LANES: usize = 16;

impl HeadMath for Portable {
    #[inline(always)]
    fn scores<E: KvElem, const B: usize>(
        q: [&[f32]; B],
        keys: &[E],
        bases: &[usize],
        scale: f32,
        p: &mut [[f32; TILE]; B],
    ) {
        for (j, &b) in bases.iter().enumerate() {
            for (i, q) in q.iter().enumerate() {
                let k = &keys[b..b + q.len()];
                let mut acc = [0f32; LANES];
                let (qc, kc) = (q.chunks_exact(LANES), k.chunks_exact(LANES));
                let mut tail = 0.0;
                for (x, y) in qc.remainder().iter().zip(kc.remainder()) {
                    tail += x * y.widen();
                }
                for (x, y) in qc.zip(kc) {
                    for l in 0..LANES {
                        acc[l] += x[l] * y[l].widen();
                    }
                }
                p[i][j] = (tail + tree(acc, |a, b| a + b)) * scale;
            }
        }
    }

    #[inline(always)]
    fn accumulate<E: KvElem, const B: usize>(
        states: &mut [f32],
        correction: [f32; B],
        p: &[[f32; TILE]; B],
        values: &[E],
        bases: &[usize],
    ) {
        let stride = states.len() / B;
        let hd = stride - 2;
        for (i, st) in states.chunks_exact_mut(stride).enumerate() {
            let acc = &mut st[2..];
            for a in acc.iter_mut() {
                *a *= correction[i];
            }
            for (&w, &b) in p[i].iter().zip(bases) {
                for (a, v) in acc.iter_mut().zip(&values[b..b + hd]) {
                    *a += w * v.widen();
                }
            }
        }
    }
}
