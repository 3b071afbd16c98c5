//! A GGUF's projections kept in their ggml blocks for the CPU
//! (`dtype: auto`): every linear layer whose block type has a kernel in
//! `kernels::quant` (q/k/v/o, gate/up/down, the head) is built as a
//! [`Linear::quantized`]; the rest of the file is dequantized to the model
//! dtype as before. The token embedding stays dequantized (a row gather,
//! not a matmul); the head is kept in blocks, tied or not, and its rows
//! dequantized too, for the f32 re-score of each row's top candidates.
//!
//! A projection whose type has no kernel is dequantized, and the log names
//! it; a tensor whose bytes do not match its shape and type is refused at
//! load, naming it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use kernels::quant::{QuantMatrix, QuantType};
use model_files::gguf::GgufWeights;
use tch::{Kind, Tensor};
use tracing::{info, warn};

use crate::error::EngineError;
use crate::model::linear::{Gemm, Linear};
use crate::model::weights::Weights;

/// The name the head's blocks are kept under.
const HEAD: &str = "lm_head.weight";

/// The projections kept in blocks, by transformers name.
#[derive(Debug, Default)]
pub struct QuantWeights {
    mats: HashMap<String, QuantMatrix>,
    /// Projections dequantized for want of a kernel: (GGUF name, type).
    fallback: Vec<(String, String)>,
}

fn invalid(path: &Path, reason: String) -> EngineError {
    EngineError::Load(model_files::LoadError::InvalidModel {
        path: path.to_path_buf(),
        reason,
    })
}

/// Whether `name` is a projection's weight (a matmul, not a gather).
fn is_projection(name: &str) -> bool {
    const PROJ: [&str; 7] = [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ];
    name == HEAD
        || PROJ
            .iter()
            .any(|p| name.strip_suffix(".weight").is_some_and(|s| s.ends_with(p)))
}

/// Reads the GGUF at `gguf`: projections with a kernel as blocks, every
/// other tensor dequantized to `kind` on the CPU (`dir` names the model in
/// messages).
pub fn load(dir: &Path, gguf: &Path, kind: Kind) -> Result<(Weights, QuantWeights), EngineError> {
    let file = GgufWeights::open(gguf).map_err(|e| invalid(gguf, e.to_string()))?;
    let tied = file.config().tie_word_embeddings;
    let mut quant = QuantWeights::default();
    let mut tensors = HashMap::new();
    let names: Vec<String> = file.names().map(str::to_string).collect();
    for name in names {
        let as_head = tied && name == "model.embed_tokens.weight";
        if is_projection(&name) || as_head {
            let raw = file.raw(&name).map_err(|e| invalid(gguf, e.to_string()))?;
            let ty = QuantType::from_ggml_id(raw.ggml_type.id());
            match (ty, &raw.shape[..]) {
                (Some(ty), &[n, k]) => {
                    let m = QuantMatrix::new(ty, n, k, raw.bytes.into_owned()).map_err(|e| {
                        invalid(gguf, format!("tensor `{}` ({name}): {e}", raw.gguf_name))
                    })?;
                    quant
                        .mats
                        .insert(if as_head { HEAD.into() } else { name.clone() }, m);
                    // The head keeps a dequantized copy beside its blocks
                    // as well, tied or not: `Head::forward` re-scores each
                    // row's top candidates in f32 from its rows.
                    if !as_head && name != HEAD {
                        continue;
                    }
                }
                _ => {
                    warn!(
                        tensor = raw.gguf_name,
                        ggml_type = %raw.ggml_type.name(),
                        "no CPU kernel for this block type: the projection is dequantized"
                    );
                    quant
                        .fallback
                        .push((raw.gguf_name.to_string(), raw.ggml_type.name()));
                }
            }
        }
        let shape: Vec<i64> = file
            .shape(&name)
            .map_err(|e| invalid(gguf, e.to_string()))?
            .iter()
            .map(|&d| d as i64)
            .collect();
        let values = file
            .to_f32(&name)
            .map_err(|e| invalid(gguf, e.to_string()))?;
        let t = Tensor::f_from_slice(&values)?
            .f_reshape(&shape)?
            .f_to_kind(kind)?;
        tensors.insert(name, t);
    }
    let weights = Weights::from_map(dir, tensors);
    info!(model = %dir.display(), precision = %quant.precision(kind), "GGUF blocks kept for the CPU");
    Ok((weights, quant))
}

