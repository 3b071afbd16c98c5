//! `tokenrouter subserver --model M` children: one model of a group per
//! process, ready when it says it runs. Peer links connect lazily (on the
//! first message) and count as up until a connect fails, so a running entry
//! answers `/health` 200 at once.

use std::path::Path;
use std::process::Command;

use crate::Proc;

/// Starts model `model` of the group in `cfg` (admin HTTP on
/// `127.0.0.1:admin` when given, `envs` added) and waits for its
/// "running" line: its scheduler, peer listener and admin port are up.
pub fn spawn(
    binary: &Path,
    cfg: &Path,
    model: &str,
    admin: Option<u16>,
    envs: &[(&str, &str)],
) -> Proc {
    let mut cmd = Command::new(binary);
    cmd.args(["subserver", "--config"])
        .arg(cfg)
        .args(["--model", model])
        .env("RUST_LOG", "info");
    if let Some(p) = admin {
        cmd.args(["--admin", &format!("127.0.0.1:{p}")]);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut p = Proc::spawn(&format!("subserver {model}"), cmd);
    p.wait_line(&format!("subserver {model} running"), |l| {
        l.contains(&format!("subserver `{model}` running"))
    });
    p
}
