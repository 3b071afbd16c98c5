//! Kernels that pick entries out of one row of logits: argmax and top-k.
//!
//! Both order entries by value, descending, with ties broken towards the
//! lower index, and never pick `NaN`. That order is total, so results are
//! deterministic and a GPU version can be checked against them exactly.

use std::cmp::Ordering;

/// `a` before `b`: larger value first, then lower index. Callers have
/// filtered out `NaN`, so `partial_cmp` cannot fail; `Equal` is a safe
/// fallback that keeps the order total on the index.
fn rank_order(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.partial_cmp(&a.1)
        .unwrap_or(Ordering::Equal)
        .then(a.0.cmp(&b.0))
}

/// Index of the largest entry; ties go to the lowest index. `NaN` entries
/// are skipped. `None` when the row is empty or all `NaN`.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in logits.iter().enumerate() {
        if x.is_nan() {
            continue;
        }
        match best {
            // Strictly greater: an equal later entry never replaces an earlier one.
            Some((_, b)) if x <= b => {}
            _ => best = Some((i, x)),
        }
    }
    best.map(|(i, _)| i as u32)
}

/// The `k` largest entries as `(index, value)`, sorted by value descending,
/// ties by lower index first. `NaN` entries are never returned. Fewer than
/// `k` pairs come back when the row has fewer non-`NaN` entries.
///
/// Uses a partial selection (`select_nth_unstable_by`, O(V)) and sorts only
/// the `k` survivors, so small `k` over a 152k vocabulary stays cheap.
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    if k == 0 {
        return Vec::new();
    }
    let mut items: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, x)| !x.is_nan())
        .map(|(i, &x)| (i as u32, x))
        .collect();
    if k < items.len() {
        items.select_nth_unstable_by(k - 1, rank_order);
        items.truncate(k);
    }
    items.sort_unstable_by(rank_order);
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_picks_largest_and_breaks_ties_low() {
        assert_eq!(argmax(&[0.1, 0.7, 0.3]), Some(1));
        assert_eq!(argmax(&[2.0, 5.0, 5.0, 1.0]), Some(1));
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), Some(0));
        assert_eq!(argmax(&[f32::NAN, -3.0, f32::NAN]), Some(1));
        assert_eq!(argmax(&[f32::NAN]), None);
        assert_eq!(argmax(&[]), None);
    }

    #[test]
    fn top_k_sorted_descending_with_low_index_ties() {
        let row = [0.5, 3.0, -1.0, 3.0, 2.0, f32::NAN, 0.5];
        assert_eq!(top_k(&row, 3), vec![(1, 3.0), (3, 3.0), (4, 2.0)]);
        assert_eq!(
            top_k(&row, 5),
            vec![(1, 3.0), (3, 3.0), (4, 2.0), (0, 0.5), (6, 0.5)]
        );
        // Tie straddling the cut: the lower index wins the last slot.
        assert_eq!(top_k(&row, 4), vec![(1, 3.0), (3, 3.0), (4, 2.0), (0, 0.5)]);
    }

    #[test]
    fn top_k_larger_than_row_returns_all_non_nan() {
        let row = [1.0, f32::NAN, -2.0];
        assert_eq!(top_k(&row, 10), vec![(0, 1.0), (2, -2.0)]);
        assert!(top_k(&row, 0).is_empty());
        assert!(top_k(&[], 3).is_empty());
    }

    #[test]
    fn top_k_agrees_with_full_sort_on_a_large_row() {
        // Deterministic pseudo-random row with many duplicates.
        let row: Vec<f32> = (0..50_000u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) >> 20) % 997) as f32 / 7.0)
            .collect();
        let mut all: Vec<(u32, f32)> = row
            .iter()
            .enumerate()
            .map(|(i, &x)| (i as u32, x))
            .collect();
        all.sort_by(rank_order);
        for k in [1, 2, 17, 400] {
            assert_eq!(top_k(&row, k), all[..k].to_vec(), "k = {k}");
        }
    }
}
