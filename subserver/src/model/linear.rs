//! The decoder's weight matmuls, `x · Wᵀ (+ b)`.
//!
//! On the CPU, bf16 weights are packed once at load into oneDNN's blocked
//! layout and multiplied by oneDNN's packed linear (`model::onednn`), the
//! path PyTorch's own CPU compilers take for inference weights. Why:
//! `make bench-engine` times one decode step of SmolLM2-135M both ways
//! (`docs/results/engine.md`, "GEMMs: packed oneDNN weights against plain
//! `linear`": 1.3-1.4x faster at batch 1 to 16 on the 2-core build
//! machine), with identical results at decode sizes. f32 keeps plain
//! `linear`: in a torch timing of the step's GEMMs at batch 1 (2 threads),
//! MKL's GEMV took 21.5 ms against 29.1 ms packed. So does CUDA.

use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};
use tracing::warn;

use crate::error::EngineError;
use crate::model::onednn;
use crate::op_count::op;

/// The environment variable that chooses the CPU GEMM path at load
/// (`packed`, the default where it applies, or `plain`), for side-by-side
/// measurements and as a way back should a libtorch build lack the operators.
pub const CPU_GEMM_ENV: &str = "TOKENROUTER_CPU_GEMM";

/// How a model's weight matmuls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gemm {
    /// libtorch's `linear` on the weight as loaded.
    Plain,
    /// oneDNN's linear on a weight packed at load (CPU, bf16).
    Packed,
}

impl Gemm {
    /// The path for weights of `kind` on `device`: packed for bf16 on the
    /// CPU unless [`CPU_GEMM_ENV`] says `plain`, or this libtorch cannot run
    /// oneDNN's bf16 linear here (a CPU without AVX-512 BW/VL/DQ or
    /// AVX-NE-CONVERT; checked once, logged).
    pub fn for_weights(kind: Kind, device: Device) -> Result<Self, EngineError> {
        let packable = device == Device::Cpu && kind == Kind::BFloat16;
        let chosen = match std::env::var(CPU_GEMM_ENV) {
            Err(_) => Self::Packed,
            Ok(v) => Self::parse(&v)?,
        };
        Ok(
            if packable && chosen == Self::Packed && packed_bf16_runs() {
                Self::Packed
            } else {
                Self::Plain
            },
        )
    }

    fn parse(value: &str) -> Result<Self, EngineError> {
        match value {
            "" | "packed" => Ok(Self::Packed),
            "plain" => Ok(Self::Plain),
            other => Err(EngineError::InvalidDevice(format!(
                "{CPU_GEMM_ENV}={other:?}: expected `packed` or `plain`"
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

/// One projection: its weight (plain, or packed for oneDNN) and bias.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    gemm: Gemm,
}

impl Linear {
    /// `weight` (`[out, in]`) and `bias` (`[out]`), packed when `gemm` says so.
    pub fn new(weight: Tensor, bias: Option<Tensor>, gemm: Gemm) -> Result<Self, EngineError> {
        let weight = match gemm {
            Gemm::Plain => weight,
            Gemm::Packed => onednn::pack(&weight)?,
        };
        Ok(Self { weight, bias, gemm })
    }

    /// `x · Wᵀ (+ b)` for `x` of `[..., in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, EngineError> {
        match self.gemm {
            Gemm::Plain => Ok(op(x.f_linear(&self.weight, self.bias.as_ref()))?),
            Gemm::Packed => op(onednn::linear(x, &self.weight, self.bias.as_ref())),
        }
    }

    /// The path this projection takes.
    pub fn gemm(&self) -> Gemm {
        self.gemm
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::{Gemm, Linear};

    fn plain_and_packed(bias: bool) -> (Tensor, Tensor) {
        tch::manual_seed(11);
        let w = (Tensor::randn([96, 64], (Kind::Float, Device::Cpu)) * 0.1).to_kind(Kind::BFloat16);
        let b =
            bias.then(|| Tensor::randn([96], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16));
        let plain = Linear::new(w.copy(), b.as_ref().map(Tensor::copy), Gemm::Plain).unwrap();
        let packed = Linear::new(w, b, Gemm::Packed).unwrap();
        assert_eq!(packed.gemm(), Gemm::Packed);
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
    fn packed_bf16_matches_plain_linear() {
        for bias in [false, true] {
            let (got, want) = plain_and_packed(bias);
            assert_eq!(got.size(), want.size());
            // Both accumulate in f32 and round once to bf16: at most one
            // bf16 ulp apart (2^-8 relative).
            let tol = want.abs() * (1.0 / 128.0) + 1e-3;
            let over = (got - &want)
                .abs()
                .gt_tensor(&tol)
                .sum(Kind::Int64)
                .int64_value(&[]);
            assert_eq!(over, 0, "bias {bias}: {over} outputs beyond one bf16 ulp");
        }
    }

    #[test]
    fn three_dimensional_inputs_keep_their_leading_dims() {
        let w = Tensor::randn([8, 4], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let lin = Linear::new(w, None, Gemm::Packed).unwrap();
        let x = Tensor::randn([2, 3, 4], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        assert_eq!(lin.forward(&x).unwrap().size(), vec![2, 3, 8]);
    }

    #[test]
    fn only_cpu_bf16_weights_are_packed_and_bad_settings_are_refused() {
        assert_eq!(
            Gemm::for_weights(Kind::Float, Device::Cpu).unwrap(),
            Gemm::Plain
        );
        assert_eq!(Gemm::parse("plain").unwrap(), Gemm::Plain);
        assert_eq!(Gemm::parse("packed").unwrap(), Gemm::Packed);
        let err = Gemm::parse("fast").unwrap_err().to_string();
        assert!(
            err.contains("TOKENROUTER_CPU_GEMM") && err.contains("fast"),
            "{err}"
        );
    }
}
