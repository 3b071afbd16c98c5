//! Every block type against the product with its dequantized weights
//! (ggml's `dequantize_row_*`, written out below independently of
//! `format`), on both instruction sets and both methods, at shapes with
//! ragged batch tails, odd block counts and row counts off 16 and 64.

use half::{bf16, f16};

use super::*;
use crate::parallel::{ScopedThreads, Serial};

fn h(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// ggml's `dequantize_row_*` for one block, operation for operation.
fn reference_block(ty: QuantType, b: &[u8], y: &mut [f32]) {
    match ty {
        QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q5_0 | QuantType::Q5_1 => {
            let d = h(b, 0);
            let (m, qh, qs) = match ty {
                QuantType::Q4_0 => (0.0, 0, &b[2..18]),
                QuantType::Q4_1 => (h(b, 2), 0, &b[4..20]),
                QuantType::Q5_0 => (0.0, u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22]),
                _ => (
                    h(b, 2),
                    u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
                    &b[8..24],
                ),
            };
            for j in 0..16 {
                let lo = ((qh >> j) << 4) & 0x10;
                let hi = (qh >> (j + 12)) & 0x10;
                let (q0, q1) = ((qs[j] & 0x0f) as u32 | lo, (qs[j] >> 4) as u32 | hi);
                let (y0, y1) = match ty {
                    QuantType::Q4_0 => ((q0 as i32 - 8) as f32 * d, (q1 as i32 - 8) as f32 * d),
                    QuantType::Q5_0 => ((q0 as i32 - 16) as f32 * d, (q1 as i32 - 16) as f32 * d),
                    _ => (q0 as f32 * d + m, q1 as f32 * d + m),
                };
                y[j] = y0;
                y[j + 16] = y1;
            }
        }
        QuantType::Q8_0 => {
            let d = h(b, 0);
            for j in 0..32 {
                y[j] = (b[2 + j] as i8) as f32 * d;
            }
        }
        QuantType::Q4_K => {
            let (d, dmin) = (h(b, 0), h(b, 2));
            for g in 0..4 {
                let (sc1, m1) = format::scale_min_k4(2 * g, &b[4..16]);
                let (sc2, m2) = format::scale_min_k4(2 * g + 1, &b[4..16]);
                let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
                let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
                for l in 0..32 {
                    let q = b[16 + 32 * g + l];
                    y[64 * g + l] = d1 * (q & 0x0f) as f32 - m1;
                    y[64 * g + l + 32] = d2 * (q >> 4) as f32 - m2;
                }
            }
        }
        QuantType::Q6_K => {
            let d = h(b, 208);
            for half in 0..2 {
                let ql = &b[64 * half..];
                let qh = &b[128 + 32 * half..];
                let sc = &b[192 + 8 * half..];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    let o = 128 * half;
                    y[o + l] = d * (sc[is] as i8) as f32 * q1 as f32;
                    y[o + l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                    y[o + l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                    y[o + l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                }
            }
        }
    }
}

/// Random blocks with sane f16 scales (random bytes elsewhere).
fn random_matrix(ty: QuantType, n: usize, k: usize, seed: u32) -> QuantMatrix {
    let nblocks = n * k / ty.block_weights();
    let bb = ty.block_bytes();
    let noise = crate::test_values::values(nblocks * bb, seed, 1.0);
    let mut bytes: Vec<u8> = noise.iter().map(|v| ((v + 1.0) * 127.99) as u8).collect();
    let scales = crate::test_values::values(nblocks * 2, seed + 1, 1.0);
    for (i, blk) in bytes.chunks_exact_mut(bb).enumerate() {
        let (s0, s1) = (scales[2 * i], scales[2 * i + 1]);
        let put = |blk: &mut [u8], at: usize, v: f32| {
            blk[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes())
        };
        match ty {
            QuantType::Q4_1 | QuantType::Q5_1 => {
                put(blk, 0, s0.abs() * 0.02 + 1e-3);
                put(blk, 2, s1 * 0.1);
            }
            QuantType::Q4_K => {
                put(blk, 0, s0.abs() * 0.002 + 1e-4);
                put(blk, 2, s1.abs() * 0.002);
            }
            QuantType::Q6_K => put(blk, 208, s0 * 0.001),
            _ => put(blk, 0, s0 * 0.02),
        }
    }
    QuantMatrix::new(ty, n, k, bytes).unwrap()
}

fn reference_weights(w: &QuantMatrix) -> Vec<f32> {
    let (bw, bb) = (w.ty.block_weights(), w.ty.block_bytes());
    let mut out = vec![0f32; w.n * w.k];
    for (src, dst) in w.bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bw)) {
        reference_block(w.ty, src, dst);
    }
    out
}

