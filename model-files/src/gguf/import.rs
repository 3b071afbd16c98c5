//! `import-gguf`: a llama GGUF → a Hugging Face model directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::dequant::is_dequantizable;
use super::file::{GgufFile, GgufTensorInfo};
use super::ggml_type::SUPPORTED_TYPES;
use super::llama_config::llama_config;
use super::permute::unpermute_rows;
use super::tensor_names::{map_llama_name, RotaryRows};
use super::tokenizer_json::tokenizer_files;
#[cfg(test)]
use super::value::MetadataValue;
use crate::dtype::StorageDtype;
use crate::hf_config::ModelConfig;
use crate::hf_files::{load_tokenizer, prepare_output_dir, write_json};
use crate::progress::bytes_bar;
use crate::safetensors_writer::{CheckpointWriter, DEFAULT_MAX_SHARD_BYTES};
use crate::tensor_spec::tensor_specs;
use crate::AssetError;

/// How to write the imported checkpoint.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Storage dtype of every tensor.
    pub dtype: StorageDtype,
    /// Shard size limit.
    pub max_shard_bytes: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            dtype: StorageDtype::F32,
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
        }
    }
}

/// What an import wrote.
#[derive(Debug, Clone)]
pub struct ImportSummary {
    /// The config written to `config.json`.
    pub config: ModelConfig,
    /// Number of tensors written.
    pub tensors: usize,
    /// Every file written.
    pub files: Vec<PathBuf>,
}

/// One planned tensor: where it comes from and how its rows are stored.
struct Source<'a> {
    info: &'a GgufTensorInfo,
    rows: RotaryRows,
}

/// Converts `file` into `out_dir` (created; must be empty if it exists).
/// Everything is validated (names, types, shapes against the config) before
/// anything is written.
pub fn import_gguf(
    file: &Path,
    out_dir: &Path,
    opts: &ImportOptions,
) -> Result<ImportSummary, AssetError> {
    let staged = crate::staged::StagedDir::create(out_dir)?;
    let mut summary = import_into(file, staged.path(), opts)?;
    summary.files = staged.commit(summary.files)?;
    tracing::info!(file = %file.display(), out = %out_dir.display(), "imported GGUF");
    Ok(summary)
}

