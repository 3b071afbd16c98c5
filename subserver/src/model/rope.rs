//! Rotary position embeddings, computed the way transformers does
//! (`rotate_half` layout, f32 tables) so logits match it closely.
//!
//! `rotate_half(x) * sin` equals `roll(x, d/2) * [-sin, sin]` (halves), so
//! the table stores the sine with its first half negated and a rotation
//! is three calls (`roll`, `mul`, `addcmul_`) instead of seven.

use tch::{Device, Kind, Tensor};

use crate::error::EngineError;
use crate::op_count::op;
use model_files::hf_config::ModelConfig;

/// Precomputed `[max_positions, 2, head_dim]` table: per position its
/// cosines, then its sines with the first half negated.
pub struct Rope {
    table: Tensor,
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
        other => Err(EngineError::Load(model_files::LoadError::InvalidModel {
            path: Default::default(),
            reason: format!(
                "rope_scaling type `{other}` is not supported (default, linear, llama3)"
            ),
        })),
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
        let half = freqs.size()[1];
        let sin = emb.f_sin()?;
        let signed_sin = Tensor::f_cat(
            &[
                sin.f_narrow(1, 0, half)?.f_neg()?,
                sin.f_narrow(1, half, half)?,
            ],
            1,
        )?;
        let table = Tensor::f_stack(&[emb.f_cos()?, signed_sin], 1)?.f_to_kind(kind)?;
        Ok(Self {
            table,
            max_positions,
        })
    }

    /// Longest position + 1 the tables cover.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// The whole table, `[max_positions, 2, head_dim]` in the model dtype
    /// (the host QKV epilogue reads it by position).
    pub fn table(&self) -> &Tensor {
        &self.table
    }

    /// cos and signed-sin rows for `positions` (`[T]` int64), each
    /// `[T, 1, head_dim]`: looked up once per step, shared by every layer.
    pub fn tables(&self, positions: &Tensor) -> Result<(Tensor, Tensor), EngineError> {
        let rows = op(self.table.f_index_select(0, positions))?;
        let cos = op(rows.f_narrow(1, 0, 1))?;
        let sin = op(rows.f_narrow(1, 1, 1))?;
        Ok((cos, sin))
    }

    /// A step's rows of the table for `positions`, looked up on first use:
    /// the ATen path needs them in every layer, the host path never.
    pub fn step_rows<'a>(&'a self, positions: &'a Tensor) -> StepRows<'a> {
        StepRows {
            rope: self,
            positions,
            rows: None,
        }
    }

    /// Applies the rotation to `x` of shape `[T, heads, head_dim]`, with
    /// `cos`, `sin` from [`Rope::tables`].
    pub fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor, EngineError> {
        let half = x.size()[2] / 2;
        let rolled = op(x.f_roll([half], [2]))?;
        let mut out = op(x.f_mul(cos))?;
        let _ = op(out.f_addcmul_(&rolled, sin))?;
        Ok(out)
    }
}

/// One step's cos and signed-sin rows ([`Rope::tables`]), looked up the
/// first time a layer asks, then shared by the step's later layers.
pub struct StepRows<'a> {
    rope: &'a Rope,
    positions: &'a Tensor,
    rows: Option<(Tensor, Tensor)>,
}

impl StepRows<'_> {
    /// The rows, `(cos, signed_sin)`, each `[T, 1, head_dim]`.
    pub fn get(&mut self) -> Result<(&Tensor, &Tensor), EngineError> {
        let rows = match self.rows.take() {
            Some(rows) => rows,
            None => self.rope.tables(self.positions)?,
        };
        let (cos, sin) = self.rows.insert(rows);
        Ok((cos, sin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny test model's f32 rope, `positions` and their table rows.
    fn tiny_rope_at(positions: &[i64]) -> (Rope, Tensor, Tensor, Tensor) {
        let cfg = crate::runner::testing::tiny_config();
        let rope = Rope::new(&cfg, Kind::Float, Device::Cpu).unwrap();
        let pos = Tensor::from_slice(positions);
        let (cos, sin) = rope.tables(&pos).unwrap();
        (rope, pos, cos, sin)
    }

    #[test]
    fn step_rows_are_the_tables_looked_up_once() {
        let (rope, pos, cos, sin) = tiny_rope_at(&[3, 0, 17]);
        let mut rows = rope.step_rows(&pos);
        let first = rows
            .get()
            .map(|(c, s)| (c.data_ptr(), s.data_ptr()))
            .unwrap();
        let (c, s) = rows.get().unwrap();
        assert_eq!((c.data_ptr(), s.data_ptr()), first, "one lookup per step");
        assert!(c.equal(&cos) && s.equal(&sin));
    }

    #[test]
    fn roll_with_signed_sine_equals_rotate_half() {
        let (_, _, cos, sin) = tiny_rope_at(&[0, 5, 63]);
        let x = Tensor::randn([3, 4, 8], (Kind::Float, Device::Cpu));
        let got = Rope::apply(&x, &cos, &sin).unwrap();
        // transformers: x * cos + rotate_half(x) * sin, with the plain sine.
        let plain_sin = Tensor::cat(&[sin.narrow(2, 0, 4).neg(), sin.narrow(2, 4, 4)], 2);
        let rotated = Tensor::cat(&[x.narrow(2, 4, 4).neg(), x.narrow(2, 0, 4)], 2);
        let want = &x * &cos + rotated * plain_sin;
        let diff = f64::try_from((got - want).abs().max()).unwrap();
        assert!(diff < 1e-6, "{diff}");
    }
}
