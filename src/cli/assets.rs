//! `import-gguf`, `derive-early-exit` and `gen-random`: argument parsing and
//! thin drivers over `subserver::assets`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use subserver::assets::gguf::{import_gguf, ImportOptions};
use subserver::assets::random::{gen_random, GenRandomOptions, Preset};
use subserver::assets::{derive_early_exit, StorageDtype, DEFAULT_MAX_SHARD_BYTES};

/// `import-gguf` arguments.
#[derive(Debug, clap::Args)]
pub struct ImportGgufArgs {
    /// The GGUF file (llama or qwen2 architecture, byte-level BPE tokenizer).
    pub file: PathBuf,
    /// Output directory (created; must be empty if it exists).
    pub out_dir: PathBuf,
    /// Storage dtype of the written tensors: f32, bf16 or f16 (not with --link).
    #[arg(long, default_value = "f32", conflicts_with = "link")]
    pub dtype: StorageDtype,
    /// Write no safetensors: the directory gets the JSON files and the GGUF
    /// itself as `model.gguf` (a hard link, or a symlink across
    /// filesystems), which the engine reads and dequantizes at load.
    #[arg(long)]
    pub link: bool,
    /// A JSON file whose keys replace those of the generation_config.json
    /// derived from the GGUF (the model's published sampling defaults and
    /// stop ids, which a GGUF does not carry).
    #[arg(long)]
    pub generation_config: Option<PathBuf>,
}

/// `derive-early-exit` arguments.
#[derive(Debug, clap::Args)]
pub struct DeriveEarlyExitArgs {
    /// Source model directory (single or sharded safetensors).
    pub src: PathBuf,
    /// Output directory (created; must be empty if it exists).
    pub out: PathBuf,
    /// Number of leading decoder layers to keep (1..=layers of SRC).
    #[arg(long)]
    pub layers: usize,
}

/// `gen-random` arguments.
#[derive(Debug, clap::Args)]
pub struct GenRandomArgs {
    /// Model shape: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-32b or tiny.
    #[arg(long)]
    pub preset: Preset,
    /// Output directory (created; must be empty if it exists). Not with --no-save.
    #[arg(required_unless_present = "no_save")]
    pub out: Option<PathBuf>,
    /// Override the preset's number of decoder layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Seed of the weights; equal seeds give identical files.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Extra `lm_head` rows after the vocabulary (Co-LLM's deferral score:
    /// 1). Sets `deferral_columns` in config.json and unties the head.
    #[arg(long, default_value_t = 0)]
    pub deferral_columns: usize,
    /// Storage dtype (default: bf16, f32 for `tiny`).
    #[arg(long)]
    pub dtype: Option<StorageDtype>,
    /// Directory holding the Qwen3 tokenizer.json and tokenizer_config.json
    /// (default: $TOKENROUTER_CACHE/assets/qwen3-tokenizer, or the nearest
    /// `.cache/assets/qwen3-tokenizer` above the working directory).
    #[arg(long)]
    pub tokenizer_dir: Option<PathBuf>,
    /// Make the weights directly on this device (cpu, cuda, cuda:N); needs --no-save.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Write nothing: build the model in device memory and time a short batched
    /// generation (benchmarks of shapes too big to write, such as qwen3-32b).
    #[arg(long)]
    pub no_save: bool,
}

/// Runs `import-gguf`.
pub fn run_import_gguf(a: ImportGgufArgs) -> anyhow::Result<()> {
    let opts = ImportOptions {
        dtype: a.dtype,
        max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
        link: a.link,
        generation_config: a.generation_config,
    };
    let summary = import_gguf(&a.file, &a.out_dir, &opts)
        .with_context(|| format!("importing {}", a.file.display()))?;
    let layers = summary.config.num_hidden_layers;
    if a.link {
        println!(
            "linked {} ({} tensors, {layers} layers) into {}",
            a.file.display(),
            summary.tensors,
            a.out_dir.display()
        );
    } else {
        println!(
            "wrote {} tensors ({layers} layers, {}) to {}",
            summary.tensors,
            a.dtype,
            a.out_dir.display()
        );
    }
    Ok(())
}

/// Runs `derive-early-exit`.
pub fn run_derive_early_exit(a: DeriveEarlyExitArgs) -> anyhow::Result<()> {
    let summary = derive_early_exit(&a.src, &a.out, a.layers, DEFAULT_MAX_SHARD_BYTES)
        .with_context(|| format!("deriving from {}", a.src.display()))?;
    println!(
        "wrote {} tensors ({} layers) to {}",
        summary.tensors,
        a.layers,
        a.out.display()
    );
    Ok(())
}

/// Runs `gen-random`.
pub fn run_gen_random(a: GenRandomArgs) -> anyhow::Result<()> {
    let dtype = a.dtype.unwrap_or(a.preset.default_dtype());
    let mut cfg = a.preset.config(dtype);
    if let Some(layers) = a.layers {
        anyhow::ensure!(layers > 0, "--layers must be at least 1");
        cfg.num_hidden_layers = layers;
    }
    if a.deferral_columns > 0 {
        cfg.deferral_columns = a.deferral_columns;
        cfg.tie_word_embeddings = false;
    }
    if a.no_save {
        let device = a.device.parse::<subserver::config::DeviceSpec>()?;
        let r = engine_bench::random_model::build_and_time(&cfg, a.seed, dtype, device)?;
        println!(
            "{} {} layers, {:.2}B parameters ({dtype}) built on {device} in {:.1}s; \
             prefill {:.0} tok/s (8 x 128 tokens); decode {:.1} tok/s (batch 8)",
            a.preset,
            r.layers,
            r.parameters as f64 / 1e9,
            r.build_s,
            r.prefill_tok_s,
            r.decode_tok_s
        );
        return Ok(());
    }
    anyhow::ensure!(
        a.device == "cpu",
        "--device {} needs --no-save (checkpoints are written from host memory)",
        a.device
    );
    let out = a
        .out
        .context("an output directory is required without --no-save")?;
    let tokenizer_dir = match a.tokenizer_dir {
        Some(dir) => dir,
        None => default_tokenizer_dir()?,
    };
    let opts = GenRandomOptions {
        seed: a.seed,
        dtype,
        tokenizer_dir,
        generation_eos: a.preset.generation_eos(),
        max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
    };
    gen_random(&cfg, &out, &opts).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "wrote random {} ({} layers, {dtype}, seed {}) to {}",
        a.preset,
        cfg.num_hidden_layers,
        a.seed,
        out.display()
    );
    Ok(())
}

/// `$TOKENROUTER_CACHE/assets/qwen3-tokenizer`, else the nearest
/// `.cache/assets/qwen3-tokenizer` above the working directory.
fn default_tokenizer_dir() -> anyhow::Result<PathBuf> {
    const SUB: &str = "assets/qwen3-tokenizer";
    if let Some(cache) = std::env::var_os("TOKENROUTER_CACHE") {
        return Ok(Path::new(&cache).join(SUB));
    }
    let cwd = std::env::current_dir().context("reading the working directory")?;
    cwd.ancestors()
        .map(|a| a.join(".cache").join(SUB))
        .find(|p| p.is_dir())
        .with_context(|| {
            format!(
                "no Qwen3 tokenizer found: pass --tokenizer-dir, set TOKENROUTER_CACHE, \
                 or run `make test` to fetch the assets (searched above {})",
                cwd.display()
            )
        })
}
