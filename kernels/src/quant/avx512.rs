//! The integer dot products on AVX-512 VNNI: 64 weights' unsigned codes
//! unpacked into one register, `vpdpbusd` against 64 int8 activations
//! (16 lanes of 4-product sums), the lanes scaled per 32 (per 16 for
//! Q6_K) in f32 and summed. One weight row is unpacked once for up to 4
//! activation rows (`R`), so batched steps share the unpacking.
//!
//! Reached only through `quant::matmul` after [`available`] checked the CPU.
#![allow(unsafe_code)] // SIMD intrinsics on bounds-checked slices.

use std::arch::x86_64::*;

use super::act::ActRow;
use super::format::{scale_min_k4, QuantType};
use super::portable;

/// Whether this CPU has what the kernels below use.
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// Weight row `row` (`k` columns of `ty`) against activation rows `acts`
/// (1 to 4): one sum per activation row, into `out[..acts.len()]`.
pub(crate) fn dot(ty: QuantType, row: &[u8], acts: &[ActRow<'_>], out: &mut [f32; 4]) {
    let nb = row.len() / ty.block_bytes();
    let k = nb * ty.block_weights();
    assert!(!acts.is_empty() && acts.len() <= 4);
    assert!(row.len() == nb * ty.block_bytes());
    for a in acts {
        assert!(a.q.len() == k && a.d.len() == k / 32 && a.s16.len() == k / 16);
    }
    // SAFETY: `available()` was checked by the caller; the assertions
    // bound every load below (whole blocks of `row`, `k` codes per row).
    unsafe {
        match acts.len() {
            1 => by_type::<1>(ty, row, nb, acts, out),
            2 => by_type::<2>(ty, row, nb, acts, out),
            3 => by_type::<3>(ty, row, nb, acts, out),
            _ => by_type::<4>(ty, row, nb, acts, out),
        }
    }
}

const T4_0: u8 = 0;
const T4_1: u8 = 1;
const T5_0: u8 = 2;
const T5_1: u8 = 3;
const T8_0: u8 = 4;

unsafe fn by_type<const R: usize>(
    ty: QuantType,
    row: &[u8],
    nb: usize,
    acts: &[ActRow<'_>],
    out: &mut [f32; 4],
) {
    let acts: &[ActRow<'_>; R] = acts.try_into().expect("R activation rows");
    let sums: [f32; R] = match ty {
        QuantType::Q4_0 => dot32::<R, T4_0>(row, nb, acts),
        QuantType::Q4_1 => dot32::<R, T4_1>(row, nb, acts),
        QuantType::Q5_0 => dot32::<R, T5_0>(row, nb, acts),
        QuantType::Q5_1 => dot32::<R, T5_1>(row, nb, acts),
        QuantType::Q8_0 => dot32::<R, T8_0>(row, nb, acts),
        QuantType::Q4_K => dot_q4_k::<R>(row, nb, acts),
        QuantType::Q6_K => dot_q6_k::<R>(row, nb, acts),
    };
    out[..R].copy_from_slice(&sums);
}

/// Bytes per block of a 32-weight type.
const fn bytes32(t: u8) -> usize {
    match t {
        T4_0 => 18,
        T4_1 => 20,
        T5_0 => 22,
        T5_1 => 24,
        _ => 34,
    }
}

/// The f16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx512f,f16c")]
unsafe fn h2f(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// The 16 bytes at `a` and at `b` split into nibbles, in weight order:
/// `[a & 15, a >> 4, b & 15, b >> 4]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
unsafe fn nibbles2(a: *const u8, b: *const u8) -> __m512i {
    let lo = _mm_loadu_si128(a as *const __m128i);
    let hi = _mm_loadu_si128(b as *const __m128i);
    let y = _mm512_castsi256_si512(_mm256_set_m128i(hi, lo));
    let z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), y);
    let z = _mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    _mm512_and_si512(z, _mm512_set1_epi8(0x0f))
}

/// The 64 codes of two consecutive blocks of 32-weight type `T` at `a`
/// and `b`, and each block's `(a, c)` (see `format`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
unsafe fn unpack2<const T: u8>(a: *const u8, b: *const u8) -> (__m512i, [(f32, f32); 2]) {
    let params = |p: *const u8| {
        let d = h2f(p);
        match T {
            T4_0 => (d, -8.0 * d),
            T5_0 => (d, -16.0 * d),
            T8_0 => (d, -128.0 * d),
            _ => (d, h2f(p.add(2))),
        }
    };
    let codes = match T {
        T4_0 => nibbles2(a.add(2), b.add(2)),
        T4_1 => nibbles2(a.add(4), b.add(4)),
        T5_0 | T5_1 => {
            let (qh, qs) = if T == T5_0 { (2, 6) } else { (4, 8) };
            let bits = |p: *const u8| u64::from(u32::from_le_bytes(*(p.add(qh) as *const [u8; 4])));
            let mask = bits(a) | (bits(b) << 32);
            let fifth = _mm512_maskz_mov_epi8(mask, _mm512_set1_epi8(0x10));
            _mm512_or_si512(nibbles2(a.add(qs), b.add(qs)), fifth)
        }
        _ => {
            let lo = _mm256_loadu_si256(a.add(2) as *const __m256i);
            let hi = _mm256_loadu_si256(b.add(2) as *const __m256i);
            let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
            _mm512_xor_si512(z, _mm512_set1_epi8(0x80u8 as i8))
        }
    };
    (codes, [params(a), params(b)])
}

/// `vpdpbusd` of 64 codes against the 64 activations at `q`.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dp64(u: __m512i, q: *const i8) -> __m512 {
    let x = _mm512_loadu_si512(q as *const _);
    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x))
}

