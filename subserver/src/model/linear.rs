//! The decoder's weight matmuls, `x · Wᵀ (+ b)`.
//!
//! On the CPU, bf16 weights are packed once at load and multiplied by one
//! of two kernels, chosen per CPU:
//! - with AMX (`amx_bf16`): oneDNN's packed linear (`model::onednn`), the
//!   path PyTorch's own CPU compilers take for inference weights, which
//!   runs on AMX tiles there. `make bench-engine` timed one decode step of
//!   SmolLM2-135M 1.3-1.4x faster than plain `linear` at batch 1 to 16
//!   on an AMX build machine.
//! - with AVX-512 but no AMX: `kernels::gemm`, weights widened to f32 in
//!   registers and f32 FMAs, because there oneDNN multiplies with
//!   `vdpbf16ps` at half the FMA rate (see that module); the page's "GEMMs"
//!   section times all three paths on the machine it ran on.
//!
//! A GGUF served with `dtype: auto` on the CPU keeps its blocks
//! ([`Linear::quantized`], `kernels::quant`): int8 activations against the
//! blocks' codes, so a step reads the file's bytes, not bf16's.
//!
//! f32 keeps plain `linear`: in a torch timing of the step's GEMMs at
//! batch 1 (2 threads), MKL's GEMV took 21.5 ms against 29.1 ms packed.
//! So does CUDA.

use std::cell::RefCell;
use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};
use tracing::warn;

use engine_config::cpu_bf16_flags;
use kernels::gemm::{self, PackedWeight};
use kernels::quant::{self, Columns, QuantMatrix, QuantScratch};

use crate::error::EngineError;
use crate::host_tensor::{host_slice, host_slice_mut};
use crate::model::onednn;
use crate::op_count::op;
use crate::openmp::OpenMp;

/// The environment variable that chooses the CPU GEMM path at load
/// (`packed`, `widened` or `plain`; unset: chosen per CPU), for
/// side-by-side measurements and as a way back should a libtorch build
/// lack the operators.
pub const CPU_GEMM_ENV: &str = "TOKENROUTER_CPU_GEMM";

/// How a model's weight matmuls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gemm {
    /// libtorch's `linear` on the weight as loaded.
    Plain,
    /// oneDNN's linear on a weight packed at load (CPU, bf16).
    Packed,
    /// `kernels::gemm` on a weight packed at load: bf16 widened to f32 in
    /// registers, f32 FMAs (CPU, bf16, AVX-512F).
    Widened,
    /// `kernels::quant` on the GGUF's blocks (CPU, `dtype: auto`).
    Quantized,
}

impl Gemm {
    /// The path for weights of `kind` on `device`. Only bf16 on the CPU
    /// is packed: as [`CPU_GEMM_ENV`] says, or else [`Gemm::Widened`] on a
    /// CPU with AVX-512F and no AMX and [`Gemm::Packed`] elsewhere. Packed
    /// falls back to plain where this libtorch cannot run oneDNN's bf16
    /// linear (a CPU without AVX-512 BW/VL/DQ or AVX-NE-CONVERT; checked
    /// once, logged); widened, where the CPU lacks AVX-512F.
    pub fn for_weights(kind: Kind, device: Device) -> Result<Self, EngineError> {
        let chosen = match std::env::var(CPU_GEMM_ENV) {
            Err(_) => None,
            Ok(v) => Self::parse(&v)?,
        };
        if device != Device::Cpu || kind != Kind::BFloat16 {
            return Ok(Self::Plain);
        }
        let chosen = chosen.unwrap_or_else(|| {
            if gemm::vectorized() && !cpu_bf16_flags().contains(&"amx_bf16") {
                Self::Widened
            } else {
                Self::Packed
            }
        });
        Ok(match chosen {
            Self::Packed if packed_bf16_runs() => Self::Packed,
            Self::Widened if gemm::vectorized() => Self::Widened,
            _ => Self::Plain,
        })
    }

