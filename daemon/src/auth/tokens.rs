//! The tokens file: a TOML list of `[[token]]` tables.
//!
//! ```toml
//! [[token]]
//! name = "web-agents"           # shown in logs and errors instead of the secret
//! role = "ingest"               # ingest | read | admin
//! sources = ["web-*", "cdn-?"]  # ingest only: globs of the sources it may push
//! sha256 = "…"                  # hex SHA-256 of the token, or instead:
//! # token = "…"                 # the token itself
//! expires = "2026-12-31T00:00:00Z"  # optional, RFC 3339
//! ```
//!
//! Errors name the line and the token's name and never quote a value: a
//! mistyped key next to a secret must not put the secret in the log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::Role;
use crate::selector::NameMatcher;

/// Shortest token accepted: 16 characters from the token alphabet carry at
/// least 96 bits when generated at random, and rule out passwords like
/// `changeme`.
const MIN_TOKEN_LEN: usize = 16;
const MAX_TOKEN_LEN: usize = 4096;
const MAX_NAME_LEN: usize = 64;
/// Globs are matched against source names (at most 128 characters).
const MAX_GLOB_LEN: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("reading the tokens file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("tokens file {path}{line}: {message}")]
    Invalid {
        path: PathBuf,
        /// ` line N`, or empty when the problem is not on one line.
        line: String,
        message: String,
    },
}

/// One token as the file spells it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    role: Role,
    #[serde(default)]
    sources: Vec<String>,
    token: Option<Secret>,
    sha256: Option<String>,
    expires: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<Entry>,
}

/// A token's text. Its own type so a value of the wrong type is reported
/// without being quoted, as serde's standard message would.
struct Secret(String);

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        match toml::Value::deserialize(d) {
            Ok(toml::Value::String(s)) => Ok(Secret(s)),
            _ => Err(serde::de::Error::custom("`token` must be a quoted string")),
        }
    }
}

/// The globs of the sources an ingest token may push.
pub(super) struct SourceGlobs {
    globs: Vec<String>,
    matcher: NameMatcher,
}

impl SourceGlobs {
    pub(super) fn matches(&self, source: &str) -> bool {
        self.matcher.matches(source)
    }

    /// The globs as written, for messages.
    pub(super) fn list(&self) -> String {
        self.globs.join(", ")
    }
}

/// One usable token: its digest, never its text.
pub(super) struct Token {
    pub(super) name: String,
    pub(super) role: Role,
    /// `None`: any source (admin, or an ingest token with `sources = ["*"]`).
    pub(super) sources: Option<SourceGlobs>,
    digest: [u8; 32],
    expires: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Token {
    pub(super) fn expired_at(&self, now: DateTime<Utc>) -> bool {
        self.expires.is_some_and(|at| now >= at)
    }
}

/// The tokens of one reading of the file.
pub(super) struct TokenSet {
    tokens: Vec<Arc<Token>>,
}

impl TokenSet {
    pub(super) fn read(path: &Path) -> Result<TokenSet, TokensError> {
        let text = std::fs::read_to_string(path).map_err(|e| TokensError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        warn_if_readable_by_others(path);
        TokenSet::parse(&text).map_err(|(line, message)| TokensError::Invalid {
            path: path.to_path_buf(),
            line: line.map(|n| format!(" line {n}")).unwrap_or_default(),
            message,
        })
    }

    /// Parses a file's text; errors carry a line number when they have one.
    pub(super) fn parse(text: &str) -> Result<TokenSet, (Option<usize>, String)> {
        let file: File = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .and_then(|span| text.get(..span.start))
                .map(|before| before.matches('\n').count() + 1);
            (line, e.message().to_string())
        })?;
        if file.token.is_empty() {
            return Err((
                None,
                "defines no [[token]]; every request would be refused. Leave auth.tokens_file empty to turn authentication off".into(),
            ));
        }
        let mut tokens: Vec<Arc<Token>> = Vec::with_capacity(file.token.len());
        for entry in file.token {
            let token = entry.check().map_err(|m| (None, m))?;
            if let Some(other) = tokens.iter().find(|t| t.name == token.name) {
                return Err((None, format!("two tokens are named {:?}", other.name)));
            }
            if let Some(other) = tokens.iter().find(|t| t.digest == token.digest) {
                return Err((
                    None,
                    format!(
                        "tokens {:?} and {:?} have the same secret",
                        other.name, token.name
                    ),
                ));
            }
            tokens.push(Arc::new(token));
        }
        Ok(TokenSet { tokens })
    }

