//! The integer dot product in plain Rust: for CPUs without AVX-512 VNNI,
//! for the vector path's odd last block, and as the tests' second path.

use super::act::ActRow;
use super::format::{decode, QuantType};

/// Block `bi` of a weight row (`blk`, its bytes) against the same
/// columns of one activation row: per group of 16,
/// `dx · (a · Σ u·q + c · Σ q)`.
pub(crate) fn block_dot(ty: QuantType, blk: &[u8], act: ActRow<'_>, bi: usize) -> f32 {
    let bw = ty.block_weights();
    let mut codes = [0u8; 256];
    let (mut a, mut c) = ([0f32; 16], [0f32; 16]);
    decode(ty, blk, &mut codes, &mut a, &mut c);
    let w0 = bi * bw;
    let mut acc = 0f32;
    for g in 0..bw / 16 {
        let q = &act.q[w0 + 16 * g..w0 + 16 * g + 16];
        let p: i32 = codes[16 * g..16 * g + 16]
            .iter()
            .zip(q)
            .map(|(&u, &q)| i32::from(u) * i32::from(q))
            .sum();
        let gi = w0 / 16 + g;
        acc += act.d[gi / 2] * (a[g] * p as f32 + c[g] * act.s16[gi] as f32);
    }
    acc
}

/// A whole weight row against one activation row.
pub(crate) fn row_dot(ty: QuantType, row: &[u8], act: ActRow<'_>) -> f32 {
    row.chunks_exact(ty.block_bytes())
        .enumerate()
        .map(|(bi, blk)| block_dot(ty, blk, act, bi))
        .sum()
}
