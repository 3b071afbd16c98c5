//! The GEMM against `f64` sums, its vector kernel against the portable
//! loop, and its threads against one.

use half::bf16;

use super::*;
use crate::parallel::{ScopedThreads, Serial};

fn values(n: usize, seed: u32) -> Vec<f32> {
    crate::test_values::values(n, seed, 1.0)
}

fn bf(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// `x · Wᵀ + b` in f64 from the bf16 values.
fn reference(
    x: &[bf16],
    rows: usize,
    w: &[bf16],
    n: usize,
    k: usize,
    b: Option<&[f32]>,
) -> Vec<f64> {
    let mut out = vec![0f64; rows * n];
    for r in 0..rows {
        for c in 0..n {
            let dot: f64 = (0..k)
                .map(|i| x[r * k + i].to_f64() * w[c * k + i].to_f64())
                .sum();
            out[r * n + c] = dot + b.map_or(0.0, |b| b[c] as f64);
        }
    }
    out
}

#[test]
fn matches_f64_sums_for_any_rows_and_ragged_columns() {
    let (n, k) = (37, 72);
    let w = bf(&values(n * k, 1));
    let packed = PackedWeight::pack(&w, n, k).unwrap();
    let bias = values(n, 2);
    for rows in [1usize, 3, 16, 17, 40] {
        let x = bf(&values(rows * k, 3 + rows as u32));
        for b in [None, Some(&bias[..])] {
            let want = reference(&x, rows, &w, n, k, b);
            let mut out = vec![0f32; rows * n];
            matmul(&x, rows, &packed, b, &mut out, &mut Vec::new(), &Serial).unwrap();
            for (i, (g, w)) in out.iter().zip(&want).enumerate() {
                assert!(
                    (*g as f64 - w).abs() < 1e-5 * (1.0 + w.abs()),
                    "rows {rows} [{i}]: {g} {w}"
                );
            }
            // bf16 out: the f32 result rounded once.
            let mut out16 = vec![bf16::ZERO; rows * n];
            matmul(&x, rows, &packed, b, &mut out16, &mut Vec::new(), &Serial).unwrap();
            for (g, f) in out16.iter().zip(&out) {
                assert_eq!(*g, bf16::from_f32(*f));
            }
        }
    }
}

#[test]
fn the_vector_kernel_gives_the_portable_loops_bits() {
    if !vectorized() {
        return; // nothing to compare on this CPU
    }
    let k = 50;
    let panel = bf(&values(k * PANEL, 4));
    for rows in 1..=BLOCK_ROWS {
        let xt = values(k * rows, 5);
        assert_eq!(
            micro::panel(true, &xt, rows, &panel, k),
            micro::portable(&xt, rows, &panel, k),
            "{rows} rows"
        );
    }
}

#[test]
fn threads_give_the_same_bits_as_one() {
    let (n, k, rows) = (16 * 40 + 5, 64, 21);
    let w = bf(&values(n * k, 6));
    let packed = PackedWeight::pack(&w, n, k).unwrap();
    let x = bf(&values(rows * k, 7));
    let run = |p: &dyn crate::parallel::Parallel| {
        let mut out = vec![0f32; rows * n];
        matmul(&x, rows, &packed, None, &mut out, &mut Vec::new(), p).unwrap();
        out
    };
    assert_eq!(run(&Serial), run(&ScopedThreads(3)));
}

#[test]
fn mismatched_shapes_are_errors() {
    let w = PackedWeight::pack(&bf(&values(32 * 8, 8)), 32, 8).unwrap();
    let x = bf(&values(16, 9));
    let mut out = vec![0f32; 64];
    assert!(matmul(&x, 2, &w, None, &mut out, &mut Vec::new(), &Serial).is_ok());
    assert!(matmul(&x, 3, &w, None, &mut out, &mut Vec::new(), &Serial).is_err());
    assert!(matmul(
        &x,
        2,
        &w,
        Some(&[0.0; 5]),
        &mut out,
        &mut Vec::new(),
        &Serial
    )
    .is_err());
    assert!(PackedWeight::pack(&bf(&values(10, 1)), 3, 4).is_err());
}
