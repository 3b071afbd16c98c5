//! `make bench-engine`: batched greedy decode tokens/s of our runner against
//! transformers on the same checkpoint, same threads, in one run. Prints a
//! table and writes it (with the command) to `--out`.
//!
//! Usage: bench_engine --model DIR --python PY [--batches 1,4,16,64]
//!        [--prompt-tokens 32] [--gen-tokens 32] [--threads 2] [--out FILE]

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use rand::{Rng, SeedableRng};
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::{ModelRunner, StepBatch, StepItem};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    model: PathBuf,
    #[arg(long)]
    python: PathBuf,
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    batches: Vec<usize>,
    #[arg(long, default_value_t = 32)]
    prompt_tokens: usize,
    #[arg(long, default_value_t = 32)]
    gen_tokens: usize,
    #[arg(long, default_value_t = 2)]
    threads: i32,
    #[arg(long)]
    out: Option<PathBuf>,
}

fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32
}

/// Decode tokens/s of our runner for `batch` requests (after one prefill step).
fn ours(args: &Args, batch: usize) -> Result<f64> {
    let mut opts = TchRunnerOptions::new(&args.model);
    opts.kv_budget = KvBudget::Tokens(batch * (args.prompt_tokens + args.gen_tokens + 16));
    opts.enable_prefix_cache = false;
    let mut runner = TchRunner::load(&opts)?;
    let vocab = runner.info().vocab_size as u32;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut step = StepBatch::default();
    for rid in 0..batch as u64 {
        let prompt: Vec<u32> = (0..args.prompt_tokens)
            .map(|_| rng.random_range(100..vocab - 1))
            .collect();
        runner.kv().admit(rid, &prompt)?;
        step.items.push(StepItem {
            rid,
            start: 0,
            tokens: prompt,
        });
    }
    let advance = |step: &mut StepBatch, rows: Vec<Vec<f32>>| {
        for (item, row) in step.items.iter_mut().zip(rows) {
            item.start += item.tokens.len();
            item.tokens = vec![argmax(&row)];
        }
    };
    let rows = runner.forward(&step)?.logits_rows()?;
    advance(&mut step, rows);
    let t0 = Instant::now();
    for _ in 0..args.gen_tokens {
        let rows = runner.forward(&step)?.logits_rows()?;
        advance(&mut step, rows);
    }
    Ok((batch * args.gen_tokens) as f64 / t0.elapsed().as_secs_f64())
}

fn theirs(args: &Args, batch: usize) -> Result<f64> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/hf_bench.py");
    let out = Command::new(&args.python)
        .arg(script)
        .arg(&args.model)
        .args(["--batch", &batch.to_string()])
        .args(["--prompt-tokens", &args.prompt_tokens.to_string()])
        .args(["--gen-tokens", &args.gen_tokens.to_string()])
        .args(["--threads", &args.threads.to_string()])
        .output()
        .context("run hf_bench.py")?;
    if !out.status.success() {
        bail!(
            "hf_bench.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(line.trim()).context("parse hf_bench output")?;
    json["decode_tok_s"]
        .as_f64()
        .context("decode_tok_s missing")
}

fn main() -> Result<()> {
    let args = Args::parse();
    tch::set_num_threads(args.threads);
    let mut table = String::from(
        "| batch | tokenrouter tok/s | transformers tok/s | ratio |\n|---:|---:|---:|---:|\n",
    );
    for &b in &args.batches {
        let o = ours(&args, b)?;
        let t = theirs(&args, b)?;
        let row = format!("| {b} | {o:.1} | {t:.1} | {:.2} |\n", o / t);
        eprint!("{row}");
        table.push_str(&row);
    }
    println!("{table}");
    if let Some(path) = &args.out {
        let cmd = std::env::args().collect::<Vec<_>>().join(" ");
        let doc = format!(
            "# Engine: batched decode throughput\n\nMeasured by `make bench-engine`, which ran:\n\n```\n{cmd}\n```\n\n\
             Greedy decode of {} tokens after a {}-token prompt per request, f32 on the CPU, \
             {} threads for both, in one run. Decode steps only (prefill excluded).\n\n{table}",
            args.gen_tokens, args.prompt_tokens, args.threads
        );
        std::fs::write(path, doc).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
