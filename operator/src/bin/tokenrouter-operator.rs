//! `tokenrouter-operator`: the Kubernetes controller for
//! `TokenRouterDeployment` (see the README's Kubernetes section).

use clap::Parser;
use operator::cli::OperatorArgs;

/// Reconciles TokenRouterDeployments into serving groups and a gateway.
#[derive(Parser, Debug)]
#[command(name = "tokenrouter-operator", version, about)]
struct Cli {
    #[command(flatten)]
    args: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    logging::init();
    match operator::cli::run(Cli::parse().args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
