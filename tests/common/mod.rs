//! Shared helpers of the end-to-end tests: where the prepared assets are.

#![allow(dead_code)]

use std::path::PathBuf;

/// `$TOKENROUTER_CACHE`, else the workspace's `.cache/` (what `make test` prepares).
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOKENROUTER_CACHE") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache")
}

/// A prepared model directory; panics with the fix when it is missing.
pub fn model_dir(name: &str) -> PathBuf {
    let dir = cache_dir().join("models").join(name);
    assert!(
        dir.join("config.json").exists(),
        "model {} is missing: run `make test` (it prepares the assets)",
        dir.display()
    );
    dir
}

/// The reference Python interpreter (transformers installed).
pub fn python() -> PathBuf {
    let py = std::env::var_os("TOKENROUTER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("venv/bin/python"));
    assert!(py.exists(), "{} is missing: run `make test`", py.display());
    py
}

/// A script under tests/python.
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
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
