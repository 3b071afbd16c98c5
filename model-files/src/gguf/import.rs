//! `import-gguf`: a llama or qwen2 GGUF → a Hugging Face model directory,
//! either with its tensors dequantized into safetensors or, linked, with the
//! GGUF itself as the directory's weights (`model.gguf`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::model_weights::GgufWeights;
use super::tokenizer_json::tokenizer_files;
use crate::dtype::StorageDtype;
use crate::hf_config::ModelConfig;
use crate::hf_files::{load_tokenizer, read_json, write_json};
use crate::progress::bytes_bar;
use crate::safetensors_writer::{CheckpointWriter, DEFAULT_MAX_SHARD_BYTES};
use crate::tensor_spec::tensor_specs;
use crate::AssetError;

/// The weights file of a linked model directory: the GGUF, hard-linked
/// (or symlinked across filesystems). The engine's loader reads a
/// directory with this file and no safetensors straight from it.
pub const LINKED_GGUF: &str = "model.gguf";

/// How to write the imported checkpoint.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Storage dtype of every tensor (safetensors output only).
    pub dtype: StorageDtype,
    /// Shard size limit.
    pub max_shard_bytes: u64,
    /// Write no safetensors: link the GGUF into the directory as
    /// [`LINKED_GGUF`] beside the JSON files.
    pub link: bool,
    /// A JSON file whose keys replace those of the `generation_config.json`
    /// derived from the GGUF (a model's published sampling defaults and
    /// stop ids, which a GGUF does not carry).
    pub generation_config: Option<PathBuf>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            dtype: StorageDtype::F32,
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
            link: false,
            generation_config: None,
        }
    }
}

/// What an import wrote.
#[derive(Debug, Clone)]
pub struct ImportSummary {
    /// The config written to `config.json`.
    pub config: ModelConfig,
    /// Number of tensors written (or, linked, that the GGUF holds).
    pub tensors: usize,
    /// Every file written.
    pub files: Vec<PathBuf>,
}

/// Converts `file` into `out_dir` (created; must be empty if it exists).
/// Everything is validated (names, types, shapes against the config, the
/// tokenizer) before anything is written, and the directory appears whole
/// or not at all.
pub fn import_gguf(
    file: &Path,
    out_dir: &Path,
    opts: &ImportOptions,
) -> Result<ImportSummary, AssetError> {
    let weights = GgufWeights::open(file)?;
    let in_file = |e: AssetError| AssetError::InFile {
        path: file.to_path_buf(),
        source: Box::new(e),
    };
    let tok = tokenizer_files(weights.header(), weights.config().max_position_embeddings)
        .map_err(in_file)?;
    let mut generation = tok.generation_config.clone();
    if let Some(path) = &opts.generation_config {
        merge_generation_config(&mut generation, path)?;
    }
    let staged = crate::staged::StagedDir::create(out_dir)?;
    let mut cfg = weights.config().clone();
    let mut files = if opts.link {
        cfg.torch_dtype = Some(StorageDtype::F32.torch_name().to_string());
        vec![link_gguf(file, &staged.path().join(LINKED_GGUF))?]
    } else {
        cfg.torch_dtype = Some(opts.dtype.torch_name().to_string());
        write_safetensors(&weights, staged.path(), opts)?
    };
    let named = [
        (
            "config.json",
            serde_json::to_value(&cfg)
                .map_err(|e| AssetError::json(&out_dir.join("config.json"), e))?,
        ),
        ("tokenizer.json", tok.tokenizer),
        ("tokenizer_config.json", tok.tokenizer_config),
        ("generation_config.json", generation),
    ];
    for (name, value) in named {
        let path = staged.path().join(name);
        write_json(&path, &value)?;
        files.push(path);
    }
    // The tokenizer we just wrote must load with the runtime's tokenizer crate.
    load_tokenizer(&staged.path().join("tokenizer.json"))?;
    let files = staged.commit(files)?;
    tracing::info!(file = %file.display(), out = %out_dir.display(), link = opts.link, "imported GGUF");
    Ok(ImportSummary {
        config: cfg,
        tensors: weights.names().count(),
        files,
    })
}

/// Replaces the keys of `generation` with those of the JSON object in `path`.
fn merge_generation_config(generation: &mut Value, path: &Path) -> Result<(), AssetError> {
    let over = read_json(path)?;
    let Some(over) = over.as_object() else {
        return Err(AssetError::InvalidArgument(format!(
            "{}: a generation config must be a JSON object",
            path.display()
        )));
    };
    if let Some(map) = generation.as_object_mut() {
        for (k, v) in over {
            map.insert(k.clone(), v.clone());
        }
    }
    Ok(())
}

/// Hard-links `file` as `to`; across filesystems (where a hard link cannot
/// be made) a symlink to its absolute path.
fn link_gguf(file: &Path, to: &Path) -> Result<PathBuf, AssetError> {
    // The file itself, not a symlink to it (a hard link to a relative
    // symlink would point elsewhere from the new folder).
    let abs = std::fs::canonicalize(file).map_err(|e| AssetError::io(file, e))?;
    if std::fs::hard_link(&abs, to).is_err() {
        symlink(&abs, to).map_err(|e| AssetError::io(to, e))?;
        tracing::info!(gguf = %abs.display(), "hard link failed; model.gguf is a symlink");
    }
    Ok(to.to_path_buf())
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::fs::copy(target, link).map(|_| ())
}

