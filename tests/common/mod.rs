//! Shared helpers of the end-to-end tests (the root crate's; where the
//! prepared assets are comes from the `test-support` crate, re-exported).

#![allow(dead_code)]

use std::path::PathBuf;

pub mod assets;
pub mod greedy;
pub mod heldout;
pub mod router_eval;

pub use test_support::{cache_dir, model_dir, python};

/// A script under tests/python.
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// Runs the tests/python script `name` with `args` in the reference venv;
/// panics with its stderr unless it succeeds, else returns its stdout.
pub fn run_script<S: AsRef<std::ffi::OsStr>>(name: &str, args: &[S]) -> Vec<u8> {
    let out = std::process::Command::new(python())
        .arg(script(name))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The release binary built by `make build`/cargo for these tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tokenrouter"))
}

/// Reads one request's events to its end: (tokens, writers, usage). Panics
/// on a failed request or a stream that ends without an outcome.
pub fn collect_stream(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<subserver::scheduler::client::StreamEvent>,
) -> (Vec<u32>, Vec<u16>, subserver::scheduler::client::Usage) {
    use subserver::scheduler::client::StreamEvent;
    let (mut toks, mut writers) = (vec![], vec![]);
    loop {
        match rx.blocking_recv().expect("stream ended early") {
            StreamEvent::Token { token, writer, .. } => {
                toks.push(token);
                writers.push(writer);
            }
            StreamEvent::Finished { usage, .. } => return (toks, writers, usage),
            StreamEvent::Failed(e) => panic!("request failed: {e}"),
        }
    }
}

/// Checks one request's accounting: every output token has exactly one
/// writer, and the per-model counts match the writers streamed.
pub fn check_accounting(
    toks: &[u32],
    writers: &[u16],
    usage: &subserver::scheduler::client::Usage,
) {
    assert_eq!(usage.completion_tokens, toks.len());
    assert_eq!(writers.len(), toks.len());
    assert_eq!(usage.tokens_by_model.iter().sum::<usize>(), toks.len());
    for (m, &n) in usage.tokens_by_model.iter().enumerate() {
        assert_eq!(n, writers.iter().filter(|&&w| w as usize == m).count());
    }
}

/// An in-process group of `runners` (entry first) under `policy`, with the
/// default settings and a long peer timeout (CPU models are slow).
pub fn policy_group(
    runners: Vec<(String, subserver::runner::tch_runner::TchRunner)>,
    policy: &str,
    kwargs: &serde_json::Value,
) -> subserver::scheduler::group::Group {
    use subserver::policy::{build, Placement};
    use subserver::scheduler::group::{Group, GroupSettings, MemberSpec};
    let n = runners.len();
    let members = runners
        .into_iter()
        .enumerate()
        .map(|(m, (name, runner))| MemberSpec {
            name,
            runner: Box::new(runner),
            policy: build(
                policy,
                kwargs,
                Placement {
                    model: m as u16,
                    num_models: n,
                    entry: 0,
                },
            )
            .unwrap(),
            tokenizer: None,
            thresholds: vec![1],
        })
        .collect();
    Group::start(
        members,
        GroupSettings {
            peer_timeout: std::time::Duration::from_secs(120),
            ..GroupSettings::default()
        },
    )
}

/// Greedy runs of `prompts` (all submitted at once) through a group:
/// (tokens, writers, usage) per prompt.
pub fn greedy_routed(
    g: &subserver::scheduler::group::Group,
    prompts: Vec<Vec<u32>>,
    n: usize,
) -> Vec<(Vec<u32>, Vec<u16>, subserver::scheduler::client::Usage)> {
    let rxs: Vec<_> = prompts
        .into_iter()
        .map(|p| {
            g.submit(p, subserver::sampling::SamplingParams::greedy(n))
                .1
        })
        .collect();
    rxs.into_iter()
        .map(|mut rx| collect_stream(&mut rx))
        .collect()
}

/// Greedy runs of `prompts` with one model alone (the single-model engine).
pub fn greedy_alone(
    runner: subserver::runner::tch_runner::TchRunner,
    prompts: Vec<Vec<u32>>,
    n: usize,
) -> Vec<Vec<u32>> {
    use subserver::engine::{BatchEngine, EngineLimits};
    let mut e = BatchEngine::new(runner, EngineLimits::default());
    for (i, p) in prompts.into_iter().enumerate() {
        e.add(i as u64, p, &subserver::sampling::SamplingParams::greedy(n))
            .unwrap();
    }
    e.run_to_completion()
        .unwrap()
        .into_iter()
        .map(|c| c.tokens)
        .collect()
}

/// How one request ended (its tokens skipped); a hang guard only catches a
/// request that never ends.
pub fn finish(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<subserver::scheduler::client::StreamEvent>,
) -> Result<subserver::scheduler::client::Usage, subserver::scheduler::client::RequestError> {
    use subserver::scheduler::client::StreamEvent;
    loop {
        match test_support::stream::recv(rx, "a request ended") {
            Some(StreamEvent::Finished { usage, .. }) => return Ok(usage),
            Some(StreamEvent::Failed(e)) => return Err(e),
            Some(StreamEvent::Token { .. }) => {}
            None => panic!("stream ended without an outcome"),
        }
    }
}

/// `questions` as user turns under `model`'s chat template, as token ids.
pub fn chat_prompts(model: &str, questions: &[&str]) -> Vec<Vec<u32>> {
    use subserver::tokenizer::{ChatMessage, ChatTemplate, TextTokenizer};
    let dir = model_dir(model);
    let template = ChatTemplate::from_dir(&dir).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir).unwrap();
    questions
        .iter()
        .map(|q| {
            let messages = [ChatMessage::new("user", *q)];
            let text = template
                .render(&messages, true, &serde_json::Map::new())
                .unwrap();
            tokenizer.encode(&text, false).unwrap()
        })
        .collect()
}
