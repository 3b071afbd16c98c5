//! The per-head arithmetic in AVX-512 intrinsics, for heads a multiple of
//! 16 wide. Why not the portable loops: given a tile of 16 positions, the
//! compiler vectorizes across positions with gathers, or reduces each dot
//! product lane by lane; here each dot is a few FMAs over the head and one
//! reduction, and a key or value row is widened from bf16 in registers.
//!
//! Reached only through `task::run_avx512`, after the CPU was checked.
#![allow(unsafe_code)] // SIMD intrinsics on bounds-checked slices.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::head_math::{HeadMath, TILE};
use super::KvElem;

/// AVX-512 (see the module docs).
pub(crate) struct Avx512;

const VEC: usize = 16;

/// The 16 elements at `at` as `f32`.
///
/// # Safety
/// The CPU must have AVX-512F, and `at` must point at 16 readable elements.
#[inline(always)]
unsafe fn load<E: KvElem>(at: *const E) -> __m512 {
    if E::IS_BF16 {
        // bf16 is the top half of an f32: zero-extend and shift.
        let h = _mm256_loadu_si256(at as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
    } else {
        _mm512_loadu_ps(at as *const f32)
    }
}

/// Checks once per tile what the loads then rely on: every row starting at
/// a base is `hd` elements inside `pool`.
#[inline(always)]
fn rows_in(pool: &[impl Copy], bases: &[usize], hd: usize) {
    assert!(
        bases.iter().all(|&b| b + hd <= pool.len()),
        "a tile's row runs past the pool"
    );
}

/// `[sum(v[0]), sum(v[1]), sum(v[2]), sum(v[3])]`, each over its 16 lanes.
///
/// # Safety
/// The CPU must have AVX-512F.
#[inline(always)]
unsafe fn sum4(v: &[__m512; 4]) -> __m128 {
    // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], and the same of c, d.
    let ab = _mm512_add_ps(
        _mm512_unpacklo_ps(v[0], v[1]),
        _mm512_unpackhi_ps(v[0], v[1]),
    );
    let cd = _mm512_add_ps(
        _mm512_unpacklo_ps(v[2], v[3]),
        _mm512_unpackhi_ps(v[2], v[3]),
    );
    // Per 128-bit lane: [a, b, c, d], each summed over that lane.
    let lanes = _mm512_add_ps(
        _mm512_shuffle_ps::<0b01_00_01_00>(ab, cd),
        _mm512_shuffle_ps::<0b11_10_11_10>(ab, cd),
    );
    // Add the four 128-bit lanes: swap halves, then neighbours.
    let halves = _mm512_add_ps(lanes, _mm512_shuffle_f32x4::<0b01_00_11_10>(lanes, lanes));
    let all = _mm512_add_ps(
        halves,
        _mm512_shuffle_f32x4::<0b10_11_00_01>(halves, halves),
    );
    _mm512_castps512_ps128(all)
}

impl HeadMath for Avx512 {
    #[inline(always)]
    fn scores<E: KvElem, const B: usize>(
        q: [&[f32]; B],
        keys: &[E],
        bases: &[usize],
        scale: f32,
        p: &mut [[f32; TILE]; B],
    ) {
        let hd = q[0].len();
        rows_in(keys, bases, hd);
        // Four positions at a time: each head's four dot products end as
        // four vectors, folded into one `[f32; 4]` by `sum4` (13 vector
        // ops) rather than four full horizontal sums (8 each).
        for (g, quad) in bases.chunks(4).enumerate() {
            // SAFETY: only reached from `task::run_avx512` (the CPU has
            // AVX-512F); a key load reads 16 elements of a row `rows_in`
            // checked, a query load 16 of a slice that holds them (`hd` is
            // a multiple of 16).
            unsafe {
                let mut acc = [[_mm512_setzero_ps(); 4]; B];
                for c in (0..hd).step_by(VEC) {
                    let qv: [__m512; B] =
                        std::array::from_fn(|i| _mm512_loadu_ps(q[i][c..c + VEC].as_ptr()));
                    for (j, &b) in quad.iter().enumerate() {
                        let kv = load(keys.as_ptr().add(b + c));
                        for (a, qv) in acc.iter_mut().zip(qv) {
                            a[j] = _mm512_fmadd_ps(qv, kv, a[j]);
                        }
                    }
                }
                for (p, a) in p.iter_mut().zip(&acc) {
                    let mut sums = [0f32; 4];
                    _mm_storeu_ps(sums.as_mut_ptr(), _mm_mul_ps(sum4(a), _mm_set1_ps(scale)));
                    // A short last quad leaves the tile's masked scores alone.
                    p[g * 4..g * 4 + quad.len()].copy_from_slice(&sums[..quad.len()]);
                }
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
        rows_in(values, bases, hd);
        // One 16-wide column of every head at a time, so the block's sums
        // stay in registers while the tile's value rows stream past.
        for c in (0..hd).step_by(VEC) {
            // SAFETY: as in `scores` (`rows_in` checked the value rows);
            // each partial's sum is `hd` long.
            unsafe {
                let mut o: [__m512; B] = std::array::from_fn(|i| {
                    let at = i * stride + 2 + c;
                    _mm512_mul_ps(
                        _mm512_loadu_ps(states[at..at + VEC].as_ptr()),
                        _mm512_set1_ps(correction[i]),
                    )
                });
                for (j, &b) in bases.iter().enumerate() {
                    let v = load(values.as_ptr().add(b + c));
                    for (o, p) in o.iter_mut().zip(p) {
                        *o = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), v, *o);
                    }
                }
                for (i, o) in o.iter().enumerate() {
                    let at = i * stride + 2 + c;
                    _mm512_storeu_ps(states[at..at + VEC].as_mut_ptr(), *o);
                }
            }
        }
    }
}
