//! Each op against the textbook formula in `f64` (`f32` elements), and
//! against the op-by-op chain of roundings libtorch makes (`bf16`).

use half::bf16;

use super::*;
use crate::parallel::{ScopedThreads, Serial};

fn values(n: usize, seed: u32) -> Vec<f32> {
    crate::test_values::values(n, seed, 2.0)
}

fn close(got: f32, want: f64, tol: f64) -> bool {
    (got as f64 - want).abs() <= tol * (1.0 + want.abs())
}

fn rms_f64(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * r * *w as f64).collect()
}

#[test]
fn add_rms_norm_matches_the_formula_and_updates_the_residual() {
    let (rows, width) = (5, 40);
    let x0 = values(rows * width, 1);
    let delta = values(rows * width, 2);
    let w = values(width, 3);
    let mut x = x0.clone();
    let mut out = vec![0f32; rows * width];
    add_rms_norm(&mut x, Some(&delta[..]), &w, 1e-5, &mut out, &Serial).unwrap();
    for r in 0..rows {
        let sum: Vec<f64> = (0..width)
            .map(|i| x0[r * width + i] as f64 + delta[r * width + i] as f64)
            .collect();
        let want = rms_f64(&sum, &w, 1e-5);
        for i in 0..width {
            assert!(close(x[r * width + i], sum[i], 1e-6));
            assert!(close(out[r * width + i], want[i], 1e-5), "{r} {i}");
        }
    }
    // Without a residual add the stream is left as it was.
    let mut y = x0.clone();
    add_rms_norm(&mut y, None::<&[f32]>, &w, 1e-5, &mut out, &Serial).unwrap();
    assert_eq!(y, x0);
}

#[test]
fn add_rms_norm_in_bf16_rounds_once_at_the_end() {
    let width = 24;
    let mut x = values(width, 4);
    let delta: Vec<bf16> = values(width, 5).into_iter().map(bf16::from_f32).collect();
    let w = values(width, 6);
    let mut out = vec![bf16::ZERO; width];
    let sum: Vec<f64> = x
        .iter()
        .zip(&delta)
        .map(|(a, b)| (a + b.to_f32()) as f64)
        .collect();
    add_rms_norm(&mut x, Some(&delta[..]), &w, 1e-6, &mut out, &Serial).unwrap();
    for (got, want) in out.iter().zip(rms_f64(&sum, &w, 1e-6)) {
        // One bf16 rounding: within half a step of 2^-8 relative.
        assert!(close(got.to_f32(), want, 1.0 / 256.0), "{got} {want}");
    }
}

#[test]
fn threads_give_the_same_bits_as_one() {
    let (rows, width, inter) = (300, 256, 256);
    let x0 = values(rows * width, 7);
    let delta = values(rows * width, 8);
    let w = values(width, 9);
    let gu = values(rows * 2 * inter, 10);
    let run = |p: &dyn crate::parallel::Parallel| {
        let mut x = x0.clone();
        let mut out = vec![0f32; rows * width];
        add_rms_norm(&mut x, Some(&delta[..]), &w, 1e-6, &mut out, p).unwrap();
        let mut act = vec![0f32; rows * inter];
        swiglu(&gu, inter, &mut act, p).unwrap();
        (x, out, act)
    };
    assert_eq!(run(&Serial), run(&ScopedThreads(3)));
}

#[test]
fn swiglu_matches_the_formula() {
    let (rows, inter) = (3, 20);
    let mut gu = values(rows * 2 * inter, 11);
    gu[0] = 90.0;
    gu[1] = -90.0;
    gu[2] = 0.0;
    let mut out = vec![0f32; rows * inter];
    swiglu(&gu, inter, &mut out, &Serial).unwrap();
    for r in 0..rows {
        for i in 0..inter {
            let g = gu[r * 2 * inter + i] as f64;
            let u = gu[r * 2 * inter + inter + i] as f64;
            let want = g / (1.0 + (-g).exp()) * u;
            assert!(close(out[r * inter + i], want, 1e-6), "{r} {i}");
        }
    }
}

#[test]
fn swiglu_in_bf16_rounds_after_silu_and_after_the_product() {
    let inter = 64;
    let gu: Vec<bf16> = values(2 * inter, 12)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let mut out = vec![bf16::ZERO; inter];
    swiglu(&gu, inter, &mut out, &Serial).unwrap();
    for i in 0..inter {
        let g = gu[i].to_f64();
        let s = bf16::from_f64(g / (1.0 + (-g).exp()));
        let want = bf16::from_f32(s.to_f32() * gu[inter + i].to_f32());
        assert_eq!(out[i], want, "{i}");
    }
}

#[test]
fn mismatched_lengths_are_errors_not_panics() {
    let mut x = vec![0f32; 10];
    let mut out = vec![0f32; 10];
    assert!(add_rms_norm(&mut x, None::<&[f32]>, &[1.0; 4], 1e-6, &mut out, &Serial).is_err());
    let short = [0f32; 8];
    assert!(add_rms_norm(&mut x, Some(&short[..]), &[1.0; 5], 1e-6, &mut out, &Serial).is_err());
    assert!(swiglu(&[0f32; 10], 3, &mut [0f32; 5], &Serial).is_err());
}

