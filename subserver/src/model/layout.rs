//! Index tensors for one ragged step. Each item brings `k >= 1` new tokens at
//! positions `start..start+k` of its own sequence; the decoder processes all
//! `T = sum k` tokens as one matrix and pads only inside attention.

use tch::{Device, Tensor};

use crate::error::EngineError;

/// One item's part of a step, as the layout needs it.
pub struct LayoutItem<'a> {
    /// New token ids.
    pub tokens: &'a [u32],
    /// Position of the first new token (tokens already in KV).
    pub start: usize,
    /// KV slot of every position `0..start + tokens.len()`.
    pub slots: &'a [i64],
}

/// One item as the CPU paged-attention kernel reads it: its context slots
/// are `BatchLayout::host_slots[slot_start..slot_start + context]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostItem {
    /// Offset of its slots in `host_slots`.
    pub slot_start: usize,
    /// Positions after this step.
    pub context: usize,
    /// Row of its first new token in `[T]`.
    pub first_row: usize,
    /// New tokens.
    pub rows: usize,
}

/// Index tensors describing a ragged batch on one device.
pub struct BatchLayout {
    /// `[T]` token ids.
    pub tokens: Tensor,
    /// `[T]` absolute positions.
    pub positions: Tensor,
    /// `[T]` KV slots the new tokens are written to.
    pub slots: Tensor,
    /// `[B * ctx_max]` KV slots read by attention (padding reads slot of position 0).
    pub gather: Tensor,
    /// `[T]` row in `gather` of each new token (`item * ctx_max + position`):
    /// where its K/V goes in the step's gathered context.
    pub new_rows: Tensor,
    /// `[B, 1, q_max, ctx_max]` true where a query may attend a key.
    pub mask: Tensor,
    /// `[B * q_max]` rows of `[T + 1]` query rows (row `T` is padding).
    pub q_pad: Tensor,
    /// `[T]` rows of the padded `[B * q_max]` output that are real tokens.
    pub q_valid: Tensor,
    /// `[B]` row in `[T]` of each item's last new token.
    pub last: Tensor,
    /// Number of items.
    pub batch: i64,
    /// Most new tokens of any item.
    pub q_max: i64,
    /// Longest context of any item after this step.
    pub ctx_max: i64,
    /// Total new tokens.
    pub num_tokens: i64,
    /// Every item has `q_max` new tokens, so no query padding is needed.
    pub is_dense: bool,
    /// Per item, on the host (for kernels that read the pool in place).
    pub host_items: Vec<HostItem>,
    /// Every item's context slots, concatenated (see [`HostItem`]).
    pub host_slots: Vec<i64>,
}

