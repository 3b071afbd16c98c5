//! Build script: links libtorch (RUNPATH set to the configured libtorch)
//! when the `tch` feature brings the weights loader in; without it this
//! crate links no libtorch at all.

include!("../subserver/libtorch_link.rs");

fn main() {
    if std::env::var_os("CARGO_FEATURE_TCH").is_some() {
        libtorch_link::emit();
    }
}