/// [`import_gguf`] into the (empty) staging directory.
fn import_into(
    file: &Path,
    out_dir: &Path,
    opts: &ImportOptions,
) -> Result<ImportSummary, AssetError> {
    let gguf = GgufFile::open(file)?;
    let header = gguf.header();
    let tied = header.tensor("output.weight").is_none();
    let cfg = llama_config(header, tied, opts.dtype)?;
    let tok = tokenizer_files(header, cfg.max_position_embeddings)?;

    let mut sources: HashMap<String, Source<'_>> = HashMap::new();
    for info in &header.tensors {
        let (hf, rows) = map_llama_name(&info.name)?;
        if !is_dequantizable(info.ggml_type) {
            return Err(AssetError::UnsupportedTensorType {
                tensor: info.name.clone(),
                ggml_type: info.ggml_type.name(),
                supported: SUPPORTED_TYPES,
            });
        }
        if sources.insert(hf.clone(), Source { info, rows }).is_some() {
            return Err(AssetError::InvalidGguf {
                path: file.to_path_buf(),
                reason: format!("two tensors map to `{hf}` (last: `{}`)", info.name),
            });
        }
    }
    let specs = tensor_specs(&cfg);
    for spec in &specs {
        let src = sources.get(&spec.name).ok_or_else(|| {
            AssetError::Load(crate::LoadError::MissingTensor {
                name: spec.name.clone(),
                path: file.to_path_buf(),
            })
        })?;
        if src.info.shape() != spec.shape {
            return Err(AssetError::TensorShape {
                tensor: src.info.name.clone(),
                reason: format!(
                    "shape {:?}, but the metadata implies {:?}",
                    src.info.shape(),
                    spec.shape
                ),
            });
        }
    }
    if sources.len() != specs.len() {
        let extra = sources
            .keys()
            .find(|k| !specs.iter().any(|s| &s.name == *k))
            .cloned()
            .unwrap_or_default();
        return Err(AssetError::UnmappedTensor {
            tensor: sources[&extra].info.name.clone(),
            reason: format!("maps to `{extra}`, which the config does not use"),
        });
    }

    prepare_output_dir(out_dir)?;
    let mut writer =
        CheckpointWriter::for_specs(out_dir, &specs, opts.dtype, opts.max_shard_bytes)?;
    let bar = bytes_bar(writer.total_bytes(), "import-gguf");
    for spec in &specs {
        let src = &sources[&spec.name];
        let mut values = gguf.dequantize(src.info)?;
        let heads = match src.rows {
            RotaryRows::Plain => None,
            RotaryRows::Query => Some(cfg.num_attention_heads),
            RotaryRows::Key => Some(cfg.kv_heads()),
        };
        if let Some(heads) = heads {
            let (rows, cols) = (spec.shape[0], spec.shape[1]);
            values = unpermute_rows(&values, rows, cols, heads).map_err(|reason| {
                AssetError::TensorShape {
                    tensor: src.info.name.clone(),
                    reason,
                }
            })?;
        }
        writer.write_tensor_f32(&spec.name, &values)?;
        bar.inc(values.len() as u64 * opts.dtype.size() as u64);
    }
    let mut files = writer.finish()?;
    bar.finish_and_clear();

    let named = [
        (
            "config.json",
            serde_json::to_value(&cfg)
                .map_err(|e| AssetError::json(&out_dir.join("config.json"), e))?,
        ),
        ("tokenizer.json", tok.tokenizer),
        ("tokenizer_config.json", tok.tokenizer_config),
        ("generation_config.json", tok.generation_config),
    ];
    for (name, value) in named {
        let path = out_dir.join(name);
        write_json(&path, &value)?;
        files.push(path);
    }
    // The tokenizer we just wrote must load with the runtime's tokenizer crate.
    load_tokenizer(&out_dir.join("tokenizer.json"))?;
    tracing::debug!(tensors = specs.len(), dtype = %opts.dtype, "GGUF tensors written");
    Ok(ImportSummary {
        config: cfg,
        tensors: specs.len(),
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::super::ggml_type::GgmlType;
    use super::super::test_file::{tiny_llama, ExpectedTensors, FIXTURE_VOCAB};
    use super::*;
    use crate::checkpoint_reader::Checkpoint;

    fn write_fixture(tied: bool) -> (tempfile::TempDir, PathBuf, ExpectedTensors) {
        let dir = tempfile::tempdir().unwrap();
        let (b, expected) = tiny_llama(tied);
        let path = dir.path().join("tiny.gguf");
        std::fs::write(&path, b.build()).unwrap();
        (dir, path, expected)
    }

    #[test]
    fn imports_every_tensor_unpermuted_with_config_and_tokenizer() {
        for tied in [true, false] {
            let (dir, gguf, expected) = write_fixture(tied);
            let out = dir.path().join("hf");
            let summary = import_gguf(&gguf, &out, &ImportOptions::default()).unwrap();
            assert_eq!(summary.tensors, expected.len());
            let ckpt = Checkpoint::open(&out).unwrap();
            assert_eq!(ckpt.names().count(), expected.len());
            for (name, shape, values) in &expected {
                let t = ckpt.tensor(name).unwrap();
                assert_eq!(t.shape, shape.as_slice(), "{name}");
                assert_eq!(&ckpt.to_f32(name).unwrap(), values, "{name}");
            }
            let cfg = ModelConfig::from_file(&out.join("config.json")).unwrap();
            assert_eq!(cfg.tie_word_embeddings, tied);
            assert_eq!(
                (cfg.vocab_size, cfg.num_hidden_layers, cfg.kv_heads()),
                (FIXTURE_VOCAB, 2, 1)
            );
            assert_eq!(cfg.torch_dtype.as_deref(), Some("float32"));
            let gen: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(out.join("generation_config.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(
                gen,
                serde_json::json!({ "bos_token_id": 1, "eos_token_id": 2 })
            );
            let tc: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(out.join("tokenizer_config.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(tc["eos_token"], "<|im_end|>");
            assert_eq!(tc["model_max_length"], 256);
            assert!(tc["chat_template"].as_str().unwrap().contains("messages"));
        }
    }

    #[test]
    fn bf16_output_rounds_each_value() {
        let (dir, gguf, expected) = write_fixture(true);
        let out = dir.path().join("hf");
        let opts = ImportOptions {
            dtype: StorageDtype::Bf16,
            ..ImportOptions::default()
        };
        import_gguf(&gguf, &out, &opts).unwrap();
        let ckpt = Checkpoint::open(&out).unwrap();
        let (name, _, values) = &expected[1];
        assert_eq!(ckpt.tensor(name).unwrap().dtype, StorageDtype::Bf16);
        // Fixture values are multiples of 1/8 below 16: exact in bf16.
        assert_eq!(&ckpt.to_f32(name).unwrap(), values);
    }

    #[test]
    fn unsupported_type_names_tensor_and_writes_nothing() {
        let (dir, _, _) = write_fixture(true);
        let (mut b, _) = tiny_llama(true);
        // 64x32 weights as IQ4_NL (id 20): 18 bytes per 32 weights.
        b.replace_tensor(
            "blk.1.ffn_up.weight",
            GgmlType::from_id(20),
            vec![0; 64 * 18],
        );
        let path = dir.path().join("iq.gguf");
        std::fs::write(&path, b.build()).unwrap();
        let out = dir.path().join("hf");
        let err = import_gguf(&path, &out, &ImportOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("blk.1.ffn_up.weight") && msg.contains("IQ4_NL"),
            "{msg}"
        );
        assert!(!out.exists());
    }

    #[test]
    fn missing_and_misshapen_tensors_are_named() {
        let (dir, _, _) = write_fixture(true);
        let (mut b, _) = tiny_llama(true);
        b.remove_tensor("blk.0.attn_v.weight");
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, b.build()).unwrap();
        let err = import_gguf(&path, &dir.path().join("a"), &ImportOptions::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("model.layers.0.self_attn.v_proj.weight"),
            "{err}"
        );

        let (mut b, _) = tiny_llama(true);
        b.set_kv("llama.feed_forward_length", MetadataValue::U32(96));
        let path = dir.path().join("s.gguf");
        std::fs::write(&path, b.build()).unwrap();
        let err = import_gguf(&path, &dir.path().join("b"), &ImportOptions::default()).unwrap_err();
        assert!(err.to_string().contains("blk.0.ffn_gate.weight"), "{err}");
    }

    #[test]
    fn refuses_non_empty_output_and_bad_files() {
        let (dir, gguf, _) = write_fixture(true);
        let out = dir.path().join("hf");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("keep.txt"), "x").unwrap();
        assert_eq!(
            import_gguf(&gguf, &out, &ImportOptions::default())
                .unwrap_err()
                .error_type(),
            "output_not_empty"
        );

        let bytes = std::fs::read(&gguf).unwrap();
        let cut = dir.path().join("cut.gguf");
        std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
        let err = import_gguf(&cut, &dir.path().join("c"), &ImportOptions::default()).unwrap_err();
        assert_eq!(err.error_type(), "truncated", "{err}");
        let bad = dir.path().join("bad.gguf");
        std::fs::write(&bad, b"PK\x03\x04rest").unwrap();
        let err = import_gguf(&bad, &dir.path().join("d"), &ImportOptions::default()).unwrap_err();
        assert_eq!(err.error_type(), "bad_magic", "{err}");
    }
}
