//! Text-aware and query-level policies end to end on the real SmolLM2 pair
//! (12-layer early exit as `quick`, the full 30 layers as `reference`),
//! built from YAML exactly as `serve` builds them.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;

use subserver::config::EngineConfig;
use subserver::sampling::SamplingParams;
use subserver::scheduler::client::{SubmitOptions, Usage};
use subserver::service::Service;

fn service(policy: &str, kwargs: &str) -> Service {
    service_with(policy, kwargs, "")
}

/// [`service`] with `extra` YAML lines (e.g. `target_large_share: 0.5\n`).
fn service_with(policy: &str, kwargs: &str, extra: &str) -> Service {
    let yaml = format!(
        "model:\n  quick: {{path: {}}}\n  reference: {{path: {}}}\n\
         system: {{entry_model: quick, kv_cache_tokens: 4096}}\n\
         scheduler_class: {policy}\nscheduler_kwargs: {kwargs}\nbackend: tch\ndevice: cpu\n{extra}",
        common::model_dir("smollm2-135m-l12").display(),
        common::model_dir("smollm2-135m").display(),
    );
    let cfg = EngineConfig::from_yaml_str(&yaml, Path::new(".")).unwrap();
    Service::start(&cfg, None).unwrap()
}

/// A chat-formatted prompt asking for a list (SmolLM2 writes "\n\n"-separated steps).
fn prompt(text: &str) -> Vec<u32> {
    let tok =
        subserver::tokenizer::TextTokenizer::from_dir(common::model_dir("smollm2-135m")).unwrap();
    let chat = format!("<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n");
    tok.encode(&chat, false).unwrap()
}

/// Greedy run: (tokens, writers, usage).
fn run(svc: &Service, prompt: Vec<u32>, n: usize, pin: Option<u16>) -> (Vec<u32>, Vec<u16>, Usage) {
    let (_, mut rx) =
        svc.group()
            .submit_with(prompt, SamplingParams::greedy(n), SubmitOptions { pin });
    common::collect_stream(&mut rx)
}

#[test]
fn query_level_pins_by_model_length_and_prompt_entropy() {
    // Pinning by the request's model field: one writer, and the same tokens
    // as that model gives alone under an always-small classifier.
    let svc = service("QueryLevel", "{}");
    let p = prompt("Name three primary colors.");
    let (small_toks, w, u) = run(&svc, p.clone(), 20, None);
    assert!(w.iter().all(|&w| w == 0));
    common::check_accounting(&small_toks, &w, &u);
    let (large_toks, w, u) = run(&svc, p.clone(), 20, Some(1));
    assert!(w.iter().all(|&w| w == 1), "{w:?}");
    common::check_accounting(&large_toks, &w, &u);
    assert_ne!(small_toks, large_toks, "the two models should differ here");
    let (again, _, _) = run(&svc, p.clone(), 20, Some(1));
    assert_eq!(again, large_toks, "greedy runs repeat");
    drop(svc);

    // Prompt length classifier.
    let svc = service("QueryLevel", "{always_large_above_prompt_tokens: 12}");
    let (toks, w, _) = run(&svc, p.clone(), 20, None);
    assert!(p.len() > 12);
    assert!(w.iter().all(|&w| w == 1));
    assert_eq!(toks, large_toks);
    drop(svc);

    // Mean prompt entropy: 0 sends everything large, 1 keeps everything small.
    for (threshold, writer, expected) in [(0.0, 1u16, &large_toks), (1.0, 0, &small_toks)] {
        let svc = service("QueryLevel", &format!("{{entropy_threshold: {threshold}}}"));
        let (toks, w, u) = run(&svc, p.clone(), 20, None);
        assert!(
            w.iter().all(|&x| x == writer),
            "threshold {threshold}: {w:?}"
        );
        assert_eq!(&toks, expected, "threshold {threshold}");
        common::check_accounting(&toks, &w, &u);
    }
}

#[test]
fn target_large_share_steers_the_query_level_entropy_threshold() {
    // The prompt-entropy classifier's threshold is a knob like any other.
    // Started where every query stays small (τ = 1), a high target must
    // lower it; started where every query goes large (τ = 0), a near-zero
    // target must raise it: live, from the shares the entry commits.
    let questions = [
        "Name three primary colors.",
        "What is 7 + 5?",
        "Spell the word cat backwards.",
        "Write one sentence about the sea.",
    ];
    for (start, target) in [(1.0, 0.95), (0.0, 0.01)] {
        let svc = service_with(
            "QueryLevel",
            &format!("{{entropy_threshold: {start}}}"),
            &format!("target_large_share: {target}\n"),
        );
        for q in questions {
            // 40 tokens each (EOS ignored): five control windows in all.
            let params = SamplingParams {
                ignore_eos: true,
                ..SamplingParams::greedy(40)
            };
            let (_, mut rx) =
                svc.group()
                    .submit_with(prompt(q), params, SubmitOptions { pin: None });
            let (toks, w, u) = common::collect_stream(&mut rx);
            common::check_accounting(&toks, &w, &u);
            // Query-level: one writer per request.
            assert!(w.iter().all(|&x| x == w[0]), "{q}: {w:?}");
        }
        let t = svc.group().stats(0).routing_threshold.expect("steered");
        let moved = if start == 1.0 { t < start } else { t > start };
        assert!(moved, "target {target} from τ = {start}: threshold {t}");
    }
}

#[test]
fn glimp_router_hands_whole_steps_to_the_large_model() {
    let svc = service("GlimpRouter", "{threshold: 0.0}");
    let p = prompt("Write two short paragraphs about the sea.");
    let (toks, w, u) = run(&svc, p.clone(), 60, None);
    common::check_accounting(&toks, &w, &u);
    // Threshold 0: every step start is uncertain, so the large model writes
    // every step, i.e. every token, exactly as it would alone.
    assert!(w.iter().all(|&x| x == 1), "{w:?}");
    let large = service("QueryLevel", "{}");
    let (alone, _, _) = run(&large, p.clone(), 60, Some(1));
    drop(large);
    assert_eq!(toks, alone);
    drop(svc);

    // Threshold 1: no glimpse is ever uncertain enough: all small.
    let svc = service("GlimpRouter", "{threshold: 1.0}");
    let (_, w, _) = run(&svc, p.clone(), 60, None);
    assert!(w.iter().all(|&x| x == 0));
    drop(svc);

    // In between, writers change only at step boundaries: every switch to
    // the large model happens at the answer's start or right after "\n\n".
    let svc = service("GlimpRouter", "{threshold: 0.05}");
    let (toks, w, u) = run(&svc, p, 80, None);
    common::check_accounting(&toks, &w, &u);
    let tok =
        subserver::tokenizer::TextTokenizer::from_dir(common::model_dir("smollm2-135m")).unwrap();
    for i in 1..w.len() {
        if w[i] == 1 && w[i - 1] == 0 {
            let before = tok.decode(&toks[..i], false).unwrap();
            assert!(before.ends_with("\n\n"), "switch at {i} after {before:?}");
        }
    }
}
