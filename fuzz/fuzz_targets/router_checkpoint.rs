#![no_main]

use std::sync::OnceLock;

/// One scratch directory per fuzzing process (the entry point rewrites
/// its files on every input).
fn scratch() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a scratch directory"))
        .path()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    subserver::fuzz_entry::router_checkpoint(data, scratch());
});