    /// A [`CPU_GEMM_ENV`] value: a path, or none (empty: chosen per CPU).
    fn parse(value: &str) -> Result<Option<Self>, EngineError> {
        match value {
            "" => Ok(None),
            "packed" => Ok(Some(Self::Packed)),
            "widened" => Ok(Some(Self::Widened)),
            "plain" => Ok(Some(Self::Plain)),
            other => Err(EngineError::InvalidDevice(format!(
                "{CPU_GEMM_ENV}={other:?}: expected `packed`, `widened` or `plain`"
            ))),
        }
    }
}

/// Whether oneDNN's packed bf16 linear runs in this process: one small
/// weight packed and applied, once.
fn packed_bf16_runs() -> bool {
    static RUNS: OnceLock<bool> = OnceLock::new();
    *RUNS.get_or_init(|| {
        let probe = || -> Result<(), EngineError> {
            let w = Tensor::f_ones([16, 32], (Kind::BFloat16, Device::Cpu))?;
            let x = Tensor::f_ones([2, 32], (Kind::BFloat16, Device::Cpu))?;
            drop(onednn::linear(&x, &onednn::pack(&w)?, None)?);
            Ok(())
        };
        match probe() {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %e, "oneDNN's packed bf16 linear does not run here; using libtorch's linear");
                false
            }
        }
    })
}

/// A weight as its path holds it.
enum Weight {
    /// As loaded (plain) or packed by oneDNN: a tensor.
    Tensor(Tensor),
    /// Packed for `kernels::gemm`, with the bias in f32.
    Widened(PackedWeight, Option<Vec<f32>>),
    /// ggml blocks for `kernels::quant`: parts stacked along the output
    /// (a fused projection whose parts differ in block type), with the
    /// bias in f32.
    Quantized(Vec<QuantMatrix>, Option<Vec<f32>>),
}

/// One projection: its weight (plain, or packed for its kernel) and bias.
pub struct Linear {
    weight: Weight,
    /// The bias of the tensor paths (the widened one holds its own).
    bias: Option<Tensor>,
    gemm: Gemm,
}

thread_local! {
    /// `kernels::gemm`'s scratch (the widened input), shared by every
    /// projection a thread runs: one model's forward at a time per thread.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// `kernels::quant`'s scratch (the int8 input), likewise.
    static QUANT_SCRATCH: RefCell<QuantScratch> = RefCell::new(QuantScratch::default());
}

impl Linear {
    /// `weight` (`[out, in]`) and `bias` (`[out]`), packed when `gemm` says so.
    pub fn new(weight: Tensor, bias: Option<Tensor>, gemm: Gemm) -> Result<Self, EngineError> {
        let (weight, bias) = match gemm {
            Gemm::Plain | Gemm::Quantized => (Weight::Tensor(weight), bias),
            Gemm::Packed => (Weight::Tensor(onednn::pack(&weight)?), bias),
            Gemm::Widened => {
                let (n, k) = match weight.size()[..] {
                    [n, k] => (n as usize, k as usize),
                    ref other => {
                        return Err(EngineError::Load(model_files::LoadError::InvalidModel {
                            path: Default::default(),
                            reason: format!("a linear weight must be 2-D, got {other:?}"),
                        }))
                    }
                };
                let w = weight.f_contiguous()?;
                let packed = PackedWeight::pack(host_slice::<half::bf16>(&w)?, n, k)?;
                // The kernel takes the bias in f32; the tensor is not kept.
                let bias = match bias {
                    Some(b) => Some(Vec::<f32>::try_from(b.f_to_kind(Kind::Float)?)?),
                    None => None,
                };
                (Weight::Widened(packed, bias), None)
            }
        };
        let gemm = if gemm == Gemm::Quantized {
            Gemm::Plain
        } else {
            gemm
        };
        Ok(Self { weight, bias, gemm })
    }

