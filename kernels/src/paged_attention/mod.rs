//! Paged attention on the CPU: each new query token attends its own
//! sequence's keys and values read in place from the KV pool through the
//! sequence's slot table. Nothing is gathered into a per-step copy, and no
//! sequence is padded to the longest context of the step.
//!
//! Work is split into tasks of (sequence, chunk of positions)
//! ([`Plan`]); each computes online-softmax partials, and [`attend`] merges
//! a sequence's chunks (flash-decoding's split over the context), so one
//! long sequence still spreads over every thread. Scores, softmax and the
//! weighted sums are in `f32`; the pool may hold `f32` or `bf16`.

#[cfg(target_arch = "x86_64")]
mod avx512;
mod head_math;
mod plan;
mod task;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub use crate::elem::KvElem;
pub use crate::parallel::{Parallel, ScopedThreads, Serial};
pub use plan::{Geometry, Item, Plan, PlanError};
use task::{run_task, Isa, MAX_HEAD_DIM};

/// Attention of `plan`'s query rows against their sequences' context.
///
/// - `q`: `[plan.rows(), heads, head_dim]`, `f32`, unscaled.
/// - `keys`, `values`: one layer of the pool, `[slots, kv_heads, head_dim]`;
///   the new tokens' K/V already written.
/// - `out`: `[plan.rows(), heads, head_dim]`; rows of no item are untouched.
/// - `scratch`: reused across calls (grown as needed).
pub fn attend<E: KvElem>(
    plan: &Plan,
    q: &[f32],
    keys: &[E],
    values: &[E],
    out: &mut [f32],
    scratch: &mut Vec<f32>,
    parallel: &dyn Parallel,
) -> Result<(), PlanError> {
    attend_on(
        Isa::detected(),
        plan,
        q,
        keys,
        values,
        out,
        scratch,
        parallel,
    )
}

#[allow(clippy::too_many_arguments)] // attend's arguments plus the ISA under test
fn attend_on<E: KvElem>(
    isa: Isa,
    plan: &Plan,
    q: &[f32],
    keys: &[E],
    values: &[E],
    out: &mut [f32],
    scratch: &mut Vec<f32>,
    parallel: &dyn Parallel,
) -> Result<(), PlanError> {
    let g = plan.geometry;
    let row = g.heads * g.head_dim;
    let kv_row = g.kv_heads * g.head_dim;
    if g.head_dim > MAX_HEAD_DIM {
        return Err(PlanError(format!(
            "head_dim {} is over the kernel's {MAX_HEAD_DIM}",
            g.head_dim
        )));
    }
    if q.len() < plan.rows * row || out.len() < plan.rows * row {
        return Err(PlanError(format!(
            "{} query rows of {row} need {} values; q has {}, out {}",
            plan.rows,
            plan.rows * row,
            q.len(),
            out.len()
        )));
    }
    if keys.len() != values.len() || !keys.len().is_multiple_of(kv_row) {
        return Err(PlanError(format!(
            "keys ({}) and values ({}) must be whole slots of {kv_row}",
            keys.len(),
            values.len()
        )));
    }
    let pool_slots = (keys.len() / kv_row) as i64;
    if plan.max_slot >= pool_slots {
        return Err(PlanError(format!(
            "slot {} is outside the pool of {pool_slots}",
            plan.max_slot
        )));
    }
    if scratch.len() < plan.scratch_len {
        scratch.resize(plan.scratch_len, 0.0);
    }
    run_tasks(
        isa,
        plan,
        q,
        keys,
        values,
        &mut scratch[..plan.scratch_len],
        parallel,
    )?;
    merge(plan, scratch, out);
    Ok(())
}

/// Every task's partials, on `parallel`'s threads.
fn run_tasks<E: KvElem>(
    isa: Isa,
    plan: &Plan,
    q: &[f32],
    keys: &[E],
    values: &[E],
    scratch: &mut [f32],
    parallel: &dyn Parallel,
) -> Result<(), PlanError> {
    let stride = plan.geometry.heads * (plan.geometry.head_dim + 2);
    // Twice as many parts as threads: a thread the OS delays leaves its
    // second part to the others.
    let parts = plan.parts(parallel.threads() * 2);
    let mut cells = Vec::with_capacity(parts.len());
    let mut rest = scratch;
    for range in parts {
        let end = plan
            .tasks
            .get(range.end)
            .map_or(plan.scratch_len, |t| t.scratch);
        let start = plan.tasks[range.start].scratch;
        let (mine, tail) = rest.split_at_mut(end - start);
        rest = tail;
        cells.push(Mutex::new(Some((range, mine))));
    }
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(cell) = cells.get(i) else { break };
        let claimed = cell.lock().map(|mut c| c.take()).unwrap_or(None);
        let Some((range, buf)) = claimed else {
            continue;
        };
        let base = plan.tasks[range.start].scratch;
        for task in &plan.tasks[range] {
            let len = plan.items[task.item].rows * stride;
            let part = &mut buf[task.scratch - base..task.scratch - base + len];
            run_task(isa, plan, task, q, keys, values, part);
        }
    };
    if !parallel.run(&work) {
        return Err(PlanError("a worker thread panicked".into()));
    }
    if cells.iter().any(|c| c.lock().map_or(true, |c| c.is_some())) {
        return Err(PlanError("a part of the step was never run".into()));
    }
    Ok(())
}

/// Combines each (row, head)'s chunk partials into `out`.
fn merge(plan: &Plan, scratch: &[f32], out: &mut [f32]) {
    let g = plan.geometry;
    let hd = g.head_dim;
    let stride = hd + 2;
    for item in &plan.items {
        let tasks = &plan.tasks[item.first_task..item.first_task + item.chunks];
        for r in 0..item.rows {
            for head in 0..g.heads {
                let at = |t: &plan::Task| {
                    let o = t.scratch + (r * g.heads + head) * stride;
                    &scratch[o..o + stride]
                };
                let m = tasks
                    .iter()
                    .map(|t| at(t)[0])
                    .fold(f32::NEG_INFINITY, f32::max);
                let o = (item.first_row + r) * g.heads * hd + head * hd;
                let dst = &mut out[o..o + hd];
                dst.fill(0.0);
                let mut l = 0.0;
                for t in tasks {
                    let st = at(t);
                    // A chunk past this row's last position holds m = -inf, l = 0.
                    if st[1] == 0.0 {
                        continue;
                    }
                    let w = (st[0] - m).exp();
                    l += st[1] * w;
                    for (d, a) in dst.iter_mut().zip(&st[2..]) {
                        *d += a * w;
                    }
                }
                let inv = 1.0 / l;
                for d in dst.iter_mut() {
                    *d *= inv;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
