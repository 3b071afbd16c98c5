//! The decoder's attention on the CPU for decode-sized steps: the paged
//! kernel of `kernels::paged_attention`, reading each sequence's K/V in
//! place from the pool through its slot table, on libtorch's OpenMP team.
//!
//! Why: the gathered path copies every item's whole context of every layer
//! once per step and pads all items to the longest; at long contexts that
//! copy and the padded attention cost more than the step's weight GEMMs.
//! Steps with many new tokens per item (prompt prefill) keep the gathered
//! path, whose flash attention is a blocked GEMM; so do CUDA devices.

use std::cell::{Cell, RefCell};

use kernels::paged_attention::{attend, Geometry, Item, Plan};
use tch::{Device, Kind, Tensor};

use crate::error::EngineError;
use crate::host_tensor::{host_slice, host_slice_mut, HostElem};
use crate::kv::storage::KvStorage;
use crate::model::layout::BatchLayout;
use crate::op_count::op;
use crate::openmp::OpenMp;
use model_files::hf_config::ModelConfig;

/// Most new tokens of one item a step may have to take the paged path:
/// decode (1) and the short catch-up prefills of a hand-over. Past this
/// the kernel's per-row pass over the context loses to flash attention.
pub const PAGED_MAX_ROWS: i64 = 16;
/// Context positions of one task: a long sequence is split into chunks of
/// this many so that it spreads over the threads.
const CHUNK: usize = 128;

/// How the CPU reads K/V in attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuAttention {
    /// The paged kernel for decode-sized steps (the default).
    Paged,
    /// Always gather each step's context and run libtorch's attention (the
    /// path before the kernel; kept for comparison and for CUDA).
    Gather,
}

/// The paged path's state: the mode and the kernel's reused scratch.
pub struct PagedCpu {
    mode: Cell<CpuAttention>,
    scratch: RefCell<Vec<f32>>,
    geometry: Geometry,
    kind: Kind,
    device: Device,
}

impl PagedCpu {
    /// For a model of `cfg` with activations of `kind` on `device`.
    pub fn new(cfg: &ModelConfig, kind: Kind, device: Device) -> Self {
        let hd = cfg.head_dim();
        Self {
            mode: Cell::new(CpuAttention::Paged),
            scratch: RefCell::new(Vec::new()),
            geometry: Geometry {
                heads: cfg.num_attention_heads,
                kv_heads: cfg.kv_heads(),
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
            },
            kind,
            device,
        }
    }

    /// Chooses how later forwards read K/V on the CPU.
    pub fn set_mode(&self, mode: CpuAttention) {
        self.mode.set(mode);
    }

    /// The step's plan when it takes the paged path: on the CPU, in
    /// [`CpuAttention::Paged`], with a pool of f32 or bf16, for a layout
    /// that carries host items of at most [`PAGED_MAX_ROWS`] new tokens.
    pub fn plan(&self, layout: &BatchLayout, kv: &KvStorage) -> Result<Option<Plan>, EngineError> {
        let takes = self.device == Device::Cpu
            && self.mode.get() == CpuAttention::Paged
            && matches!(kv.kind(), Kind::Float | Kind::BFloat16)
            && !layout.host_items.is_empty()
            && layout.q_max <= PAGED_MAX_ROWS;
        if !takes {
            return Ok(None);
        }
        let items: Vec<Item<'_>> = layout
            .host_items
            .iter()
            .map(|h| Item {
                slots: &layout.host_slots[h.slot_start..h.slot_start + h.context],
                first_row: h.first_row,
                rows: h.rows,
            })
            .collect();
        Ok(Some(Plan::new(self.geometry, &items, CHUNK)?))
    }

    /// Attention of `q` (`[T, heads, head_dim]`, any layout) against layer
    /// `layer` of the pool, whose new rows are already written; returns
    /// `[T, heads * head_dim]` in the activation dtype.
    pub fn attend(
        &self,
        plan: &Plan,
        kv: &KvStorage,
        layer: usize,
        q: &Tensor,
    ) -> Result<Tensor, EngineError> {
        let g = self.geometry;
        let t = plan.rows() as i64;
        let q32 = if q.kind() == Kind::Float && q.is_contiguous() {
            q.shallow_clone()
        } else {
            op(op(q.f_to_kind(Kind::Float))?.f_contiguous())?
        };
        let mut out = op(Tensor::f_empty(
            [t, (g.heads * g.head_dim) as i64],
            (Kind::Float, Device::Cpu),
        ))?;
        {
            let q_host = host_slice::<f32>(&q32)?;
            let out_host = host_slice_mut::<f32>(&mut out)?;
            match kv.kind() {
                Kind::BFloat16 => self.run::<half::bf16>(plan, kv, layer, q_host, out_host)?,
                _ => self.run::<f32>(plan, kv, layer, q_host, out_host)?,
            }
        }
        // The kernel counts as one call, like the attention op it replaces.
        if self.kind == Kind::Float {
            Ok(op(out))
        } else {
            Ok(op(out.f_to_kind(self.kind))?)
        }
    }

    fn run<T: HostElem + kernels::paged_attention::KvElem>(
        &self,
        plan: &Plan,
        kv: &KvStorage,
        layer: usize,
        q: &[f32],
        out: &mut [f32],
    ) -> Result<(), EngineError> {
        let (keys, values) = kv.layer_host::<T>(layer)?;
        let mut scratch = self.scratch.borrow_mut();
        attend(plan, q, keys, values, out, &mut scratch, &OpenMp)?;
        Ok(())
    }
}