    /// The token whose secret is `presented`. Every digest is compared,
    /// each in constant time, so the answer's timing says nothing about
    /// how close a guess came.
    pub(super) fn find(&self, presented: &[u8]) -> Option<Arc<Token>> {
        let digest = sha256(presented);
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.digest.ct_eq(&digest)) {
                found = Some(token.clone());
            }
        }
        found
    }

    pub(super) fn names(&self) -> Vec<String> {
        self.tokens.iter().map(|t| t.name.clone()).collect()
    }
}

impl Entry {
    fn check(self) -> Result<Token, String> {
        let name = self.name;
        if name.is_empty()
            || name.len() > MAX_NAME_LEN
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
        {
            return Err(format!(
                "token name {name:?}: use 1-{MAX_NAME_LEN} characters of [A-Za-z0-9._:-]"
            ));
        }
        let at = |message: String| format!("token {name:?}: {message}");
        let digest = match (self.token, self.sha256) {
            (Some(Secret(text)), None) => {
                check_secret(&text).map_err(at)?;
                sha256(text.as_bytes())
            }
            (None, Some(hex)) => parse_sha256(&hex).map_err(at)?,
            _ => return Err(at("give exactly one of `token` and `sha256`".into())),
        };
        let expires = self
            .expires
            .map(|s| {
                DateTime::parse_from_rfc3339(&s)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| at(format!("expires {s:?} is not an RFC 3339 time: {e}")))
            })
            .transpose()?;
        let sources = match self.role {
            Role::Ingest if self.sources.is_empty() => {
                return Err(at(
                    "an ingest token needs `sources`, the globs of the sources it may push (\"*\" for all)".into(),
                ))
            }
            Role::Ingest => source_globs(self.sources).map_err(at)?,
            Role::Read | Role::Admin if !self.sources.is_empty() => {
                return Err(at(format!(
                    "`sources` limits ingest tokens only; a {} token cannot have it",
                    self.role.as_str()
                )))
            }
            Role::Read | Role::Admin => None,
        };
        Ok(Token {
            name,
            role: self.role,
            sources,
            digest,
            expires,
        })
    }
}

/// What a token's text may be: RFC 6750's bearer token alphabet.
fn check_secret(text: &str) -> Result<(), String> {
    if !(MIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&text.len()) {
        return Err(format!(
            "`token` must be {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} characters long"
        ));
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._~+/=".contains(c))
    {
        return Err("`token` may hold only A-Z a-z 0-9 - . _ ~ + / =".into());
    }
    Ok(())
}

fn parse_sha256(hex: &str) -> Result<[u8; 32], String> {
    let bad = || "`sha256` must be 64 hex digits (the output of `sha256sum`)".to_string();
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// `None` when the globs allow every source.
fn source_globs(globs: Vec<String>) -> Result<Option<SourceGlobs>, String> {
    for glob in &globs {
        let ok = !glob.is_empty()
            && glob.len() <= MAX_GLOB_LEN
            && glob
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-*?".contains(c));
        if !ok {
            return Err(format!(
                "source glob {glob:?}: use 1-{MAX_GLOB_LEN} characters of source names ([A-Za-z0-9._:-]) and the wildcards * and ?"
            ));
        }
    }
    if globs.iter().any(|g| g == "*") {
        return Ok(None);
    }
    let matcher = NameMatcher::parse_list(&globs.join(",")).map_err(|e| e.to_string())?;
    Ok(Some(SourceGlobs { globs, matcher }))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

/// A file holding secrets that anyone on the host can read is worth a
/// warning, not a refusal: containers often mount secrets that way.
#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o004 != 0 {
            tracing::warn!(
                path = %path.display(),
                "the tokens file is readable by every user on this host; chmod o-r it"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}
