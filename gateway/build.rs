//! Build script: links libtorch (RUNPATH set to the configured libtorch)
//! when the `inproc` feature brings the engine in; without it the gateway
//! links no libtorch at all.

include!("../subserver/libtorch_link.rs");

fn main() {
    if std::env::var_os("CARGO_FEATURE_INPROC").is_some() {
        libtorch_link::emit();
    }
}
