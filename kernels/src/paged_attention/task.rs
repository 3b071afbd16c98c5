//! One task: an online softmax over one chunk of one sequence's context,
//! for every new query row and every query head of the sequence. A tile's
//! slots are read whole (every kv head's row, contiguous in the pool), so
//! the pool streams from memory in order. The driver here walks the tiles and rows; the
//! per-head arithmetic is a [`HeadMath`], portable or AVX-512.
//!
//! A partial is `[m, l, acc[head_dim]]` per (row, head): the running
//! maximum score, the sum of `exp(score - m)`, and the `exp`-weighted sum
//! of value rows; [`super::merge`] combines the chunks of a sequence.

use super::head_math::{tree, HeadMath, Portable, TILE};
use super::plan::{Plan, Task};
use super::KvElem;
use crate::fast_exp::exp_nonpositive;

/// Widest head the kernel takes.
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// Most query heads one block holds (more share a kv head in blocks).
const MAX_BLOCK: usize = 4;

/// Folds one tile's scores (`-inf` past the visible positions) into a
/// partial `[m, l, ..]`: updates the running max `m` and sum `l`, leaves the
/// tile's weights `exp(score - m)` in `p`, and returns the factor by which
/// the partial's weighted sum must be scaled before they are added.
#[inline(always)]
fn fold_tile(st: &mut [f32], p: &mut [f32; TILE]) -> f32 {
    let m = st[0].max(tree(*p, f32::max));
    // exp(-inf) is 0: the first tile starts from an empty sum, and
    // positions past the visible ones weigh nothing.
    let correction = exp_nonpositive(st[0] - m);
    for s in p.iter_mut() {
        *s = exp_nonpositive(*s - m);
    }
    st[0] = m;
    st[1] = st[1] * correction + tree(*p, |a, b| a + b);
    correction
}

/// One tile for a block of `B` heads: `q` holds their `B` query rows,
/// `states` their `B` partials.
#[inline(always)]
fn run_block<M: HeadMath, E: KvElem, const B: usize>(
    q: &[f32],
    keys: &[E],
    values: &[E],
    bases: &[usize],
    scale: f32,
    states: &mut [f32],
) {
    let hd = q.len() / B;
    let stride = hd + 2;
    let qs: [&[f32]; B] = std::array::from_fn(|i| &q[i * hd..(i + 1) * hd]);
    let mut p = [[f32::NEG_INFINITY; TILE]; B];
    M::scores(qs, keys, bases, scale, &mut p);
    let correction: [f32; B] =
        std::array::from_fn(|i| fold_tile(&mut states[i * stride..(i + 1) * stride], &mut p[i]));
    M::accumulate(states, correction, &p, values, bases);
}

/// Computes `task`'s partials into `part` (`rows * heads * (head_dim + 2)`).
/// Slots were checked against the pool by [`super::attend`].
#[inline(always)]
fn run_body<M: HeadMath, E: KvElem>(
    plan: &Plan,
    task: &Task,
    q: &[f32],
    keys: &[E],
    values: &[E],
    part: &mut [f32],
) {
    let g = plan.geometry;
    let (hd, group) = (g.head_dim, g.group());
    let item = &plan.items[task.item];
    let slots = &plan.slots[item.slot_start..item.slot_start + item.context];
    let stride = hd + 2;
    let slot_len = g.kv_heads * hd;
    for st in part.chunks_exact_mut(stride) {
        st[0] = f32::NEG_INFINITY;
        st[1] = 0.0;
        st[2..].fill(0.0);
    }
    // Row r sees positions 0..=first_limit + r.
    let first_limit = item.context - item.rows;
    let mut bases = [0usize; TILE];
    let mut j0 = task.begin;
    while j0 < task.end {
        let n = TILE.min(task.end - j0);
        for kv_head in 0..g.kv_heads {
            for (b, &slot) in bases.iter_mut().zip(&slots[j0..j0 + n]) {
                *b = slot as usize * slot_len + kv_head * hd;
            }
            for r in 0..item.rows {
                let limit = first_limit + r;
                if j0 > limit {
                    continue;
                }
                let visible = &bases[..n.min(limit + 1 - j0)];
                // This kv head's query heads, in the row and in the partials.
                let heads = kv_head * group * hd;
                let row = (item.first_row + r) * g.heads * hd + heads;
                let states = (r * g.heads + kv_head * group) * stride;
                let mut h = 0;
                while h < group {
                    let block = (group - h).min(MAX_BLOCK);
                    let q = &q[row + h * hd..row + (h + block) * hd];
                    let st = &mut part[states + h * stride..states + (h + block) * stride];
                    match block {
                        1 => run_block::<M, E, 1>(q, keys, values, visible, g.scale, st),
                        2 => run_block::<M, E, 2>(q, keys, values, visible, g.scale, st),
                        3 => run_block::<M, E, 3>(q, keys, values, visible, g.scale, st),
                        _ => run_block::<M, E, MAX_BLOCK>(q, keys, values, visible, g.scale, st),
                    }
                    h += block;
                }
            }
        }
        j0 += n;
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // target_feature: callable only where the CPU has them.
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2<E: KvElem>(
    plan: &Plan,
    task: &Task,
    q: &[f32],
    keys: &[E],
    values: &[E],
    part: &mut [f32],
) {
    run_body::<Portable, E>(plan, task, q, keys, values, part)
}

/// # Safety
/// The CPU must have AVX-512F ([`super::avx512`]'s arithmetic).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // target_feature: callable only where the CPU has them.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn run_avx512<E: KvElem>(
    plan: &Plan,
    task: &Task,
    q: &[f32],
    keys: &[E],
    values: &[E],
    part: &mut [f32],
) {
    run_body::<super::avx512::Avx512, E>(plan, task, q, keys, values, part)
}

/// Ordered narrowest first: any level up to the detected one is safe to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    Baseline,
    Avx2,
    Avx512,
}

impl Isa {
    /// [`Isa::detect`], once per process.
    pub(crate) fn detected() -> Self {
        static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ISA.get_or_init(Isa::detect)
    }

    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx2") && has!("fma") {
                return Isa::Avx512;
            }
            if has!("avx2") && has!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Baseline
    }
}

/// Runs one task on `isa`'s build of the loop, or the widest this CPU has
/// if that is narrower. AVX-512's arithmetic takes heads of whole vectors
/// (a multiple of 16 wide); others run the AVX2 build.
pub(crate) fn run_task<E: KvElem>(
    isa: Isa,
    plan: &Plan,
    task: &Task,
    q: &[f32],
    keys: &[E],
    values: &[E],
    part: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: `isa` is at most what `Isa::detect` found (checked below), so
    // the CPU has the features each function is compiled for.
    match isa.min(Isa::detected()) {
        Isa::Avx512 if plan.geometry.head_dim.is_multiple_of(16) => {
            return unsafe { run_avx512(plan, task, q, keys, values, part) }
        }
        Isa::Avx512 | Isa::Avx2 => return unsafe { run_avx2(plan, task, q, keys, values, part) },
        Isa::Baseline => {}
    }
    run_body::<Portable, E>(plan, task, q, keys, values, part)
}
