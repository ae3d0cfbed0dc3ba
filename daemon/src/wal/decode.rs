//! Why a record of the log could not be read back: one error for the
//! record framing (`record.rs`) and the compact requests inside it
//! (`compact.rs`), which both read it.

/// Why a record could not be read back.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record ends early")]
    Short,
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("a name is not UTF-8")]
    Utf8,
    #[error("request: {0}")]
    Request(String),
    #[error("compact request: {0}")]
    Compact(String),
    #[error("packed record: {0}")]
    Packed(String),
}
