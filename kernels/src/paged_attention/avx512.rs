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

use super::task::{HeadMath, TILE};
use super::KvElem;

/// AVX-512 (see the module docs).
pub(crate) struct Avx512;

const VEC: usize = 16;

/// 16 elements from the start of `row` (at least 16 long) as `f32`.
///
/// # Safety
/// The CPU must have AVX-512F.
#[inline(always)]
unsafe fn load<E: KvElem>(row: &[E]) -> __m512 {
    debug_assert!(row.len() >= VEC);
    if E::IS_BF16 {
        // bf16 is the top half of an f32: zero-extend and shift.
        let h = _mm256_loadu_si256(row.as_ptr() as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
    } else {
        _mm512_loadu_ps(row.as_ptr() as *const f32)
    }
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
        for (j, &b) in bases.iter().enumerate() {
            let k = &keys[b..b + hd];
            // SAFETY: only reached from `task::run_avx512` (the CPU has
            // AVX-512F); every load reads 16 elements of a slice checked
            // to hold them (`hd` is a multiple of 16).
            unsafe {
                let mut acc = [_mm512_setzero_ps(); B];
                for c in (0..hd).step_by(VEC) {
                    let kv = load(&k[c..c + VEC]);
                    for (a, q) in acc.iter_mut().zip(&q) {
                        *a = _mm512_fmadd_ps(_mm512_loadu_ps(q[c..c + VEC].as_ptr()), kv, *a);
                    }
                }
                for (p, a) in p.iter_mut().zip(acc) {
                    p[j] = _mm512_reduce_add_ps(a) * scale;
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
        // One 16-wide column of every head at a time, so the block's sums
        // stay in registers while the tile's value rows stream past.
        for c in (0..hd).step_by(VEC) {
            // SAFETY: as in `scores`; each partial's sum is `hd` long.
            unsafe {
                let mut o: [__m512; B] = std::array::from_fn(|i| {
                    let at = i * stride + 2 + c;
                    _mm512_mul_ps(
                        _mm512_loadu_ps(states[at..at + VEC].as_ptr()),
                        _mm512_set1_ps(correction[i]),
                    )
                });
                for (j, &b) in bases.iter().enumerate() {
                    let v = load(&values[b + c..b + c + VEC]);
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
