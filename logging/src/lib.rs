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

    /// The one test of this binary: the global subscriber can be set once
    /// per process, so the first `init` here is the process's first.
    #[test]
    fn init_installs_the_info_filter_and_a_second_init_keeps_it() {
        // The default filter is what is checked: no inherited RUST_LOG.
        std::env::remove_var("RUST_LOG");
        assert!(!tracing::dispatcher::has_been_set());
        init();
        assert!(
            tracing::dispatcher::has_been_set(),
            "init installed nothing"
        );
        let levels = || {
            (
                tracing::enabled!(tracing::Level::INFO),
                tracing::enabled!(tracing::Level::DEBUG),
            )
        };
        assert_eq!(levels(), (true, false), "the default filter is `info`");
        // Tests and embedders may call it again: no panic, and the first
        // subscriber (its filter) stays.
        std::env::set_var("RUST_LOG", "trace");
        init();
        assert_eq!(levels(), (true, false), "a second init replaced the first");
    }
}
