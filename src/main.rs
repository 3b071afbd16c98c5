//! `tokenrouter`: one binary, one subcommand per job. Argument parsing only;
//! the work lives in the crates.

mod cli;

use clap::{Parser, Subcommand};

/// Token-level LLM routing: several models that share a tokenizer write one answer.
#[derive(Parser)]
#[command(name = "tokenrouter", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI API: the gateway and every subserver in one process.
    Serve(cli::serve::ServeArgs),
    /// Serve the OpenAI API in front of remote groups (reloads the group list).
    Gateway(gateway::cli::GatewayArgs),
    /// Generate one completion from one model (the smallest end-to-end check of the runtime).
    Generate(cli::generate::GenerateArgs),
    /// Convert a GGUF file into a Hugging Face model directory.
    ImportGguf(cli::assets::ImportGgufArgs),
    /// Derive a smaller partner model: the first K layers, the final norm and the head.
    DeriveEarlyExit(cli::assets::DeriveEarlyExitArgs),
    /// Write a random-weight checkpoint of a Qwen3 preset with the real Qwen3 tokenizer.
    GenRandom(cli::assets::GenRandomArgs),
    /// Convert a torch.save router checkpoint (R2R, CITER) into the directory the policies load.
    ConvertRouter(cli::router::ConvertRouterArgs),
    /// Measure the routed runtime on the simulated backend (JSON for scripts).
    SimBench(cli::sim_bench::SimBenchArgs),
    /// Serve one model of a group in this process (TCP to the other models).
    Subserver(cli::subserver::SubserverArgs),
    /// The Std. Serving baseline: single-model servers and a one-token-per-call forwarder.
    StdServing(cli::std_serving::StdServingArgs),
    /// Pick delayed-batching thresholds with the Markov-chain model.
    Tune(tuner::cli::TuneArgs),
    /// Closed-loop load generator against any OpenAI-compatible URL.
    Bench(loadgen::cli::bench::BenchArgs),
    /// Math accuracy of any OpenAI-compatible URL (boxed or final-number answers).
    Eval(loadgen::cli::eval::EvalArgs),
    /// Write a results page from `bench` folders and `eval` results.
    Report(loadgen::cli::report::ReportArgs),
}

fn main() -> std::process::ExitCode {
    logging::init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => cli::serve::run(args),
        Command::Gateway(args) => gateway::cli::run(args),
        Command::Generate(args) => cli::generate::run(args),
        Command::ImportGguf(args) => cli::assets::run_import_gguf(args),
        Command::DeriveEarlyExit(args) => cli::assets::run_derive_early_exit(args),
        Command::GenRandom(args) => cli::assets::run_gen_random(args),
        Command::ConvertRouter(args) => cli::router::run(args),
        Command::SimBench(args) => cli::sim_bench::run(args),
        Command::Subserver(args) => cli::subserver::run(args),
        Command::StdServing(args) => cli::std_serving::run(args),
        Command::Tune(args) => tuner::cli::run(args).map_err(anyhow::Error::from),
        Command::Bench(args) => loadgen::cli::bench::run_cli(args),
        Command::Eval(args) => loadgen::cli::eval::run_cli(args),
        Command::Report(args) => loadgen::cli::report::run_cli(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cli::report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
