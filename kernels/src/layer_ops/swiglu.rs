//! SwiGLU over the fused gate/up projection.

use super::rows::{row_chunk, run_parts};
use super::LayerOpError;
use crate::elem::KvElem;
use crate::fast_exp::exp_nonpositive;
use crate::parallel::Parallel;

/// `out = silu(gate) * up` row by row, where each row of `gate_up` is the
/// gate's `inter` values then the up projection's.
///
/// Rounds to `E` after the SiLU and after the product, as ATen's
/// `silu_` then `mul_` on a model-dtype tensor do.
pub fn swiglu<E: KvElem>(
    gate_up: &[E],
    inter: usize,
    out: &mut [E],
    parallel: &dyn Parallel,
) -> Result<(), LayerOpError> {
    if inter == 0 || !gate_up.len().is_multiple_of(2 * inter) || out.len() * 2 != gate_up.len() {
        return Err(LayerOpError(format!(
            "swiglu: rows of 2 x {inter} in ({}) need out of half as many ({})",
            gate_up.len(),
            out.len()
        )));
    }
    let rows = out.len() / inter;
    let per_rows = row_chunk(parallel, rows, 2 * inter);
    let parts: Vec<_> = out.chunks_mut(per_rows * inter).enumerate().collect();
    let ok = run_parts(parallel, parts, |(i, out)| {
        let first = i * per_rows;
        for (r, out) in out.chunks_mut(inter).enumerate() {
            let row = &gate_up[(first + r) * 2 * inter..(first + r + 1) * 2 * inter];
            let (gate, up) = row.split_at(inter);
            for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
                let s = E::narrow(silu(g.widen()));
                *o = E::narrow(s.widen() * u.widen());
            }
        }
    });
    if ok {
        Ok(())
    } else {
        Err(LayerOpError("swiglu: a task panicked".into()))
    }
}

/// `x * sigmoid(x)`, through an exponent that is never positive so that
/// the vectorizable `exp` applies: `e = exp(-|x|)`, then `x / (1 + e)` for
/// `x >= 0` and `x * e / (1 + e)` below.
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    let e = exp_nonpositive(-x.abs());
    let num = if x >= 0.0 { x } else { x * e };
    num / (1.0 + e)
}
