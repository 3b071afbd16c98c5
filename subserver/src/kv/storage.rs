//! The KV tensors of one model: per layer, keys and values for every slot of
//! the block pool (`[num_blocks * block_size, kv_heads, head_dim]`).

use tch::{Device, Kind, Tensor};

use tch::TchError;

use crate::op_count::op;

/// Per-layer key/value tensors indexed by slot.
pub struct KvStorage {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    num_slots: i64,
}

/// Bytes one block occupies over all layers (keys and values).
pub fn bytes_per_block(
    layers: usize,
    block_size: usize,
    kv_heads: usize,
    head_dim: usize,
    kind: Kind,
) -> usize {
    2 * layers * block_size * kv_heads * head_dim * kind.elt_size_in_bytes()
}

impl KvStorage {
    /// Allocates zeroed storage.
    pub fn new(
        layers: usize,
        num_slots: usize,
        kv_heads: usize,
        head_dim: usize,
        kind: Kind,
        device: Device,
    ) -> Result<Self, TchError> {
        let shape = [num_slots as i64, kv_heads as i64, head_dim as i64];
        let mut keys = Vec::with_capacity(layers);
        let mut values = Vec::with_capacity(layers);
        for _ in 0..layers {
            keys.push(Tensor::f_zeros(shape, (kind, device))?);
            values.push(Tensor::f_zeros(shape, (kind, device))?);
        }
        Ok(Self {
            keys,
            values,
            num_slots: num_slots as i64,
        })
    }

    /// Number of slots per layer.
    pub fn num_slots(&self) -> i64 {
        self.num_slots
    }

    /// Writes `k`, `v` (`[T, kv_heads, head_dim]`) of `layer` at `slots` (`[T]`).
    pub fn write(
        &mut self,
        layer: usize,
        slots: &Tensor,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(), TchError> {
        let _ = op(self.keys[layer].f_index_copy_(0, slots, k))?;
        let _ = op(self.values[layer].f_index_copy_(0, slots, v))?;
        Ok(())
    }

    /// Reads keys and values of `layer` at `slots` (any shape, flattened).
    pub fn gather(&self, layer: usize, slots: &Tensor) -> Result<(Tensor, Tensor), TchError> {
        Ok((
            op(self.keys[layer].f_index_select(0, slots))?,
            op(self.values[layer].f_index_select(0, slots))?,
        ))
    }
}
