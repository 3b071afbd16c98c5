//! `tokenrouter generate`: one completion from one model, streamed to stdout,
//! with timing on stderr. The smallest end-to-end check of the runtime.
//! With `--prompts-file`, every prompt of a JSONL file goes to one engine so
//! they decode as one batch (see [`super::generate_batch`]).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use subserver::config::{DTypeSetting, DeviceSpec};
use subserver::engine::{BatchEngine, EngineLimits};
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::sampling::SamplingParams;
use subserver::tokenizer::{ChatMessage, ChatTemplate, TextTokenizer};

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
        (_, Some(file), Some(out)) => super::generate_batch::run(&args, setup, file, out),
        (Some(prompt), _, _) => run_one(&args, setup, prompt),
        _ => anyhow::bail!("give --prompt, or --prompts-file with --out"),
    }
}

/// What every form of `generate` checks before a model loads, and the
/// tokenizer and chat template it reads prompts with.
pub(super) struct Setup {
    /// Sampling from the flags (a prompts file may override some per line).
    pub params: SamplingParams,
    /// The model's tokenizer.
    pub tokenizer: TextTokenizer,
    template: Option<ChatTemplate>,
}

impl Setup {
    fn check(args: &GenerateArgs) -> Result<Self> {
        // Everything that needs no model is checked before anything loads.
        anyhow::ensure!(
            args.model.is_dir(),
            "--model {}: {}",
            args.model.display(),
            if args.model.exists() {
                "not a directory (give the Hugging Face model directory)"
            } else {
                "no such directory"
            }
        );
        args.device.parse::<DeviceSpec>()?;
        args.dtype.parse::<DTypeSetting>()?;
        anyhow::ensure!(
            args.kv_cache_fraction > 0.0 && args.kv_cache_fraction <= 1.0,
            "--kv-cache-fraction {} must be in (0, 1]",
            args.kv_cache_fraction
        );
        anyhow::ensure!(
            args.max_batch_size > 0,
            "--max-batch-size must be at least 1"
        );
        let params = SamplingParams {
            temperature: args.temperature,
            top_p: args.top_p,
            top_k: args.top_k,
            min_p: args.min_p,
            seed: args.seed,
            max_tokens: args.max_tokens,
            stop: args.stop.clone(),
            ..SamplingParams::default()
        };
        params.validate()?;
        if let Some(t) = args.threads {
            anyhow::ensure!(t > 0, "--threads {t} must be at least 1");
            subserver::device::set_cpu_threads(t);
        }
        let tokenizer = TextTokenizer::from_dir(&args.model)?;
        let template = if args.chat {
            Some(ChatTemplate::from_dir(&args.model)?)
        } else {
            None
        };
        Ok(Self {
            params,
            tokenizer,
            template,
        })
    }

    /// The token ids of one prompt: the user turn under the chat template
    /// with --chat, raw text otherwise.
    pub fn encode(&self, args: &GenerateArgs, prompt: &str) -> Result<Vec<u32>> {
        let Some(template) = &self.template else {
            return Ok(self.tokenizer.encode(prompt, true)?);
        };
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(ChatMessage::new("system", system));
        }
        messages.push(ChatMessage::new("user", prompt));
        let mut kwargs = serde_json::Map::new();
        if let Some(thinking) = args.enable_thinking {
            kwargs.insert("enable_thinking".into(), serde_json::Value::Bool(thinking));
        }
        let text = template.render(&messages, true, &kwargs)?;
        Ok(self.tokenizer.encode(&text, false)?)
    }

    /// Loads the model and puts it under one batch engine.
    pub fn engine(&self, args: &GenerateArgs) -> Result<BatchEngine<TchRunner>> {
        let mut opts = TchRunnerOptions::new(&args.model);
        let device = args.device.parse::<DeviceSpec>()?;
        opts.device = device.into();
        opts.dtype = args.dtype.parse::<DTypeSetting>()?.resolve(device);
        opts.kv_budget = KvBudget::Fraction(args.kv_cache_fraction);
        opts.cuda.graphs = args.cuda_graphs;
        let runner = TchRunner::load(&opts).context("loading the model")?;
        let limits = EngineLimits {
            max_batch_size: args.max_batch_size,
            ..EngineLimits::default()
        };
        Ok(BatchEngine::new(runner, limits).with_tokenizer(self.tokenizer.clone()))
    }
}

/// One prompt, streamed to stdout.
fn run_one(args: &GenerateArgs, setup: Setup, prompt: &str) -> Result<()> {
    let prompt = setup.encode(args, prompt)?;
    let mut engine = setup.engine(args)?;
    engine.add(0, prompt.clone(), &setup.params)?;

    let mut stdout = std::io::stdout().lock();
    let start = Instant::now();
    let mut first_token = None;
    let mut generated = 0usize;
    while !engine.is_idle() {
        for ev in engine.step()? {
            first_token.get_or_insert_with(|| start.elapsed());
            generated += 1;
            write!(stdout, "{}", ev.text)?;
            stdout.flush()?;
        }
    }
    writeln!(stdout)?;
    let done = engine.take_finished();
    let total = start.elapsed().as_secs_f64();
    let ttft = first_token.map(|d| d.as_secs_f64()).unwrap_or(total);
    let decode_rate = if generated > 1 {
        (generated - 1) as f64 / (total - ttft).max(1e-9)
    } else {
        0.0
    };
    if args.print_ids {
        let ids = done.first().map(|c| c.tokens.clone()).unwrap_or_default();
        eprintln!("{}", serde_json::json!({"prompt_ids": prompt, "ids": ids}));
    }
    eprintln!(
        "prompt {} tokens, generated {generated} tokens, finish {:?}; first token {:.3}s, decode {decode_rate:.1} tokens/s",
        prompt.len(),
        done.first().map(|c| c.finish),
        ttft
    );
    Ok(())
}
