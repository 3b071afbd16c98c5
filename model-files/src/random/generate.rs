//! Writes a random-weight checkpoint from a config and the tensor plan.

use std::path::{Path, PathBuf};

use crate::dtype::StorageDtype;
use crate::hf_config::{ModelConfig, TokenIds};
use crate::hf_files::{generation_config, prepare_output_dir, write_json};
use crate::progress::bytes_bar;
use crate::safetensors_writer::{CheckpointWriter, DEFAULT_MAX_SHARD_BYTES};
use crate::tensor_spec::{tensor_rng, tensor_specs};
use crate::AssetError;

/// Values generated per chunk: bounds memory for any model size.
const CHUNK: usize = 1 << 20;

/// Tokenizer files `gen-random` copies; both must exist.
const REQUIRED_TOKENIZER_FILES: [&str; 2] = ["tokenizer.json", "tokenizer_config.json"];

/// How to write the random checkpoint.
#[derive(Debug, Clone)]
pub struct GenRandomOptions {
    /// Seed of every tensor's stream.
    pub seed: u64,
    /// Storage dtype.
    pub dtype: StorageDtype,
    /// Directory with `tokenizer.json` and `tokenizer_config.json` to copy.
    pub tokenizer_dir: PathBuf,
    /// Stop ids for `generation_config.json`.
    pub generation_eos: TokenIds,
    /// Shard size limit.
    pub max_shard_bytes: u64,
}

impl GenRandomOptions {
    /// Defaults: seed 0, f32, 2 GB shards.
    pub fn new(tokenizer_dir: PathBuf, generation_eos: TokenIds) -> Self {
        Self {
            seed: 0,
            dtype: StorageDtype::F32,
            tokenizer_dir,
            generation_eos,
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
        }
    }
}

/// Writes `config.json` (with `torch_dtype` set to the dtype), the weights,
/// `generation_config.json` and the copied tokenizer files into `out`.
/// The same seed gives the same bytes.
pub fn gen_random(
    cfg: &ModelConfig,
    out: &Path,
    opts: &GenRandomOptions,
) -> Result<Vec<PathBuf>, AssetError> {
    let staged = crate::staged::StagedDir::create(out)?;
    let files = gen_into(cfg, staged.path(), opts)?;
    let files = staged.commit(files)?;
    tracing::info!(out = %out.display(), layers = cfg.num_hidden_layers, seed = opts.seed, dtype = %opts.dtype, "wrote random checkpoint");
    Ok(files)
}

/// [`gen_random`] into the (empty) staging directory.
fn gen_into(
    cfg: &ModelConfig,
    out: &Path,
    opts: &GenRandomOptions,
) -> Result<Vec<PathBuf>, AssetError> {
    cfg.validate().map_err(AssetError::InvalidArgument)?;
    for name in REQUIRED_TOKENIZER_FILES {
        let path = opts.tokenizer_dir.join(name);
        if !path.is_file() {
            return Err(AssetError::io(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "tokenizer file not found (pass --tokenizer-dir)",
                ),
            ));
        }
    }
    let mut cfg = cfg.clone();
    cfg.torch_dtype = Some(opts.dtype.torch_name().to_string());
    let specs = tensor_specs(&cfg);
    prepare_output_dir(out)?;
    let mut writer = CheckpointWriter::for_specs(out, &specs, opts.dtype, opts.max_shard_bytes)?;
    let bar = bytes_bar(writer.total_bytes(), "gen-random");
    let mut buf = vec![0f32; CHUNK];
    for spec in &specs {
        let mut rng = tensor_rng(opts.seed, &spec.name);
        writer.begin(&spec.name)?;
        let mut left = spec.numel();
        while left > 0 {
            let chunk = &mut buf[..left.min(CHUNK)];
            spec.init.fill(&mut rng, chunk);
            writer.write_f32(chunk)?;
            bar.inc((chunk.len() * opts.dtype.size()) as u64);
            left -= chunk.len();
        }
    }
    let mut files = writer.finish()?;
    bar.finish_and_clear();

    let config_path = out.join("config.json");
    write_json(&config_path, &cfg)?;
    let gen_path = out.join("generation_config.json");
    write_json(
        &gen_path,
        &generation_config(cfg.bos_token_id, &opts.generation_eos),
    )?;
    files.extend([config_path, gen_path]);
    for name in REQUIRED_TOKENIZER_FILES {
        let (from, to) = (opts.tokenizer_dir.join(name), out.join(name));
        std::fs::copy(&from, &to).map_err(|e| AssetError::io(&from, e))?;
        files.push(to);
    }
    Ok(files)
}
