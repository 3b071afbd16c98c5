//! The fused QKV projection's epilogue: per-head norms, RoPE, q out for the
//! paged attention, k and v into their KV slots.

use super::LayerOpError;
use crate::elem::KvElem;

/// Heads of one QKV row: `heads` q heads, then `kv_heads` k heads, then
/// `kv_heads` v heads, each `head_dim` wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkvShape {
    /// Query heads.
    pub heads: usize,
    /// Key (and value) heads.
    pub kv_heads: usize,
    /// Values per head (even: RoPE rotates halves).
    pub head_dim: usize,
}

impl QkvShape {
    fn row(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }
}

/// RoPE's precomputed table, `[positions, 2, head_dim]`: per position the
/// cosines, then the sines with their first half negated, so that
/// `rotate_half(x) * sin == roll(x, head_dim / 2) * table_sin`.
#[derive(Debug, Clone, Copy)]
pub struct RopeTable<'a, E> {
    /// The table's values.
    pub values: &'a [E],
}

/// From `qkv` (`[rows, (heads + 2 kv_heads) * head_dim]`, model dtype),
/// for every row `r`:
/// - q and k heads: normalized by `qk_norm` when given (Qwen3: an RMSNorm
///   over each head with a per-head weight, `[(heads + kv_heads) *
///   head_dim]`, epsilon `eps`), then rotated by RoPE at `positions[r]`;
/// - q: written to `q_out` (`[rows, heads * head_dim]`, `f32`);
/// - k and v: written to slot `slots[r]` of `keys` and `values`
///   (`[slots, kv_heads * head_dim]`).
///
/// Rounds to `E` after every step that ATen's chain rounds after (the norm,
/// its weight, `x * cos`, then `+ rolled * sin`).
#[allow(clippy::too_many_arguments)] // one pass over what a dozen ops read
pub fn qkv_epilogue<E: KvElem>(
    shape: QkvShape,
    qkv: &[E],
    positions: &[i64],
    rope: RopeTable<'_, E>,
    qk_norm: Option<(&[E], f32)>,
    slots: &[i64],
    q_out: &mut [f32],
    keys: &mut [E],
    values: &mut [E],
) -> Result<(), LayerOpError> {
    let QkvShape {
        heads,
        kv_heads,
        head_dim: hd,
    } = shape;
    let row = shape.row();
    let rows = positions.len();
    let kv_row = kv_heads * hd;
    if hd == 0 || !hd.is_multiple_of(2) {
        return Err(LayerOpError(format!("qkv: head_dim {hd} must be even")));
    }
    if qkv.len() != rows * row || slots.len() != rows || q_out.len() != rows * heads * hd {
        return Err(LayerOpError(format!(
            "qkv: {rows} positions need {rows} slots (got {}), {} qkv values (got {}) and \
             {} q values (got {})",
            slots.len(),
            rows * row,
            qkv.len(),
            rows * heads * hd,
            q_out.len()
        )));
    }
    if let Some((w, _)) = qk_norm {
        if w.len() != (heads + kv_heads) * hd {
            return Err(LayerOpError(format!(
                "qkv: the q/k norm weight has {} values for {} heads of {hd}",
                w.len(),
                heads + kv_heads
            )));
        }
    }
    let table_rows = rope.values.len() / (2 * hd);
    if let Some(p) = positions
        .iter()
        .find(|&&p| p < 0 || p as usize >= table_rows)
    {
        return Err(LayerOpError(format!(
            "qkv: position {p} is outside the RoPE table of {table_rows}"
        )));
    }
    let pool = keys.len().min(values.len()) / kv_row.max(1);
    if let Some(s) = slots.iter().find(|&&s| s < 0 || s as usize >= pool) {
        return Err(LayerOpError(format!(
            "qkv: slot {s} is outside the KV pool of {pool}"
        )));
    }
    let mut head = vec![0f32; hd];
    for (r, src) in qkv.chunks_exact(row).enumerate() {
        let p = positions[r] as usize;
        let table = &rope.values[p * 2 * hd..(p + 1) * 2 * hd];
        let (cos, sin) = table.split_at(hd);
        let slot = slots[r] as usize;
        for h in 0..heads + kv_heads {
            let x = &src[h * hd..(h + 1) * hd];
            match qk_norm {
                Some((w, eps)) => norm_head(x, &w[h * hd..(h + 1) * hd], eps, &mut head),
                None => head.iter_mut().zip(x).for_each(|(o, v)| *o = v.widen()),
            }
            if h < heads {
                let out = &mut q_out[(r * heads + h) * hd..(r * heads + h + 1) * hd];
                rotate(&head, cos, sin, out, |v| E::narrow(v).widen());
            } else {
                let at = slot * kv_row + (h - heads) * hd;
                rotate(&head, cos, sin, &mut keys[at..at + hd], E::narrow);
            }
        }
        let v = &src[(heads + kv_heads) * hd..];
        values[slot * kv_row..(slot + 1) * kv_row].copy_from_slice(v);
    }
    Ok(())
}

/// ATen's `rms_norm(x)` (statistics in `f32`, rounded to `E`) then `* w`
/// (rounded again), into `out` as `f32`.
fn norm_head<E: KvElem>(x: &[E], w: &[E], eps: f32, out: &mut [f32]) {
    let mean = x.iter().map(|v| v.widen() * v.widen()).sum::<f32>() / x.len() as f32;
    let r = 1.0 / (mean + eps).sqrt();
    for ((o, v), w) in out.iter_mut().zip(x).zip(w) {
        *o = E::narrow(E::narrow(v.widen() * r).widen() * w.widen()).widen();
    }
}

/// `out = round(round(x * cos) + roll(x, d/2) * sin)`, `round` being the
/// model dtype's (`store` rounds and writes).
#[inline(always)]
fn rotate<E: KvElem, O>(x: &[f32], cos: &[E], sin: &[E], out: &mut [O], store: impl Fn(f32) -> O) {
    let half = x.len() / 2;
    let (lo, hi) = x.split_at(half);
    let (out_lo, out_hi) = out.split_at_mut(half);
    // roll by half: the first half reads the second and the other way round.
    for (src, rolled, cos, sin, out) in [
        (lo, hi, &cos[..half], &sin[..half], out_lo),
        (hi, lo, &cos[half..], &sin[half..], out_hi),
    ] {
        for ((((o, &v), &r), c), s) in out.iter_mut().zip(src).zip(rolled).zip(cos).zip(sin) {
            let t = E::narrow(v * c.widen()).widen();
            *o = store(t + r * s.widen());
        }
    }
}