    /// A projection on ggml blocks: `parts` (each `[n_i, in]`, one input
    /// width) stacked along the output, `bias` over all of it.
    pub fn quantized(parts: Vec<QuantMatrix>, bias: Option<Tensor>) -> Result<Self, EngineError> {
        let invalid = |reason: String| {
            EngineError::Load(model_files::LoadError::InvalidModel {
                path: Default::default(),
                reason,
            })
        };
        let Some(k) = parts.first().map(QuantMatrix::k) else {
            return Err(invalid("a quantized projection needs a weight".into()));
        };
        if parts.iter().any(|p| p.k() != k) {
            return Err(invalid(format!(
                "the parts of a fused projection differ in input width: {:?}",
                parts.iter().map(QuantMatrix::k).collect::<Vec<_>>()
            )));
        }
        let n: usize = parts.iter().map(QuantMatrix::n).sum();
        let bias = match bias {
            Some(b) => Some(Vec::<f32>::try_from(b.f_to_kind(Kind::Float)?)?),
            None => None,
        };
        if bias.as_ref().is_some_and(|b| b.len() != n) {
            return Err(invalid(format!("a bias of {n} values expected")));
        }
        Ok(Self {
            weight: Weight::Quantized(parts, bias),
            bias: None,
            gemm: Gemm::Quantized,
        })
    }

    /// The block types of a quantized projection's parts (empty for the
    /// others).
    pub fn block_types(&self) -> Vec<quant::QuantType> {
        match &self.weight {
            Weight::Quantized(parts, _) => parts.iter().map(QuantMatrix::ty).collect(),
            _ => Vec::new(),
        }
    }

    /// `x · Wᵀ (+ b)` for `x` of `[..., in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, EngineError> {
        match (&self.weight, self.gemm) {
            (Weight::Tensor(w), Gemm::Packed) => op(onednn::linear(x, w, self.bias.as_ref())),
            (Weight::Tensor(w), _) => Ok(op(x.f_linear(w, self.bias.as_ref()))?),
            (Weight::Widened(w, bias), _) => widened(x, w, bias.as_deref()),
            (Weight::Quantized(parts, bias), _) => quantized(x, parts, bias.as_deref()),
        }
    }

    /// The path this projection takes.
    pub fn gemm(&self) -> Gemm {
        self.gemm
    }
}

/// [`Linear::forward`] through `kernels::gemm`, on libtorch's OpenMP team.
fn widened(x: &Tensor, w: &PackedWeight, bias: Option<&[f32]>) -> Result<Tensor, EngineError> {
    let mut size = x.size();
    let Some(last) = size.last_mut() else {
        return Err(EngineError::InvalidRequest(
            "a linear input must have a dimension".into(),
        ));
    };
    *last = w.n() as i64;
    let x = if x.is_contiguous() && x.kind() == Kind::BFloat16 {
        x.shallow_clone()
    } else {
        op(op(x.f_to_kind(Kind::BFloat16))?.f_contiguous())?
    };
    let rows = x.numel() / w.k().max(1);
    let mut out = op(Tensor::f_empty(
        size.as_slice(),
        (Kind::BFloat16, Device::Cpu),
    ))?;
    SCRATCH.with(|scratch| {
        gemm::matmul(
            host_slice::<half::bf16>(&x)?,
            rows,
            w,
            bias,
            host_slice_mut::<half::bf16>(&mut out)?,
            &mut scratch.borrow_mut(),
            &OpenMp,
        )
        .map_err(EngineError::from)
    })?;
    Ok(out)
}

