//! `tokenrouter generate`: one completion from one model, streamed to stdout,
//! with timing on stderr. The smallest end-to-end check of the runtime.
//! With `--prompts-file`, every prompt of a JSONL file goes to one engine so
//! they decode as one batch (see [`batch`]).

mod batch;
mod one;
mod setup;

use std::path::PathBuf;

use anyhow::Result;
use subserver::engine::EngineLimits;

use setup::Setup;

/// Arguments of `generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Hugging Face model directory.
    #[arg(long)]
    model: PathBuf,
    /// The prompt (raw text, or the user turn with --chat).
    #[arg(
        long,
        required_unless_present = "prompts_file",
        conflicts_with = "prompts_file"
    )]
    prompt: Option<String>,
    /// A JSONL file of prompts, all submitted to one engine so they batch:
    /// one object a line with `prompt` (text, templated with --chat) or
    /// `prompt_ids` (token ids, used as they are), and optionally `seed`,
    /// `temperature` and `max_tokens` overriding the flags for that line.
    #[arg(long, requires = "out")]
    prompts_file: Option<PathBuf>,
    /// With --prompts-file: where the answers go (JSONL, input order:
    /// `index`, `prompt_ids`, `ids`, `finish`, `text`).
    #[arg(long, requires = "prompts_file")]
    out: Option<PathBuf>,
    /// Most requests decoded in one forward.
    #[arg(long, default_value_t = EngineLimits::default().max_batch_size)]
    max_batch_size: usize,
    /// Wrap the prompt in the model's chat template as a user turn.
    #[arg(long)]
    chat: bool,
    /// A system turn (with --chat).
    #[arg(long)]
    system: Option<String>,
    /// Chat template `enable_thinking` (Qwen3); omitted when not given.
    #[arg(long)]
    enable_thinking: Option<bool>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Keep only the k most likely tokens (0: off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Drop tokens below min_p times the top probability.
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Sampling seed (same seed, same output).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop strings (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// auto, f32, bf16 or f16 (auto: bf16 on a CPU with native bf16, f32 elsewhere).
    #[arg(long, default_value = "auto")]
    dtype: String,
    /// Fraction of free memory for the KV cache.
    #[arg(long, default_value_t = 0.05)]
    kv_cache_fraction: f64,
    /// CPU threads for libtorch (default: all cores).
    #[arg(long)]
    threads: Option<i32>,
    /// Decode steps as CUDA graphs (CUDA builds with the `cuda` feature): on | off.
    #[arg(long, default_value = "off", value_parser = subserver::cuda::parse_switch, action = clap::ArgAction::Set)]
    cuda_graphs: bool,
    /// Also print the prompt and generated token ids as one JSON line on
    /// stderr (`{"prompt_ids": [...], "ids": [...]}`), for parity scripts.
    #[arg(long)]
    print_ids: bool,
}

/// Runs `generate`.
pub fn run(args: GenerateArgs) -> Result<()> {
    let setup = Setup::check(&args)?;
    match (&args.prompt, &args.prompts_file, &args.out) {
        (_, Some(file), Some(out)) => batch::run(&args, setup, file, out),
        (Some(prompt), _, _) => one::run(&args, setup, prompt),
        _ => anyhow::bail!("give --prompt, or --prompts-file with --out"),
    }
}
