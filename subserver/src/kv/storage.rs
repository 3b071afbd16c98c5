//! The KV tensors of one model: keys and values of every layer for every
//! slot of the block pool, `[layers, num_blocks * block_size, kv_heads,
//! head_dim]` each.
//!
//! Attention reads K/V through the block table without a gather per layer:
//! once per step, [`KvStorage::gather_context`] copies the context slots
//! of every layer at once (one `index_select` for keys, one for values,
//! into buffers reused across steps on the CPU); each layer then writes its
//! new tokens' K/V into that copy, and [`KvStorage::commit`] stores the new
//! rows of every layer in the pool in one `index_copy_` each at the end.
//!
//! On the CPU the decoder skips that copy for decode steps: it writes each
//! layer's new rows straight into the pool ([`KvStorage::write_layer`]) and
//! its paged-attention kernel reads the pool in place
//! ([`KvStorage::layer_host`]).

use tch::{Device, Kind, Tensor};

use tch::TchError;

use crate::host_tensor::{host_slice, host_slice_mut, HostElem, HostTensorError};
use crate::op_count::op;

/// Per-layer key/value tensors indexed by slot.
pub struct KvStorage {
    keys: Tensor,
    values: Tensor,
    num_slots: i64,
    /// Flat buffers the CPU gathers each step's context into (grown, never
    /// shrunk). Not on CUDA: a captured graph keeps the addresses it saw,
    /// and a grown buffer would move under it.
    buffers: Option<(Tensor, Tensor)>,
    reuse_buffers: bool,
}

/// The context of one step: per layer, the K/V of every gathered slot
/// (`[N, kv_heads, head_dim]` views into one `[layers, N, ..]` tensor).
pub struct StepContext {
    keys: Tensor,
    values: Tensor,
    /// Views of `keys`, one per layer.
    pub layer_keys: Vec<Tensor>,
    /// Views of `values`, one per layer.
    pub layer_values: Vec<Tensor>,
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
        let shape = [
            layers as i64,
            num_slots as i64,
            kv_heads as i64,
            head_dim as i64,
        ];
        Ok(Self {
            keys: Tensor::f_zeros(shape, (kind, device))?,
            values: Tensor::f_zeros(shape, (kind, device))?,
            num_slots: num_slots as i64,
            buffers: None,
            reuse_buffers: device == Device::Cpu,
        })
    }

    /// Number of slots per layer.
    pub fn num_slots(&self) -> i64 {
        self.num_slots
    }

    /// A `[layers, n, kv_heads, head_dim]` pair of tensors to gather into:
    /// views of the reused buffers on the CPU, fresh elsewhere.
    fn gather_targets(&mut self, n: i64) -> Result<Option<(Tensor, Tensor)>, TchError> {
        if !self.reuse_buffers {
            return Ok(None);
        }
        let size = self.keys.size();
        let shape = [size[0], n, size[2], size[3]];
        let numel: i64 = shape.iter().product();
        let have = self.buffers.as_ref().map_or(0, |(k, _)| k.numel() as i64);
        if have < numel {
            // Grow by half again, so a context growing a token per step
            // reallocates rarely.
            let cap = numel.max(have + have / 2);
            let opts = (self.keys.kind(), self.keys.device());
            self.buffers = Some((Tensor::f_empty([cap], opts)?, Tensor::f_empty([cap], opts)?));
        }
        let Some((k, v)) = &self.buffers else {
            return Ok(None);
        };
        let view = |t: &Tensor| -> Result<Tensor, TchError> {
            op(op(t.f_narrow(0, 0, numel))?.f_view(shape))
        };
        Ok(Some((view(k)?, view(v)?)))
    }

    /// dtype of the stored K/V.
    pub fn kind(&self) -> Kind {
        self.keys.kind()
    }

    /// Writes layer `layer`'s new K/V (`[T, kv_heads, head_dim]`) into pool
    /// slots `slots` (`[T]`) directly: the path of steps that read the pool
    /// in place instead of gathering a context.
    pub fn write_layer(
        &mut self,
        layer: usize,
        slots: &Tensor,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(), TchError> {
        let l = layer as i64;
        let _ = op(op(self.keys.f_select(0, l))?.f_index_copy_(0, slots, k))?;
        let _ = op(op(self.values.f_select(0, l))?.f_index_copy_(0, slots, v))?;
        Ok(())
    }

    /// Layer `layer`'s keys and values on the host, `[slots, kv_heads,
    /// head_dim]` each, flat (CPU storage of dtype `T` only).
    pub fn layer_host<T: HostElem>(&self, layer: usize) -> Result<(&[T], &[T]), HostTensorError> {
        let size = self.keys.size();
        let per_layer = (size[1] * size[2] * size[3]) as usize;
        let at = layer * per_layer..(layer + 1) * per_layer;
        let (k, v) = (host_slice::<T>(&self.keys)?, host_slice::<T>(&self.values)?);
        match (k.get(at.clone()), v.get(at)) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(HostTensorError(format!(
                "layer {layer} is outside the KV pool of {} layers",
                size[0]
            ))),
        }
    }

    /// Layer `layer`'s keys and values on the host, writable (as
    /// [`KvStorage::layer_host`]): the decoder's QKV epilogue writes a
    /// step's new rows through them.
    pub fn layer_host_mut<T: HostElem>(
        &mut self,
        layer: usize,
    ) -> Result<(&mut [T], &mut [T]), HostTensorError> {
        let size = self.keys.size();
        let per_layer = (size[1] * size[2] * size[3]) as usize;
        let at = layer * per_layer..(layer + 1) * per_layer;
        let layers = size[0];
        let (k, v) = (
            host_slice_mut::<T>(&mut self.keys)?,
            host_slice_mut::<T>(&mut self.values)?,
        );
        match (k.get_mut(at.clone()), v.get_mut(at)) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(HostTensorError(format!(
                "layer {layer} is outside the KV pool of {layers} layers"
            ))),
        }
    }

    /// Reads every layer's K/V at `slots` (`[N]`, any slot of the pool).
    pub fn gather_context(&mut self, slots: &Tensor) -> Result<StepContext, TchError> {
        let n = slots.size().first().copied().unwrap_or(0);
        let (keys, values) = match self.gather_targets(n)? {
            Some((k, v)) => (
                op(self.keys.f_index_select_out(&k, 1, slots))?,
                op(self.values.f_index_select_out(&v, 1, slots))?,
            ),
            None => (
                op(self.keys.f_index_select(1, slots))?,
                op(self.values.f_index_select(1, slots))?,
            ),
        };
        Ok(StepContext {
            layer_keys: op(keys.f_unbind(0))?,
            layer_values: op(values.f_unbind(0))?,
            keys,
            values,
        })
    }

    /// Stores the step's new K/V: rows `rows` (`[T]`) of the context, of
    /// every layer, go to pool slots `slots` (`[T]`).
    pub fn commit(
        &mut self,
        ctx: &StepContext,
        rows: &Tensor,
        slots: &Tensor,
    ) -> Result<(), TchError> {
        let k = op(ctx.keys.f_index_select(1, rows))?;
        let v = op(ctx.values.f_index_select(1, rows))?;
        let _ = op(self.keys.f_index_copy_(1, slots, &k))?;
        let _ = op(self.values.f_index_copy_(1, slots, &v))?;
        Ok(())
    }
}

