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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match operator::cli::run(Cli::parse().args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
