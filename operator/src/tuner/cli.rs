//! `tokenrouter tune` (placeholder until the tuner lands).

/// Arguments of `tokenrouter tune`.
#[derive(Debug, clap::Args)]
pub struct TuneArgs {}

/// Error of the tune command.
#[derive(Debug, thiserror::Error)]
#[error("tune is not implemented yet")]
pub struct TuneError;

/// Runs the tune command.
pub fn run(_args: TuneArgs) -> Result<(), TuneError> {
    Err(TuneError)
}