/// A vector of `lo` in lanes 0..8 and `hi` in lanes 8..16 (one per block
/// of 32 of the 64 weights a `dp64` covers).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn halves(lo: f32, hi: f32) -> __m512 {
    _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(lo), _mm512_set1_ps(hi))
}

/// A row of a 32-weight type, two blocks a step; an odd last block takes
/// the portable sum.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn dot32<const R: usize, const T: u8>(
    row: &[u8],
    nb: usize,
    acts: &[ActRow<'_>; R],
) -> [f32; R] {
    let bb = bytes32(T);
    let w = row.as_ptr();
    let mut acc = [_mm512_setzero_ps(); R];
    let mut cst = [0f32; R];
    let mut b = 0;
    while b + 2 <= nb {
        let pa = w.add(b * bb);
        let (u, [(a0, c0), (a1, c1)]) = unpack2::<T>(pa, pa.add(bb));
        for (r, act) in acts.iter().enumerate() {
            let (d0, d1) = (*act.d.get_unchecked(b), *act.d.get_unchecked(b + 1));
            let p = dp64(u, act.q.as_ptr().add(32 * b));
            acc[r] = _mm512_fmadd_ps(p, halves(a0 * d0, a1 * d1), acc[r]);
            cst[r] += c0 * *act.sx.get_unchecked(b) + c1 * *act.sx.get_unchecked(b + 1);
        }
        b += 2;
    }
    let mut out = [0f32; R];
    for (r, act) in acts.iter().enumerate() {
        out[r] = _mm512_reduce_add_ps(acc[r]) + cst[r];
        if b < nb {
            out[r] += portable::block_dot(QUANT32[T as usize], &row[b * bb..(b + 1) * bb], *act, b);
        }
    }
    out
}

/// The [`QuantType`] of each `T*` constant.
const QUANT32: [QuantType; 5] = [
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q5_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
];

