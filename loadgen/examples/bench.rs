//! `tokenrouter bench` without the rest of tokenrouter (no libtorch): the
//! same load generator, for driving a server from a machine that only has
//! the Rust toolchain (`cargo run --release -p loadgen --example bench --
//! --url http://... --dataset ...`).

use clap::Parser;

/// The arguments of `tokenrouter bench`.
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "Closed-loop load generator for OpenAI-compatible servers"
)]
struct Cli {
    #[command(flatten)]
    args: loadgen::cli::bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    loadgen::cli::bench::run_cli(Cli::parse().args)
}