impl BatchLayout {
    /// Builds the index tensors on the CPU and moves them to `device`.
    pub fn build(items: &[LayoutItem<'_>], device: Device) -> Result<Self, EngineError> {
        if items.is_empty() || items.iter().any(|i| i.tokens.is_empty()) {
            return Err(EngineError::InvalidRequest(
                "a step needs at least one item with at least one new token".into(),
            ));
        }
        let b = items.len();
        let q_max = items.iter().map(|i| i.tokens.len()).max().unwrap_or(1);
        let ctx_max = items
            .iter()
            .map(|i| i.start + i.tokens.len())
            .max()
            .unwrap_or(1);
        let t: usize = items.iter().map(|i| i.tokens.len()).sum();
        let is_dense = items.iter().all(|i| i.tokens.len() == q_max);

        let mut tokens = Vec::with_capacity(t);
        let mut positions = Vec::with_capacity(t);
        let mut slots = Vec::with_capacity(t);
        let mut new_rows = Vec::with_capacity(t);
        let mut gather = vec![0i64; b * ctx_max];
        let mut mask = vec![false; b * q_max * ctx_max];
        let mut q_pad = vec![t as i64; b * q_max];
        let mut q_valid = Vec::with_capacity(t);
        let mut last = Vec::with_capacity(b);
        let mut host_items = Vec::with_capacity(b);
        let mut host_slots =
            Vec::with_capacity(items.iter().map(|i| i.start + i.tokens.len()).sum());
        for (bi, item) in items.iter().enumerate() {
            let ctx = item.start + item.tokens.len();
            if item.slots.len() < ctx {
                return Err(EngineError::InvalidRequest(format!(
                    "item {bi}: {} KV slots for a context of {ctx}",
                    item.slots.len()
                )));
            }
            host_items.push(HostItem {
                slot_start: host_slots.len(),
                context: ctx,
                first_row: tokens.len(),
                rows: item.tokens.len(),
            });
            host_slots.extend_from_slice(&item.slots[..ctx]);
            gather[bi * ctx_max..bi * ctx_max + ctx].copy_from_slice(&item.slots[..ctx]);
            gather[bi * ctx_max + ctx..(bi + 1) * ctx_max].fill(item.slots[0]);
            for (j, &tok) in item.tokens.iter().enumerate() {
                let pos = item.start + j;
                q_pad[bi * q_max + j] = tokens.len() as i64;
                q_valid.push((bi * q_max + j) as i64);
                tokens.push(tok as i64);
                positions.push(pos as i64);
                slots.push(item.slots[pos]);
                new_rows.push((bi * ctx_max + pos) as i64);
                let row = (bi * q_max + j) * ctx_max;
                mask[row..row + pos + 1].fill(true);
            }
            for j in item.tokens.len()..q_max {
                // Padding queries attend position 0 so softmax stays finite.
                mask[(bi * q_max + j) * ctx_max] = true;
            }
            last.push(tokens.len() as i64 - 1);
        }
        let to = |v: &[i64]| -> Result<Tensor, EngineError> {
            Ok(Tensor::f_from_slice(v)?.f_to_device(device)?)
        };
        let mask = Tensor::f_from_slice(&mask)?
            .f_view([b as i64, 1, q_max as i64, ctx_max as i64])?
            .f_to_device(device)?;
        Ok(Self {
            tokens: to(&tokens)?,
            positions: to(&positions)?,
            slots: to(&slots)?,
            gather: to(&gather)?,
            new_rows: to(&new_rows)?,
            mask,
            q_pad: to(&q_pad)?,
            q_valid: to(&q_valid)?,
            last: to(&last)?,
            batch: b as i64,
            q_max: q_max as i64,
            ctx_max: ctx_max as i64,
            num_tokens: t as i64,
            is_dense,
            host_items,
            host_slots,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ragged_layout_indices() {
        let s0: Vec<i64> = (100..104).collect();
        let s1: Vec<i64> = (200..202).collect();
        let items = [
            LayoutItem {
                tokens: &[7, 8],
                start: 2,
                slots: &s0,
            },
            LayoutItem {
                tokens: &[9],
                start: 1,
                slots: &s1,
            },
        ];
        let l = BatchLayout::build(&items, Device::Cpu).unwrap();
        assert!(!l.is_dense);
        assert_eq!((l.batch, l.q_max, l.ctx_max, l.num_tokens), (2, 2, 4, 3));
        assert_eq!(Vec::<i64>::try_from(&l.positions).unwrap(), vec![2, 3, 1]);
        assert_eq!(Vec::<i64>::try_from(&l.slots).unwrap(), vec![102, 103, 201]);
        assert_eq!(Vec::<i64>::try_from(&l.new_rows).unwrap(), vec![2, 3, 5]);
        assert_eq!(Vec::<i64>::try_from(&l.q_pad).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(Vec::<i64>::try_from(&l.q_valid).unwrap(), vec![0, 1, 2]);
        assert_eq!(Vec::<i64>::try_from(&l.last).unwrap(), vec![1, 2]);
        assert_eq!(l.host_slots, vec![100, 101, 102, 103, 200, 201]);
        let second = HostItem {
            slot_start: 4,
            context: 2,
            first_row: 2,
            rows: 1,
        };
        assert_eq!(l.host_items[1], second);
        let mask: Vec<bool> = Vec::<bool>::try_from(&l.mask.flatten(0, -1)).unwrap();
        // item 0, query at pos 2 sees 0..=2; at pos 3 sees 0..=3
        assert_eq!(
            &mask[0..8],
            &[true, true, true, false, true, true, true, true]
        );
        // item 1, query at pos 1 sees 0..=1; padding query sees only 0
        assert_eq!(
            &mask[8..16],
            &[true, true, false, false, true, false, false, false]
        );
    }

    #[test]
    fn rejects_empty_items() {
        let items = [LayoutItem {
            tokens: &[],
            start: 0,
            slots: &[],
        }];
        assert!(BatchLayout::build(&items, Device::Cpu).is_err());
    }
}
