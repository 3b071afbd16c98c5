//! For the `assets_*` integration tests: the cached assets they check and
//! running `tests/python/assets_check.py` (the lookups themselves live in
//! the `test-support` crate). A missing asset fails the test with a pointer
//! to `make test`.

use std::path::{Path, PathBuf};
use std::process::Command;

pub use test_support::{asset, python};

/// The real Qwen3 tokenizer directory.
pub fn qwen3_tokenizer_dir() -> PathBuf {
    asset("assets/qwen3-tokenizer")
}

/// Runs `assets_check.py <args>`; fails the test with its stderr unless it
/// succeeds, and returns the JSON object on its last stdout line.
pub fn check_py(args: &[&dyn AsRef<std::ffi::OsStr>]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/assets_check.py");
    let mut cmd = Command::new(python());
    cmd.arg(&script).env("TOKENIZERS_PARALLELISM", "false");
    for a in args {
        cmd.arg(a);
    }
    let out = cmd.output().expect("spawn python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "assets_check.py failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    let last = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output; stderr:\n{stderr}"));
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("bad JSON from assets_check.py ({e}): {last}"))
}
