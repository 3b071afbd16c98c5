//! Rotary position embeddings, computed the way transformers does
//! (`rotate_half` layout, f32 tables) so logits match it closely.

use tch::{Device, Kind, Tensor};

use crate::error::EngineError;
use crate::model::config::ModelConfig;
use crate::op_count::op;

/// Precomputed cos/sin tables of shape `[max_positions, head_dim]`.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
    max_positions: usize,
}

/// Inverse frequencies, with llama3-style scaling when configured.
fn inv_freq(cfg: &ModelConfig, device: Device) -> Result<Tensor, EngineError> {
    let dim = cfg.head_dim() as i64;
    let exponents = Tensor::f_arange_start_step(0, dim, 2, (Kind::Int64, device))?
        .f_to_kind(Kind::Float)?
        .f_div_scalar(dim as f64)?;
    let base = Tensor::f_from_slice(&[cfg.rope_theta as f32])?.f_to_device(device)?;
    let inv = base.f_pow(&exponents)?.f_reciprocal()?;
    let Some(scaling) = &cfg.rope_scaling else {
        return Ok(inv);
    };
    match scaling.rope_type.as_str() {
        "default" => Ok(inv),
        "linear" => Ok(inv.f_div_scalar(scaling.factor.unwrap_or(1.0))?),
        "llama3" => {
            let factor = scaling.factor.unwrap_or(8.0);
            let low = scaling.low_freq_factor.unwrap_or(1.0);
            let high = scaling.high_freq_factor.unwrap_or(4.0);
            let old_ctx = scaling.original_max_position_embeddings.unwrap_or(8192) as f64;
            let values: Vec<f32> = Vec::<f32>::try_from(&inv)?;
            let low_wavelen = old_ctx / low;
            let high_wavelen = old_ctx / high;
            let scaled: Vec<f32> = values
                .iter()
                .map(|&f| {
                    let f = f as f64;
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    let out = if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old_ctx / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    };
                    out as f32
                })
                .collect();
            Ok(Tensor::f_from_slice(&scaled)?.f_to_device(device)?)
        }
        other => Err(EngineError::InvalidModel {
            path: Default::default(),
            reason: format!(
                "rope_scaling type `{other}` is not supported (default, linear, llama3)"
            ),
        }),
    }
}

impl Rope {
    /// Builds tables for every position the model accepts.
    pub fn new(cfg: &ModelConfig, kind: Kind, device: Device) -> Result<Self, EngineError> {
        let max_positions = cfg.max_position_embeddings;
        let inv = inv_freq(cfg, device)?;
        let pos = Tensor::f_arange(max_positions as i64, (Kind::Float, device))?;
        let freqs = pos.f_outer(&inv)?;
        let emb = Tensor::f_cat(&[&freqs, &freqs], -1)?;
        Ok(Self {
            cos: emb.f_cos()?.f_to_kind(kind)?,
            sin: emb.f_sin()?.f_to_kind(kind)?,
            max_positions,
        })
    }

    /// Longest position + 1 the tables cover.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// cos/sin rows for `positions` (`[T]` int64), shaped `[T, 1, head_dim]`.
    pub fn tables(&self, positions: &Tensor) -> Result<(Tensor, Tensor), EngineError> {
        let cos = op(op(self.cos.f_index_select(0, positions))?.f_unsqueeze(1))?;
        let sin = op(op(self.sin.f_index_select(0, positions))?.f_unsqueeze(1))?;
        Ok((cos, sin))
    }

    /// Applies the rotation to `x` of shape `[T, heads, head_dim]`.
    pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor, EngineError> {
        let half = x.size()[2] / 2;
        let x1 = op(x.f_narrow(2, 0, half))?;
        let x2 = op(x.f_narrow(2, half, half))?;
        let rotated = op(Tensor::f_cat(&[&op(x2.f_neg())?, &x1], 2))?;
        Ok(op(op(x.f_mul(cos))?.f_add(&op(rotated.f_mul(sin))?))?)
    }
}
