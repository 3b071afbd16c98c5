//! Where a decoder layer's elementwise work runs: on the CPU (f32, bf16)
//! as host passes of `kernels::layer_ops` into buffers reused by every
//! layer of a step; elsewhere (CUDA, other dtypes) as ATen ops.
//!
//! Why: on a CPU each ATen op is a dispatch, an allocation and an OpenMP
//! fork/join. At decode sizes those cost more than the arithmetic, and a
//! layer made about 31 of them; the host passes leave it the four weight
//! matmuls, the attention and no other op.

use kernels::layer_ops::{add_rms_norm, qkv_epilogue, swiglu, QkvShape, RopeTable};
use tch::{Device, Kind, Tensor};

use crate::error::EngineError;
use crate::host_tensor::{host_slice, host_slice_mut, HostElem};
use crate::kv::storage::KvStorage;
use crate::model::head::norm_for_matmul;
use crate::op_count::op;
use crate::openmp::OpenMp;

/// One step's elementwise path.
pub enum Elementwise {
    /// Host passes, writing into the step's buffers.
    Host(StepBuffers),
    /// ATen ops.
    Ops,
}

/// A step's reused outputs (`t` rows): the normed input of a matmul
/// (`[t, hidden]`), the SwiGLU output (`[t, intermediate]`), both in the
/// model dtype, and q in f32 for the paged attention (`[t, heads *
/// head_dim]`).
pub struct StepBuffers {
    normed: Tensor,
    act: Tensor,
    q32: Tensor,
}

/// Whether a model of `kind` on `device` takes the host passes.
pub fn runs_on_host(kind: Kind, device: Device) -> bool {
    device == Device::Cpu && matches!(kind, Kind::Float | Kind::BFloat16)
}

/// `t` in memory order, with no call where it already is.
fn dense(t: &Tensor) -> Result<Tensor, EngineError> {
    if t.is_contiguous() {
        Ok(t.shallow_clone())
    } else {
        Ok(op(t.f_contiguous())?)
    }
}

impl Elementwise {
    /// The path of a step of `t` rows for a model of `kind` on `device`,
    /// with hidden size `hidden`, MLP width `inter` and `q_width` query
    /// values per row: on the host where `host` allows and the model
    /// [`runs_on_host`].
    pub fn for_step(
        host: bool,
        kind: Kind,
        device: Device,
        t: i64,
        hidden: i64,
        inter: i64,
        q_width: i64,
    ) -> Result<Self, EngineError> {
        if !host || !runs_on_host(kind, device) {
            return Ok(Self::Ops);
        }
        let empty = |cols: i64, k: Kind| op(Tensor::f_empty([t, cols], (k, Device::Cpu)));
        Ok(Self::Host(StepBuffers {
            normed: empty(hidden, kind)?,
            act: empty(inter, kind)?,
            q32: empty(q_width, Kind::Float)?,
        }))
    }

    /// `x += delta` (when given), then the RMSNorm of `x` with `weight`
    /// (residual dtype), in the model dtype `kind` for the matmul.
    pub fn add_norm(
        &mut self,
        x: &mut Tensor,
        delta: Option<&Tensor>,
        weight: &Tensor,
        eps: f64,
        kind: Kind,
    ) -> Result<Tensor, EngineError> {
        let Self::Host(buf) = self else {
            if let Some(d) = delta {
                let _ = op(x.f_add_(d))?;
            }
            return norm_for_matmul(x, weight, eps, kind);
        };
        let delta = delta.map(dense).transpose()?;
        match kind {
            Kind::BFloat16 => add_norm_host::<half::bf16>(x, delta.as_ref(), weight, eps, buf)?,
            _ => add_norm_host::<f32>(x, delta.as_ref(), weight, eps, buf)?,
        }
        Ok(buf.normed.shallow_clone())
    }

    /// SwiGLU of the fused gate/up output `gu` (`[t, 2 * inter]`): `[t,
    /// inter]`, contiguous, in the model dtype.
    pub fn swiglu(&mut self, gu: &Tensor, inter: i64) -> Result<Tensor, EngineError> {
        let Self::Host(buf) = self else {
            let mut gate = op(gu.f_narrow(1, 0, inter))?;
            let _ = op(gate.f_silu_())?;
            let _ = op(gate.f_mul_(&op(gu.f_narrow(1, inter, inter))?))?;
            return Ok(gate);
        };
        let gu = dense(gu)?;
        let inter = inter as usize;
        match gu.kind() {
            Kind::BFloat16 => swiglu_host::<half::bf16>(&gu, inter, &mut buf.act)?,
            _ => swiglu_host::<f32>(&gu, inter, &mut buf.act)?,
        }
        Ok(buf.act.shallow_clone())
    }

    /// The step's buffers where it runs on the host.
    pub fn buffers(&mut self) -> Option<&mut StepBuffers> {
        match self {
            Self::Host(buf) => Some(buf),
            Self::Ops => None,
        }
    }
}

