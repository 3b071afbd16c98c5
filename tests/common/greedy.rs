//! Greedy answers of one runner to held-out chat prompts, decoded in one
//! ragged batch, and how far two runs' answers agree: the parity tests'
//! shared measure (bf16 against f32, GGUF blocks against dequantized).

use std::path::Path;

use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::{ModelRunner, StepBatch, StepItem};
use subserver::tokenizer::{ChatMessage, ChatTemplate, TextTokenizer};

/// One prompt's greedy answer: its tokens and the logits row each was chosen from.
pub type Answer = (Vec<u32>, Vec<Vec<f32>>);

/// The first `n` questions of `data/eval/math30.jsonl` (held out: never
/// used to tune anything), as chat prompts in `model`'s template.
pub fn math_prompts(model: &Path, n: usize) -> Vec<Vec<u32>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/eval/math30.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let tok = TextTokenizer::from_dir(model).unwrap();
    let template = ChatTemplate::from_dir(model).unwrap();
    text.lines()
        .take(n)
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let q = v["question"].as_str().unwrap();
            let chat = template
                .render(
                    &[ChatMessage::new("user", q)],
                    true,
                    &serde_json::Map::new(),
                )
                .unwrap();
            tok.encode(&chat, false).unwrap()
        })
        .collect()
}

/// The first index of the largest logit.
pub fn argmax(row: &[f32]) -> u32 {
    (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as u32
}

/// `steps` greedy tokens for every prompt from the runner `opts` loads
/// (its KV budget and prefix cache set here), and that runner's precision.
pub fn greedy(
    mut opts: TchRunnerOptions,
    prompts: &[Vec<u32>],
    steps: usize,
) -> (Vec<Answer>, String) {
    opts.kv_budget = KvBudget::Tokens(prompts.len() * 256);
    opts.enable_prefix_cache = false;
    let mut r = TchRunner::load(&opts).unwrap();
    let precision = r.decoder().precision().to_string();
    let mut items: Vec<StepItem> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            r.kv().admit(i as u64, p).unwrap();
            StepItem {
                rid: i as u64,
                start: 0,
                tokens: p.clone(),
            }
        })
        .collect();
    let mut out = vec![(Vec::new(), Vec::new()); prompts.len()];
    for _ in 0..steps {
        let rows = r
            .forward(&StepBatch::new(items.clone()))
            .unwrap()
            .logits_rows()
            .unwrap();
        for ((item, row), (toks, logits)) in items.iter_mut().zip(rows).zip(&mut out) {
            let t = argmax(&row);
            item.start += item.tokens.len();
            item.tokens = vec![t];
            toks.push(t);
            logits.push(row);
        }
    }
    (out, precision)
}

/// How far two runs' answers agree: tokens before each answer's first
/// divergence (summed), all tokens, and the largest logit difference over
/// the shared steps (the row that picks the first differing token
/// included: logits are comparable while both answers share their prefix).
pub fn agreement(a: &[Answer], b: &[Answer], steps: usize) -> (usize, usize, f32) {
    let (mut shared, mut total, mut max_diff) = (0usize, 0usize, 0f32);
    for (i, ((ta, la), (tb, lb))) in a.iter().zip(b).enumerate() {
        let same = ta.iter().zip(tb).take_while(|(x, y)| x == y).count();
        for (ra, rb) in la.iter().zip(lb).take((same + 1).min(steps)) {
            let d = ra
                .iter()
                .zip(rb)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            max_diff = max_diff.max(d);
        }
        println!("prompt {i}: {same}/{steps} tokens before the first divergence");
        shared += same;
        total += ta.len();
    }
    (shared, total, max_diff)
}