/// A Q4_K row: per super-block, four groups of 64 codes (32 bytes of
/// nibbles, low then high), each half with its 6-bit scale; the mins
/// against the activation sums.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q4_k<const R: usize>(row: &[u8], nsb: usize, acts: &[ActRow<'_>; R]) -> [f32; R] {
    let mut acc = [_mm512_setzero_ps(); R];
    let mut cst = [0f32; R];
    let shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    for sb in 0..nsb {
        let blk = &row[sb * 144..(sb + 1) * 144];
        let p = blk.as_ptr();
        let (d, dmin) = (h2f(p), h2f(p.add(2)));
        let mut sc = [0f32; 8];
        let mut mn = [0f32; 8];
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, &blk[4..16]);
            sc[j] = d * f32::from(s);
            mn[j] = dmin * f32::from(m);
        }
        for (r, act) in acts.iter().enumerate() {
            let sx = &act.sx[8 * sb..8 * sb + 8];
            cst[r] -= (0..8).map(|j| mn[j] * sx[j]).sum::<f32>();
        }
        for g in 0..4 {
            let y = _mm256_loadu_si256(p.add(16 + 32 * g) as *const __m256i);
            let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(y), y);
            let u = _mm512_and_si512(_mm512_srlv_epi64(z, shift), _mm512_set1_epi8(0x0f));
            let b = 8 * sb + 2 * g;
            for (r, act) in acts.iter().enumerate() {
                let (d0, d1) = (*act.d.get_unchecked(b), *act.d.get_unchecked(b + 1));
                let s = halves(sc[2 * g] * d0, sc[2 * g + 1] * d1);
                acc[r] = _mm512_fmadd_ps(dp64(u, act.q.as_ptr().add(32 * b)), s, acc[r]);
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]) + cst[r];
    }
    out
}

/// The four int8 scales at `p`, each in 4 lanes (one per 16 codes).
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn scale_lanes(p: *const u8) -> __m512i {
    let four = _mm_cvtsi32_si128(i32::from_le_bytes(*(p as *const [u8; 4])));
    let spread = _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    _mm512_cvtepi8_epi32(_mm_shuffle_epi8(four, spread))
}

/// A Q6_K row: per half super-block, 64 bytes of low nibbles and 32 of
/// high bit pairs make two registers of 64 six-bit codes; the lanes are
/// scaled by their group's int8 scale in integers, by `d · dx` in f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q6_k<const R: usize>(row: &[u8], nsb: usize, acts: &[ActRow<'_>; R]) -> [f32; R] {
    let mut acc = [_mm512_setzero_ps(); R];
    let mut cst = [0f32; R];
    let m4 = _mm512_set1_epi8(0x0f);
    let m2 = _mm512_set1_epi8(0x03);
    let sh_a = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
    let sh_b = _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6);
    for sb in 0..nsb {
        let blk = &row[sb * 210..(sb + 1) * 210];
        let p = blk.as_ptr();
        let d = h2f(p.add(208));
        for (r, act) in acts.iter().enumerate() {
            let s16 = &act.s16[16 * sb..16 * sb + 16];
            let dx = &act.d[8 * sb..8 * sb + 8];
            let mut c = 0f32;
            for g in 0..16 {
                c += dx[g / 2] * (i32::from(blk[192 + g] as i8) * s16[g]) as f32;
            }
            cst[r] -= 32.0 * d * c;
        }
        for h in 0..2 {
            let ql = _mm512_loadu_si512(p.add(64 * h) as *const _);
            let qh = _mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i);
            let qh = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), qh);
            let hi_a = _mm512_and_si512(_mm512_srlv_epi64(qh, sh_a), m2);
            let hi_b = _mm512_and_si512(_mm512_srlv_epi64(qh, sh_b), m2);
            let ua = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16::<4>(hi_a));
            let lo_b = _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4);
            let ub = _mm512_or_si512(lo_b, _mm512_slli_epi16::<4>(hi_b));
            for (c, u) in [ua, ub].into_iter().enumerate() {
                let base = 128 * h + 64 * c; // first weight in the super-block
                let scales = scale_lanes(p.add(192 + base / 16));
                let b = 8 * sb + base / 32;
                for (r, act) in acts.iter().enumerate() {
                    let x = _mm512_loadu_si512(act.q.as_ptr().add(32 * b) as *const _);
                    let dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x);
                    let dots = _mm512_cvtepi32_ps(_mm512_mullo_epi32(dots, scales));
                    let (d0, d1) = (*act.d.get_unchecked(b), *act.d.get_unchecked(b + 1));
                    acc[r] = _mm512_fmadd_ps(dots, halves(d * d0, d * d1), acc[r]);
                }
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]) + cst[r];
    }
    out
}
