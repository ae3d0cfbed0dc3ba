//! Unary gRPC calls over HTTP/2, each request written with one write.
//!
//! tonic's client hands a request to its connection in three steps (the
//! headers, then the message once the stream has flow-control capacity,
//! then the end of the stream), and each step is flushed by itself: three
//! writes and three TCP segments per request, each of which the daemon
//! reads, and answers with an ACK, on its own. The agents that push to a
//! daemon in production (grpc-go's, behind the OpenTelemetry Collector and
//! most exporters) write a unary request's headers and message together.
//! A load generator that measures the daemon's CPU per request must send
//! what they send, so `tally.v1`'s unary `Push` and OTLP's `Export` go
//! through this client:
//! the headers and the whole message, ended, are queued on the HTTP/2
//! stream before its connection is polled, which writes them at once.
//!
//! Errors come back as [`Status`]es that [`crate::transport::classify`]
//! reads as it reads tonic's: a status the daemon sent has no source; a
//! local failure carries its cause; a call that could not be started on
//! the connection carries [`NotSent`], so that it is retried.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tonic::codegen::http::{self, HeaderMap, Method, Request};
use tonic::{Code, Status};

use crate::transport::{with_attempts, NotSent, TransportError};

/// One HTTP/2 connection to the daemon, reopened when it is lost.
pub struct UnaryClient {
    url: String,
    authority: String,
    connect_timeout: Duration,
    send: Option<h2::client::SendRequest<Bytes>>,
}

impl UnaryClient {
    /// Connects to `url` (`http://host:port`), trying `attempts` times
    /// ([`with_attempts`]): a daemon started beside the load generator may
    /// not listen yet.
    pub async fn connect(
        url: &str,
        attempts: u32,
        connect_timeout: Duration,
    ) -> Result<Self, TransportError> {
        let authority = url
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/').to_string())
            .filter(|a| !a.is_empty())
            .ok_or_else(|| TransportError::BadTarget {
                url: url.to_string(),
                reason: "not an http:// address".into(),
            })?;
        let send = with_attempts(url, attempts, || dial(&authority, connect_timeout)).await?;
        Ok(UnaryClient {
            url: url.to_string(),
            authority,
            connect_timeout,
            send: Some(send),
        })
    }

    async fn open(&mut self) -> Result<h2::client::SendRequest<Bytes>, String> {
        let send = dial(&self.authority, self.connect_timeout).await?;
        self.send = Some(send.clone());
        Ok(send)
    }

    /// A ready handle on the connection, reopening it once if it is gone.
    async fn ready(&mut self) -> Result<h2::client::SendRequest<Bytes>, Status> {
        if let Some(send) = self.send.clone() {
            if let Ok(ready) = send.ready().await {
                return Ok(ready);
            }
            self.send = None;
        }
        let send = self.open().await.map_err(|e| not_sent(&self.url, e))?;
        send.ready()
            .await
            .map_err(|e| not_sent(&self.url, e.to_string()))
    }

    /// Calls `path` with the message `msg` (not yet framed); the answer's
    /// message, unframed.
    pub async fn call(&mut self, path: &str, msg: &[u8]) -> Result<Bytes, Status> {
        let mut send = self.ready().await?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("http://{}{path}", self.authority))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| Status::internal(format!("building the request: {e}")))?;
        let (answer, mut stream) = send
            .send_request(request, false)
            .map_err(|e| not_sent(&self.url, e.to_string()))?;
        stream
            .send_data(frame(msg), true)
            .map_err(|e| local(Code::Unavailable, "sending the message", e))?;
        let answer = answer
            .await
            .map_err(|e| local(Code::Unavailable, "waiting for the answer", e))?;
        if answer.status() != http::StatusCode::OK {
            return Err(Status::unknown(format!(
                "the daemon answered HTTP {}",
                answer.status()
            )));
        }
        // A refusal may come as headers alone ("trailers-only").
        if let Some(status) = status_in(answer.headers()) {
            return Err(status);
        }
        let mut body = answer.into_body();
        let mut message = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| local(Code::Unavailable, "reading the answer", e))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        let trailers = body
            .trailers()
            .await
            .map_err(|e| local(Code::Unavailable, "reading the answer's trailers", e))?;
        match trailers.as_ref().and_then(status_in) {
            Some(status) => Err(status),
            None if trailers.is_none() => Err(Status::internal("the answer has no grpc-status")),
            None => unframe(message.freeze()),
        }
    }
}