impl StepContext {
    /// Writes layer `layer`'s new K/V (`[T, kv_heads, head_dim]`) at
    /// context rows `rows` (`[T]`), before that layer's attention reads them.
    pub fn write(
        &mut self,
        layer: usize,
        rows: &Tensor,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(), TchError> {
        let _ = op(self.layer_keys[layer].f_index_copy_(0, rows, k))?;
        let _ = op(self.layer_values[layer].f_index_copy_(0, rows, v))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(kv: &mut KvStorage, slots: &[i64], base: f64) {
        let s = Tensor::from_slice(slots);
        let t = slots.len() as i64;
        let rows = Tensor::arange(t, (Kind::Int64, Device::Cpu));
        let mut ctx = kv.gather_context(&s).unwrap();
        for layer in 0..2 {
            let k = Tensor::full([t, 1, 2], base + layer as f64, (Kind::Float, Device::Cpu));
            let v = k.neg();
            ctx.write(layer as usize, &rows, &k, &v).unwrap();
        }
        kv.commit(&ctx, &rows, &s).unwrap();
    }

    #[test]
    fn a_step_reads_its_own_new_rows_and_commits_them_for_the_next() {
        let mut kv = KvStorage::new(2, 8, 1, 2, Kind::Float, Device::Cpu).unwrap();
        filled(&mut kv, &[3, 5], 10.0);
        // The next step gathers old slots 3, 5 and a new row for slot 6.
        let slots = Tensor::from_slice(&[3i64, 5, 6]);
        let mut ctx = kv.gather_context(&slots).unwrap();
        let got: Vec<f32> = Vec::try_from(ctx.layer_keys[1].flatten(0, -1)).unwrap();
        assert_eq!(&got[..4], &[11.0, 11.0, 11.0, 11.0]);
        let row = Tensor::from_slice(&[2i64]);
        let k = Tensor::full([1, 1, 2], 7.0, (Kind::Float, Device::Cpu));
        ctx.write(0, &row, &k, &k.neg()).unwrap();
        ctx.write(1, &row, &k, &k.neg()).unwrap();
        let got: Vec<f32> = Vec::try_from(ctx.layer_values[0].flatten(0, -1)).unwrap();
        assert_eq!(got, vec![-10.0, -10.0, -10.0, -10.0, -7.0, -7.0]);
        kv.commit(&ctx, &row, &Tensor::from_slice(&[6i64])).unwrap();
        // A longer context regrows the reused buffer and still reads right.
        let ctx = kv
            .gather_context(&Tensor::from_slice(&[6i64, 3, 5, 0, 1, 2, 4, 7]))
            .unwrap();
        let got: Vec<f32> = Vec::try_from(ctx.layer_keys[0].flatten(0, -1)).unwrap();
        assert_eq!(&got[..6], &[7.0, 7.0, 10.0, 10.0, 10.0, 10.0]);
        assert!(got[6..].iter().all(|&x| x == 0.0));
    }
}
