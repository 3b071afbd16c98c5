//! The Qwen2.5-Coder pair (config/coder.yaml) on the real GGUFs, against
//! transformers loading the same files (`tests/python/qwen_pair_ref.py`):
//! the tokenizer on 220 texts, f32 logits on 5 prompts per model, the
//! group's one-tokenizer check, and two answers of the 1.5B member.
//! A missing GGUF or model folder fails (`make test` prepares them).
//!
//! Time on this project's 2-core CPU machine (shared with other builds
//! when measured): about 12 minutes (tokenizer 40 s, 0.5B logits 3.6 min,
//! 1.5B logits and the two answers 8 min), most of it the f32 forwards of
//! each model, ours and transformers', run one after the other (the 1.5B
//! in f32 is ~6 GB on each side).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use subserver::config::EngineConfig;
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::{ModelRunner, StepBatch, StepItem};
use subserver::tokenizer::TextTokenizer;
use tch::Tensor;

const SMALL: &str = "qwen2.5-coder-0.5b";
const LARGE: &str = "qwen2.5-coder-1.5b";
const SMALL_GGUF: &str = "assets/qwen2.5-coder-0.5b-instruct.gguf";
const LARGE_GGUF: &str = "assets/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

/// Largest |our logit − transformers' logit| allowed. Both sides run f32 on
/// the same dequantized values (our dequantization follows ggml's, as
/// gguf-py's does, bit for bit), so only the order of f32 sums differs
/// (our GEMM and attention against torch's eager ones). Through 24–28
/// layers of 896–8960-wide dot products that stays far below a hundredth
/// on logits of magnitude ~10–40 (1.3e-4 on the 1.5B when this was
/// written); 2e-2 leaves room for other CPUs' kernels and still fails on
/// any real error (a wrong bias, a missing norm or a rotary mistake moves
/// logits by whole units).
const MAX_ABS_LOGIT_DIFF: f64 = 2e-2;

