//! Where the prepared test assets are (the one home of these lookups for
//! every test crate): the cache directory, the reference Python
//! interpreter, and files under the cache that must exist. A missing one
//! fails the test with a pointer to `make test`.

use std::path::{Path, PathBuf};

/// `$TOKENROUTER_CACHE`, else the nearest `.cache/` above this crate (the
/// workspace's, which `make test` prepares).
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

/// A prepared model directory (`models/<name>` with its `config.json`).
pub fn model_dir(name: &str) -> PathBuf {
    let dir = cache_dir().join("models").join(name);
    assert!(
        dir.join("config.json").exists(),
        "model {} is missing: run `make test` (it prepares the assets)",
        dir.display()
    );
    dir
}

/// The reference Python interpreter (transformers installed):
/// `$TOKENROUTER_PYTHON`, else the cache's venv.
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
