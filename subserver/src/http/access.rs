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
use std::path::Path;
use std::sync::Arc;

use warp::http::StatusCode;
use warp::{Filter, Rejection};

/// The environment variable holding the token itself.
pub const TOKEN_ENV: &str = "TOKENROUTER_ADMIN_TOKEN";
/// The environment variable naming a file that holds the token.
pub const TOKEN_FILE_ENV: &str = "TOKENROUTER_ADMIN_TOKEN_FILE";

/// A bearer token; its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(Arc<str>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// A token from its text (surrounding whitespace, e.g. a file's final
    /// newline, is not part of it); `None` when empty.
    pub fn new(text: &str) -> Option<Self> {
        let t = text.trim();
        (!t.is_empty()).then(|| Self(Arc::from(t)))
    }

    /// Reads a token file; an empty file is an error (a Secret that was
    /// meant to be there and is not must not open the endpoints).
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("admin token file {}: {e}", path.display()))?;
        Self::new(&text).ok_or_else(|| format!("admin token file {} is empty", path.display()))
    }

    /// The `Authorization` header value this token accepts.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether `header` (an `Authorization` value) carries this token; the
    /// comparison takes the same time wherever the first difference is.
    pub fn accepts(&self, header: Option<&str>) -> bool {
        let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        let (a, b) = (given.trim().as_bytes(), self.0.as_bytes());
        let mut diff = a.len() ^ b.len();
        for (i, &x) in b.iter().enumerate() {
            diff |= usize::from(x ^ a.get(i).copied().unwrap_or(!x));
        }
        diff == 0
    }
}

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
        let token = match std::env::var_os(TOKEN_FILE_ENV) {
            Some(path) if !path.is_empty() => Some(AdminToken::from_file(Path::new(&path))?),
            _ => std::env::var(TOKEN_ENV)
                .ok()
                .and_then(|t| AdminToken::new(&t)),
        };
        Ok(Self { token, bind: None })
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
    fn token_matching() {
        let t = AdminToken::new(" s3cret\n").unwrap();
        assert!(t.accepts(Some("Bearer s3cret")));
        for bad in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "s3cret",
            "Basic s3cret",
            "Bearer ",
        ] {
            assert!(!t.accepts(Some(bad)), "{bad}");
        }
        assert!(!t.accepts(None));
        assert!(AdminToken::new("  \n").is_none());
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    #[test]
    fn token_file_errors_are_precise() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let e = AdminToken::from_file(&empty).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
        let e = AdminToken::from_file(&dir.path().join("none")).unwrap_err();
        assert!(e.contains("none"), "{e}");
    }

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
