//! What a reply or a failure means for the flush pipeline: write errors in
//! a reply, driver errors and timeouts become [`StoreError`] kinds. This
//! decides between retrying (the data is held) and refusing (it is
//! dropped), so all of it sits together.

use std::time::Duration;

use bson::{Bson, Document};
use mongodb::error::{Error as DriverError, ErrorKind, RETRYABLE_WRITE_ERROR};

use crate::store::{Cause, StoreError};

const DUPLICATE_KEY: i32 = 11_000;

/// What one write command did.
#[derive(Debug, Default)]
pub(super) struct WriteReply {
    /// Statements the server reports as matched, upserted or inserted.
    pub(super) n: u64,
    /// Indexes (within the command) of statements refused with 11000.
    pub(super) duplicates: Vec<usize>,
    /// Documents an upsert created: the fallback, when neither
    /// pre-allocation nor the first-sighting insert made them.
    pub(super) upserted: usize,
    /// Statements the server refused for good (neither a duplicate key nor
    /// a transient code), with the server's error: only a reply read with
    /// [`read_write_reply`] holds them; [`parse_write_reply`] makes them
    /// an error.
    pub(super) refused: Vec<(usize, String)>,
}

/// Server error codes worth retrying: the server is stepping down, shutting
/// down, interrupted, overloaded or timed out, or not a writable primary.
const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    50,    // MaxTimeMSExpired
    64,    // WriteConcernFailed
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    112,   // WriteConflict
    134,   // ReadConcernMajorityNotAvailableYet
    189,   // PrimarySteppedDown
    202,   // NetworkInterfaceExceededTimeLimit
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10058, // LegacyNotPrimary
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11601, // Interrupted
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];

/// Refusals that are about the deployment, not the request: wrong
/// credentials or roles. Retrying keeps the data in memory (with
/// backpressure) until an operator fixes them, instead of dropping flushes.
const ACCESS_CODES: &[i32] = &[
    13, // Unauthorized
    18, // AuthenticationFailed
];

/// Commands that were refused before doing anything.
const NOTHING_DONE_CODES: &[i32] = &[91, 10058, 10107, 13435, 13436, 13, 18];

pub(super) fn as_i64(v: &Bson) -> Option<i64> {
    match *v {
        Bson::Int32(n) => Some(i64::from(n)),
        Bson::Int64(n) => Some(n),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
        _ => None,
    }
}

/// Reads the reply of an `update` or `insert` command; a statement the
/// server refused makes the whole reply an error.
pub(super) fn parse_write_reply(
    reply: &Document,
    statements: usize,
) -> Result<WriteReply, StoreError> {
    let out = read_write_reply(reply, statements)?;
    if let Some((index, first)) = out.refused.first() {
        return Err(StoreError::Invalid(
            format!(
                "the server refused {} statement(s); first: statement {index}: {first}",
                out.refused.len()
            )
            .into(),
        ));
    }
    Ok(out)
}

/// Reads the reply of an `update` or `insert` command, keeping the
/// statements the server refused for good in [`WriteReply::refused`], so
/// that the caller can set them aside and keep the rest: with
/// `ordered: false` the server applied every other statement.
pub(super) fn read_write_reply(
    reply: &Document,
    statements: usize,
) -> Result<WriteReply, StoreError> {
    let mut out = WriteReply {
        n: reply
            .get("n")
            .and_then(as_i64)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        duplicates: Vec::new(),
        upserted: match reply.get("upserted") {
            Some(Bson::Array(a)) => a.len(),
            _ => 0,
        },
        refused: Vec::new(),
    };
    let mut transient: Option<String> = None;
    if let Some(errors) = reply.get("writeErrors") {
        let Bson::Array(errors) = errors else {
            return Err(StoreError::Ambiguous(
                format!("unexpected writeErrors in reply: {errors}").into(),
            ));
        };
        for e in errors {
            let (index, code, msg) = write_error(e, statements)?;
            if code == DUPLICATE_KEY {
                out.duplicates.push(index);
            } else if TRANSIENT_CODES.contains(&code) || ACCESS_CODES.contains(&code) {
                transient.get_or_insert_with(|| format!("statement {index}: code {code}: {msg}"));
            } else {
                out.refused.push((index, format!("code {code}: {msg}")));
            }
        }
    }
    if let Some(wce) = reply.get("writeConcernError") {
        // Applied on the primary, not (yet) acknowledged by the write concern.
        return Err(StoreError::Ambiguous(
            format!("write concern error: {wce}").into(),
        ));
    }
    if let Some(first) = transient {
        return Err(StoreError::Unavailable(
            format!("statements failed transiently; first: {first}").into(),
        ));
    }
    Ok(out)
}

/// One entry of `writeErrors`: the statement's index, the code, the message.
fn write_error(e: &Bson, statements: usize) -> Result<(usize, i32, String), StoreError> {
    let unexpected =
        || StoreError::Ambiguous(format!("unexpected write error in reply: {e}").into());
    let Bson::Document(e) = e else {
        return Err(unexpected());
    };
    let index = e
        .get("index")
        .and_then(as_i64)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|&i| i < statements);
    let code = e
        .get("code")
        .and_then(as_i64)
        .and_then(|c| i32::try_from(c).ok());
    let (Some(index), Some(code)) = (index, code) else {
        return Err(unexpected());
    };
    Ok((index, code, e.get_str("errmsg").unwrap_or("").to_owned()))
}

