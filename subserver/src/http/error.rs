//! The HTTP server's error type.

use std::net::SocketAddr;

/// Why the HTTP server could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Another socket listens on the address.
    #[error("address {addr} in use")]
    AddrInUse {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Any other failure to bind or listen (permission, address not local, ...).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The server thread or its tokio runtime could not be created.
    #[error("cannot start the HTTP server thread for {addr}: {source}")]
    Runtime {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The control endpoints' exposure is unsafe (see `ControlAccess::check`).
    #[error("{0}")]
    Access(String),
    /// The server thread ended before it was ready (it panicked).
    #[error("the HTTP server thread for {addr} died while starting")]
    ThreadDied {
        /// The address asked for.
        addr: SocketAddr,
    },
}

impl HttpError {
    /// Classifies a bind error on `addr`.
    pub(super) fn bind(addr: SocketAddr, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            Self::AddrInUse { addr }
        } else {
            Self::Bind { addr, source }
        }
    }
}
