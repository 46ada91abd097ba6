//! A connection whose client stops reading: a write that makes no progress for
//! [`WRITE_STALL_LIMIT`] fails the connection, so that an answer nobody takes (and the
//! memory it holds, however large) is not kept for as long as the client keeps the socket
//! open, nor holds a stopping server past its drain.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a write to a client may wait for the client to read (its receive window to
/// open) before the connection is closed: 30 s without one byte taken.
pub const WRITE_STALL_LIMIT: Duration = Duration::from_secs(30);

/// `S` whose writes fail with `TimedOut` once one has waited [`WRITE_STALL_LIMIT`] without
/// any progress. Reads are untouched (their limits are hyper's and the body reader's).
pub(crate) struct StallGuard<S> {
    inner: S,
    limit: Duration,
    /// Set while a write waits; reset by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallGuard<S> {
    pub(crate) fn new(inner: S, limit: Duration) -> StallGuard<S> {
        StallGuard {
            inner,
            limit,
            stalled: None,
        }
    }

    /// What a write's poll gave: progress clears the wait, a wait starts (or goes on
    /// with) its timer, and a wait past the limit is an error.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client took nothing of an answer for {} s: connection closed",
                    limit.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A peer that reads nothing: the writer fills the pipe, then its write fails once
    /// it has waited the limit; a peer that reads keeps the writer going.
    #[tokio::test]
    async fn a_write_nobody_takes_fails_after_the_limit() {
        let limit = Duration::from_millis(300);
        let (near, _far) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(near, limit);
        let started = std::time::Instant::now();
        let err = guarded
            .write_all(&vec![b'x'; 64 * 1024])
            .await
            .expect_err("nobody reads");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= limit);

        let (near, mut reader) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(near, limit);
        let read = tokio::spawn(async move {
            let mut all = Vec::new();
            // Slower than the pipe, never slower than the limit.
            let mut chunk = [0u8; 4096];
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                match tokio::io::AsyncReadExt::read(&mut reader, &mut chunk).await {
                    Ok(0) => return all.len(),
                    Ok(n) => all.extend_from_slice(&chunk[..n]),
                    Err(err) => panic!("{err}"),
                }
            }
        });
        guarded.write_all(&vec![b'y'; 64 * 1024]).await.unwrap();
        guarded.shutdown().await.unwrap();
        assert_eq!(read.await.unwrap(), 64 * 1024);
    }
}
