//! Locating the shared test assets (`.cache/`) from unit tests.

use std::path::PathBuf;

/// `$TOKENROUTER_CACHE`, else the first `.cache/` found walking up from this
/// crate. Panics (tests only) with the fix when it is missing.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOKENROUTER_CACHE") {
        return PathBuf::from(dir);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|d| d.join(".cache"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no .cache/ above {} and TOKENROUTER_CACHE unset: run `make test` (it fetches the test assets)",
                manifest.display()
            )
        })
}

/// The real Qwen3 tokenizer directory; panics with the fix if absent.
pub fn qwen3_tokenizer_dir() -> PathBuf {
    let dir = cache_dir().join("assets/qwen3-tokenizer");
    assert!(
        dir.join("tokenizer.json").is_file(),
        "missing test asset {}: run `make test` (it fetches the test assets)",
        dir.join("tokenizer.json").display()
    );
    dir
}
