//! The store's errors: [`StoreError`], whose kinds tell the flush pipeline
//! what to do (retry, hold, set aside), and [`Cause`], what happened, with
//! the error behind it where there is one.

use std::fmt;
use std::sync::Arc;

/// What a [`StoreError`] says happened. The message is what clients and
/// logs read, whole (the source's own text included, as before it was
/// kept), and the source is the error behind it, where there is one, for
/// [`std::error::Error::source`]: a caller that needs its type (a driver's
/// error label, an I/O kind) finds it there rather than in text. Shared,
/// so that an error stays cheap to clone for the outage record and the
/// metrics.
#[derive(Debug, Clone)]
pub struct Cause {
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl Cause {
    /// `message` caused by `source`.
    pub fn of(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Cause {
        Cause {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::ops::Deref for Cause {
    type Target = str;

    fn deref(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Cause {
        Cause {
            message,
            source: None,
        }
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Cause {
        Cause::from(message.to_string())
    }
}

impl From<Cause> for String {
    fn from(c: Cause) -> String {
        c.message
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or did not answer; worth retrying.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] Cause),
    /// The store answered, but the outcome is not known (e.g. the connection
    /// dropped after the request was sent). Retrying is safe: applies are
    /// idempotent per flush.
    #[error("outcome unknown: {0}")]
    Ambiguous(#[source] Cause),
    /// Stored data is not what this version of Tally writes.
    #[error("corrupt document {doc}: {reason}")]
    Corrupt { doc: String, reason: String },
    /// A request the store cannot serve.
    #[error("invalid request: {0}")]
    Invalid(#[source] Cause),
    #[error("store I/O: {0}")]
    Io(#[source] Cause),
}

impl StoreError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_) | StoreError::Ambiguous(_) | StoreError::Io(_)
        )
    }

    /// Short label for the `kind` label of error metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Ambiguous(_) => "ambiguous",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::Invalid(_) => "invalid",
            StoreError::Io(_) => "io",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_cause_keeps_its_message_whole_and_its_source_typed() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = StoreError::Io(Cause::of(format!("cannot open x: {io}"), io));
        assert_eq!(e.to_string(), "store I/O: cannot open x: denied");
        let cause = e.source().and_then(|c| c.source());
        let io = cause.and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(std::io::Error::kind),
            Some(std::io::ErrorKind::PermissionDenied)
        );
        let plain = StoreError::Invalid("no such thing".into());
        assert!(plain.source().and_then(|c| c.source()).is_none());
    }
}
