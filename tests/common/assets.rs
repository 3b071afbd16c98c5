//! Shared by the `assets_*` integration tests: locating the cached assets and
//! the Python interpreter, and running `tests/python/assets_check.py`.
//! A missing asset fails the test with a pointer to `make test`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `TOKENROUTER_CACHE`, else the nearest `.cache/` above this package.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOKENROUTER_CACHE") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join(".cache"))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no .cache/ above {}: set TOKENROUTER_CACHE or run `make test`",
                env!("CARGO_MANIFEST_DIR")
            )
        })
}

/// A file or directory under the cache that must exist.
pub fn asset(rel: &str) -> PathBuf {
    let path = cache_dir().join(rel);
    assert!(
        path.exists(),
        "missing test asset {}: run `make test` to fetch it",
        path.display()
    );
    path
}

/// The real Qwen3 tokenizer directory.
pub fn qwen3_tokenizer_dir() -> PathBuf {
    asset("assets/qwen3-tokenizer")
}

/// `TOKENROUTER_PYTHON`, else the cache's venv.
pub fn python() -> PathBuf {
    let path = std::env::var_os("TOKENROUTER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("venv/bin/python"));
    assert!(
        path.exists(),
        "missing Python interpreter {}: run `make test` to create the venv",
        path.display()
    );
    path
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