/// Runs `qwen_pair_ref.py` with `args`; fails the test with its stderr.
fn reference(args: &[&std::ffi::OsStr]) {
    let out = Command::new(common::python())
        .arg(common::script("qwen_pair_ref.py"))
        .args(args)
        .env("TOKENIZERS_PARALLELISM", "false")
        .output()
        .expect("run qwen_pair_ref.py");
    assert!(
        out.status.success(),
        "qwen_pair_ref.py {:?} failed:\n{}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The GGUF alone in a folder of its own: transformers, given a folder
/// holding a tokenizer.json, would read that file instead of the GGUF's
/// tokenizer (and ours is what is under test).
fn lone_gguf(rel: &str) -> (tempfile::TempDir, PathBuf) {
    let src = std::fs::canonicalize(common::assets::asset(rel)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join(src.file_name().unwrap());
    std::os::unix::fs::symlink(&src, &link).unwrap();
    (dir, link)
}

/// 220 texts, made the same way every run: 20 fragments (code with tabs
/// and runs of spaces, digits, CJK, emoji, accented Latin, Cyrillic,
/// contractions, CRLF, ChatML special tokens inside text) alone and in
/// every other ordered pair, joined by separators that change the splits.
fn corpus() -> Vec<String> {
    let fragments = [
        "def add(a, b):\n\treturn a + b\n",
        "    if  x  ==  y:\n        pass    # four  spaces",
        "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
        "1234567890 3.14159 -0.5e10 0x1F 1_000_000",
        "你好，世界！这是一个测试。",
        "日本語のテキストと한국어 텍스트",
        "emoji 🦀🚀 and 👨\u{200d}👩\u{200d}👧 family ✅",
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "end<|endoftext|>start",
        "   leading and trailing spaces   ",
        "\n\n\nnewlines\r\nCRLF\r\n\r\n",
        "Don't stop: it's we'll they've I'm you'd HE'LL",
        "Àéîõü ñ ç ß Ωμέγα Привет мир",
        "tabs\t\there\t\t\tand\tthere",
        "x=[1,2,3];y={'k':v**2}//7",
        "https://example.com/path?q=1&r=2#frag",
        "SELECT name, COUNT(*) FROM users WHERE id > 7 GROUP BY name;",
        "fn main() { let v: Vec<u32> = (0..10).collect(); }",
        "    \n    \n\t\n",
        "Qwen2.5-Coder-1.5B: 28 layers, 12 heads, 2 KV heads!!!",
    ];
    let seps = ["", " ", "\n", "\t", "  ", "\n\n    "];
    let n = fragments.len();
    let mut texts: Vec<String> = fragments.iter().map(|f| f.to_string()).collect();
    for i in 0..n {
        for j in 0..n {
            if (i * n + j).is_multiple_of(2) {
                let sep = seps[(i * 7 + j) % seps.len()];
                texts.push(format!("{}{sep}{}", fragments[i], fragments[j]));
            }
        }
    }
    texts
}

#[test]
fn tokenizer_matches_transformers_gguf_tokenizer() {
    let ours = TextTokenizer::from_dir(common::model_dir(SMALL)).unwrap();
    let large = TextTokenizer::from_dir(common::model_dir(LARGE)).unwrap();
    assert_eq!(ours.difference(&large), None, "the pair's tokenizers");
    assert_eq!(ours.vocab_size(), 151_936);

    let texts = corpus();
    assert!(texts.len() >= 200);
    let tmp = tempfile::tempdir().unwrap();
    let texts_file = tmp.path().join("texts.json");
    std::fs::write(&texts_file, serde_json::to_string(&texts).unwrap()).unwrap();
    let out = tmp.path().join("ids.json");
    let (_keep, gguf) = lone_gguf(SMALL_GGUF);
    reference(&[
        "tokens".as_ref(),
        gguf.as_os_str(),
        texts_file.as_os_str(),
        out.as_os_str(),
    ]);
    let theirs: Vec<Vec<u32>> =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(theirs.len(), texts.len());
    for (text, want) in texts.iter().zip(&theirs) {
        let ids = ours.encode(text, false).unwrap();
        assert_eq!(&ids, want, "ids of {text:?}");
        assert_eq!(
            &ours.decode(&ids, false).unwrap(),
            text,
            "decode of {text:?}"
        );
    }
    // Each control and user-defined token of the GGUF (FIM, tool calls, ...)
    // is one token inside text, as in the model's own tokenizer.json and in
    // llama.cpp. transformers' GGUF converter knows only three of them, so
    // these are checked against the GGUF's ids, not against it.
    for (id, tok) in [
        (151_659, "<|fim_prefix|>"),
        (151_661, "<|fim_suffix|>"),
        (151_664, "<|file_sep|>"),
        (151_657, "<tool_call>"),
    ] {
        let ids = ours.encode(&format!("a{tok}b"), false).unwrap();
        assert_eq!(ids.len(), 3, "{tok}: {ids:?}");
        assert_eq!(ids[1], id, "{tok}");
    }
    // Skipping special tokens drops <|im_end|>, keeps <tool_call> (not special).
    let ids = ours.encode("<tool_call>x<|im_end|>", false).unwrap();
    assert_eq!(ours.decode(&ids, true).unwrap(), "<tool_call>x");
}

/// Five chat prompts as ids (our tokenizer; both sides get the same ids).
fn prompts(tok: &TextTokenizer) -> Vec<Vec<u32>> {
    [
        "What is the capital of France?",
        "Write a Python function that reverses a string.",
        "Explain what a hash map is in one sentence.",
        "def fib(n):\n    # complete this",
        "用一句话解释递归。",
    ]
    .iter()
    .map(|q| {
        let text = format!(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
        );
        tok.encode(&text, false).unwrap()
    })
    .collect()
}

/// Our f32 logits at every position of each prompt: all prompts decoded
/// together, one token per step, so each step's row is one position's.
fn our_logits(model: &Path, prompts: &[Vec<u32>]) -> Vec<Vec<Vec<f32>>> {
    let mut opts = TchRunnerOptions::new(model);
    opts.kv_budget = KvBudget::Tokens(1024);
    let mut runner = TchRunner::load(&opts).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        runner.kv().admit(i as u64, p).unwrap();
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap();
    let mut rows: Vec<Vec<Vec<f32>>> = vec![Vec::new(); prompts.len()];
    for pos in 0..longest {
        let live: Vec<usize> = (0..prompts.len())
            .filter(|&i| pos < prompts[i].len())
            .collect();
        let batch = StepBatch {
            entropy_items: vec![],
            items: live
                .iter()
                .map(|&i| StepItem {
                    rid: i as u64,
                    start: pos,
                    tokens: vec![prompts[i][pos]],
                })
                .collect(),
        };
        let out = runner.forward(&batch).unwrap().logits_rows().unwrap();
        for (row, &i) in out.into_iter().zip(&live) {
            rows[i].push(row);
        }
    }
    rows
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

fn check_logits(name: &str, gguf_rel: &str) {
    let model = common::model_dir(name);
    let tok = TextTokenizer::from_dir(&model).unwrap();
    let prompts = prompts(&tok);
    let tmp = tempfile::tempdir().unwrap();
    let prompts_file = tmp.path().join("prompts.json");
    std::fs::write(&prompts_file, serde_json::to_string(&prompts).unwrap()).unwrap();
    let out = tmp.path().join("logits.safetensors");
    let (_keep, gguf) = lone_gguf(gguf_rel);
    // transformers first, then ours: never both models in memory at once.
    reference(&[
        "logits".as_ref(),
        gguf.as_os_str(),
        prompts_file.as_os_str(),
        out.as_os_str(),
    ]);
    let named = Tensor::read_safetensors(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    let ours = our_logits(&model, &prompts);
    let mut worst = 0f64;
    for (i, rows) in ours.iter().enumerate() {
        let theirs = &named
            .iter()
            .find(|(k, _)| *k == format!("logits_{i}"))
            .unwrap()
            .1;
        assert_eq!(theirs.size()[0] as usize, rows.len(), "{name} prompt {i}");
        for (pos, row) in rows.iter().enumerate() {
            let want = Vec::<f32>::try_from(&theirs.get(pos as i64)).unwrap();
            assert_eq!(want.len(), row.len(), "{name}: vocabulary width");
            let diff = row
                .iter()
                .zip(&want)
                .fold(0f64, |m, (&a, &b)| m.max((a as f64 - b as f64).abs()));
            worst = worst.max(diff);
            assert_eq!(
                argmax(row),
                argmax(&want),
                "{name} prompt {i} position {pos}: top-1 differs (max diff {diff:.3e})"
            );
        }
    }
    eprintln!("{name}: max abs logit difference over 5 prompts, every position = {worst:.3e}");
    assert!(
        worst <= MAX_ABS_LOGIT_DIFF,
        "{name}: max abs logit difference {worst:.3e} > {MAX_ABS_LOGIT_DIFF:e}"
    );
}

#[test]
fn small_logits_match_transformers_f32() {
    check_logits(SMALL, SMALL_GGUF);
}

#[test]
fn large_logits_match_transformers_f32() {
    check_logits(LARGE, LARGE_GGUF);
}

/// config/coder.yaml as `make run` loads it (paths under the test cache).
fn coder() -> EngineConfig {
    let cfg =
        EngineConfig::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/coder.yaml"))
            .unwrap();
    assert_eq!(cfg.model_names(), [SMALL, LARGE]);
    cfg
}

#[test]
fn the_pair_shares_one_tokenizer_and_a_mixed_group_is_refused() {
    subserver::service::build::check_shared_vocabulary(&coder()).unwrap();
    let yaml = format!(
        "model:\n  quick: {{path: {}}}\n  coder: {{path: {}}}\n\
         system: {{entry_model: quick, kv_cache_tokens: 4096}}\n\
         scheduler_class: RStitch\nscheduler_kwargs: {{threshold: 0.1}}\nbackend: tch\ndevice: cpu\n",
        common::model_dir("smollm2-135m").display(),
        common::model_dir(LARGE).display()
    );
    let mixed = EngineConfig::from_yaml_str(&yaml, Path::new(".")).unwrap();
    let err = subserver::service::build::check_shared_vocabulary(&mixed)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`quick`") && err.contains("`coder`") && err.contains("vocabularies differ"),
        "{err}"
    );
}

/// The 1.5B member's greedy answer to `prompt` (bf16 or f32 as `auto`
/// picks on this CPU, as the group serves it).
fn large_answers(prompt: &str, max_tokens: usize) -> String {
    let cfg = coder();
    let dir = cfg.model(1).unwrap().path.clone().unwrap();
    let out = Command::new(common::binary())
        .args(["generate", "--chat", "--temperature", "0", "--model"])
        .arg(&dir)
        .args(["--max-tokens", &max_tokens.to_string(), "--prompt", prompt])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "generate failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn large_member_answers_paris_and_writes_working_python() {
    let answer = large_answers("What is the capital of France?", 24);
    assert!(answer.contains("Paris"), "{answer}");

    let answer = large_answers(
        "Write a Python function `is_prime(n)` that returns True when the integer n \
         is a prime number and False otherwise. Reply with the code only.",
        200,
    );
    // The code block's body (or the whole answer when it has no fence).
    let code = match answer.split("```").nth(1) {
        Some(block) => block.trim_start_matches("python").to_string(),
        None => answer.clone(),
    };
    let check = "\nprint([n for n in range(-3, 60) if is_prime(n)])\n";
    // coreutils' timeout: a deadline only against a hang (an infinite
    // loop in the answer); 124 is its exit status when it fired.
    let out = Command::new("timeout")
        .arg("30")
        .arg(common::python())
        .args(["-c", &format!("{code}{check}")])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(124), "the function hung:\n{code}");
    assert!(
        out.status.success(),
        "the answer's code failed:\n{code}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59]",
        "answer:\n{answer}"
    );
}
