//! The decoder shared by Llama, Qwen2 and Qwen3: embeddings, pre-norm blocks
//! with grouped-query attention over the paged KV cache, SwiGLU MLP, final
//! norm and head. One forward serves a ragged batch (see `model::layout`).
//!
//! Kept to few libtorch calls per token, since on a CPU each costs a
//! dispatch whatever its size: q, k, v and gate, up are one matmul each
//! (weights concatenated at load, whatever the loader; every matmul goes
//! through `model::linear`, weights packed at load for bf16 on the CPU).
//! On the CPU the rest of a layer is host passes of ours
//! (`model::elementwise`): the residual add with the next norm, SwiGLU,
//! and for decode-sized steps the QKV epilogue (q/k norms, RoPE, K/V
//! written to their slots); elsewhere ATen ops do the same (RoPE as a roll
//! and a sign-folded sine table, no `rotate_half` cat). K/V are read
//! through the block table: on the CPU for decode-sized steps by a paged
//! kernel of ours, in place (`model::paged_cpu`), otherwise once per step
//! for all layers (`KvStorage::gather_context`), not gathered per layer.
//! A bf16 model's residual stream and logits are f32 (see `model::head`).

use std::cell::Cell;

use kernels::layer_ops::QkvShape;
use kernels::paged_attention::Plan;
use tch::{Device, Kind, Tensor};
use tracing::warn;

use crate::error::EngineError;
use crate::kv::storage::{KvStorage, StepContext};
use crate::model::elementwise::{Elementwise, QkvInputs};
use crate::model::head::{residual_kind, to_kind, Head};
use crate::model::layout::BatchLayout;
use crate::model::linear::{Gemm, Linear};
use crate::model::paged_cpu::{CpuAttention, PagedCpu};
use crate::model::quantized::QuantWeights;
use crate::model::rope::Rope;
use crate::model::weights::Weights;
use crate::op_count::{op, ops_so_far};
use model_files::hf_config::{Architecture, ModelConfig};

struct Layer {
    /// In the residual dtype, like `post_norm`.
    input_norm: Tensor,
    /// q, k and v projections stacked along the output dimension.
    qkv: Linear,
    /// Qwen3's per-head q and k norm weights, as one `[heads + kv_heads,
    /// head_dim]` table, so q and k are normalized in one pass.
    qk_norm: Option<Tensor>,
    o_proj: Linear,
    post_norm: Tensor,
    /// gate and up projections stacked along the output dimension.
    gate_up: Linear,
    down: Linear,
}

/// How one forward's attention reads K/V.
enum KvReads {
    /// From the pool, through the slot tables (`model::paged_cpu`); new
    /// rows are written to the pool per layer.
    InPlace(Plan),
    /// From a per-step copy of every item's context; new rows go to the
    /// copy and are committed to the pool after the last layer.
    Gathered(StepContext),
}

/// A loaded decoder-only model.
pub struct Decoder {
    cfg: ModelConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    head: Head,
    rope: Rope,
    kind: Kind,
    device: Device,
    /// libtorch calls of the last forward (see `crate::op_count`).
    last_ops: Cell<u64>,
    /// The CPU's paged attention (unused on CUDA).
    paged: PagedCpu,
    /// See [`Decoder::set_host_elementwise`].
    host_elementwise: Cell<bool>,
    /// See [`Decoder::precision`].
    precision: String,
}

impl Decoder {
    /// Builds the model from checkpoint tensors, checking every name and shape.
    pub fn new(
        cfg: &ModelConfig,
        w: Weights,
        kind: Kind,
        device: Device,
    ) -> Result<Self, EngineError> {
        Self::with_quantized(cfg, w, QuantWeights::default(), kind, device)
    }

