//! What every form of `generate` checks and loads before it runs.

use anyhow::{Context, Result};
use subserver::config::{DTypeSetting, DeviceSpec};
use subserver::engine::{BatchEngine, EngineLimits};
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::sampling::SamplingParams;
use subserver::tokenizer::{ChatMessage, ChatTemplate, TextTokenizer};

use super::GenerateArgs;

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
    pub(super) fn check(args: &GenerateArgs) -> Result<Self> {
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
