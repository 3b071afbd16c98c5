//! One bench client's own HTTP/1.1 connection, kept alive across its
//! requests, so that a failed request can be told apart exactly.
//!
//! Some servers close a connection their response advertised as keep-alive:
//! llama.cpp's `llama-server` closes it after every streamed response (its
//! content provider returns false after `sink.done()`, which cpp-httplib
//! takes as a cancel). A client that sends its next request at once races
//! that close; with a shared pool (reqwest's) the request fails with
//! "connection closed before message completed", and the server's log shows
//! nothing because its handler never saw the request. Such a request is
//! safe to send again: it went out on a *reused* connection and *no byte*
//! of a response came back. A [`Link`] knows both (it counts the bytes read
//! off its socket and the requests its connection served), so it retries
//! exactly those, on a fresh connection, and reports how many; a failure on
//! a fresh connection, or after a response byte, is the server's.

use std::error::Error as StdError;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper1::body::Incoming;
use hyper1::client::conn::http1::SendRequest;
use hyper1::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// An idle connection older than this is closed rather than reused: below
/// the 5 s keep-alive of cpp-httplib (llama-server) and uvicorn, so the
/// server's idle timeout never races our request.
pub const IDLE_LIMIT: Duration = Duration::from_secs(3);

/// Sends after which a request that never reached the server is given up.
pub const MAX_RETRIES: usize = 3;

/// What can go wrong sending a request.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The URL is not `http://host[:port]...`.
    #[error("unsupported URL {0:?}: the load generator speaks plain http://host[:port]")]
    BadUrl(String),
    /// Connecting (TCP or the HTTP/1.1 handshake) failed.
    #[error("connect to {addr}: {cause}")]
    Connect {
        /// host:port
        addr: String,
        /// The error and its sources.
        cause: String,
    },
    /// The request failed after it may have reached the server.
    #[error("error sending request: {0}")]
    Send(String),
}

/// An error and its sources on one line ("a: b: c"): reqwest's and hyper's
/// top-level messages alone ("error sending request") hide the cause.
pub fn chain(e: &dyn StdError) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// A TCP stream that counts the bytes read off it.
struct Counted {
    inner: TcpStream,
    read: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// An open connection.
struct Open {
    sender: SendRequest<Full<Bytes>>,
    /// Bytes read off the socket so far.
    read: Arc<AtomicU64>,
    /// Requests it carried to a response.
    served: usize,
    /// When it last went idle (its last response ended, see
    /// [`Link::mark_idle`], or it opened).
    idle_since: Instant,
}

/// One client's connection to one server (`http://host:port`).
pub struct Link {
    addr: String,
    open: Option<Open>,
}

/// A sent request's response, and how many sends it took past the first.
pub struct Sent {
    /// The response (head read; the body streams).
    pub response: Response<Incoming>,
    /// Retries of sends that provably never reached the server.
    pub retries: usize,
}

/// A failed request, and the retries it took before failing.
#[derive(Debug)]
pub struct Failed {
    /// Why it failed.
    pub error: LinkError,
    /// Retries before the failure.
    pub retries: usize,
}

impl Link {
    /// A link to the server of `url` (not connected yet).
    pub fn new(url: &str) -> Result<Self, LinkError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| LinkError::BadUrl(url.into()))?;
        let host = rest.split('/').next().unwrap_or_default();
        if host.is_empty() {
            return Err(LinkError::BadUrl(url.into()));
        }
        let addr = if host.contains(':') && !host.ends_with(']') {
            host.to_string()
        } else {
            format!("{host}:80")
        };
        Ok(Self { addr, open: None })
    }

    /// The `Host` header value.
    pub fn authority(&self) -> &str {
        &self.addr
    }

    async fn connect(&self) -> Result<Open, LinkError> {
        let err = |e: &dyn StdError| LinkError::Connect {
            addr: self.addr.clone(),
            cause: chain(e),
        };
        let tcp = TcpStream::connect(&self.addr).await.map_err(|e| err(&e))?;
        tcp.set_nodelay(true).map_err(|e| err(&e))?;
        let read = Arc::new(AtomicU64::new(0));
        let io = TokioIo::new(Counted {
            inner: tcp,
            read: read.clone(),
        });
        let (sender, conn) = hyper1::client::conn::http1::handshake(io)
            .await
            .map_err(|e| err(&e))?;
        // The connection's own task; its errors reach the request's future.
        tokio::spawn(conn);
        Ok(Open {
            sender,
            read,
            served: 0,
            idle_since: Instant::now(),
        })
    }

    /// A connection ready for a request: the open one if the server has not
    /// closed it and it is not stale, else a new one.
    async fn ready(&mut self) -> Result<Open, LinkError> {
        if let Some(mut o) = self.open.take() {
            if o.idle_since.elapsed() < IDLE_LIMIT && o.sender.ready().await.is_ok() {
                return Ok(o);
            }
        }
        self.connect().await
    }

    /// Notes that the last response's body has been read to its end: the
    /// connection is idle from now.
    pub fn mark_idle(&mut self) {
        if let Some(o) = &mut self.open {
            o.idle_since = Instant::now();
        }
    }

    /// Sends the request `make` builds (called again for a retry), retrying
    /// up to [`MAX_RETRIES`] times a send that failed on a reused connection
    /// before any response byte.
    pub async fn send(&mut self, make: impl Fn() -> Request<Full<Bytes>>) -> Result<Sent, Failed> {
        let mut retries = 0;
        loop {
            let mut o = match self.ready().await {
                Ok(o) => o,
                Err(error) => return Err(Failed { error, retries }),
            };
            let read_before = o.read.load(Ordering::Relaxed);
            match o.sender.send_request(make()).await {
                Ok(response) => {
                    o.served += 1;
                    self.open = Some(o);
                    return Ok(Sent { response, retries });
                }
                Err(e) => {
                    let unanswered = o.read.load(Ordering::Relaxed) == read_before;
                    // Reused, and not a byte back: the server never
                    // answered it; the connection is dropped either way.
                    let retry = o.served > 0 && unanswered && retries < MAX_RETRIES;
                    if !retry {
                        return Err(Failed {
                            error: LinkError::Send(chain(&e)),
                            retries,
                        });
                    }
                    retries += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(Link::new("http://h:1/v1").unwrap().authority(), "h:1");
        assert_eq!(Link::new("http://h").unwrap().authority(), "h:80");
        assert_eq!(Link::new("http://[::1]:8").unwrap().authority(), "[::1]:8");
        assert_eq!(Link::new("http://[::1]").unwrap().authority(), "[::1]:80");
        assert!(matches!(Link::new("https://h"), Err(LinkError::BadUrl(_))));
        assert!(matches!(Link::new("http:///x"), Err(LinkError::BadUrl(_))));
    }
}
