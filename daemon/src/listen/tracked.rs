//! A connection's socket as its pool sees it: every byte read or written
//! is progress (what eviction ranks by, see `pool`), and a write the client
//! does not take within the write timeout fails the connection, so a client
//! that stops reading cannot hold it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use super::pool::Member;
use super::Closed;

/// `S` with its progress recorded on `member`.
pub struct Tracked<S> {
    inner: S,
    member: Arc<Member>,
    write_timeout: Option<Duration>,
    /// Armed while a write waits on the client.
    stall: Option<Pin<Box<Sleep>>>,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, member: Arc<Member>, write_timeout: Option<Duration>) -> Tracked<S> {
        Tracked {
            inner,
            member,
            write_timeout,
            stall: None,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// A write made no progress: fails once the client has taken nothing
    /// for the write timeout.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(limit) = self.write_timeout else {
            return Poll::Pending;
        };
        let sleep = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.member.close_for(Closed::WriteTimeout);
                Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client took nothing for {limit:?}"),
                ))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn wrote(&mut self, n: usize) {
        if n > 0 {
            self.stall = None;
            self.member.progress();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            this.member.read(n);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.wrote(n);
                Poll::Ready(Ok(n))
            }
            Poll::Pending => this.stalled(cx).map(Err),
            other => other,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) => {
                this.wrote(n);
                Poll::Ready(Ok(n))
            }
            Poll::Pending => this.stalled(cx).map(Err),
            other => other,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.stalled(cx).map(Err),
            Poll::Ready(r) => {
                this.stall = None;
                Poll::Ready(r)
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Pending => this.stalled(cx).map(Err),
            ready => ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_fails_the_write() {
        let member = Arc::new(Member::new(Instant::now()));
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut t = Tracked::new(ours, member.clone(), Some(Duration::from_secs(5)));
        // Reads and writes that go through are progress.
        theirs.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        t.read_exact(&mut buf).await.unwrap();
        t.write_all(&[1u8; 64]).await.unwrap();
        theirs.read_exact(&mut [0u8; 32]).await.unwrap();
        // A slow reader's writes keep going...
        t.write_all(&[1u8; 32]).await.unwrap();
        // ...one that reads nothing stops them after the timeout.
        let e = t.write_all(&[1u8; 1024]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(member.reason(), Some(Closed::WriteTimeout));
    }
}
