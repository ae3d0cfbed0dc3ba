//! The gRPC side: endpoints, connecting, and what a failed request means.
//!
//! Every failure is put in one of three classes, because they call for
//! different actions and a load generator that claims exactness must not
//! guess:
//! - [`Verdict::Retry`]: the daemon certainly took nothing (it said so with
//!   `RESOURCE_EXHAUSTED` or `UNAVAILABLE`, which it only returns before
//!   ingesting, or the connection could not even be made). Sending the same
//!   batch again after a backoff is safe.
//! - [`Verdict::Ambiguous`]: the request may or may not have been applied
//!   (deadline passed, connection lost mid-call). Resending could count it
//!   twice, so it is not resent; its series are left out of verification.
//! - [`Verdict::Fatal`]: retrying cannot help (bad batch, wrong service).

use std::error::Error as _;
use std::time::Duration;

use rand::Rng;
use tally_proto::v1 as pb;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("--target {url:?}: {reason}")]
    BadTarget { url: String, reason: String },
    #[error("cannot connect to tallyd at {url}: {detail}. Is tallyd running, and is --target its gRPC address (default port 4317)?")]
    Connect { url: String, detail: String },
    #[error("tallyd at {url} did not accept a test push: {detail}")]
    Preflight { url: String, detail: String },
}

/// A request that could not be put on its connection (see `unary`):
/// nothing reached the daemon, and sending it again is safe.
#[derive(Debug)]
pub struct NotSent(pub String);

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not sent: {}", self.0)
    }
}

impl std::error::Error for NotSent {}

/// Adds `http://` when no scheme is given; refuses anything but plain HTTP.
pub fn normalize_url(flag: &str, url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    let url = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    match url.split_once("://") {
        Some(("http", rest)) if !rest.is_empty() => Ok(url),
        Some(("https", _)) => Err(format!(
            "{flag} {url:?}: TLS is not supported; tallyd serves plain HTTP/2 on loopback by default, use http://"
        )),
        _ => Err(format!(
            "{flag} {url:?} is not an http:// address like http://127.0.0.1:4317"
        )),
    }
}

/// A lazily-connecting endpoint with a connect timeout. Request timeouts are
/// enforced by the caller around each call (see `worker`), because a
/// client-streaming call legitimately lasts longer than one request.
pub fn endpoint(url: &str, connect_timeout: Duration) -> Result<Endpoint, TransportError> {
    Endpoint::from_shared(url.to_string())
        .map(|e| {
            e.connect_timeout(connect_timeout)
                .tcp_nodelay(true)
                .keep_alive_while_idle(true)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(Duration::from_secs(10))
        })
        .map_err(|e| TransportError::BadTarget {
            url: url.to_string(),
            reason: e.to_string(),
        })
}

/// Connects, retrying a refused or timed-out connection `attempts` times in
/// all with a short backoff, so a daemon that is just starting is waited
/// for, but a wrong address fails within seconds.
pub async fn connect(
    ep: &Endpoint,
    attempts: u32,
    connect_timeout: Duration,
) -> Result<Channel, TransportError> {
    let url = ep.uri().to_string();
    with_attempts(&url, attempts, || async {
        // connect() has its own timeout; this outer one also bounds DNS.
        match tokio::time::timeout(connect_timeout + Duration::from_secs(1), ep.connect()).await {
            Ok(Ok(ch)) => Ok(ch),
            Ok(Err(e)) => Err(error_chain(&e)),
            Err(_) => Err(format!("no connection within {connect_timeout:?}")),
        }
    })
    .await
}

/// Runs `open` up to `attempts` times with the connection backoff between
/// tries; the last failure becomes a [`TransportError::Connect`] for `url`.
/// Every client of the load generator connects through it.
pub async fn with_attempts<T, F, Fut>(
    url: &str,
    attempts: u32,
    mut open: F,
) -> Result<T, TransportError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(1));
    let mut detail = String::new();
    for attempt in 0..attempts.max(1) {
        if attempt > 0 {
            tokio::time::sleep(backoff.next_delay()).await;
        }
        match open().await {
            Ok(v) => return Ok(v),
            Err(e) => detail = e,
        }
    }
    Err(TransportError::Connect {
        url: url.to_string(),
        detail,
    })
}