impl QuantWeights {
    /// Whether no projection is kept in blocks.
    pub fn is_empty(&self) -> bool {
        self.mats.is_empty()
    }

    /// What the model runs in: the dtype alone, or the block types kept
    /// (projections per type) and the dtype of the rest, e.g.
    /// `Q4_1 (150), Q8_0 (61); rest bf16`.
    pub fn precision(&self, kind: Kind) -> String {
        let dtype = match kind {
            Kind::BFloat16 => "bf16",
            Kind::Half => "f16",
            _ => "f32",
        };
        if self.mats.is_empty() {
            return dtype.to_string();
        }
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.mats.values() {
            *counts.entry(m.ty().name()).or_default() += 1;
        }
        let types: Vec<String> = counts.iter().map(|(t, c)| format!("{t} ({c})")).collect();
        format!("{}; rest {dtype}", types.join(", "))
    }

    /// The head's blocks, if kept.
    pub fn take_head(&mut self, shape: [i64; 2]) -> Result<Option<QuantMatrix>, EngineError> {
        self.take_checked(HEAD, shape)
    }

    fn take_checked(
        &mut self,
        name: &str,
        shape: [i64; 2],
    ) -> Result<Option<QuantMatrix>, EngineError> {
        let Some(m) = self.mats.remove(name) else {
            return Ok(None);
        };
        if [m.n() as i64, m.k() as i64] != shape {
            return Err(invalid(
                Path::new(""),
                format!(
                    "tensor `{name}` has shape [{}, {}], expected {shape:?}",
                    m.n(),
                    m.k()
                ),
            ));
        }
        Ok(Some(m))
    }

    /// A projection of `parts` (names with their `[out, in]` shapes)
    /// stacked along the output: on their blocks when every part has
    /// them, else as one dequantized tensor in `kind` through `gemm`.
    pub fn projection(
        &mut self,
        w: &mut Weights,
        parts: &[(String, [i64; 2])],
        bias: Option<Tensor>,
        kind: Kind,
        gemm: Gemm,
    ) -> Result<Linear, EngineError> {
        if parts.iter().all(|(n, _)| self.mats.contains_key(n)) {
            let mut mats = Vec::with_capacity(parts.len());
            for (name, shape) in parts {
                mats.extend(self.take_checked(name, *shape)?);
            }
            return Linear::quantized(mats, bias);
        }
        let mut tensors = Vec::with_capacity(parts.len());
        for (name, shape) in parts {
            tensors.push(match self.take_checked(name, *shape)? {
                // A part kept in blocks beside one that is not.
                Some(m) => Tensor::f_from_slice(&m.dequantize())?
                    .f_reshape(shape)?
                    .f_to_kind(kind)?,
                None => w.take(name, shape)?,
            });
        }
        let weight = if tensors.len() == 1 {
            tensors.remove(0)
        } else {
            Tensor::f_cat(&tensors, 0)?
        };
        Linear::new(weight, bias, gemm)
    }
}

#[cfg(test)]
mod tests {
    use super::is_projection;

    #[test]
    fn projections_are_the_matmul_weights() {
        assert!(is_projection("model.layers.3.self_attn.q_proj.weight"));
        assert!(is_projection("model.layers.0.mlp.down_proj.weight"));
        assert!(is_projection("lm_head.weight"));
        assert!(!is_projection("model.layers.3.self_attn.q_proj.bias"));
        assert!(!is_projection("model.embed_tokens.weight"));
        assert!(!is_projection("model.layers.0.input_layernorm.weight"));
    }
}