/// Dequantizes every tensor into safetensors shards under `out_dir`.
fn write_safetensors(
    weights: &GgufWeights,
    out_dir: &Path,
    opts: &ImportOptions,
) -> Result<Vec<PathBuf>, AssetError> {
    let specs = tensor_specs(weights.config());
    let mut writer =
        CheckpointWriter::for_specs(out_dir, &specs, opts.dtype, opts.max_shard_bytes)?;
    let bar = bytes_bar(writer.total_bytes(), "import-gguf");
    for spec in &specs {
        let values = weights.to_f32(&spec.name)?;
        writer.write_tensor_f32(&spec.name, &values)?;
        bar.inc(values.len() as u64 * opts.dtype.size() as u64);
    }
    let files = writer.finish()?;
    bar.finish_and_clear();
    tracing::debug!(tensors = specs.len(), dtype = %opts.dtype, "GGUF tensors written");
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::super::ggml_type::GgmlType;
    use super::super::test_file::{tiny_llama, tiny_qwen2, ExpectedTensors, FIXTURE_VOCAB};
    use super::super::value::MetadataValue;
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

    fn write(dir: &Path, name: &str, b: &super::super::test_file::GgufBuilder) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, b.build()).unwrap();
        path
    }

    #[test]
    fn imports_qwen2_with_biases_and_unpermuted_q_k() {
        for tied in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (b, expected) = tiny_qwen2(tied);
            let gguf = write(dir.path(), "q.gguf", &b);
            let out = dir.path().join("hf");
            let summary = import_gguf(&gguf, &out, &ImportOptions::default()).unwrap();
            assert_eq!(summary.tensors, expected.len());
            let ckpt = Checkpoint::open(&out).unwrap();
            for (name, _, values) in &expected {
                assert_eq!(&ckpt.to_f32(name).unwrap(), values, "{name}");
            }
            assert!(expected
                .iter()
                .any(|(n, _, _)| n == "model.layers.1.self_attn.v_proj.bias"));
            let cfg = ModelConfig::from_file(&out.join("config.json")).unwrap();
            assert_eq!(cfg.architectures, ["Qwen2ForCausalLM"]);
            assert_eq!(cfg.tie_word_embeddings, tied);
        }
    }

    #[test]
    fn link_writes_json_and_the_gguf_only() {
        let dir = tempfile::tempdir().unwrap();
        let (b, _) = tiny_qwen2(false);
        let gguf = write(dir.path(), "q.gguf", &b);
        let gen = dir.path().join("gen.json");
        std::fs::write(&gen, r#"{"eos_token_id": [2, 0], "top_k": 20}"#).unwrap();
        let out = dir.path().join("linked");
        let opts = ImportOptions {
            link: true,
            generation_config: Some(gen),
            ..ImportOptions::default()
        };
        let summary = import_gguf(&gguf, &out, &opts).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "config.json",
                "generation_config.json",
                "model.gguf",
                "tokenizer.json",
                "tokenizer_config.json"
            ]
        );
        assert_eq!(summary.files.len(), 5);
        assert_eq!(
            std::fs::read(out.join(LINKED_GGUF)).unwrap(),
            std::fs::read(&gguf).unwrap()
        );
        let gen: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join("generation_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            gen,
            serde_json::json!({ "eos_token_id": [2, 0], "bos_token_id": 1, "top_k": 20 })
        );
    }

    #[test]
    fn bad_files_name_the_file_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        /// A file name, an edit of the fixture, what the error must name.
        type Case = (&'static str, Edit, &'static str);
        type Edit = Box<dyn Fn(&mut super::super::test_file::GgufBuilder)>;
        let cases: Vec<Case> = vec![
            (
                "arch.gguf",
                Box::new(|b| {
                    b.set_kv(
                        "general.architecture",
                        MetadataValue::String("mamba".into()),
                    )
                }),
                "`mamba`",
            ),
            (
                "nomerges.gguf",
                Box::new(|b| b.remove_kv("tokenizer.ggml.merges")),
                "tokenizer.ggml.merges",
            ),
        ];
        for (name, edit, what) in cases {
            let (mut b, _) = tiny_qwen2(true);
            edit(&mut b);
            let gguf = write(dir.path(), name, &b);
            for link in [false, true] {
                let out = dir.path().join(format!("out-{name}-{link}"));
                let opts = ImportOptions {
                    link,
                    ..ImportOptions::default()
                };
                let err = import_gguf(&gguf, &out, &opts).unwrap_err().to_string();
                assert!(err.contains(name) && err.contains(what), "{err}");
                assert!(!out.exists(), "{name}: nothing written");
            }
        }
        let (b, _) = tiny_qwen2(true);
        let bytes = b.build();
        let cut = dir.path().join("cut.gguf");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let out = dir.path().join("out-cut");
        let opts = ImportOptions {
            link: true,
            ..ImportOptions::default()
        };
        let err = import_gguf(&cut, &out, &opts).unwrap_err();
        assert_eq!(err.error_type(), "truncated", "{err}");
        assert!(err.to_string().contains("cut.gguf"), "{err}");
        assert!(!out.exists());
        // Nothing left beside the outputs either (no staging folders).
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
