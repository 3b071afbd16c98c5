//! `tokenrouter generate --prompts-file F --out A.jsonl`: every prompt of a
//! JSONL file submitted to one engine at once, so they decode as one
//! continuous batch (how make's heal gets its teacher answers), and each
//! answer's token ids written back in input order.

use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use subserver::sampling::{FinishReason, SamplingParams};

use super::setup::Setup;
use super::GenerateArgs;

/// One line of the prompts file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptLine {
    /// Text (the user turn with --chat).
    #[serde(default)]
    prompt: Option<String>,
    /// Token ids, used as they are.
    #[serde(default)]
    prompt_ids: Option<Vec<u32>>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    max_tokens: Option<usize>,
}

/// One line of the answers file.
#[derive(Debug, Serialize)]
struct AnswerLine<'a> {
    index: usize,
    prompt_ids: &'a [u32],
    ids: &'a [u32],
    finish: FinishReason,
    text: String,
}

/// A prompt ready to submit.
struct Job {
    prompt: Vec<u32>,
    params: SamplingParams,
}

/// Reads and checks every line before the model loads: a bad line is an
/// error naming it, and nothing runs.
fn read_jobs(args: &GenerateArgs, setup: &Setup, file: &Path) -> Result<Vec<Job>> {
    let f =
        std::fs::File::open(file).with_context(|| format!("--prompts-file {}", file.display()))?;
    let mut jobs = Vec::new();
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("{}: reading line {}", file.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", file.display(), n + 1);
        let p: PromptLine = serde_json::from_str(&line).with_context(at)?;
        let prompt = match (p.prompt, p.prompt_ids) {
            (Some(text), None) => setup.encode(args, &text).with_context(at)?,
            (None, Some(ids)) => ids,
            _ => anyhow::bail!("{}: give exactly one of `prompt` and `prompt_ids`", at()),
        };
        anyhow::ensure!(!prompt.is_empty(), "{}: the prompt is empty", at());
        let mut params = setup.params.clone();
        if let Some(seed) = p.seed {
            params.seed = Some(seed);
        }
        if let Some(t) = p.temperature {
            params.temperature = t;
        }
        if let Some(m) = p.max_tokens {
            params.max_tokens = m;
        }
        params.validate().with_context(at)?;
        jobs.push(Job { prompt, params });
    }
    anyhow::ensure!(
        !jobs.is_empty(),
        "--prompts-file {}: no prompts",
        file.display()
    );
    Ok(jobs)
}

/// Runs the batch and writes `out`.
pub(super) fn run(args: &GenerateArgs, setup: Setup, file: &Path, out: &Path) -> Result<()> {
    let jobs = read_jobs(args, &setup, file)?;
    let mut engine = setup.engine(args)?;
    for (i, job) in jobs.iter().enumerate() {
        engine
            .add(i as u64, job.prompt.clone(), &job.params)
            .with_context(|| format!("{}: prompt {}", file.display(), i + 1))?;
    }
    let start = Instant::now();
    let mut done = HashMap::with_capacity(jobs.len());
    let mut generated = 0usize;
    let report_every = (jobs.len() / 10).max(1);
    while !engine.is_idle() {
        generated += engine.step()?.len();
        for c in engine.take_finished() {
            done.insert(c.id as usize, c);
            if done.len() % report_every == 0 {
                tracing::info!(
                    done = done.len(),
                    of = jobs.len(),
                    generated,
                    tokens_per_s = generated as f64 / start.elapsed().as_secs_f64().max(1e-9),
                    "generate"
                );
            }
        }
    }
    let mut w = BufWriter::new(
        std::fs::File::create(out).with_context(|| format!("--out {}", out.display()))?,
    );
    for (i, job) in jobs.iter().enumerate() {
        let c = done
            .get(&i)
            .with_context(|| format!("prompt {} never finished", i + 1))?;
        let line = AnswerLine {
            index: i,
            prompt_ids: &job.prompt,
            ids: &c.tokens,
            finish: c.finish,
            text: setup.tokenizer.decode(&c.tokens, true)?,
        };
        serde_json::to_writer(&mut w, &line)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{} prompts, generated {generated} tokens in {secs:.1}s ({:.1} tokens/s); answers in {}",
        jobs.len(),
        generated as f64 / secs.max(1e-9),
        out.display()
    );
    Ok(())
}
