//! The residual stream's precision and the output head (final norm and the
//! vocabulary projection) of a [`crate::model::decoder::Decoder`].
//!
//! A model narrower than f32 (bf16) keeps its weights, matmuls, attention
//! and K/V in its own dtype, but its residual stream, norm statistics and
//! logits in f32:
//! - a bf16 residual rounds every one of a 30-layer model's 60 adds to 8
//!   mantissa bits;
//! - a bf16 projection rounds each logit to steps of 0.125 at a logit of
//!   20, so near-tied candidates tie or swap, and a greedy answer leaves
//!   the f32 one's path.
//!
//! Computing every logit in f32 would triple the projection's cost on a
//! CPU (ATen has no bf16 matmul with an f32 output there), so the head
//! projects in the model dtype and re-scores each row's top [`RESCORED`]
//! candidates exactly (the f32 hidden state against the weights' exact
//! values), which is what greedy and top-k choices read. On SmolLM2-135M
//! this took bf16 greedy answers from 62% to 85% of tokens shared with
//! f32 before the first divergence (24 held-out prompts); f32 arithmetic
//! on bf16-rounded weights, the ceiling, shares 95%.

use tch::{Kind, Tensor};

use crate::error::EngineError;
use crate::model::linear::{Gemm, Linear};
use crate::op_count::op;

/// Candidates per row whose logits are recomputed in f32.
pub const RESCORED: i64 = 8;

/// The dtype of the residual stream for a model in `kind`.
pub fn residual_kind(kind: Kind) -> Kind {
    match kind {
        Kind::Double => Kind::Double,
        _ => Kind::Float,
    }
}

/// RMSNorm as transformers computes it (ATen's `rms_norm`: statistics in
/// f32), over the last dimension.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor, EngineError> {
    let last = x.size().last().copied().unwrap_or(1);
    Ok(op(x.f_rms_norm([last], Some(weight), eps))?)
}

/// `x` in `kind`, with no call when it already is.
pub fn to_kind(x: Tensor, kind: Kind) -> Result<Tensor, EngineError> {
    if x.kind() == kind {
        Ok(x)
    } else {
        Ok(op(x.f_to_kind(kind))?)
    }
}

/// A norm on the residual stream, returned in the model dtype for the
/// matmul that reads it. `weight` is in the residual dtype.
pub fn norm_for_matmul(
    x: &Tensor,
    weight: &Tensor,
    eps: f64,
    kind: Kind,
) -> Result<Tensor, EngineError> {
    to_kind(rms_norm(x, weight, eps)?, kind)
}

/// The final norm and the vocabulary projection.
pub struct Head {
    /// Final norm weight, in the residual dtype.
    pub norm: Tensor,
    /// `[rows, hidden]` in the model dtype (rows: the vocabulary, plus
    /// Co-LLM's deferral columns); the re-score reads its rows.
    pub lm_head: Tensor,
    /// The same weight as a projection (packed for oneDNN where the
    /// decoder's projections are: a copy then, as a packed weight cannot be
    /// indexed).
    proj: Linear,
    /// The model dtype.
    pub kind: Kind,
    /// The norm's epsilon.
    pub eps: f64,
}

impl Head {
    /// The head of final norm `norm` (residual dtype) and vocabulary
    /// projection `lm_head` (model dtype `kind`), multiplied by `gemm`.
    pub fn new(
        norm: Tensor,
        lm_head: Tensor,
        kind: Kind,
        eps: f64,
        gemm: Gemm,
    ) -> Result<Self, EngineError> {
        let proj = Linear::new(lm_head.shallow_clone(), None, gemm)?;
        Ok(Self::with_proj(norm, lm_head, proj, kind, eps))
    }

    /// As [`Head::new`], with the projection built by the caller (on the
    /// GGUF's blocks: `model::quantized`).
    pub fn with_proj(norm: Tensor, lm_head: Tensor, proj: Linear, kind: Kind, eps: f64) -> Self {
        Self {
            norm,
            lm_head,
            proj,
            kind,
            eps,
        }
    }

