//! Source and metric names: their charsets and lengths, checked on the
//! ingest hot path with byte lookup tables.

/// Longest accepted source name.
pub const MAX_SOURCE_LEN: usize = 128;
/// Longest accepted metric name.
pub const MAX_METRIC_LEN: usize = 200;

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("is empty")]
    Empty,
    #[error("is {len} bytes long; the limit is {max}")]
    TooLong { len: usize, max: usize },
    #[error("contains {ch:?} at byte {at}; allowed are letters, digits and {allowed}")]
    BadChar {
        ch: char,
        at: usize,
        allowed: &'static str,
    },
}

const SOURCE_PUNCT: &str = "._:-";
const METRIC_PUNCT: &str = "._:/-";

/// Byte lookup tables: validation runs for every series group on the ingest
/// hot path.
const fn charset(punct: &str) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let p = punct.as_bytes();
    let mut i = 0;
    while i < p.len() {
        t[p[i] as usize] = true;
        i += 1;
    }
    t
}

static SOURCE_CHARS: [bool; 256] = charset(SOURCE_PUNCT);
static METRIC_CHARS: [bool; 256] = charset(METRIC_PUNCT);

fn validate_name(
    name: &str,
    max: usize,
    allowed: &[bool; 256],
    punct: &'static str,
) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > max {
        return Err(NameError::TooLong {
            len: name.len(),
            max,
        });
    }
    match name.bytes().position(|b| !allowed[b as usize]) {
        None => Ok(()),
        Some(at) => Err(NameError::BadChar {
            // The name may be non-ASCII; report the whole character.
            ch: name
                .get(at..)
                .and_then(|r| r.chars().next())
                .unwrap_or('\u{fffd}'),
            at,
            allowed: punct,
        }),
    }
}

/// A source is a server or agent id: 1–128 bytes of `[A-Za-z0-9._:-]`.
pub fn validate_source(name: &str) -> Result<(), NameError> {
    validate_name(name, MAX_SOURCE_LEN, &SOURCE_CHARS, SOURCE_PUNCT)
}

/// A source as stored: an agent's source, or a group rollup's `@<group>`
/// (see `rollup`), whose `@` no agent can send.
pub fn validate_stored_source(name: &str) -> Result<(), NameError> {
    validate_source(name.strip_prefix('@').unwrap_or(name))
}

/// A metric name: 1–200 bytes of `[A-Za-z0-9._:/-]`.
pub fn validate_metric(name: &str) -> Result<(), NameError> {
    validate_name(name, MAX_METRIC_LEN, &METRIC_CHARS, METRIC_PUNCT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_sources_admit_rollups_only_with_one_at() {
        assert!(validate_stored_source("@all").is_ok());
        assert!(validate_stored_source("web-1").is_ok());
        assert!(validate_stored_source("@@all").is_err());
        assert!(validate_stored_source("@").is_err());
        assert!(validate_source("@all").is_err());
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_source("db-01.eu:27017").is_ok());
        assert!(validate_metric("opcounters/insert").is_ok());
        assert_eq!(validate_source(""), Err(NameError::Empty));
        assert!(matches!(
            validate_source(&"a".repeat(129)),
            Err(NameError::TooLong { len: 129, max: 128 })
        ));
        assert!(matches!(
            validate_metric("a b"),
            Err(NameError::BadChar { ch: ' ', at: 1, .. })
        ));
        assert!(matches!(
            validate_source("srv/1"),
            Err(NameError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            validate_metric("é"),
            Err(NameError::BadChar {
                ch: 'é', at: 0, ..
            })
        ));
    }
}
