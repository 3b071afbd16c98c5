//! How subservers of a group reach each other (`transport:`).

use std::time::Duration;

use super::string_enum::string_enum;

string_enum! {
    /// The `transport.kind` names.
    pub enum TransportKind as "transport kind" {
        /// Channels inside one process.
        InProc => "inproc",
        /// Length-prefixed frames over TCP, one listener per model.
        Tcp => "tcp",
    }
}

/// Default `transport.connect_timeout_ms`.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 2000;
/// Default `transport.peer_timeout_ms`.
pub const DEFAULT_PEER_TIMEOUT_MS: u64 = 10_000;

/// The transport between the subservers of a group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TransportConfig {
    /// All models in this process.
    #[default]
    InProc,
    /// One process (or host) per model.
    Tcp(TcpTransport),
}

impl TransportConfig {
    /// The kind, as written in the file.
    pub fn kind(&self) -> TransportKind {
        match self {
            Self::InProc => TransportKind::InProc,
            Self::Tcp(_) => TransportKind::Tcp,
        }
    }
}

/// TCP transport settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpTransport {
    /// `host:port` of each model's listener, by model index.
    pub addresses: Vec<String>,
    /// Give up connecting to a peer after this long (> 0).
    pub connect_timeout_ms: u64,
    /// A request pending at an unreachable peer fails (or falls back, with
    /// `fallback_on_peer_failure`) after this long (> 0).
    pub peer_timeout_ms: u64,
}

impl TcpTransport {
    /// Model `model`'s listener address.
    pub fn address(&self, model: usize) -> Option<&str> {
        self.addresses.get(model).map(String::as_str)
    }

    /// `connect_timeout_ms` as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// `peer_timeout_ms` as a duration.
    pub fn peer_timeout(&self) -> Duration {
        Duration::from_millis(self.peer_timeout_ms)
    }
}

/// Checks `host:port` (host may be a name, an IPv4 address or a bracketed
/// IPv6 address). Names are not resolved here: peers may not exist yet.
pub(crate) fn check_address(address: &str) -> Result<(), String> {
    let bad = || format!("\"{address}\" is not host:port");
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = !host.is_empty()
        && !host.chars().any(char::is_whitespace)
        && (host.starts_with('[') == host.ends_with(']'))
        && (host.starts_with('[') || !host.contains(':'));
    if !host_ok {
        return Err(bad());
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("\"{address}\": port must be 1..=65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_need_host_and_port() {
        for ok in [
            "127.0.0.1:31001",
            "quick-0.group.svc:31001",
            "[::1]:80",
            "localhost:1",
        ] {
            assert!(check_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            ":31001",
            "h:0",
            "h:70000",
            "h:x",
            "::1:80",
            "a b:1",
            "[::1:80",
        ] {
            assert!(check_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kind_and_durations() {
        let tcp = TcpTransport {
            addresses: vec!["a:1".into(), "b:2".into()],
            connect_timeout_ms: 2000,
            peer_timeout_ms: 10,
        };
        assert_eq!(tcp.address(1), Some("b:2"));
        assert_eq!(tcp.address(2), None);
        assert_eq!(tcp.connect_timeout(), Duration::from_secs(2));
        assert_eq!(TransportConfig::Tcp(tcp).kind(), TransportKind::Tcp);
        assert_eq!(TransportConfig::default().kind().as_str(), "inproc");
    }
}
