//! `make bench-engine`: batched greedy decode throughput, in one run, of
//! 1. the bare forward (our `TchRunner` stepped in a loop, argmax on the host),
//! 2. the engine (a one-model group: scheduler thread, batching, KV
//!    admission, sampling, stop checks, token streaming), and
//! 3. transformers on the same checkpoint with the same threads.
//!
//! Usage: bench_engine --model DIR --python PY [--batches 1,4,16,64]
//!        [--prompt-tokens 32] [--gen-tokens 32] [--threads 2] [--out FILE]

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use loadgen::page::Page;
use rand::{Rng, SeedableRng};
use subserver::bench::profile::{context_points, decode_run, StepProfile};
use subserver::config::KvBudget;
use subserver::engine::EngineLimits;
use subserver::policy::{build, Placement};
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::ModelRunner;
use subserver::sampling::SamplingParams;
use subserver::scheduler::batching::ExecutionMode;
use subserver::scheduler::client::StreamEvent;
use subserver::scheduler::group::{Group, GroupSettings, MemberSpec};

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
    /// Save the bare forward's step profile (JSON) for `bench-ablation`.
    #[arg(long)]
    profile_out: Option<PathBuf>,
    /// Contexts (prompt tokens) of the profile's one-sequence points, which
    /// give the sim its cost per context position.
    #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
    profile_contexts: Vec<usize>,
    /// Only the bare forward and the step profile: no engine or
    /// transformers runs (their columns read NaN).
    #[arg(long)]
    profile_only: bool,
}