/// The transformers formula: `x * cos + rotate_half(x) * sin` with the
/// plain sine, after an optional per-head RMSNorm, in `f64`.
fn rope_f64(x: &[f64], pos: usize, theta: f64) -> Vec<f64> {
    let d = x.len();
    (0..d)
        .map(|i| {
            let f = pos as f64 / theta.powf((2 * (i % (d / 2))) as f64 / d as f64);
            let rot = if i < d / 2 {
                -x[i + d / 2]
            } else {
                x[i - d / 2]
            };
            x[i] * f.cos() + rot * f.sin()
        })
        .collect()
}

fn rope_table(positions: usize, d: usize, theta: f64) -> Vec<f32> {
    let mut t = Vec::new();
    for p in 0..positions {
        let f = |i: usize| p as f64 / theta.powf((2 * (i % (d / 2))) as f64 / d as f64);
        t.extend((0..d).map(|i| f(i).cos() as f32));
        t.extend((0..d).map(|i| {
            let s = f(i).sin() as f32;
            if i < d / 2 {
                -s
            } else {
                s
            }
        }));
    }
    t
}

#[test]
fn qkv_epilogue_normalizes_rotates_and_scatters() {
    let shape = QkvShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
    };
    let (rows, d, theta) = (3, 8, 10_000.0);
    let row = (4 + 2 * 2) * d;
    let qkv = values(rows * row, 13);
    let positions = [0i64, 5, 9];
    let slots = [6i64, 1, 3];
    let table = rope_table(16, d, theta);
    let norm_w = values(6 * d, 14);
    let mut q = vec![0f32; rows * 4 * d];
    let (mut keys, mut values_) = (vec![7f32; 8 * 2 * d], vec![7f32; 8 * 2 * d]);
    qkv_epilogue(
        shape,
        &qkv,
        &positions,
        RopeTable { values: &table },
        Some((&norm_w[..], 1e-6)),
        &slots,
        &mut q,
        &mut keys,
        &mut values_,
    )
    .unwrap();
    for r in 0..rows {
        for h in 0..6 {
            let x: Vec<f64> = qkv[r * row + h * d..r * row + (h + 1) * d]
                .iter()
                .map(|v| *v as f64)
                .collect();
            let normed = rms_f64(&x, &norm_w[h * d..(h + 1) * d], 1e-6);
            let want = rope_f64(&normed, positions[r] as usize, theta);
            let got = if h < 4 {
                &q[(r * 4 + h) * d..(r * 4 + h + 1) * d]
            } else {
                let at = slots[r] as usize * 2 * d + (h - 4) * d;
                &keys[at..at + d]
            };
            for i in 0..d {
                assert!(close(got[i], want[i], 1e-5), "row {r} head {h} [{i}]");
            }
        }
        let at = slots[r] as usize * 2 * d;
        assert_eq!(values_[at..at + 2 * d], qkv[r * row + 6 * d..(r + 1) * row]);
    }
    // Slots no row names are untouched.
    for s in [0usize, 2, 4, 5, 7] {
        assert!(keys[s * 2 * d..(s + 1) * 2 * d].iter().all(|v| *v == 7.0));
        assert!(values_[s * 2 * d..(s + 1) * 2 * d]
            .iter()
            .all(|v| *v == 7.0));
    }
}

#[test]
fn qkv_epilogue_in_bf16_rounds_like_the_op_chain() {
    let shape = QkvShape {
        heads: 1,
        kv_heads: 1,
        head_dim: 8,
    };
    let d = 8;
    let qkv: Vec<bf16> = values(3 * d, 15).into_iter().map(bf16::from_f32).collect();
    let table: Vec<bf16> = rope_table(4, d, 100.0)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    let mut q = vec![0f32; d];
    let (mut k, mut v) = (vec![bf16::ZERO; d], vec![bf16::ZERO; d]);
    qkv_epilogue(
        shape,
        &qkv,
        &[3],
        RopeTable { values: &table },
        None,
        &[0],
        &mut q,
        &mut k,
        &mut v,
    )
    .unwrap();
    let (cos, sin) = table[3 * 2 * d..4 * 2 * d].split_at(d);
    for (h, got) in [(0, q.clone()), (1, k.iter().map(|x| x.to_f32()).collect())] {
        let x = &qkv[h * d..(h + 1) * d];
        for i in 0..d {
            // roll, mul (rounded), addcmul (rounded once).
            let rolled = x[(i + d / 2) % d].to_f32();
            let t = bf16::from_f32(x[i].to_f32() * cos[i].to_f32());
            let want = bf16::from_f32(t.to_f32() + rolled * sin[i].to_f32());
            assert_eq!(got[i], want.to_f32(), "head {h} [{i}]");
        }
    }
    assert_eq!(v, &qkv[2 * d..]);
}

#[test]
fn qkv_epilogue_refuses_slots_and_positions_outside() {
    let shape = QkvShape {
        heads: 1,
        kv_heads: 1,
        head_dim: 4,
    };
    let table = rope_table(2, 4, 100.0);
    let run = |pos: i64, slot: i64| {
        let mut q = vec![0f32; 4];
        let (mut k, mut v) = (vec![0f32; 8], vec![0f32; 8]);
        qkv_epilogue(
            shape,
            &[0f32; 12],
            &[pos],
            RopeTable { values: &table },
            None,
            &[slot],
            &mut q,
            &mut k,
            &mut v,
        )
    };
    assert!(run(1, 1).is_ok());
    assert!(run(2, 1).unwrap_err().0.contains("position 2"));
    assert!(run(0, 2).unwrap_err().0.contains("slot 2"));
    assert!(run(0, -1).unwrap_err().0.contains("slot -1"));
}
