//! Asset subcommands (placeholder until the assets module lands).

/// `import-gguf` arguments.
#[derive(Debug, clap::Args)]
pub struct ImportGgufArgs {}
/// `derive-early-exit` arguments.
#[derive(Debug, clap::Args)]
pub struct DeriveEarlyExitArgs {}
/// `gen-random` arguments.
#[derive(Debug, clap::Args)]
pub struct GenRandomArgs {}

pub fn run_import_gguf(_a: ImportGgufArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
pub fn run_derive_early_exit(_a: DeriveEarlyExitArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
pub fn run_gen_random(_a: GenRandomArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
