include!("../subserver/libtorch_link.rs");

fn main() {
    libtorch_link::emit();
}
