//! A peer's address as configured (`host:port`). A DNS name is resolved
//! again at every connect: a pod recreated with a new IP behind the same
//! name is reached again. Before a model loads, [`wait_resolvable`] waits
//! (bounded) for the names to exist, so a peer that is not scheduled yet
//! costs a wait, not a crash loop through full reloads.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::peer::message::ModelIdx;
use crate::peer::transport::TransportError;

/// `host:port` of one model's peer listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddr {
    text: String,
    /// Set when `text` is an IP literal (nothing to resolve).
    fixed: Option<SocketAddr>,
}

impl PeerAddr {
    /// The address `text` (an `IP:port`, or a `name:port` resolved at each connect).
    pub fn new(text: &str) -> Self {
        Self {
            text: text.to_string(),
            fixed: text.parse().ok(),
        }
    }

    /// The socket address it names now (the first the resolver gives).
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        if let Some(addr) = self.fixed {
            return Ok(addr);
        }
        self.text
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", self.text))?
            .next()
            .ok_or_else(|| format!("cannot resolve {}: no address", self.text))
    }
}

impl From<SocketAddr> for PeerAddr {
    fn from(addr: SocketAddr) -> Self {
        Self {
            text: addr.to_string(),
            fixed: Some(addr),
        }
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Polls every unresolved name of `addrs` (index = model) once a second
/// until all resolve, or fails naming those that still do not after
/// `deadline`. Logged when it starts waiting and when the names appear.
pub fn wait_resolvable(addrs: &[PeerAddr], deadline: Duration) -> Result<(), TransportError> {
    let end = Instant::now() + deadline;
    let mut waited = false;
    loop {
        let missing: Vec<(usize, String)> = addrs
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.resolve().err().map(|e| (i, e)))
            .collect();
        let Some((first, why)) = missing.first() else {
            if waited {
                info!("every peer name resolves: loading the model");
            }
            return Ok(());
        };
        if Instant::now() >= end {
            let model = ModelIdx::try_from(*first).unwrap_or(ModelIdx::MAX);
            return Err(TransportError::Unreachable(
                model,
                format!("{why} (still after waiting {deadline:?} for DNS)"),
            ));
        }
        if !waited {
            let names: Vec<String> = missing.iter().map(|(i, _)| addrs[*i].to_string()).collect();
            warn!(
                ?names,
                ?deadline,
                "waiting for the peers' DNS names before loading"
            );
            waited = true;
        }
        std::thread::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_fixed_and_names_resolve_each_time() {
        let ip = PeerAddr::new("127.0.0.1:7000");
        assert_eq!(ip.resolve().unwrap(), "127.0.0.1:7000".parse().unwrap());
        let name = PeerAddr::new("localhost:7000");
        assert!(name.fixed.is_none());
        assert_eq!(name.resolve().unwrap().port(), 7000);
        assert_eq!(name.to_string(), "localhost:7000");
        let bad = PeerAddr::new("no-such-host.invalid:7000");
        assert!(bad.resolve().unwrap_err().contains("no-such-host.invalid"));
    }

    #[test]
    fn waiting_ends_when_names_resolve_or_fails_at_the_deadline() {
        let ok = [PeerAddr::new("localhost:1"), PeerAddr::new("127.0.0.1:2")];
        wait_resolvable(&ok, Duration::ZERO).unwrap();
        let missing = [
            PeerAddr::new("localhost:1"),
            PeerAddr::new("gone.invalid:2"),
        ];
        let err = wait_resolvable(&missing, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("gone.invalid"), "{err}");
    }
}