/// Decode tokens/s of the engine: `batch` requests submitted at once; the
/// clock runs from the moment every request has its first token (prefill
/// done) to the last token, like the bare-forward and transformers figures.
fn engine(args: &Args, batch: usize) -> Result<f64> {
    let mut opts = TchRunnerOptions::new(&args.model);
    opts.kv_budget = KvBudget::Tokens(batch * (args.prompt_tokens + args.gen_tokens + 32));
    opts.enable_prefix_cache = false;
    let runner = TchRunner::load(&opts)?;
    let vocab = runner.info().vocab_size as u32;
    let at = Placement {
        model: 0,
        num_models: 1,
        entry: 0,
    };
    let member = MemberSpec {
        name: "model".into(),
        runner: Box::new(runner),
        policy: build("Single", &serde_json::Value::Null, at)
            .map_err(|e| anyhow::anyhow!("policy: {e}"))?,
        tokenizer: None,
        thresholds: vec![1],
    };
    let settings = GroupSettings {
        mode: ExecutionMode::Async,
        limits: EngineLimits {
            max_batched_tokens: batch * args.prompt_tokens + 64,
            max_batch_size: batch.max(1),
        },
        ..GroupSettings::default()
    };
    let group = Group::start(vec![member], settings);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(batch as u64);
    let mut streams = Vec::new();
    for _ in 0..batch {
        let prompt: Vec<u32> = (0..args.prompt_tokens)
            .map(|_| rng.random_range(100..vocab - 1))
            .collect();
        let params = SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(args.gen_tokens + 1)
        };
        streams.push(group.submit(prompt, params).1);
    }
    // Each stream is drained on its own thread, so every token is stamped
    // when it arrives (reading the streams one after another would stamp
    // the later streams' buffered tokens all at once).
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut rx| {
            std::thread::spawn(move || -> Result<Vec<Instant>> {
                let mut t = Vec::new();
                while let Some(ev) = rx.blocking_recv() {
                    match ev {
                        StreamEvent::Token { .. } => t.push(Instant::now()),
                        StreamEvent::Finished { .. } => break,
                        StreamEvent::Failed(e) => bail!("engine request failed: {e}"),
                    }
                }
                Ok(t)
            })
        })
        .collect();
    let mut times: Vec<Vec<Instant>> = Vec::new();
    for r in readers {
        times.push(
            r.join()
                .map_err(|_| anyhow::anyhow!("reader thread panicked"))??,
        );
    }
    drop(group);
    let first_all = times.iter().filter_map(|t| t.first()).max().copied();
    let last = times.iter().filter_map(|t| t.last()).max().copied();
    let (Some(a), Some(b)) = (first_all, last) else {
        bail!("engine produced no tokens");
    };
    let after: usize = times
        .iter()
        .map(|t| t.iter().filter(|x| **x > a).count())
        .sum();
    Ok(after as f64 / (b - a).as_secs_f64().max(1e-9))
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
    let mut page = Page::begin("Engine: batched decode throughput", "make bench-engine");
    page.para(&format!(
        "Greedy decode of {} tokens after a {}-token random prompt per request, SmolLM2-135M in f32 \
         on the CPU, {} threads for every side, all in one run. Decode only (prefill excluded). \
         *Bare forward*: our runner stepped in a loop with host argmax. *Engine*: the same runner \
         inside a one-model group (scheduler thread, KV admission, batching, sampling, stop checks, \
         token streaming to the client), timed from the moment every request has its first token \
         to the last token. *transformers*: `tests/python/hf_bench.py`, the same loop with the HF KV cache.",
        args.gen_tokens, args.prompt_tokens, args.threads
    ));
    let mut rows = Vec::new();
    let mut profile = StepProfile {
        decode_ms: Vec::new(),
        prefill_tokens: args.prompt_tokens,
        prefill_ms: f64::NAN,
        context: Vec::new(),
    };
    for &b in &args.batches {
        let (prefill_ms, step_ms) =
            decode_run(&args.model, b, args.prompt_tokens, args.gen_tokens)?;
        profile.decode_ms.push((b, step_ms));
        if b == 1 {
            profile.prefill_ms = prefill_ms;
        }
        let bare = b as f64 * 1e3 / step_ms;
        let (eng, hf) = if args.profile_only {
            (f64::NAN, f64::NAN)
        } else {
            (engine(&args, b)?, theirs(&args, b)?)
        };
        let row = vec![
            b.to_string(),
            format!("{bare:.1}"),
            format!("{eng:.1}"),
            format!("{hf:.1}"),
            format!("{:.2}", eng / bare),
            format!("{:.2}", eng / hf),
        ];
        eprintln!("{}", row.join(" | "));
        rows.push(row);
    }
    page.table(
        &[
            "batch",
            "bare forward tok/s",
            "engine tok/s",
            "transformers tok/s",
            "engine / bare",
            "engine / transformers",
        ],
        &rows,
    );
    if let Some(path) = &args.profile_out {
        if profile.prefill_ms.is_nan() {
            profile.prefill_ms = decode_run(&args.model, 1, args.prompt_tokens, 1)?.0;
        }
        profile.context = context_points(&args.model, &args.profile_contexts, args.gen_tokens)?;
        let rel = profile.relative();
        page.para(&format!(
            "Step profile of the bare forward (saved for `make bench-ablation`): decode steps {}; \
             prefill of one {}-token prompt {:.1} ms. As fractions of a one-sequence decode step: \
             base {:.3}, per sequence {:.4}, per new token {:.4}, per context position {:.2e} \
             (one sequence at contexts {}).",
            profile
                .decode_ms
                .iter()
                .map(|(b, ms)| format!("B={b}: {ms:.1} ms"))
                .collect::<Vec<_>>()
                .join(", "),
            profile.prefill_tokens,
            profile.prefill_ms,
            rel.base,
            rel.per_seq,
            rel.per_token,
            rel.per_context,
            profile
                .context
                .iter()
                .map(|p| format!(
                    "{}: prefill {:.0} ms, decode {:.1} ms",
                    p.tokens, p.prefill_ms, p.decode_ms
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_vec_pretty(&profile)?)?;
    }
    print!("{}", page.render());
    if let Some(path) = &args.out {
        page.write(path)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
