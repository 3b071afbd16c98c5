//! The micro-kernel in AVX-512F intrinsics: per `k`, one 32-byte load of
//! the panel's 16 bf16 weights widened in registers, then one broadcast
//! FMA per row into that row's accumulator (16 rows: 16 of the 32 vector
//! registers). Rows are a const parameter so each block size gets its own
//! fully unrolled loop.
//!
//! Reached only through `micro::panel`, after `gemm::vectorized` checked
//! the CPU.
#![allow(unsafe_code)] // SIMD intrinsics on bounds-checked slices.

use std::arch::x86_64::*;

use half::bf16;

use super::{Acc, BLOCK_ROWS, PANEL};

/// Weight steps (32 bytes each) the loop prefetches ahead: 4 KiB. The
/// weights stream from memory once per call and the hardware prefetcher
/// alone left the loop waiting on loads; on the build machine this took
/// 30 layers' GEMMs of SmolLM2 at 16 rows from 24.6 to 18.7 ms (2
/// threads), flat from 2 to 8 KiB.
const PREFETCH: usize = 128;

/// As `micro::panel`, for a CPU with AVX-512F.
pub(crate) fn panel(xt: &[f32], rows: usize, panel: &[bf16], k: usize) -> Acc {
    assert!(xt.len() >= k * rows && panel.len() >= k * PANEL && rows <= BLOCK_ROWS);
    // SAFETY: the caller checked AVX-512F (`gemm::vectorized`); the
    // assertion above bounds every load of `run`.
    unsafe {
        match rows {
            16 => run::<16>(xt, panel, k),
            15 => run::<15>(xt, panel, k),
            14 => run::<14>(xt, panel, k),
            13 => run::<13>(xt, panel, k),
            12 => run::<12>(xt, panel, k),
            11 => run::<11>(xt, panel, k),
            10 => run::<10>(xt, panel, k),
            9 => run::<9>(xt, panel, k),
            8 => run::<8>(xt, panel, k),
            7 => run::<7>(xt, panel, k),
            6 => run::<6>(xt, panel, k),
            5 => run::<5>(xt, panel, k),
            4 => run::<4>(xt, panel, k),
            3 => run::<3>(xt, panel, k),
            2 => run::<2>(xt, panel, k),
            _ => run::<1>(xt, panel, k),
        }
    }
}

/// # Safety
/// AVX-512F; `xt` holds `k * R` values and `panel` `k * 16`.
#[target_feature(enable = "avx512f")]
unsafe fn run<const R: usize>(xt: &[f32], panel: &[bf16], k: usize) -> Acc {
    let mut acc = [_mm512_setzero_ps(); R];
    let wp = panel.as_ptr() as *const __m256i;
    let xp = xt.as_ptr();
    for kk in 0..k {
        if kk % 2 == 0 {
            // One cache line per two steps, PREFETCH steps ahead: into the
            // next panel near the end (panels are contiguous). A prefetch
            // past the allocation does not fault.
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(kk + PREFETCH) as *const i8);
        }
        let raw = _mm256_loadu_si256(wp.add(kk));
        let w = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
        let x = xp.add(kk * R);
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm512_fmadd_ps(_mm512_set1_ps(*x.add(i)), w, *a);
        }
    }
    let mut out = [[0f32; PANEL]; BLOCK_ROWS];
    for (o, a) in out.iter_mut().zip(acc) {
        _mm512_storeu_ps(o.as_mut_ptr(), a);
    }
    out
}