/// Maps a driver error onto the store's kinds. `sent_write` says whether the
/// operation was a write that may have reached the server.
pub(super) fn classify(e: &DriverError, sent_write: bool) -> StoreError {
    // The driver's error is kept whole: its labels and codes stay
    // readable to whoever handles the `StoreError`.
    let cause = || Cause::of(e.to_string(), e.clone());
    let maybe_applied = |cause: Cause| {
        if sent_write {
            StoreError::Ambiguous(cause)
        } else {
            StoreError::Unavailable(cause)
        }
    };
    match &*e.kind {
        // The deployment, not the request, is at fault: retrying keeps the
        // data (under backpressure) until it is fixed, where a refusal
        // would make the pipeline drop every flush.
        ErrorKind::ServerSelection { .. }
        | ErrorKind::DnsResolve { .. }
        | ErrorKind::Authentication { .. }
        | ErrorKind::IncompatibleServer { .. }
        | ErrorKind::InvalidTlsConfig { .. }
        | ErrorKind::Shutdown => StoreError::Unavailable(cause()),
        ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => {
            if e.contains_label("NoWritesPerformed") {
                StoreError::Unavailable(cause())
            } else {
                maybe_applied(cause())
            }
        }
        ErrorKind::Command(c) => {
            if NOTHING_DONE_CODES.contains(&c.code) {
                StoreError::Unavailable(cause())
            } else if TRANSIENT_CODES.contains(&c.code)
                || ACCESS_CODES.contains(&c.code)
                || e.contains_label(RETRYABLE_WRITE_ERROR)
                || e.contains_label("RetryableError")
                || e.contains_label("SystemOverloadedError")
            {
                maybe_applied(cause())
            } else {
                StoreError::Invalid(cause())
            }
        }
        ErrorKind::InvalidResponse { .. } | ErrorKind::Internal { .. } => maybe_applied(cause()),
        ErrorKind::BsonDeserialization(_) => StoreError::Corrupt {
            doc: "reply".into(),
            reason: e.to_string(),
        },
        _ => StoreError::Invalid(cause()),
    }
}

const COMMAND_NOT_FOUND: i32 = 59;
const COMMAND_NOT_SUPPORTED: i32 = 115;
const INVALID_INDEX_OPTION: i32 = 197;
const NOT_IMPLEMENTED: i32 = 238;

/// A refusal that says the server does not have a command or option at
/// all, rather than that this request was wrong.
pub(super) fn not_implemented(code: i32) -> bool {
    matches!(
        code,
        COMMAND_NOT_FOUND | COMMAND_NOT_SUPPORTED | INVALID_INDEX_OPTION | NOT_IMPLEMENTED
    )
}

/// Orders errors of concurrent commands: the one to report first. A refusal
/// is reported over a transient failure because retrying cannot fix it.
fn severity(e: &StoreError) -> u8 {
    match e {
        StoreError::Corrupt { .. } => 4,
        StoreError::Invalid(_) => 3,
        StoreError::Ambiguous(_) => 2,
        StoreError::Io(_) => 1,
        StoreError::Unavailable(_) => 0,
    }
}

fn keep_worst(slot: &mut Option<StoreError>, e: StoreError) {
    match slot {
        Some(old) if severity(old) >= severity(&e) => {}
        _ => *slot = Some(e),
    }
}

/// Every result of concurrent commands, or the worst of their errors: all
/// of them ran, so the caller learns the most telling failure, not the first.
pub(super) fn all_or_worst<T>(results: Vec<Result<T, StoreError>>) -> Result<Vec<T>, StoreError> {
    let mut worst = None;
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(v) => out.push(v),
            Err(e) => keep_worst(&mut worst, e),
        }
    }
    match worst {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// A command that did not come back with a reply.
pub(super) enum Failure {
    Driver(DriverError),
    Timeout(Duration),
}

impl Failure {
    /// The server's error code, when the server refused the command.
    pub(super) fn code(&self) -> Option<i32> {
        match self {
            Failure::Driver(e) => match &*e.kind {
                ErrorKind::Command(c) => Some(c.code),
                _ => None,
            },
            Failure::Timeout(_) => None,
        }
    }

    /// What went wrong, for a log line.
    pub(super) fn message(&self) -> String {
        match self {
            Failure::Driver(e) => e.to_string(),
            Failure::Timeout(limit) => format!("no answer within {limit:?}"),
        }
    }

    pub(super) fn into_store(self, write: bool) -> StoreError {
        match self {
            Failure::Driver(e) => classify(&e, write),
            Failure::Timeout(limit) => {
                let msg = format!("no answer within {limit:?}");
                if write {
                    StoreError::Ambiguous(msg.into())
                } else {
                    StoreError::Unavailable(msg.into())
                }
            }
        }
    }
}