fn add_norm_host<E: HostElem + kernels::elem::KvElem>(
    x: &mut Tensor,
    delta: Option<&Tensor>,
    weight: &Tensor,
    eps: f64,
    buf: &mut StepBuffers,
) -> Result<(), EngineError> {
    let delta = delta.map(host_slice::<E>).transpose()?;
    let weight = host_slice::<f32>(weight)?;
    let out = host_slice_mut::<E>(&mut buf.normed)?;
    let x = host_slice_mut::<f32>(x)?;
    add_rms_norm(x, delta, weight, eps as f32, out, &OpenMp)?;
    Ok(())
}

fn swiglu_host<E: HostElem + kernels::elem::KvElem>(
    gu: &Tensor,
    inter: usize,
    act: &mut Tensor,
) -> Result<(), EngineError> {
    swiglu(
        host_slice::<E>(gu)?,
        inter,
        host_slice_mut::<E>(act)?,
        &OpenMp,
    )?;
    Ok(())
}

/// What the QKV epilogue reads besides the projection: the step's
/// positions and slots (`[t]` int64, CPU), RoPE's table and the optional
/// per-head q/k norm weight with its epsilon.
pub struct QkvInputs<'a> {
    /// The shape of one QKV row.
    pub shape: QkvShape,
    /// Each row's position.
    pub positions: &'a Tensor,
    /// Each row's KV slot.
    pub slots: &'a Tensor,
    /// RoPE's `[positions, 2, head_dim]` table, model dtype.
    pub rope: &'a Tensor,
    /// Qwen3's `[heads + kv_heads, head_dim]` norm weight and epsilon.
    pub qk_norm: Option<(&'a Tensor, f64)>,
}

impl StepBuffers {
    /// From the fused QKV output `qkv`: q (normed, rotated) into the step's
    /// f32 q buffer, which it returns, and k (normed, rotated) and v into
    /// layer `layer` of `kv` at the rows' slots.
    pub fn qkv_to_pool(
        &mut self,
        qkv: &Tensor,
        inputs: &QkvInputs<'_>,
        kv: &mut KvStorage,
        layer: usize,
    ) -> Result<Tensor, EngineError> {
        let qkv = dense(qkv)?;
        match qkv.kind() {
            Kind::BFloat16 => self.qkv_host::<half::bf16>(&qkv, inputs, kv, layer)?,
            _ => self.qkv_host::<f32>(&qkv, inputs, kv, layer)?,
        }
        Ok(self.q32.shallow_clone())
    }

    fn qkv_host<E: HostElem + kernels::elem::KvElem>(
        &mut self,
        qkv: &Tensor,
        inputs: &QkvInputs<'_>,
        kv: &mut KvStorage,
        layer: usize,
    ) -> Result<(), EngineError> {
        let qk_norm = match inputs.qk_norm {
            Some((w, eps)) => Some((host_slice::<E>(w)?, eps as f32)),
            None => None,
        };
        let (keys, values) = kv.layer_host_mut::<E>(layer)?;
        qkv_epilogue(
            inputs.shape,
            host_slice::<E>(qkv)?,
            host_slice::<i64>(inputs.positions)?,
            RopeTable {
                values: host_slice::<E>(inputs.rope)?,
            },
            qk_norm,
            host_slice::<i64>(inputs.slots)?,
            host_slice_mut::<f32>(&mut self.q32)?,
            keys,
            values,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use crate::runner::testing::{greedy_alone, tiny_runner_in};

    /// Greedy decode of `prompt` for `steps` steps with the elementwise work
    /// on the host or as ATen ops: (tokens, logits of each step).
    fn decode(kind: Kind, host: bool, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
        let mut r = tiny_runner_in(kind, 512, 4).unwrap();
        r.decoder().set_host_elementwise(host);
        greedy_alone(&mut r, prompt, steps).unwrap()
    }

    #[test]
    fn host_passes_match_the_aten_ops() {
        // 12 tokens: the prefill takes the paged path and the host QKV
        // epilogue; 40: it is gathered, with host norms and SwiGLU only.
        // bf16 rounds where the ops round, so only the order of a sum of
        // squares differs: logits within a few bf16 steps, same tokens.
        for (kind, tol) in [(Kind::Float, 1e-4f32), (Kind::BFloat16, 0.1)] {
            for len in [12u32, 40] {
                let prompt: Vec<u32> = (0..len).map(|i| (i * 37 + 5) % 97).collect();
                let (host_toks, host) = decode(kind, true, &prompt, 8);
                let (ops_toks, ops) = decode(kind, false, &prompt, 8);
                assert_eq!(host_toks, ops_toks, "{kind:?}, prompt of {len}");
                let diff = host
                    .iter()
                    .flatten()
                    .zip(ops.iter().flatten())
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    diff < tol,
                    "{kind:?}, prompt of {len}: logits differ by {diff}"
                );
            }
        }
    }
}
