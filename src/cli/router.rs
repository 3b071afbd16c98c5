//! `convert-router`: a `torch.save` router checkpoint to the directory the
//! R2R and CITER policies load. The pickle is read by PyTorch itself
//! (tools/convert_router.py, embedded in the binary and run with the
//! configured Python), then the result is loaded back here to check it.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::Context;

/// The converter script (tools/convert_router.py).
const SCRIPT: &str = include_str!("../../tools/convert_router.py");

/// `convert-router` arguments.
#[derive(Debug, clap::Args)]
pub struct ConvertRouterArgs {
    /// The checkpoint written by torch.save (R2R's `*.pt`, or a CITER state dict).
    pub input: PathBuf,
    /// Output directory (created): model.safetensors and router.json.
    pub out_dir: PathBuf,
    /// Python with torch and safetensors (default: $TOKENROUTER_PYTHON, else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
}

/// Runs `convert-router`.
pub fn run(a: ConvertRouterArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.input.is_file(), "{} is not a file", a.input.display());
    let python = a
        .python
        .or_else(|| std::env::var_os("TOKENROUTER_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let mut child = Command::new(&python)
        .arg("-")
        .arg(&a.input)
        .arg(&a.out_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (pass --python or set TOKENROUTER_PYTHON)",
                python.display()
            )
        })?;
    child
        .stdin
        .take()
        .context("python stdin")?
        .write_all(SCRIPT.as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "converting {} failed: {}",
        a.input.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let summary = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // Load the result back with the networks the policies use.
    let what = subserver::policy::router::describe(&a.out_dir)?;
    println!("{what}; wrote {} ({summary})", a.out_dir.display());
    Ok(())
}