/// Inputs with a spread of block maxima (a few large values).
fn input(rows: usize, k: usize, seed: u32) -> Vec<f32> {
    let mut x = crate::test_values::values(rows * k, seed, 1.0);
    for i in (0..x.len()).step_by(45) {
        x[i] *= 8.0;
    }
    x
}

/// Per output: the exact product in f64, `Σ|w·x|`, and the int8 bound
/// `Σ_b max|x_b| / 254 · Σ_{i∈b} |w_i|` (see the module's documentation).
fn expected(w: &[f32], x: &[f32], rows: usize, n: usize, k: usize) -> Vec<(f64, f64, f64)> {
    let mut out = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let (mut dot, mut mag, mut bound) = (0f64, 0f64, 0f64);
            for (xb, wb) in xr.chunks(32).zip(wr.chunks(32)) {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                let wsum: f64 = wb.iter().map(|v| v.abs() as f64).sum();
                bound += amax / 254.0 * wsum;
                for (a, b) in xb.iter().zip(wb) {
                    dot += *a as f64 * *b as f64;
                    mag += (*a as f64 * *b as f64).abs();
                }
            }
            out.push((dot, mag, bound));
        }
    }
    out
}

fn isas() -> Vec<Isa> {
    let mut v = vec![Isa::Portable];
    if Isa::best() == Isa::Avx512 {
        v.push(Isa::Avx512);
    }
    v
}

fn shapes(ty: QuantType) -> Vec<(usize, usize)> {
    let bw = ty.block_weights();
    // One block, an odd count of blocks (the vector path's tail), and a
    // wide row; 37 and 70 rows: off 16 and 64.
    vec![(37, bw), (70, 3 * bw), (5, 7 * bw.max(64))]
}

