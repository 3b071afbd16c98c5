//! The activation rows quantized to int8 per block of 32 (ggml's Q8_0
//! form: `x̂ = d · q`, `d = max|x| / 127`), with the sums of `q` that the
//! weights' constant terms need.
//!
//! ggml quantizes activations against K-quant weights per 256 (Q8_K);
//! here one form serves every weight type: per 32 is the finer scale (a
//! smaller error), and a layer's input is quantized once whatever mix of
//! types its projections use.

use crate::elem::KvElem;

/// Values per activation block.
pub(crate) const QK: usize = 32;

/// `rows` activation rows of `k` values, quantized.
#[derive(Debug, Default)]
pub(crate) struct Act {
    pub(crate) k: usize,
    /// `[rows][k]` int8 codes.
    pub(crate) q: Vec<i8>,
    /// `[rows][k / 32]` block scales.
    pub(crate) d: Vec<f32>,
    /// `[rows][k / 32]`: `d · Σq` per block.
    pub(crate) sx: Vec<f32>,
    /// `[rows][k / 16]`: `Σq` per group of 16 (Q6_K's scales are per 16).
    pub(crate) s16: Vec<i32>,
}

impl Act {
    /// Quantizes `x` (`[rows, k]`, `k` a multiple of 32) into `self`,
    /// reusing its buffers.
    pub(crate) fn quantize<X: KvElem>(&mut self, x: &[X], rows: usize, k: usize) {
        debug_assert!(k.is_multiple_of(QK) && x.len() == rows * k);
        self.k = k;
        let nb = rows * k / QK;
        self.q.resize(rows * k, 0);
        self.d.resize(nb, 0.0);
        self.sx.resize(nb, 0.0);
        self.s16.resize(2 * nb, 0);
        let mut buf = [0f32; QK];
        for (b, src) in x.chunks_exact(QK).enumerate() {
            for (v, s) in buf.iter_mut().zip(src) {
                *v = s.widen();
            }
            let amax = buf.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let q = &mut self.q[b * QK..(b + 1) * QK];
            for (q, v) in q.iter_mut().zip(&buf) {
                // |v · id| <= 127 up to rounding: the clamp only guards it.
                *q = (v * id).round().clamp(-127.0, 127.0) as i8;
            }
            let lo: i32 = q[..16].iter().map(|&v| i32::from(v)).sum();
            let hi: i32 = q[16..].iter().map(|&v| i32::from(v)).sum();
            self.d[b] = d;
            self.sx[b] = d * (lo + hi) as f32;
            self.s16[2 * b] = lo;
            self.s16[2 * b + 1] = hi;
        }
    }

    /// Row `r`'s parts.
    pub(crate) fn row(&self, r: usize) -> ActRow<'_> {
        let (k, nb) = (self.k, self.k / QK);
        ActRow {
            q: &self.q[r * k..(r + 1) * k],
            d: &self.d[r * nb..(r + 1) * nb],
            sx: &self.sx[r * nb..(r + 1) * nb],
            s16: &self.s16[2 * r * nb..2 * (r + 1) * nb],
        }
    }
}

/// One quantized activation row (see [`Act`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ActRow<'a> {
    pub(crate) q: &'a [i8],
    pub(crate) d: &'a [f32],
    pub(crate) sx: &'a [f32],
    pub(crate) s16: &'a [i32],
}
