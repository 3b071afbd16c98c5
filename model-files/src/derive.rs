//! `derive-early-exit`: a partner model made of the first K decoder layers of
//! another, with its embedding, final norm and head. Tensors are copied byte
//! for byte, so the partner shares the source's dtype and exact weights.

use std::path::{Path, PathBuf};

use super::checkpoint_reader::Checkpoint;
use super::hf_files::{copy_present, prepare_output_dir, read_json, write_json, TOKENIZER_FILES};
use super::progress::bytes_bar;
use super::safetensors_writer::{CheckpointWriter, TensorEntry};
use super::tensor_spec::tensor_specs;
use super::AssetError;
use crate::hf_config::ModelConfig;

/// What a derivation wrote.
#[derive(Debug, Clone)]
pub struct DeriveSummary {
    /// The partner's config.
    pub config: ModelConfig,
    /// Tensors copied.
    pub tensors: usize,
    /// Every file written.
    pub files: Vec<PathBuf>,
}

/// The decoder layer a tensor belongs to, from `model.layers.{i}.`.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("model.layers.")?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Copies the first `layers` layers of `src` (plus everything outside the
/// layers) into `out`, with `num_hidden_layers = layers`.
pub fn derive_early_exit(
    src: &Path,
    out: &Path,
    layers: usize,
    max_shard_bytes: u64,
) -> Result<DeriveSummary, AssetError> {
    let staged = super::staged::StagedDir::create(out)?;
    let mut summary = derive_into(src, staged.path(), layers, max_shard_bytes)?;
    summary.files = staged.commit(summary.files)?;
    tracing::info!(src = %src.display(), out = %out.display(), layers, tensors = summary.tensors, "derived early-exit model");
    Ok(summary)
}

/// [`derive_early_exit`] into the (empty) staging directory.
fn derive_into(
    src: &Path,
    out: &Path,
    layers: usize,
    max_shard_bytes: u64,
) -> Result<DeriveSummary, AssetError> {
    let config_path = src.join("config.json");
    let mut raw = read_json(&config_path)?;
    let cfg: ModelConfig =
        serde_json::from_value(raw.clone()).map_err(|e| AssetError::json(&config_path, e))?;
    cfg.validate().map_err(|reason| {
        AssetError::Load(crate::LoadError::InvalidModel {
            path: config_path.clone(),
            reason,
        })
    })?;
    if layers == 0 || layers > cfg.num_hidden_layers {
        return Err(AssetError::InvalidArgument(format!(
            "--layers {layers}: must be between 1 and the {} layers of {}",
            cfg.num_hidden_layers,
            src.display()
        )));
    }
    let ckpt = Checkpoint::open(src)?;
    let mut derived = cfg.clone();
    derived.num_hidden_layers = layers;
    // Everything the smaller model needs must be present in the source.
    for spec in tensor_specs(&derived) {
        let t = ckpt.tensor(&spec.name)?;
        if t.shape != spec.shape.as_slice() {
            return Err(AssetError::TensorShape {
                tensor: spec.name.clone(),
                reason: format!(
                    "shape {:?} in {}, config implies {:?}",
                    t.shape,
                    src.display(),
                    spec.shape
                ),
            });
        }
    }
    let mut names: Vec<&str> = ckpt
        .names()
        .filter(|n| layer_of(n).is_none_or(|i| i < layers))
        .collect();
    // Embedding, then layers in numeric order, then the rest (norm, head).
    names.sort_by_key(|n| match layer_of(n) {
        _ if *n == "model.embed_tokens.weight" => (0, 0, *n),
        Some(i) => (1, i, *n),
        None => (2, 0, *n),
    });
    let plan = names
        .iter()
        .map(|n| {
            let t = ckpt.tensor(n)?;
            Ok(TensorEntry {
                name: n.to_string(),
                shape: t.shape.to_vec(),
                dtype: t.dtype,
            })
        })
        .collect::<Result<Vec<_>, AssetError>>()?;

    prepare_output_dir(out)?;
    let mut writer = CheckpointWriter::create(out, plan, max_shard_bytes)?;
    let bar = bytes_bar(writer.total_bytes(), "derive-early-exit");
    for name in &names {
        let t = ckpt.tensor(name)?;
        writer.write_tensor_raw(name, t.bytes)?;
        bar.inc(t.bytes.len() as u64);
    }
    let mut files = writer.finish()?;
    bar.finish_and_clear();

    raw["num_hidden_layers"] = serde_json::json!(layers);
    // Newer transformers configs list one attention type per layer.
    if let Some(types) = raw.get_mut("layer_types").and_then(|v| v.as_array_mut()) {
        types.truncate(layers);
    }
    let config_out = out.join("config.json");
    write_json(&config_out, &raw)?;
    files.push(config_out);
    files.extend(copy_present(src, out, TOKENIZER_FILES)?);
    Ok(DeriveSummary {
        config: derived,
        tensors: names.len(),
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_index_parsing() {
        assert_eq!(layer_of("model.layers.12.mlp.up_proj.weight"), Some(12));
        assert_eq!(layer_of("model.norm.weight"), None);
        assert_eq!(layer_of("lm_head.weight"), None);
    }
}
