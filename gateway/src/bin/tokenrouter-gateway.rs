//! `tokenrouter-gateway`: the OpenAI gateway in front of remote groups, the
//! same as `tokenrouter gateway`. Built with `--no-default-features` it
//! links no libtorch (the gateway pod's image).

use clap::Parser;
use gateway::cli::GatewayArgs;

/// Serves the OpenAI API in front of remote groups (reloads the group list).
#[derive(Parser, Debug)]
#[command(name = "tokenrouter-gateway", version, about)]
struct Cli {
    #[command(flatten)]
    args: GatewayArgs,
}

fn main() -> std::process::ExitCode {
    logging::init();
    match gateway::cli::run(Cli::parse().args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