/// Proves the target is a tallyd ingest service: an empty `Push` must be
/// answered. Catches a wrong port (HTTP listener, another service) before
/// the run starts instead of as a flood of errors.
pub async fn preflight(ch: Channel, url: &str, timeout: Duration) -> Result<(), TransportError> {
    let mut client = pb::ingest_client::IngestClient::new(ch);
    let fail = |detail: String| TransportError::Preflight {
        url: url.to_string(),
        detail,
    };
    match tokio::time::timeout(timeout, client.push(pb::PushRequest::default())).await {
        Ok(Ok(_)) => Ok(()),
        // Pushing back is a perfectly healthy daemon.
        Ok(Err(s)) if s.code() == Code::ResourceExhausted => Ok(()),
        Ok(Err(s)) if s.code() == Code::Unimplemented => Err(fail(format!(
            "{}; this does not look like tallyd's gRPC port (is --target the HTTP port?)",
            describe(&s)
        ))),
        Ok(Err(s)) => Err(fail(describe(&s))),
        Err(_) => Err(fail(format!("no answer within {timeout:?}"))),
    }
}

/// What to do about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Retry,
    Ambiguous,
    Fatal,
}

/// Classifies a failed call; see the module docs.
pub fn classify(status: &Status) -> Verdict {
    if never_sent(status) {
        return Verdict::Retry;
    }
    let from_server = status.source().is_none();
    match status.code() {
        // tallyd refuses these before taking anything from the batch.
        Code::ResourceExhausted | Code::Unavailable if from_server => Verdict::Retry,
        Code::InvalidArgument
        | Code::Unimplemented
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::NotFound
        | Code::AlreadyExists
            if from_server =>
        {
            Verdict::Fatal
        }
        _ => Verdict::Ambiguous,
    }
}

/// True when the request cannot have reached the daemon: the connection
/// could not be made.
fn never_sent(status: &Status) -> bool {
    let mut source = status.source();
    while let Some(e) = source {
        if e.downcast_ref::<tonic::ConnectError>().is_some()
            || e.downcast_ref::<NotSent>().is_some()
        {
            return true;
        }
        source = e.source();
    }
    // tonic reports a channel that failed before the call like this.
    status.code() == Code::Unknown && status.message().starts_with("Service was not ready")
}

/// `CODE: message: cause: cause…` — the whole story in one line.
pub fn describe(status: &Status) -> String {
    let s = format!("{}: {}", code_name(status.code()), status.message());
    with_sources(s, status.source())
}

/// An error and its sources on one line, each source once (transport
/// errors often repeat their cause in their own text).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    with_sources(e.to_string(), e.source())
}

/// Appends each source's text to `s` unless `s` already says it.
fn with_sources(mut s: String, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(e) = source {
        let text = e.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = e.source();
    }
    s
}

/// The canonical gRPC name of a status code, as in the gRPC docs.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Exponential backoff with jitter: `initial · 2^k`, capped, each delay
/// drawn from its upper half so that workers pushed back together do not
/// come back in lockstep.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { next: initial, max }
    }

    pub fn next_delay(&mut self) -> Duration {
        let d = self.next.min(self.max);
        self.next = (self.next * 2).min(self.max);
        d.mul_f64(rand::rng().random_range(0.5..=1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_a_scheme_and_tls_is_refused() {
        assert_eq!(
            normalize_url("--target", "127.0.0.1:4317").unwrap(),
            "http://127.0.0.1:4317"
        );
        assert_eq!(
            normalize_url("--http", "http://h:8080/").unwrap(),
            "http://h:8080"
        );
        assert!(normalize_url("--target", "https://h:1")
            .unwrap_err()
            .contains("TLS"));
        assert!(normalize_url("--target", "ftp://h:1").is_err());
    }

    #[test]
    fn server_statuses_are_classified() {
        assert_eq!(
            classify(&Status::resource_exhausted("full")),
            Verdict::Retry
        );
        assert_eq!(
            classify(&Status::unavailable("shutting down")),
            Verdict::Retry
        );
        assert_eq!(
            classify(&Status::invalid_argument("too big")),
            Verdict::Fatal
        );
        assert_eq!(
            classify(&Status::deadline_exceeded("slow")),
            Verdict::Ambiguous
        );
        assert_eq!(classify(&Status::internal("boom")), Verdict::Ambiguous);
        assert_eq!(
            classify(&Status::unknown("Service was not ready: x")),
            Verdict::Retry
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let d: Vec<Duration> = (0..4).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[1] >= Duration::from_millis(100) && d[1] <= Duration::from_millis(200));
        assert!(d[3] >= Duration::from_millis(175) && d[3] <= Duration::from_millis(350));
    }
}