    /// As [`Decoder::new`], with the projections `quant` holds computed on
    /// their GGUF blocks (CPU).
    pub fn with_quantized(
        cfg: &ModelConfig,
        mut w: Weights,
        mut quant: QuantWeights,
        kind: Kind,
        device: Device,
    ) -> Result<Self, EngineError> {
        let precision = quant.precision(kind);
        let arch = cfg.architecture().map_err(|reason| {
            EngineError::Load(model_files::LoadError::InvalidModel {
                path: Default::default(),
                reason,
            })
        })?;
        let h = cfg.hidden_size as i64;
        let hd = cfg.head_dim() as i64;
        let nh = cfg.num_attention_heads as i64;
        let nkv = cfg.kv_heads() as i64;
        let inter = cfg.intermediate_size as i64;
        let vocab = cfg.vocab_size as i64;
        let qkv_bias = arch == Architecture::Qwen2 || cfg.attention_bias;
        let res = residual_kind(kind);
        let gemm = Gemm::for_weights(kind, device)?;
        let embed = w.take("model.embed_tokens.weight", &[vocab, h])?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let qkv = [
                (format!("{p}.self_attn.q_proj.weight"), [nh * hd, h]),
                (format!("{p}.self_attn.k_proj.weight"), [nkv * hd, h]),
                (format!("{p}.self_attn.v_proj.weight"), [nkv * hd, h]),
            ];
            let bias = if qkv_bias {
                let qb = w.take(&format!("{p}.self_attn.q_proj.bias"), &[nh * hd])?;
                let kb = w.take(&format!("{p}.self_attn.k_proj.bias"), &[nkv * hd])?;
                let vb = w.take(&format!("{p}.self_attn.v_proj.bias"), &[nkv * hd])?;
                Some(Tensor::f_cat(&[qb, kb, vb], 0)?)
            } else {
                None
            };
            let qk_norm = if arch == Architecture::Qwen3 {
                let qn = w.take(&format!("{p}.self_attn.q_norm.weight"), &[hd])?;
                let kn = w.take(&format!("{p}.self_attn.k_norm.weight"), &[hd])?;
                Some(Tensor::f_cat(
                    &[
                        qn.f_expand([nh, hd], false)?,
                        kn.f_expand([nkv, hd], false)?,
                    ],
                    0,
                )?)
            } else {
                None
            };
            let o_bias = if cfg.attention_bias {
                Some(w.take(&format!("{p}.self_attn.o_proj.bias"), &[h])?)
            } else {
                None
            };
            let gate_up = [
                (format!("{p}.mlp.gate_proj.weight"), [inter, h]),
                (format!("{p}.mlp.up_proj.weight"), [inter, h]),
            ];
            let o = [(format!("{p}.self_attn.o_proj.weight"), [h, nh * hd])];
            let down = [(format!("{p}.mlp.down_proj.weight"), [h, inter])];
            layers.push(Layer {
                input_norm: w
                    .take(&format!("{p}.input_layernorm.weight"), &[h])?
                    .f_to_kind(res)?,
                qkv: quant.projection(&mut w, &qkv, bias, kind, gemm)?,
                qk_norm,
                o_proj: quant.projection(&mut w, &o, o_bias, kind, gemm)?,
                post_norm: w
                    .take(&format!("{p}.post_attention_layernorm.weight"), &[h])?
                    .f_to_kind(res)?,
                gate_up: quant.projection(&mut w, &gate_up, None, kind, gemm)?,
                down: quant.projection(&mut w, &down, None, kind, gemm)?,
            });
        }
        let norm = w.take("model.norm.weight", &[h])?.f_to_kind(res)?;
        let lm_head = if cfg.tie_word_embeddings {
            // Some tied checkpoints still carry a copy; it is identical, drop it.
            let _ = w.take_optional("lm_head.weight", &[vocab, h])?;
            embed.shallow_clone()
        } else {
            // Co-LLM heads carry `deferral_columns` extra rows after the vocabulary.
            let rows = vocab + cfg.deferral_columns as i64;
            w.take("lm_head.weight", &[rows, h])?
        };
        let rows = lm_head.size()[0];
        let head = match quant.take_head([rows, h])? {
            Some(m) => Head::with_proj(
                norm,
                lm_head,
                Linear::quantized(vec![m], None)?,
                kind,
                cfg.rms_norm_eps,
            ),
            None => Head::new(norm, lm_head, kind, cfg.rms_norm_eps, gemm)?,
        };
        let leftover = w.leftover();
        if !leftover.is_empty() {
            warn!(count = leftover.len(), first = %leftover[0], "checkpoint tensors not used by the architecture");
        }
        Ok(Self {
            cfg: cfg.clone(),
            embed,
            layers,
            head,
            precision,
            rope: Rope::new(cfg, kind, device)?,
            kind,
            device,
            last_ops: Cell::new(0),
            paged: PagedCpu::new(cfg, kind, device),
            host_elementwise: Cell::new(true),
        })
    }

    /// What the weights are computed in: the dtype, or the GGUF block
    /// types kept and the dtype of the rest (`QuantWeights::precision`).
    pub fn precision(&self) -> &str {
        &self.precision
    }

    /// libtorch calls (ATen ops, views included) the last forward made.
    pub fn ops_last_forward(&self) -> u64 {
        self.last_ops.get()
    }

    /// Chooses how later forwards read K/V on the CPU (the paged kernel by
    /// default; [`CpuAttention::Gather`] is the path before it, for
    /// side-by-side measurements).
    pub fn set_cpu_attention(&self, mode: CpuAttention) {
        self.paged.set_mode(mode);
    }

    /// Whether later forwards on the CPU run the layers' elementwise work
    /// as host passes (`true`, the default) or as ATen ops (the path
    /// before them, for side-by-side measurements and tests).
    pub fn set_host_elementwise(&self, on: bool) {
        self.host_elementwise.set(on);
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Activation dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Device of weights and activations.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Longest context the position tables cover.
    pub fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    /// The token embedding matrix `[vocab, hidden]` (routers read it).
    pub fn embeddings(&self) -> &Tensor {
        &self.embed
    }

    /// One forward over a ragged batch. Writes the new tokens' K/V into `kv`
    /// and returns, per batch item, the last position's logits (`[B, V]`, f32;
    /// `V` is `vocab_size + deferral_columns`) and final hidden state after
    /// the last norm (`[B, H]`), plus, when `entropy_rows` (`[N]` rows of the
    /// `[T]` new tokens) is given, the normalized next-token entropy at each
    /// of those rows (`[N]`, on the CPU).
    pub fn forward(
        &self,
        layout: &BatchLayout,
        kv: &mut KvStorage,
        entropy_rows: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Option<Vec<f32>>), EngineError> {
        let _guard = tch::no_grad_guard();
        let cfg = &self.cfg;
        let nh = cfg.num_attention_heads as i64;
        let nkv = cfg.kv_heads() as i64;
        let hd = cfg.head_dim() as i64;
        let eps = cfg.rms_norm_eps;
        let t = layout.num_tokens;
        let ops_before = ops_so_far();
        let inter = cfg.intermediate_size as i64;
        let mut reads = match self.paged.plan(layout, kv)? {
            Some(plan) => KvReads::InPlace(plan),
            None => KvReads::Gathered(kv.gather_context(&layout.gather)?),
        };
        let kind = self.kind;
        let embedded = op(self.embed.f_index_select(0, &layout.tokens))?;
        let mut x = to_kind(embedded, residual_kind(kind))?;
        let mut ew = Elementwise::for_step(
            self.host_elementwise.get(),
            kind,
            self.device,
            t,
            cfg.hidden_size as i64,
            inter,
            nh * hd,
        )?;
        let shape = QkvShape {
            heads: nh as usize,
            kv_heads: nkv as usize,
            head_dim: hd as usize,
        };
        let mut rope_rows = self.rope.step_rows(&layout.positions);
        // Each layer's closing residual add runs with the next one's norm.
        let mut pending: Option<Tensor> = None;
        for (li, layer) in self.layers.iter().enumerate() {
            let h = ew.add_norm(&mut x, pending.as_ref(), &layer.input_norm, eps, kind)?;
            let qkv = layer.qkv.forward(&h)?;
            let attn = match (&mut reads, ew.buffers()) {
                (KvReads::InPlace(plan), Some(buf)) => {
                    let inputs = QkvInputs {
                        shape,
                        positions: &layout.positions,
                        slots: &layout.slots,
                        rope: self.rope.table(),
                        qk_norm: layer.qk_norm.as_ref().map(|w| (w, eps)),
                    };
                    let q = buf.qkv_to_pool(&qkv, &inputs, kv, li)?;
                    self.paged.attend(plan, kv, li, &q)?
                }
                (reads, _) => {
                    let (cos, sin) = rope_rows.get()?;
                    let (q, k, v) = self.qkv_ops(layer, &qkv, t, cos, sin)?;
                    match reads {
                        KvReads::InPlace(plan) => {
                            kv.write_layer(li, &layout.slots, &k, &v)?;
                            self.paged.attend(plan, kv, li, &q)?
                        }
                        KvReads::Gathered(ctx) => {
                            ctx.write(li, &layout.new_rows, &k, &v)?;
                            let (keys, values) = (&ctx.layer_keys[li], &ctx.layer_values[li]);
                            self.attention(layout, keys, values, &q)?
                        }
                    }
                }
            };
            let o = layer.o_proj.forward(&attn)?;
            let h = ew.add_norm(&mut x, Some(&o), &layer.post_norm, eps, kind)?;
            let gu = layer.gate_up.forward(&h)?;
            let act = ew.swiglu(&gu, inter)?;
            pending = Some(layer.down.forward(&act)?);
        }
        if let Some(down) = pending {
            let _ = op(x.f_add_(&down))?;
        }
        if let KvReads::Gathered(ctx) = reads {
            kv.commit(&ctx, &layout.new_rows, &layout.slots)?;
        }
        let entropies = match entropy_rows {
            Some(rows) => {
                // Over the vocabulary only (not a deferral column).
                let logits = self.head.logits(&x.f_index_select(0, rows)?)?.f_narrow(
                    1,
                    0,
                    self.cfg.vocab_size as i64,
                )?;
                Some(policies::signals::normalized_entropy_rows(&logits)?)
            }
            None => None,
        };
        let last = op(x.f_index_select(0, &layout.last))?;
        let (hidden, logits) = self.head.forward(&last)?;
        self.last_ops.set(ops_so_far() - ops_before);
        Ok((logits, hidden, entropies))
    }

    /// q (`[T, heads, head_dim]`), k and v (`[T, kv_heads, head_dim]`)
    /// from the fused QKV output as ATen ops: q/k norms, then RoPE.
    fn qkv_ops(
        &self,
        layer: &Layer,
        qkv: &Tensor,
        t: i64,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor), EngineError> {
        let cfg = &self.cfg;
        let nh = cfg.num_attention_heads as i64;
        let nkv = cfg.kv_heads() as i64;
        let hd = cfg.head_dim() as i64;
        // q and k side by side as `[T, heads + kv_heads, head_dim]`.
        let mut qk = op(op(qkv.f_narrow(1, 0, (nh + nkv) * hd))?.f_view([t, nh + nkv, hd]))?;
        if let Some(w) = &layer.qk_norm {
            let normed = op(qk.f_rms_norm([hd], None::<Tensor>, cfg.rms_norm_eps))?;
            qk = op(normed.f_mul(w))?;
        }
        let qk = Rope::apply(&qk, cos, sin)?;
        let q = op(qk.f_narrow(1, 0, nh))?;
        let k = op(qk.f_narrow(1, nh, nkv))?;
        let v = op(op(qkv.f_narrow(1, (nh + nkv) * hd, nkv * hd))?.f_view([t, nkv, hd]))?;
        Ok((q, k, v))
    }

    /// Attention of the new queries against each item's whole context,
    /// padded to `[B, heads, q_max, ctx_max]` with a causal/padding mask.
    /// `k_ctx`, `v_ctx`: this layer's gathered context, `[B * ctx_max, kv_heads, head_dim]`.
    fn attention(
        &self,
        layout: &BatchLayout,
        k_ctx: &Tensor,
        v_ctx: &Tensor,
        q: &Tensor,
    ) -> Result<Tensor, EngineError> {
        let cfg = &self.cfg;
        let nh = cfg.num_attention_heads as i64;
        let nkv = cfg.kv_heads() as i64;
        let hd = cfg.head_dim() as i64;
        let (b, qm, cm) = (layout.batch, layout.q_max, layout.ctx_max);
        // [B*ctx, nkv, hd] -> [B, nkv, ctx, hd]
        let k = op(op(k_ctx.f_view([b, cm, nkv, hd]))?.f_transpose(1, 2))?;
        let v = op(op(v_ctx.f_view([b, cm, nkv, hd]))?.f_transpose(1, 2))?;
        let q_pad = if layout.is_dense {
            q.shallow_clone()
        } else {
            let zero = op(Tensor::f_zeros([1, nh, hd], (q.kind(), q.device())))?;
            op(op(Tensor::f_cat(&[q, &zero], 0))?.f_index_select(0, &layout.q_pad))?
        };
        let q4 = op(op(q_pad.f_view([b, qm, nh, hd]))?.f_transpose(1, 2))?;
        let out = op(Tensor::f_scaled_dot_product_attention(
            &q4,
            &k,
            &v,
            Some(&layout.mask),
            0.0,
            false,
            1.0 / (hd as f64).sqrt(),
            nh != nkv,
        ))?;
        let out = op(op(out.f_transpose(1, 2))?.f_reshape([b * qm, nh * hd]))?;
        if layout.is_dense {
            Ok(out)
        } else {
            Ok(op(out.f_index_select(0, &layout.q_valid))?)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tch::{Device, Kind, Tensor};

    use super::Decoder;
    use crate::error::EngineError;
    use crate::model::weights::Weights;
    use crate::runner::testing::{random_weights, tiny_config};

    fn build(
        edit: impl FnOnce(&mut std::collections::HashMap<String, Tensor>),
    ) -> Result<Decoder, EngineError> {
        let cfg = tiny_config();
        let mut w = random_weights(&cfg, 1);
        edit(&mut w);
        Decoder::new(
            &cfg,
            Weights::from_map(Path::new("m"), w),
            Kind::Float,
            Device::Cpu,
        )
    }

    #[test]
    fn a_missing_tensor_is_named() {
        let err = build(|w| {
            w.remove("model.layers.1.mlp.up_proj.weight");
        })
        .err()
        .unwrap();
        assert!(
            matches!(err, EngineError::Load(model_files::LoadError::MissingTensor { ref name, .. }) if name == "model.layers.1.mlp.up_proj.weight")
        );
        assert!(err
            .to_string()
            .contains("model.layers.1.mlp.up_proj.weight"));
    }

    #[test]
    fn a_wrong_shape_is_named_with_both_shapes() {
        let err = build(|w| {
            w.insert(
                "model.layers.0.self_attn.k_proj.weight".into(),
                Tensor::zeros([3, 32], (Kind::Float, Device::Cpu)),
            );
        })
        .err()
        .unwrap();
        let msg = err.to_string();
        assert!(
            msg.contains("model.layers.0.self_attn.k_proj.weight")
                && msg.contains("[3, 32]")
                && msg.contains("[16, 32]"),
            "{msg}"
        );
    }

    #[test]
    fn builds_from_complete_weights() {
        assert!(build(|_| {}).is_ok());
    }
}