    /// Final hidden states (`[N, H]`, model dtype) and logits without the
    /// re-score (`[N, rows]`, f32) of residual rows `x`, plus the normed
    /// rows in the residual dtype.
    fn project(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor), EngineError> {
        let normed = rms_norm(x, &self.norm, self.eps)?;
        let hidden = to_kind(normed.shallow_clone(), self.kind)?;
        let logits = self.proj.forward(&hidden)?;
        Ok((hidden, to_kind(logits, Kind::Float)?, normed))
    }

    /// Logits (`[N, rows]`, f32) of residual rows `x`, for signals that
    /// read the whole distribution (no re-score).
    pub fn logits(&self, x: &Tensor) -> Result<Tensor, EngineError> {
        Ok(self.project(x)?.1)
    }

    /// Final hidden states (`[N, H]`, model dtype) and logits (`[N, rows]`,
    /// f32) of residual rows `x`, each row's top candidates re-scored in
    /// f32 when the model is narrower.
    pub fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor), EngineError> {
        let (hidden, mut logits, normed) = self.project(x)?;
        if normed.kind() == self.kind {
            return Ok((hidden, logits));
        }
        let (n, h) = (normed.size()[0], normed.size()[1]);
        let k = RESCORED.min(logits.size()[1]);
        let (_, idx) = op(logits.f_topk(k, 1, true, false))?;
        let rows = op(self.lm_head.f_index_select(0, &op(idx.f_view([-1]))?))?;
        let rows = op(op(rows.f_to_kind(normed.kind()))?.f_view([n, k, h]))?;
        let exact = op(rows.f_bmm(&op(normed.f_unsqueeze(2))?))?;
        let exact = to_kind(op(exact.f_view([n, k]))?, Kind::Float)?;
        let _ = op(logits.f_scatter_(1, &idx, &exact))?;
        Ok((hidden, logits))
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use super::{Head, RESCORED};
    use crate::model::linear::Gemm;

    fn head(kind: Kind) -> (Head, Tensor) {
        tch::manual_seed(3);
        let lm = Tensor::randn([64, 16], (Kind::Float, Device::Cpu));
        let head = Head::new(
            Tensor::ones([16], (Kind::Float, Device::Cpu)),
            lm.to_kind(kind),
            kind,
            1e-6,
            Gemm::for_weights(kind, Device::Cpu).unwrap(),
        )
        .unwrap();
        (head, Tensor::randn([3, 16], (Kind::Float, Device::Cpu)))
    }

    /// The f32 logits of bf16 weights: the normed rows against the weights'
    /// exact values.
    fn exact(head: &Head, x: &Tensor) -> Tensor {
        let normed = x.rms_norm([16], Some(&head.norm), head.eps);
        normed.linear::<Tensor>(&head.lm_head.to_kind(Kind::Float), None)
    }

    #[test]
    fn bf16_top_candidates_are_rescored_exactly_and_the_rest_kept() {
        let (head, x) = head(Kind::BFloat16);
        let (hidden, logits) = head.forward(&x).unwrap();
        assert_eq!(hidden.kind(), Kind::BFloat16);
        assert_eq!(logits.kind(), Kind::Float);
        let want = exact(&head, &x);
        let plain = head.logits(&x);
        let (_, top) = want.topk(RESCORED, 1, true, false);
        let got_top = logits.gather(1, &top, false);
        let want_top = want.gather(1, &top, false);
        let err = (got_top - want_top).abs().max().double_value(&[]);
        assert!(err < 1e-4, "re-scored logits off by {err}");
        // Every row's top candidates are exact; others keep the bf16 value.
        let plain = plain.unwrap();
        let changed = logits.ne_tensor(&plain).sum(Kind::Int64).int64_value(&[]);
        assert!(changed <= 3 * RESCORED, "{changed} logits changed");
        assert_eq!(
            logits.argmax(1, false),
            want.argmax(1, false),
            "greedy choice differs from f32"
        );
    }

    #[test]
    fn f32_models_are_projected_as_they_are() {
        let (head, x) = head(Kind::Float);
        let (_, logits) = head.forward(&x).unwrap();
        let err = (logits - exact(&head, &x)).abs().max().double_value(&[]);
        assert!(err < 1e-4);
    }
}
