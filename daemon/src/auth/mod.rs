//! Bearer tokens with roles, for the gRPC and HTTP listeners: who may
//! push, who may read, and which sources an ingest token may push for.
//!
//! The tokens file (`[auth] tokens_file`, format in `tokens`) gives each
//! token a name, a role and, for `ingest`, the globs of the sources it may
//! push. Only a SHA-256 digest of each token is kept in memory, presented
//! tokens are compared with every digest in constant time, and logs and
//! errors name tokens by their names, never by their secrets.
//!
//! [`Authenticator::authorize`] decides every request: the gRPC interceptor
//! (`grpc`) and the HTTP middleware (`http`) only carry its answer to their
//! protocols. A granted request carries a [`Grant`] in its extensions, which
//! the ingest service asks about each source. With no tokens file,
//! authentication is off and every request gets an unrestricted grant.
//!
//! The file is read again on SIGHUP ([`Authenticator::reload`]): a removed
//! token stops working and a new one starts with the next request; a file
//! that does not load leaves the tokens in force as they were.

mod config;
mod grpc;
mod http;
mod tokens;

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Deserialize;

pub use config::AuthConfig;
pub use grpc::AuthInterceptor;
pub use http::require_token;
pub use tokens::TokensError;

use tokens::{Token, TokenSet};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Push samples, for the sources its globs allow.
    Ingest,
    /// Every read: queries, discovery, watch, `/metrics`.
    Read,
    /// Both, pushing for any source.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Ingest => "ingest",
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }

    fn allows(self, need: Need) -> bool {
        matches!(
            (self, need),
            (Role::Admin, _) | (Role::Ingest, Need::Ingest) | (Role::Read, Need::Read)
        )
    }
}

/// What a request needs its token to allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Ingest,
    Read,
}

impl Need {
    fn roles(self) -> &'static str {
        match self {
            Need::Ingest => "ingest or admin",
            Need::Read => "read or admin",
        }
    }
}

/// Why a request was refused. The messages go to clients: they name the
/// token by its name, never by its secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("no bearer token: send the header `authorization: Bearer <token>`")]
    Missing,
    #[error("the authorization header is not `Bearer <token>`")]
    Malformed,
    #[error("unknown bearer token")]
    Unknown,
    #[error("token {name:?} expired")]
    Expired { name: String },
    #[error("token {name:?} has role {role}; this needs a token with role {needs}")]
    Forbidden {
        name: String,
        role: &'static str,
        needs: &'static str,
    },
}

impl Denied {
    /// Whether the client is known but not allowed (403 / PERMISSION_DENIED)
    /// rather than not known (401 / UNAUTHENTICATED).
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Denied::Forbidden { .. })
    }

    /// Label value for `tally_auth_denied_total{reason=…}`.
    pub fn reason(&self) -> &'static str {
        match self {
            Denied::Missing => "missing",
            Denied::Malformed => "malformed",
            Denied::Unknown => "unknown",
            Denied::Expired { .. } => "expired",
            Denied::Forbidden { .. } => "forbidden",
        }
    }
}

/// What a granted request may do, carried in its extensions.
#[derive(Debug, Clone)]
pub struct Grant {
    /// `None` when authentication is off.
    token: Option<Arc<Token>>,
}

impl Grant {
    /// Everything allowed: authentication is off.
    pub fn open() -> Grant {
        Grant { token: None }
    }

    /// Whether some sources are out of this grant's reach.
    pub fn limits_sources(&self) -> bool {
        self.token.as_ref().is_some_and(|t| t.sources.is_some())
    }

    /// `None` if this grant may push for `source`, else why not.
    pub fn source_refusal(&self, source: &str) -> Option<String> {
        let token = self.token.as_ref()?;
        let globs = token.sources.as_ref()?;
        (!globs.matches(source)).then(|| {
            format!(
                "token {:?} may push only sources matching {}",
                token.name,
                globs.list()
            )
        })
    }
}

/// Decides requests against the tokens in force; cheap to clone.
#[derive(Clone, Default)]
pub struct Authenticator {
    /// `None` when authentication is off.
    tokens: Option<Arc<Tokens>>,
}

struct Tokens {
    path: PathBuf,
    current: RwLock<Arc<TokenSet>>,
}

impl Authenticator {
    /// Reads the tokens file `config` names; off when it names none.
    pub fn load(config: &AuthConfig) -> Result<Authenticator, TokensError> {
        if !config.enabled() {
            return Ok(Authenticator::default());
        }
        let set = TokenSet::read(&config.tokens_file)?;
        Ok(Authenticator {
            tokens: Some(Arc::new(Tokens {
                path: config.tokens_file.clone(),
                current: RwLock::new(Arc::new(set)),
            })),
        })
    }

    pub fn enabled(&self) -> bool {
        self.tokens.is_some()
    }

    /// Reads the tokens file again; on success the new tokens are in force
    /// and their names are returned (for the log), on failure the old ones
    /// stay. `Ok` with no names when authentication is off.
    pub fn reload(&self) -> Result<Vec<String>, TokensError> {
        let Some(tokens) = &self.tokens else {
            return Ok(Vec::new());
        };
        let set = TokenSet::read(&tokens.path)?;
        let names = set.names();
        *tokens.current.write() = Arc::new(set);
        Ok(names)
    }

    /// Names of the tokens in force.
    pub fn token_names(&self) -> Vec<String> {
        self.tokens
            .as_ref()
            .map(|t| t.current.read().names())
            .unwrap_or_default()
    }

    /// Decides a request that needs `need`, given its `authorization`
    /// header value if it had one.
    pub fn authorize(&self, header: Option<&[u8]>, need: Need) -> Result<Grant, Denied> {
        let Some(tokens) = &self.tokens else {
            return Ok(Grant::open());
        };
        let secret = bearer(header.ok_or(Denied::Missing)?)?;
        let set = tokens.current.read().clone();
        let token = set.find(secret).ok_or(Denied::Unknown)?;
        if token.expired_at(chrono::Utc::now()) {
            return Err(Denied::Expired {
                name: token.name.clone(),
            });
        }
        if !token.role.allows(need) {
            return Err(Denied::Forbidden {
                name: token.name.clone(),
                role: token.role.as_str(),
                needs: need.roles(),
            });
        }
        Ok(Grant { token: Some(token) })
    }
}

/// Counts and logs (at debug level: a scanner would flood the log) one
/// refused request.
fn count_denied(listener: &'static str, denied: &Denied) {
    metrics::counter!("tally_auth_denied_total", "listener" => listener, "reason" => denied.reason())
        .increment(1);
    tracing::debug!(
        listener,
        reason = denied.reason(),
        "request refused: {denied}"
    );
}

/// The token of an `authorization: Bearer <token>` value (RFC 6750: the
/// scheme is case-insensitive).
fn bearer(header: &[u8]) -> Result<&[u8], Denied> {
    let (scheme, rest) = header.split_at_checked(6).ok_or(Denied::Malformed)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return Err(Denied::Malformed);
    }
    let token = rest.trim_ascii();
    if token.is_empty() {
        return Err(Denied::Malformed);
    }
    Ok(token)
}

#[cfg(test)]
mod tests;
