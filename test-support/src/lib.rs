//! Helpers of the workspace's process-level tests (a dev-dependency only;
//! torch-free, so the gateway's no-default-features tests use it too).
//!
//! Tests wait on events, never on wall-clock luck: a child is ready when it
//! prints its ready line, has exited when its output closes. [`HANG`] only
//! turns a hang into a failure that names what never happened.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod assets;
pub mod chromium;
pub mod proc;
pub mod stream;
mod subserver;

pub use assets::{asset, cache_dir, model_dir, python};
pub use proc::Proc;
pub use subserver::spawn as spawn_subserver;

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

/// Deadline of every wait: only a hang reaches it, even on a loaded machine.
pub const HANG: Duration = Duration::from_secs(300);

/// A port free at the time of the call, for configs that name fixed addresses.
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// `N` distinct free loopback ports: every listener is held until all are
/// picked (one at a time, the kernel may hand the same port out twice).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: [TcpListener; N] = std::array::from_fn(|_| TcpListener::bind("127.0.0.1:0").unwrap());
    held.map(|l| l.local_addr().unwrap().port())
}

/// The workspace binary `name` beside the running test's own directory in
/// the target folder (for a crate whose tests cannot use `CARGO_BIN_EXE_`).
pub fn sibling_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build it first (cargo build --release --bin {name})",
        bin.display()
    );
    bin
}
