//! `tokenrouter generate` (placeholder).

/// `generate` arguments.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {}

pub fn run(_a: GenerateArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
