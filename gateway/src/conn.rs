//! Open client connections, counted: a drain's close notice ends early
//! once no client holds a connection (nothing is left to tell to go).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// How many accepted connections are open.
#[derive(Debug, Default)]
pub struct OpenConnections {
    count: AtomicUsize,
    closed: Notify,
}

impl OpenConnections {
    /// Connections open now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Resolves once no connection is open.
    pub async fn none_open(&self) {
        loop {
            let closed = self.closed.notified();
            if self.count() == 0 {
                return;
            }
            closed.await;
        }
    }

    /// `stream`, counted until it is dropped.
    pub fn track(self: &Arc<Self>, stream: TcpStream) -> CountedStream {
        self.count.fetch_add(1, Ordering::SeqCst);
        CountedStream {
            inner: stream,
            open: self.clone(),
        }
    }
}

/// A connection that counts itself open until dropped.
#[derive(Debug)]
pub struct CountedStream {
    inner: TcpStream,
    open: Arc<OpenConnections>,
}

impl Drop for CountedStream {
    fn drop(&mut self) {
        if self.open.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.open.closed.notify_waiters();
        }
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
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

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_until_dropped_and_wakes_on_the_last() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(OpenConnections::default());
        let _client = TcpStream::connect(addr).await.unwrap();
        let (s, _) = listener.accept().await.unwrap();
        let counted = open.track(s);
        assert_eq!(open.count(), 1);
        let waiter = tokio::spawn({
            let open = open.clone();
            async move { open.none_open().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(counted);
        waiter.await.unwrap();
        assert_eq!(open.count(), 0);
        open.none_open().await; // at once when none is open
    }
}
