//! The decode layout at a fixed shape, so one captured CUDA graph serves
//! every step of its bucket: `batch` rows (real items first, then padding
//! rows) and a `ctx`-wide attention window. Padding rows read and write a
//! scratch KV slot that no request owns; keys past an item's context are
//! masked, so the real rows compute exactly what the ragged layout does.

use tch::{Device, Tensor};

use crate::error::EngineError;
use crate::model::layout::BatchLayout;

/// One decoding item: its new token and the KV slot of every position
/// `0..=pos` (the new token's slot last).
pub struct DecodeItem<'a> {
    /// The new token.
    pub token: u32,
    /// Slots of positions `0..=pos`.
    pub slots: &'a [i64],
}

/// Builds the dense `[batch]` x `ctx` layout on `device`.
pub fn decode_layout(
    items: &[DecodeItem<'_>],
    batch: usize,
    ctx: usize,
    pad_slot: i64,
    device: Device,
) -> Result<BatchLayout, EngineError> {
    if items.is_empty() || items.len() > batch {
        return Err(EngineError::InvalidRequest(format!(
            "a decode graph of batch {batch} cannot take {} items",
            items.len()
        )));
    }
    let mut tokens = vec![0i64; batch];
    let mut positions = vec![0i64; batch];
    let mut slots = vec![pad_slot; batch];
    let mut gather = vec![pad_slot; batch * ctx];
    // Padding rows write their K/V at their own first row (the scratch slot).
    let mut new_rows: Vec<i64> = (0..batch).map(|b| (b * ctx) as i64).collect();
    let mut mask = vec![false; batch * ctx];
    for (b, item) in items.iter().enumerate() {
        let n = item.slots.len();
        if n == 0 || n > ctx {
            return Err(EngineError::InvalidRequest(format!(
                "a decode graph of context {ctx} cannot take a context of {n}"
            )));
        }
        tokens[b] = i64::from(item.token);
        positions[b] = n as i64 - 1;
        slots[b] = item.slots[n - 1];
        new_rows[b] = (b * ctx + n - 1) as i64;
        gather[b * ctx..b * ctx + n].copy_from_slice(item.slots);
        mask[b * ctx..b * ctx + n].fill(true);
    }
    for b in items.len()..batch {
        // Padding rows attend their own scratch slot only: softmax stays finite.
        mask[b * ctx] = true;
    }
    let to = |v: &[i64]| -> Result<Tensor, EngineError> {
        Ok(Tensor::f_from_slice(v)?.f_to_device(device)?)
    };
    let rows: Vec<i64> = (0..batch as i64).collect();
    Ok(BatchLayout {
        tokens: to(&tokens)?,
        positions: to(&positions)?,
        slots: to(&slots)?,
        gather: to(&gather)?,
        new_rows: to(&new_rows)?,
        mask: Tensor::f_from_slice(&mask)?
            .f_view([batch as i64, 1, 1, ctx as i64])?
            .f_to_device(device)?,
        q_pad: to(&rows)?,
        q_valid: to(&rows)?,
        last: to(&rows)?,
        batch: batch as i64,
        q_max: 1,
        ctx_max: ctx as i64,
        num_tokens: batch as i64,
        is_dense: true,
        // A captured graph reads the gathered context: no host items, so
        // the decoder never takes the CPU paged path for this layout.
        host_items: Vec::new(),
        host_slots: Vec::new(),
    })
}

/// Copies every index tensor of `src` into `dst` (same shapes): how a new
/// step's inputs reach the addresses a captured graph reads.
pub fn copy_into(dst: &mut BatchLayout, src: &BatchLayout) -> Result<(), EngineError> {
    for (d, s) in [
        (&mut dst.tokens, &src.tokens),
        (&mut dst.positions, &src.positions),
        (&mut dst.slots, &src.slots),
        (&mut dst.gather, &src.gather),
        (&mut dst.new_rows, &src.new_rows),
        (&mut dst.mask, &src.mask),
    ] {
        d.f_copy_(s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_rows_and_context_with_the_scratch_slot() {
        let a: Vec<i64> = vec![10, 11, 12];
        let b: Vec<i64> = vec![20];
        let items = [
            DecodeItem {
                token: 5,
                slots: &a,
            },
            DecodeItem {
                token: 6,
                slots: &b,
            },
        ];
        let l = decode_layout(&items, 4, 4, 99, Device::Cpu).unwrap();
        assert_eq!(Vec::<i64>::try_from(&l.tokens).unwrap(), vec![5, 6, 0, 0]);
        assert_eq!(
            Vec::<i64>::try_from(&l.positions).unwrap(),
            vec![2, 0, 0, 0]
        );
        assert_eq!(
            Vec::<i64>::try_from(&l.slots).unwrap(),
            vec![12, 20, 99, 99]
        );
        assert_eq!(
            Vec::<i64>::try_from(&l.new_rows).unwrap(),
            vec![2, 4, 8, 12]
        );
        let g = Vec::<i64>::try_from(&l.gather).unwrap();
        assert_eq!(&g[..8], &[10, 11, 12, 99, 20, 99, 99, 99]);
        assert!(g[8..].iter().all(|&s| s == 99));
        let m = Vec::<bool>::try_from(&l.mask.flatten(0, -1)).unwrap();
        assert_eq!(&m[..4], &[true, true, true, false]);
        assert_eq!(&m[4..8], &[true, false, false, false]);
        assert_eq!(&m[8..12], &[true, false, false, false]);
    }

    #[test]
    fn rejects_what_does_not_fit() {
        let s: Vec<i64> = vec![1, 2, 3];
        let one = [DecodeItem {
            token: 1,
            slots: &s,
        }];
        assert!(decode_layout(&one, 1, 2, 0, Device::Cpu).is_err());
        assert!(decode_layout(&[], 1, 4, 0, Device::Cpu).is_err());
    }
}