/// Opens an HTTP/2 connection to `authority` and starts its I/O beside
/// the calls; it ends when its handles are dropped or the daemon closes it.
async fn dial(
    authority: &str,
    connect_timeout: Duration,
) -> Result<h2::client::SendRequest<Bytes>, String> {
    let tcp = tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| format!("no connection within {connect_timeout:?}"))?
        .map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let (send, conn) = h2::client::Builder::new()
        // A request of the largest batches fits the windows whole, so
        // none waits for a window update in the middle.
        .initial_window_size(4 << 20)
        .initial_connection_window_size(8 << 20)
        .handshake(tcp)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// The message with gRPC's five-byte prefix: not compressed, its length.
fn frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + msg.len());
    b.put_u8(0);
    b.put_u32(msg.len() as u32);
    b.extend_from_slice(msg);
    b.freeze()
}

/// The one message of an answer's body.
fn unframe(mut body: Bytes) -> Result<Bytes, Status> {
    if body.len() < 5 {
        return Err(Status::internal("the answer holds no message"));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 || len != body.len() {
        return Err(Status::internal(format!(
            "the answer is not one uncompressed message (flag {compressed}, {len} bytes declared, {} sent)",
            body.len()
        )));
    }
    Ok(body)
}

/// The status in `grpc-status` (and `grpc-message`), when it is not OK.
fn status_in(headers: &HeaderMap) -> Option<Status> {
    let code = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .parse::<i32>()
        .ok()?;
    if code == 0 {
        return None;
    }
    let message = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .map(|m| {
            percent_encoding::percent_decode_str(m)
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    Some(Status::new(Code::from(code), message))
}

fn not_sent(url: &str, why: impl Into<String>) -> Status {
    let mut s = Status::unavailable(format!("cannot reach tallyd at {url}"));
    s.set_source(Arc::new(NotSent(why.into())));
    s
}

fn local(code: Code, what: &str, e: h2::Error) -> Status {
    let mut s = Status::new(code, format!("{what}: {e}"));
    s.set_source(Arc::new(e));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_framed_message_unframes_to_itself() {
        let msg = b"\x08\x96\x01";
        assert_eq!(unframe(frame(msg)).unwrap().as_ref(), msg);
        assert!(unframe(Bytes::from_static(b"\x00\x00\x00")).is_err());
        assert!(unframe(Bytes::from_static(b"\x01\x00\x00\x00\x00")).is_err());
    }

    #[test]
    fn a_refusal_in_the_headers_is_read_with_its_message() {
        let mut h = HeaderMap::new();
        h.insert("grpc-status", "8".parse().unwrap());
        h.insert(
            "grpc-message",
            "store%20is%20behind: retry".parse().unwrap(),
        );
        let s = status_in(&h).unwrap();
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(s.message(), "store is behind: retry");
        h.insert("grpc-status", "0".parse().unwrap());
        assert!(status_in(&h).is_none());
    }

    /// A daemon that starts listening after the load generator: the first
    /// attempt is refused, a later one connects.
    #[tokio::test]
    async fn the_first_connection_is_retried() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let once = UnaryClient::connect(&url, 1, Duration::from_secs(1)).await;
        assert!(matches!(once, Err(TransportError::Connect { .. })));
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(tcp).await.unwrap();
            while conn.accept().await.is_some() {}
        });
        let client = UnaryClient::connect(&url, 3, Duration::from_secs(1)).await;
        assert!(client.is_ok(), "{:?}", client.err());
        drop(client);
        late.abort();
    }
}
