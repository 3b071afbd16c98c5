//! The work of one step's attention, decided once per forward and reused by
//! every layer: which sequence each query row belongs to, the slots of each
//! sequence's context (copied flat), and the tasks, one per (sequence,
//! chunk of context positions), each with its own partial results.

use std::ops::Range;

/// Shapes and scale of one model's attention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Geometry {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (`heads` is a multiple of it: grouped-query attention).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Multiplier of `q . k` (usually `1 / sqrt(head_dim)`).
    pub scale: f32,
}

impl Geometry {
    /// Query heads that share one kv head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }
}

/// One sequence's part of a step.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// KV slot of every context position, the new tokens' included
    /// (their K/V must be in the pool before [`super::attend`] runs).
    pub slots: &'a [i64],
    /// Row of its first new token in the step's query matrix.
    pub first_row: usize,
    /// Its new tokens: the last `rows` positions of `slots`. Row `r` sees
    /// positions `0..=slots.len() - rows + r` (causal).
    pub rows: usize,
}

/// A sequence as the plan keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlannedItem {
    /// Its slots: `plan.slots[slot_start..slot_start + context]`.
    pub slot_start: usize,
    pub context: usize,
    pub first_row: usize,
    pub rows: usize,
    /// Its tasks: `chunks` consecutive ones from here.
    pub first_task: usize,
    pub chunks: usize,
}

/// One unit of work: positions `begin..end` of one sequence, every head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Task {
    pub item: usize,
    pub begin: usize,
    pub end: usize,
    /// Offset of its partials in the scratch buffer.
    pub scratch: usize,
}

/// The step's attention work (see the module docs).
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) geometry: Geometry,
    pub(crate) items: Vec<PlannedItem>,
    pub(crate) slots: Vec<i64>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) rows: usize,
    pub(crate) scratch_len: usize,
    pub(crate) max_slot: i64,
}

/// Error for a step the kernel cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("paged attention: {0}")]
pub struct PlanError(pub String);

impl Plan {
    /// Plans a step. `chunk` bounds the context positions of one task, so a
    /// long sequence is split across threads (its partials merged after).
    pub fn new(geometry: Geometry, items: &[Item<'_>], chunk: usize) -> Result<Self, PlanError> {
        let g = geometry;
        if g.kv_heads == 0 || g.head_dim == 0 || !g.heads.is_multiple_of(g.kv_heads) {
            return Err(PlanError(format!(
                "{} query heads cannot share {} kv heads",
                g.heads, g.kv_heads
            )));
        }
        let chunk = chunk.max(1);
        let stride = g.heads * (g.head_dim + 2);
        let mut plan = Plan {
            geometry,
            items: Vec::with_capacity(items.len()),
            slots: Vec::with_capacity(items.iter().map(|i| i.slots.len()).sum()),
            tasks: Vec::new(),
            rows: 0,
            scratch_len: 0,
            max_slot: -1,
        };
        for (n, item) in items.iter().enumerate() {
            let context = item.slots.len();
            if item.rows == 0 || item.rows > context {
                return Err(PlanError(format!(
                    "item {n}: {} new rows in a context of {context}",
                    item.rows
                )));
            }
            if let Some(&bad) = item.slots.iter().find(|&&s| s < 0) {
                return Err(PlanError(format!("item {n}: negative slot {bad}")));
            }
            let chunks = context.div_ceil(chunk);
            let planned = PlannedItem {
                slot_start: plan.slots.len(),
                context,
                first_row: item.first_row,
                rows: item.rows,
                first_task: plan.tasks.len(),
                chunks,
            };
            for c in 0..chunks {
                plan.tasks.push(Task {
                    item: n,
                    begin: c * chunk,
                    end: ((c + 1) * chunk).min(context),
                    scratch: plan.scratch_len,
                });
                plan.scratch_len += item.rows * stride;
            }
            plan.slots.extend_from_slice(item.slots);
            plan.max_slot = item.slots.iter().copied().fold(plan.max_slot, i64::max);
            plan.rows = plan.rows.max(item.first_row + item.rows);
            plan.items.push(planned);
        }
        Ok(plan)
    }

    /// Query rows the step's matrices must have.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Splits the tasks into at most `parts` consecutive ranges of about
    /// equal work (positions times query rows), for the threads to claim.
    pub(crate) fn parts(&self, parts: usize) -> Vec<Range<usize>> {
        let cost = |t: &Task| ((t.end - t.begin) * self.items[t.item].rows) as u64;
        let total: u64 = self.tasks.iter().map(cost).sum();
        let parts = parts.max(1) as u64;
        let mut out = Vec::with_capacity(parts as usize);
        let (mut start, mut acc) = (0usize, 0u64);
        for (i, t) in self.tasks.iter().enumerate() {
            acc += cost(t);
            // Close a part once it holds its share of the work so far.
            if acc * parts >= total * (out.len() as u64 + 1) && out.len() + 1 < parts as usize {
                out.push(start..i + 1);
                start = i + 1;
            }
        }
        if start < self.tasks.len() {
            out.push(start..self.tasks.len());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            scale: 1.0,
        }
    }

    #[test]
    fn long_contexts_are_chunked() {
        let a: Vec<i64> = (0..10).collect();
        let b: Vec<i64> = (20..23).collect();
        let items = [
            Item {
                slots: &a,
                first_row: 0,
                rows: 1,
            },
            Item {
                slots: &b,
                first_row: 1,
                rows: 2,
            },
        ];
        let plan = Plan::new(geometry(), &items, 4).unwrap();
        // 3 chunks, then 1.
        assert_eq!(plan.tasks.len(), 4);
        assert_eq!((plan.tasks[2].begin, plan.tasks[2].end), (8, 10));
        assert_eq!((plan.tasks[3].item, plan.tasks[3].end), (1, 3));
        assert_eq!(plan.rows(), 3);
        assert_eq!(plan.max_slot, 22);
        // Each partial holds m, l and head_dim sums per query head and row.
        let stride = 4 * (8 + 2);
        assert_eq!(plan.scratch_len, 3 * stride + 2 * stride);
    }

    #[test]
    fn parts_cover_every_task_once_and_balance_work() {
        let a: Vec<i64> = (0..64).collect();
        let items = [Item {
            slots: &a,
            first_row: 0,
            rows: 1,
        }];
        let plan = Plan::new(geometry(), &items, 8).unwrap();
        let parts = plan.parts(2);
        assert_eq!(parts, vec![0..4, 4..8]);
        assert_eq!(plan.parts(64).len(), 8);
        assert_eq!(plan.parts(0), vec![0..8]);
    }

    #[test]
    fn bad_items_are_refused_with_the_reason() {
        let a = [1i64, 2];
        let err = |items: &[Item<'_>]| Plan::new(geometry(), items, 4).unwrap_err().to_string();
        let too_many = Item {
            slots: &a,
            first_row: 0,
            rows: 3,
        };
        assert!(err(&[too_many]).contains("3 new rows in a context of 2"));
        let neg = [-1i64];
        let bad_slot = Item {
            slots: &neg,
            first_row: 0,
            rows: 1,
        };
        assert!(err(&[bad_slot]).contains("negative slot -1"));
        let odd = Geometry {
            heads: 3,
            kv_heads: 2,
            ..geometry()
        };
        assert!(Plan::new(odd, &[], 4).is_err());
    }
}