/// [`Linear::forward`] through `kernels::quant`, each part into its
/// columns, on libtorch's OpenMP team; the output in `x`'s dtype (bf16 or
/// f32).
fn quantized(
    x: &Tensor,
    parts: &[QuantMatrix],
    bias: Option<&[f32]>,
) -> Result<Tensor, EngineError> {
    let k = parts[0].k();
    let n: usize = parts.iter().map(QuantMatrix::n).sum();
    let mut size = x.size();
    let Some(last) = size.last_mut() else {
        return Err(EngineError::InvalidRequest(
            "a linear input must have a dimension".into(),
        ));
    };
    *last = n as i64;
    let kind = if x.kind() == Kind::Float {
        Kind::Float
    } else {
        Kind::BFloat16
    };
    let x = if x.is_contiguous() && x.kind() == kind {
        x.shallow_clone()
    } else {
        op(op(x.f_to_kind(kind))?.f_contiguous())?
    };
    let rows = x.numel() / k.max(1);
    let mut out = op(Tensor::f_empty(size.as_slice(), (kind, Device::Cpu)))?;
    QUANT_SCRATCH.with(|scratch| {
        let scratch = &mut scratch.borrow_mut();
        let mut first = 0;
        for part in parts {
            let cols = Columns { stride: n, first };
            let b = bias.map(|b| &b[first..first + part.n()]);
            let path = quant::Path::for_rows(rows);
            if kind == Kind::Float {
                let (xs, o) = (host_slice::<f32>(&x)?, host_slice_mut::<f32>(&mut out)?);
                quant::matmul_columns(xs, rows, part, b, o, cols, scratch, &OpenMp, path)?;
            } else {
                let xs = host_slice::<half::bf16>(&x)?;
                let o = host_slice_mut::<half::bf16>(&mut out)?;
                quant::matmul_columns(xs, rows, part, b, o, cols, scratch, &OpenMp, path)?;
            }
            first += part.n();
        }
        Ok::<(), EngineError>(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::{Gemm, Linear};

    /// `gemm`'s outputs and plain `linear`'s for the same weights and inputs.
    fn plain_and(gemm: Gemm, bias: bool) -> (Tensor, Tensor) {
        tch::manual_seed(11);
        let w = (Tensor::randn([96, 64], (Kind::Float, Device::Cpu)) * 0.1).to_kind(Kind::BFloat16);
        let b =
            bias.then(|| Tensor::randn([96], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16));
        let plain = Linear::new(w.copy(), b.as_ref().map(Tensor::copy), Gemm::Plain).unwrap();
        let packed = Linear::new(w, b, gemm).unwrap();
        assert_eq!(packed.gemm(), gemm);
        // Rows 1..16 (decode batches) and a prefill-sized 40; the last
        // input is a transposed (non-contiguous) view.
        let mut got = Vec::new();
        let mut want = Vec::new();
        for rows in [1, 3, 16, 40] {
            let x = Tensor::randn([64, rows], (Kind::Float, Device::Cpu))
                .to_kind(Kind::BFloat16)
                .tr();
            got.push(packed.forward(&x).unwrap().to_kind(Kind::Float));
            want.push(plain.forward(&x).unwrap().to_kind(Kind::Float));
        }
        (Tensor::cat(&got, 0), Tensor::cat(&want, 0))
    }

    #[test]
    fn packed_and_widened_bf16_match_plain_linear() {
        let mut paths = vec![Gemm::Packed];
        if kernels::gemm::vectorized() {
            paths.push(Gemm::Widened);
        }
        for gemm in paths {
            for bias in [false, true] {
                let (got, want) = plain_and(gemm, bias);
                assert_eq!(got.size(), want.size());
                // All accumulate in f32 and round once to bf16: at most one
                // bf16 ulp apart (2^-8 relative).
                let tol = want.abs() * (1.0 / 128.0) + 1e-3;
                let over = (got - &want)
                    .abs()
                    .gt_tensor(&tol)
                    .sum(Kind::Int64)
                    .int64_value(&[]);
                assert_eq!(
                    over, 0,
                    "{gemm:?}, bias {bias}: {over} outputs beyond one bf16 ulp"
                );
            }
        }
    }

    #[test]
    fn three_dimensional_inputs_keep_their_leading_dims() {
        for gemm in [Gemm::Packed, Gemm::Widened] {
            let w = Tensor::randn([8, 4], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
            let lin = Linear::new(w, None, gemm).unwrap();
            let x = Tensor::randn([2, 3, 4], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
            assert_eq!(lin.forward(&x).unwrap().size(), vec![2, 3, 8]);
        }
    }

    #[test]
    fn only_cpu_bf16_weights_are_packed_and_bad_settings_are_refused() {
        assert_eq!(
            Gemm::for_weights(Kind::Float, Device::Cpu).unwrap(),
            Gemm::Plain
        );
        assert_eq!(Gemm::parse("plain").unwrap(), Some(Gemm::Plain));
        assert_eq!(Gemm::parse("packed").unwrap(), Some(Gemm::Packed));
        assert_eq!(Gemm::parse("widened").unwrap(), Some(Gemm::Widened));
        assert_eq!(Gemm::parse("").unwrap(), None);
        let err = Gemm::parse("fast").unwrap_err().to_string();
        assert!(
            err.contains("TOKENROUTER_CPU_GEMM") && err.contains("fast"),
            "{err}"
        );
    }
}
