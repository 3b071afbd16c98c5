//! Argument types and thin drivers for each subcommand.

pub mod assets;
pub mod generate;
pub mod router;
pub mod serve;
pub mod sim_bench;
pub mod std_serving;
pub mod subserver;

/// An error and its causes on one line, each cause once: a source whose
/// text the message already shows (`#[error("...: {source}")]`) is not
/// repeated.
pub fn report(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {path}: {source}")]
    struct Wrapped {
        path: String,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn report_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let e = anyhow::Error::new(Wrapped {
            path: "a.yaml".into(),
            source: io,
        })
        .context("loading the config");
        assert_eq!(
            super::report(&e),
            "loading the config: cannot read a.yaml: No such file or directory"
        );
        let plain = anyhow::anyhow!("outer").context("ctx");
        assert_eq!(super::report(&plain), "ctx: outer");
    }
}