#[test]
fn every_type_matches_the_dequantized_product_on_every_path() {
    for ty in QuantType::ALL {
        for (si, (n, k)) in shapes(ty).into_iter().enumerate() {
            let w = random_matrix(ty, n, k, 10 + si as u32);
            let wf = reference_weights(&w);
            let bias = crate::test_values::values(n, 3, 1.0);
            for rows in [1usize, 3, 4, 5, 9, 17] {
                let x = input(rows, k, rows as u32);
                let want = expected(&wf, &x, rows, n, k);
                for isa in isas() {
                    for method in [Method::IntDot, Method::Tiles] {
                        let path = Path { isa, method };
                        let b = (rows % 2 == 1).then_some(&bias[..]);
                        let mut out = vec![0f32; rows * n];
                        let mut s = QuantScratch::default();
                        matmul_with(&x, rows, &w, b, &mut out, &mut s, &Serial, path).unwrap();
                        for (i, (g, (dot, mag, bound))) in out.iter().zip(&want).enumerate() {
                            let dot = dot + b.map_or(0.0, |b| b[i % n] as f64);
                            // f32 sums: 1e-5 of the magnitude; int8 inputs:
                            // the bound; bf16 tiles: 2^-8 of the magnitude.
                            let tol = 1e-5 * mag
                                + 1e-6
                                + match method {
                                    Method::IntDot => bound * 1.001,
                                    Method::Tiles => mag / 256.0,
                                };
                            let err = (*g as f64 - dot).abs();
                            assert!(
                                err <= tol,
                                "{ty} [{n},{k}] rows {rows} {path:?} out[{i}]: {g} vs {dot} (err {err}, tol {tol})"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dequantize_matches_ggml_and_vector_path_matches_portable() {
    for ty in QuantType::ALL {
        let (n, k) = (9, 2 * ty.block_weights());
        let w = random_matrix(ty, n, k, 7);
        let (got, want) = (w.dequantize(), reference_weights(&w));
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            assert!((g - r).abs() <= 1e-6 * scale, "{ty} [{i}]: {g} vs {r}");
        }
        // Same int8 input: the two instruction sets differ only in the
        // order of f32 sums.
        let rows = 6;
        let x = input(rows, k, 5);
        let run = |isa| {
            let mut out = vec![0f32; rows * n];
            let path = Path {
                isa,
                method: Method::IntDot,
            };
            let mut s = QuantScratch::default();
            matmul_with(&x, rows, &w, None, &mut out, &mut s, &Serial, path).unwrap();
            out
        };
        let (p, v) = (run(Isa::Portable), run(Isa::best()));
        let want = expected(&want, &x, rows, n, k);
        for ((p, v), (_, mag, _)) in p.iter().zip(&v).zip(&want) {
            assert!(
                ((p - v).abs() as f64) <= 1e-5 * mag + 1e-6,
                "{ty}: {p} vs {v}"
            );
        }
    }
}

#[test]
fn threads_give_the_serial_result_and_bf16_output_rounds_it() {
    let w = random_matrix(QuantType::Q4_K, 130, 512, 4);
    for rows in [1, 16] {
        let x: Vec<bf16> = input(rows, 512, 9)
            .iter()
            .map(|&v| bf16::from_f32(v))
            .collect();
        let path = Path::for_rows(rows);
        let mut one = vec![0f32; rows * 130];
        let mut s = QuantScratch::default();
        matmul_with(&x, rows, &w, None, &mut one, &mut s, &Serial, path).unwrap();
        let mut three = vec![0f32; rows * 130];
        matmul_with(
            &x,
            rows,
            &w,
            None,
            &mut three,
            &mut s,
            &ScopedThreads(3),
            path,
        )
        .unwrap();
        assert_eq!(one, three);
        let mut half = vec![bf16::ZERO; rows * 130];
        matmul(&x, rows, &w, None, &mut half, &mut s, &Serial).unwrap();
        for (h, f) in half.iter().zip(&one) {
            assert_eq!(*h, bf16::from_f32(*f));
        }
    }
}

#[test]
fn bad_matrices_and_arguments_are_refused_with_the_reason() {
    let err = QuantMatrix::new(QuantType::Q4_K, 2, 896, vec![0; 2 * 3 * 144]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Q4_K: 896 columns is not a multiple of the block size 256"
    );
    let err = QuantMatrix::new(QuantType::Q5_0, 2, 896, vec![0; 100]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Q5_0: a [2, 896] matrix takes 1232 bytes, got 100"
    );
    let w = random_matrix(QuantType::Q8_0, 4, 64, 1);
    let mut out = vec![0f32; 4];
    let err = matmul(
        &[0f32; 63],
        1,
        &w,
        None,
        &mut out,
        &mut QuantScratch::default(),
        &Serial,
    );
    assert!(err.unwrap_err().to_string().contains("x of 64 (got 63)"));
    let err = matmul(
        &[0f32; 64],
        1,
        &w,
        Some(&[0.0; 3]),
        &mut out,
        &mut QuantScratch::default(),
        &Serial,
    );
    assert!(err
        .unwrap_err()
        .to_string()
        .contains("3 values for 4 columns"));
    for ty in QuantType::ALL {
        assert_eq!(QuantType::from_ggml_id(ty.ggml_id()), Some(ty));
    }
    assert_eq!(QuantType::from_ggml_id(13), None); // Q5_K: no kernel
}

#[test]
fn parts_of_different_types_fill_their_columns_of_one_output() {
    // A fused projection: a Q4_K part of 40 rows, a Q6_K part of 24.
    let (a, b) = (
        random_matrix(QuantType::Q4_K, 40, 256, 2),
        random_matrix(QuantType::Q6_K, 24, 256, 3),
    );
    let bias = crate::test_values::values(64, 4, 1.0);
    for rows in [1, 5] {
        let x = input(rows, 256, 6);
        for method in [Method::IntDot, Method::Tiles] {
            let path = Path {
                isa: Isa::best(),
                method,
            };
            let mut s = QuantScratch::default();
            let mut fused = vec![f32::NAN; rows * 64];
            for (w, first, bias) in [(&a, 0, &bias[..40]), (&b, 40, &bias[40..])] {
                let cols = Columns { stride: 64, first };
                matmul_columns(
                    &x,
                    rows,
                    w,
                    Some(bias),
                    &mut fused,
                    cols,
                    &mut s,
                    &Serial,
                    path,
                )
                .unwrap();
            }
            for (w, first, bias) in [(&a, 0, &bias[..40]), (&b, 40, &bias[40..])] {
                let mut alone = vec![0f32; rows * w.n()];
                matmul_with(&x, rows, w, Some(bias), &mut alone, &mut s, &Serial, path).unwrap();
                for r in 0..rows {
                    let got = &fused[r * 64 + first..r * 64 + first + w.n()];
                    assert_eq!(got, &alone[r * w.n()..(r + 1) * w.n()], "{method:?}");
                }
            }
        }
    }
    let mut out = vec![0f32; 64];
    let cols = Columns {
        stride: 64,
        first: 30,
    };
    let err = matmul_columns(
        &[0f32; 256],
        1,
        &a,
        None,
        &mut out,
        cols,
        &mut QuantScratch::default(),
        &Serial,
        Path::for_rows(1),
    );
    assert!(err
        .unwrap_err()
        .to_string()
        .contains("columns 30..70 inside rows of 64"));
}
