//! Who may call the control endpoints (`/admin/*`, `/internal/generate`).
//!
//! `/metrics` and `/health` are open to every client. The control
//! endpoints change the engine or take prompts, so:
//! - with a bearer token configured (`TOKENROUTER_ADMIN_TOKEN`, or a file
//!   named by `TOKENROUTER_ADMIN_TOKEN_FILE`, which the operator mounts from
//!   a Secret), every call must bring `Authorization: Bearer <token>`;
//! - without one, only loopback clients reach them (others get a 403);
//! - they can have their own listener ([`ControlAccess::bind`]), in which
//!   case the main address serves only `/metrics` and `/health`.

use std::net::SocketAddr;

use warp::http::StatusCode;
use warp::{Filter, Rejection};

pub use protocol::access::{AdminToken, TOKEN_ENV, TOKEN_FILE_ENV};

/// How the control endpoints are exposed.
#[derive(Debug, Clone, Default)]
pub struct ControlAccess {
    /// Required bearer token; `None`: loopback clients only.
    pub token: Option<AdminToken>,
    /// Serve the control endpoints on this address (not on the main one).
    pub bind: Option<SocketAddr>,
}

impl ControlAccess {
    /// The token from `TOKENROUTER_ADMIN_TOKEN_FILE` or
    /// `TOKENROUTER_ADMIN_TOKEN` (the file wins), no separate listener.
    pub fn from_env() -> Result<Self, String> {
        Ok(Self {
            token: AdminToken::from_env()?,
            bind: None,
        })
    }

    /// Refuses a control listener that would be reachable from other
    /// hosts with no token to guard it.
    pub fn check(&self) -> Result<(), String> {
        match self.bind {
            Some(addr) if self.token.is_none() && !addr.ip().is_loopback() => Err(format!(
                "the control endpoints would listen on {addr} without a token: \
                 set {TOKEN_ENV} (or {TOKEN_FILE_ENV}) or bind them to a loopback address"
            )),
            _ => Ok(()),
        }
    }

    /// The gate for a connection from `peer` accepted on the control
    /// listener (`on_control`) or on the main one.
    pub(super) fn gate_for(&self, peer: SocketAddr, on_control: bool) -> GateKind {
        if self.bind.is_some() && !on_control {
            GateKind::Closed
        } else if self.token.is_some() {
            GateKind::Bearer
        } else if peer.ip().is_loopback() {
            GateKind::Open
        } else {
            GateKind::Closed
        }
    }
}

/// What a connection's control endpoints require.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GateKind {
    /// Nothing (a loopback client, no token configured).
    Open,
    /// The bearer token.
    Bearer,
    /// Refused (403).
    Closed,
}

/// A refused control call.
#[derive(Debug)]
pub(super) struct Denied {
    pub status: StatusCode,
    pub message: &'static str,
}
impl warp::reject::Reject for Denied {}

const NO_TOKEN: &str = "missing or wrong bearer token (Authorization: Bearer ...)";
const NOT_HERE: &str = "the control endpoints (/admin/*, /internal/generate) are not served to \
     this client: without a token (TOKENROUTER_ADMIN_TOKEN) they answer loopback clients only, \
     and with a separate control address only there";

/// A filter that passes the control endpoints' requests this gate allows.
pub(super) fn gate(
    kind: GateKind,
    token: Option<AdminToken>,
) -> impl Filter<Extract = (), Error = Rejection> + Clone + Send + Sync + 'static {
    warp::header::optional::<String>("authorization")
        .and_then(move |auth: Option<String>| {
            let verdict = match kind {
                GateKind::Open => Ok(()),
                GateKind::Bearer if token.as_ref().is_some_and(|t| t.accepts(auth.as_deref())) => {
                    Ok(())
                }
                GateKind::Bearer => Err(Denied {
                    status: StatusCode::UNAUTHORIZED,
                    message: NO_TOKEN,
                }),
                GateKind::Closed => Err(Denied {
                    status: StatusCode::FORBIDDEN,
                    message: NOT_HERE,
                }),
            };
            std::future::ready(verdict.map_err(warp::reject::custom))
        })
        .untuple_one()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates() {
        let lo: SocketAddr = "127.0.0.1:5".parse().unwrap();
        let far: SocketAddr = "10.0.0.7:5".parse().unwrap();
        let open = ControlAccess::default();
        assert_eq!(open.gate_for(lo, false), GateKind::Open);
        assert_eq!(open.gate_for(far, false), GateKind::Closed);
        let with_token = ControlAccess {
            token: AdminToken::new("t"),
            bind: None,
        };
        assert_eq!(with_token.gate_for(far, false), GateKind::Bearer);
        assert_eq!(with_token.gate_for(lo, false), GateKind::Bearer);
        let split = ControlAccess {
            token: AdminToken::new("t"),
            bind: Some("0.0.0.0:9".parse().unwrap()),
        };
        assert_eq!(split.gate_for(lo, false), GateKind::Closed);
        assert_eq!(split.gate_for(far, true), GateKind::Bearer);
        assert!(split.check().is_ok());
        let unguarded = ControlAccess {
            token: None,
            bind: Some("0.0.0.0:9".parse().unwrap()),
        };
        assert!(unguarded.check().unwrap_err().contains(TOKEN_ENV));
    }
}
