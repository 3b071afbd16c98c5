//! The tracing set-up shared by `tokenrouter`, `tokenrouter-gateway` and
//! `tokenrouter-operator`, so the three binaries log alike: `RUST_LOG`
//! filters (default `info`), everything goes to stderr (stdout carries
//! command output), and colour is used only on a terminal (pods, pipes and
//! log collectors get plain text).

use std::io::IsTerminal;

/// The filter `RUST_LOG` names, else `info`.
fn filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}

/// Installs the process's subscriber. Call once, first thing in `main`; a
/// second call (or a subscriber installed elsewhere) leaves the first one.
pub fn init() {
    let _already_set = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_init_is_harmless() {
        // Tests and embedders may call it again; it must not panic.
        init();
        init();
    }
}
