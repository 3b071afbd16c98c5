//! Build script: links libtorch (RUNPATH set to the configured libtorch).

include!("../subserver/libtorch_link.rs");

fn main() {
    libtorch_link::emit();
}
