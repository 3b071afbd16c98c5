//! The residual add fused with the RMSNorm that follows it.

use super::rows::{row_chunk, run_parts};
use super::LayerOpError;
use crate::elem::KvElem;
use crate::parallel::Parallel;

/// Row by row (rows of `weight.len()`): `x += delta` when given, then
/// `out = x * rsqrt(mean(x²) + eps) * weight`, rounded to `E`.
///
/// `x` is the residual stream (`f32`), `delta` the output of the matmul
/// that ends a block (model dtype), `weight` the norm's weight in `f32`:
/// ATen's `x.add_(delta)`, `rms_norm(x, weight)` and `.to(E)`.
pub fn add_rms_norm<E: KvElem>(
    x: &mut [f32],
    delta: Option<&[E]>,
    weight: &[f32],
    eps: f32,
    out: &mut [E],
    parallel: &dyn Parallel,
) -> Result<(), LayerOpError> {
    let width = weight.len();
    if width == 0 || !x.len().is_multiple_of(width) || out.len() != x.len() {
        return Err(LayerOpError(format!(
            "rms norm: rows of {width} need x ({}) and out ({}) of whole, equal rows",
            x.len(),
            out.len()
        )));
    }
    if let Some(d) = delta {
        if d.len() != x.len() {
            return Err(LayerOpError(format!(
                "rms norm: the residual add has {} values for {}",
                d.len(),
                x.len()
            )));
        }
    }
    let rows = x.len() / width;
    let per = row_chunk(parallel, rows, width) * width;
    let parts: Vec<_> = x
        .chunks_mut(per)
        .zip(out.chunks_mut(per))
        .enumerate()
        .map(|(i, (x, out))| (x, delta.map(|d| &d[i * per..i * per + out.len()]), out))
        .collect();
    let ok = run_parts(parallel, parts, |(x, delta, out)| {
        for (r, (x, out)) in x.chunks_mut(width).zip(out.chunks_mut(width)).enumerate() {
            let delta = delta.map(|d| &d[r * width..(r + 1) * width]);
            norm_row(x, delta, weight, eps, out);
        }
    });
    if ok {
        Ok(())
    } else {
        Err(LayerOpError("rms norm: a task panicked".into()))
    }
}

/// Lanes of the sum of squares: a vector's worth, so the loop vectorizes
/// (and sums pairwise-ish, like ATen, rather than in one running total).
const LANES: usize = 16;

fn norm_row<E: KvElem>(x: &mut [f32], delta: Option<&[E]>, w: &[f32], eps: f32, out: &mut [E]) {
    if let Some(d) = delta {
        for (a, b) in x.iter_mut().zip(d) {
            *a += b.widen();
        }
    }
    let mut acc = [0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v * v;
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    let mean = (acc.iter().sum::<f32>() + tail) / x.len() as f32;
    let r = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x.iter()).zip(w) {
        *o = E::narrow(v * r * w);
    }
}
