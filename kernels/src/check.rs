//! Equivalence checks of a kernel against the CPU references: the test rows
//! and the comparison rules the GPU check applies (`kernel-check`).
//!
//! Rules: a float passes when its relative error (against
//! `max(|reference|, 1e-2)`, so values near 0 are compared absolutely) is
//! within the tolerance; equal infinities pass; `NaN` passes only where the
//! reference is `NaN` too, and a `NaN` error never passes ([`within`] is
//! `err <= tol`, false for `NaN`). Top-k must be the same
//! indices in the same order with the same values.

use crate::sampling::SampleParams;
use crate::signals::RoutingSignals;

/// Whether an error is within `tol`; a `NaN` error never is.
pub fn within(err: f32, tol: f32) -> bool {
    err <= tol
}

/// Relative error of `got` against `want` (see the module docs); `0` for
/// matching `NaN`s or infinities, `NaN` for any other `NaN` mismatch.
pub fn rel_err(got: f32, want: f32) -> f32 {
    match (got.is_nan(), want.is_nan()) {
        (true, true) => return 0.0,
        (true, false) | (false, true) => return f32::NAN,
        _ => {}
    }
    if got.is_infinite() || want.is_infinite() {
        return if got == want { 0.0 } else { f32::NAN };
    }
    (got - want).abs() / want.abs().max(1e-2)
}

/// Checks one row's signals; the error names the first field that differs.
pub fn compare_signals(
    got: &RoutingSignals,
    want: &RoutingSignals,
    tol: f32,
) -> Result<f32, String> {
    let mut worst = 0f32;
    for (name, g, w) in [
        ("max_logit", got.max_logit, want.max_logit),
        ("max_prob", got.max_prob, want.max_prob),
        ("logsumexp", got.logsumexp, want.logsumexp),
        ("entropy", got.entropy, want.entropy),
        (
            "normalized_entropy",
            got.normalized_entropy,
            want.normalized_entropy,
        ),
    ] {
        let e = rel_err(g, w);
        if !within(e, tol) {
            return Err(format!("{name}: got {g}, want {w} (rel err {e})"));
        }
        worst = worst.max(e);
    }
    if got.argmax != want.argmax {
        return Err(format!(
            "argmax: got {:?}, want {:?}",
            got.argmax, want.argmax
        ));
    }
    if got.top_k != want.top_k {
        return Err(format!("top_k: got {:?}, want {:?}", got.top_k, want.top_k));
    }
    Ok(worst)
}

/// A small deterministic generator (xorshift64*), so the check needs no RNG crate.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Approximately normal (sum of four uniforms, centred and scaled).
    fn normal(&mut self) -> f32 {
        ((0..4).map(|_| self.unit()).sum::<f32>() - 2.0) * 1.732
    }
}

/// `rows` rows of `cols` logits: mostly logit-like rows at several scales,
/// plus edge rows (masked entries, exact ties, a `NaN`, a `+inf`, all
/// masked) so that every rule of the references is exercised.
pub fn test_rows(rows: usize, cols: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    (0..rows)
        .map(|r| {
            let scale = [0.5f32, 2.0, 6.0, 20.0][r % 4];
            let mut row: Vec<f32> = (0..cols).map(|_| g.normal() * scale).collect();
            let pick = |g: &mut Gen| (g.next() % cols.max(1) as u64) as usize;
            match r % 8 {
                1 => {
                    for _ in 0..cols / 3 {
                        let i = pick(&mut g);
                        row[i] = f32::NEG_INFINITY;
                    }
                }
                3 if cols > 2 => {
                    // A tie at the top: the lower index must win everywhere.
                    let (a, b) = (pick(&mut g), pick(&mut g));
                    let top = row.iter().cloned().fold(f32::MIN, f32::max) + 1.0;
                    row[a] = top;
                    row[b] = top;
                }
                5 if r % 16 == 5 => {
                    let i = pick(&mut g);
                    row[i] = f32::NAN;
                }
                7 if r % 32 == 7 => {
                    let i = pick(&mut g);
                    row[i] = f32::INFINITY;
                }
                _ => {}
            }
            if r == rows - 1 && rows > 8 {
                row.fill(f32::NEG_INFINITY);
            }
            row
        })
        .collect()
}

/// Rounds every entry to bf16 and back (what a bf16 model hands the kernel).
pub fn round_bf16(rows: &[Vec<f32>]) -> Vec<Vec<f32>> {
    rows.iter()
        .map(|r| {
            r.iter()
                .map(|&x| half::bf16::from_f32(x).to_f32())
                .collect()
        })
        .collect()
}

/// Sampling settings per test row: greedy, plain, top-k, top-p, and all three.
pub fn test_params(rows: usize) -> Vec<SampleParams> {
    (0..rows)
        .map(|r| match r % 5 {
            0 => SampleParams {
                temperature: 0.0,
                top_k: 0,
                top_p: 1.0,
            },
            1 => SampleParams {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
            },
            2 => SampleParams {
                temperature: 0.7,
                top_k: 20,
                top_p: 1.0,
            },
            3 => SampleParams {
                temperature: 1.3,
                top_k: 0,
                top_p: 0.9,
            },
            _ => SampleParams {
                temperature: 0.8,
                top_k: 50,
                top_p: 0.95,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::{routing_signals, routing_signals_one_pass};

    #[test]
    fn nan_never_passes_and_infinities_must_match() {
        assert!(!within(rel_err(f32::NAN, 1.0), 1.0));
        assert!(!within(rel_err(1.0, f32::NAN), 1.0));
        assert_eq!(rel_err(f32::NAN, f32::NAN), 0.0);
        assert_eq!(rel_err(f32::NEG_INFINITY, f32::NEG_INFINITY), 0.0);
        assert!(rel_err(f32::INFINITY, 1e30).is_nan());
        assert!(rel_err(1.0005, 1.0) <= 1e-3 && rel_err(1.002, 1.0) > 1e-3);
    }

    #[test]
    fn a_wrong_top_k_or_entropy_is_reported() {
        let row = [1.0, 2.0, 3.0];
        let want = routing_signals(&row, 2);
        let mut got = want.clone();
        got.top_k.swap(0, 1);
        assert!(compare_signals(&got, &want, 1e-3)
            .unwrap_err()
            .contains("top_k"));
        let mut got = want.clone();
        got.entropy = f32::NAN;
        assert!(compare_signals(&got, &want, 1e-3)
            .unwrap_err()
            .contains("entropy"));
        assert!(compare_signals(&want, &want, 0.0).is_ok());
    }

    #[test]
    fn one_pass_passes_the_check_on_the_test_rows_in_bf16() {
        for row in round_bf16(&test_rows(40, 4099, 3)) {
            let want = routing_signals(&row, 8);
            let got = routing_signals_one_pass(&row, 8, 256);
            compare_signals(&got, &want, 1e-3).unwrap();
        }
    }
}
