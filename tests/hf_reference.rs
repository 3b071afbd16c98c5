//! Our logits against Hugging Face transformers on the same checkpoints, live:
//! a 64-token prompt plus 32 greedy steps, f32 on the CPU. The reference is
//! computed in this run by `tests/python/hf_logits.py`; nothing is committed.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;
use std::process::Command;

use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::{ModelRunner, StepBatch, StepItem};
use tch::Tensor;

const PROMPT_TOKENS: usize = 64;
const STEPS: usize = 32;
const MAX_REL_ERR: f64 = 1e-4;

struct Reference {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn reference(model: &Path) -> Reference {
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("ref.safetensors");
    let status = Command::new(common::python())
        .arg(common::script("hf_logits.py"))
        .arg(model)
        .arg(&file)
        .args([
            "--prompt-tokens",
            &PROMPT_TOKENS.to_string(),
            "--steps",
            &STEPS.to_string(),
        ])
        .status()
        .expect("run the python reference");
    assert!(
        status.success(),
        "hf_logits.py failed on {}",
        model.display()
    );
    let named = Tensor::read_safetensors(&file).unwrap();
    let get = |n: &str| {
        named
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, t)| t.shallow_clone())
            .unwrap()
    };
    let ids = |t: Tensor| {
        Vec::<i64>::try_from(&t)
            .unwrap()
            .into_iter()
            .map(|x| x as u32)
            .collect()
    };
    let logits = get("logits");
    let rows = (0..logits.size()[0])
        .map(|i| Vec::<f32>::try_from(&logits.get(i)).unwrap())
        .collect();
    Reference {
        prompt: ids(get("prompt_ids")),
        tokens: ids(get("tokens")),
        logits: rows,
    }
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy decoding with our runner, one request, returning each step's logits.
fn ours(model: &Path, prompt: &[u32]) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut opts = TchRunnerOptions::new(model);
    opts.kv_budget = KvBudget::Tokens(256);
    let mut runner = TchRunner::load(&opts).unwrap();
    runner.kv().admit(1, prompt).unwrap();
    let mut batch = StepBatch {
        entropy_items: vec![],
        items: vec![StepItem {
            rid: 1,
            start: 0,
            tokens: prompt.to_vec(),
        }],
    };
    let (mut tokens, mut logits) = (Vec::new(), Vec::new());
    for _ in 0..STEPS {
        let row = runner
            .forward(&batch)
            .unwrap()
            .logits_rows()
            .unwrap()
            .remove(0);
        let next = argmax(&row);
        let item = &mut batch.items[0];
        item.start += item.tokens.len();
        item.tokens = vec![next];
        tokens.push(next);
        logits.push(row);
    }
    (tokens, logits)
}

fn max_rel_err(ours: &[f32], theirs: &[f32]) -> f64 {
    // A row cut short would otherwise compare only its common prefix.
    assert_eq!(ours.len(), theirs.len(), "logit rows differ in length");
    let scale = theirs.iter().fold(0f64, |m, &x| m.max((x as f64).abs()));
    let diff = ours
        .iter()
        .zip(theirs)
        .fold(0f64, |m, (&a, &b)| m.max((a as f64 - b as f64).abs()));
    diff / scale.max(1e-30)
}

fn check(model_name: &str) {
    let model = common::model_dir(model_name);
    let r = reference(&model);
    assert_eq!(r.prompt.len(), PROMPT_TOKENS);
    let (tokens, logits) = ours(&model, &r.prompt);
    // zip stops at the shorter side: both must hold every step.
    assert_eq!(logits.len(), STEPS, "{model_name}: our logit rows");
    assert_eq!(
        r.logits.len(),
        STEPS,
        "{model_name}: transformers' logit rows"
    );
    let worst = logits
        .iter()
        .zip(&r.logits)
        .map(|(a, b)| max_rel_err(a, b))
        .fold(0f64, f64::max);
    eprintln!("{model_name}: worst relative logit error over {STEPS} steps = {worst:.3e}");
    assert!(
        worst <= MAX_REL_ERR,
        "{model_name}: relative error {worst:.3e} > {MAX_REL_ERR:e}"
    );
    assert_eq!(
        tokens, r.tokens,
        "{model_name}: greedy tokens differ from transformers"
    );
}

#[test]
fn qwen3_tiny_matches_transformers() {
    check("qwen3-tiny");
}

#[test]
fn smollm2_matches_transformers() {
    check("smollm2-135m");
}
