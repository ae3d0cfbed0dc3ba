//! Sections whose types still live here until their components own them:
//! the MongoDB store, the embedded store and query limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{secs, Problems};

/// MongoDB refuses larger write batches (`maxWriteBatchSize`).
const MONGODB_MAX_BATCH: usize = 100_000;

/// The MongoDB store; read only when `store = "mongodb"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MongoDbConfig {
    pub uri: String,
    pub database: String,
    pub hour_collection: String,
    pub day_collection: String,
    /// The series catalog (discovery): one small document per series.
    pub series_collection: String,
    /// Update statements per bulk write.
    pub statements_per_batch: usize,
    /// Bulk writes in flight at once.
    pub max_concurrent_batches: usize,
    /// Deadline for each database operation.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

/// The embedded store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// Bytes of B-tree pages kept in memory. The storage engine's own default
    /// (1 GiB) would dominate the daemon's memory.
    pub cache_size_bytes: usize,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            cache_size_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Limits on queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// Most points per series one query may return.
    pub max_points: usize,
    /// Point budget of `step=auto` when the reader gives none (capped by
    /// `max_points`).
    pub default_points: usize,
    /// Series per range or latest call.
    pub max_series: usize,
    /// Member series one cross-source aggregate may read when no rollup
    /// serves it.
    pub max_fanout: usize,
    /// Entries per discovery page.
    pub max_page: usize,
    /// Points of all series of one range read (or watch snapshot) together.
    pub max_total_points: usize,
}

impl Default for MongoDbConfig {
    fn default() -> Self {
        MongoDbConfig {
            uri: "mongodb://127.0.0.1:27017".to_string(),
            database: "tally".to_string(),
            hour_collection: "metrics_by_hour".to_string(),
            day_collection: "metrics_by_day".to_string(),
            series_collection: "tally_series".to_string(),
            statements_per_batch: 1000,
            max_concurrent_batches: 4,
            timeout: secs(10),
        }
    }
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            max_points: 100_000,
            default_points: 1_440,
            max_series: 1_000,
            max_fanout: 10_000,
            max_page: 10_000,
            max_total_points: 10_000_000,
        }
    }
}

impl MongoDbConfig {
    pub(crate) fn check(&self, c: &mut Problems) {
        let m = self;
        c.require(
            m.uri.starts_with("mongodb://") || m.uri.starts_with("mongodb+srv://"),
            "mongodb.uri",
            "must start with mongodb:// or mongodb+srv://",
        );
        if let Err(why) = check_database_name(&m.database) {
            c.fail("mongodb.database", why);
        }
        if let Err(why) = check_collection_name(&m.hour_collection) {
            c.fail("mongodb.hour_collection", why);
        }
        if let Err(why) = check_collection_name(&m.day_collection) {
            c.fail("mongodb.day_collection", why);
        }
        c.require(
            m.hour_collection != m.day_collection,
            "mongodb.day_collection",
            "must differ from mongodb.hour_collection: the two document shapes cannot share a collection",
        );
        if let Err(why) = check_collection_name(&m.series_collection) {
            c.fail("mongodb.series_collection", why);
        }
        c.require(
            ![&m.hour_collection, &m.day_collection].contains(&&m.series_collection)
                && m.series_collection != crate::store::mongodb::WRITERS_COLLECTION,
            "mongodb.series_collection",
            format!(
                "must differ from mongodb.hour_collection, mongodb.day_collection and {}: catalog entries cannot share a collection",
                crate::store::mongodb::WRITERS_COLLECTION
            ),
        );
        c.require(
            (1..=MONGODB_MAX_BATCH).contains(&m.statements_per_batch),
            "mongodb.statements_per_batch",
            format!("must be between 1 and {MONGODB_MAX_BATCH} (MongoDB's write batch limit)"),
        );
        c.at_least(
            m.max_concurrent_batches,
            1,
            "mongodb.max_concurrent_batches",
        );
        c.positive(m.timeout, "mongodb.timeout");
    }
}

impl EmbeddedConfig {
    pub(crate) fn check(&self, _: &mut Problems) {}
}

impl QueryConfig {
    pub(crate) fn check(&self, c: &mut Problems) {
        c.at_least(self.max_points, 1, "query.max_points");
        c.at_least(self.default_points, 1, "query.default_points");
        c.at_least(self.max_series, 1, "query.max_series");
        c.at_least(self.max_fanout, 1, "query.max_fanout");
        c.at_least(self.max_page, 1, "query.max_page");
        c.at_least(self.max_total_points, 1, "query.max_total_points");
    }
}

// MongoDB's own naming rules; checking them here turns a failure on the
// first write into a startup error that names the setting.
fn check_database_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() >= 64 {
        return Err("must be shorter than 64 bytes".into());
    }
    match name.chars().find(|c| "/\\. \"$*<>:|?\0".contains(*c)) {
        Some(c) => Err(format!("must not contain {c:?}")),
        None => Ok(()),
    }
}

fn check_collection_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.starts_with("system.") {
        return Err("must not start with \"system.\" (reserved by MongoDB)".into());
    }
    match name.chars().find(|c| "$\0".contains(*c)) {
        Some(c) => Err(format!("must not contain {c:?}")),
        None => Ok(()),
    }
}

/// Masks the password in a MongoDB connection string. Anything that looks
/// like `user:secret@` is masked, erring towards hiding too much.
pub fn redact_uri(uri: &str) -> String {
    let Some(scheme_end) = uri.find("://") else {
        return uri.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &uri[rest_start..];
    let Some(at) = rest.rfind('@') else {
        return uri.to_string();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &uri[..rest_start],
            &userinfo[..colon],
            &rest[at..]
        ),
        None => uri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(redact_uri("mongodb://h:1"), "mongodb://h:1");
        assert_eq!(redact_uri("mongodb://u@h"), "mongodb://u@h");
        assert_eq!(redact_uri("mongodb://u:p@h"), "mongodb://u:***@h");
        assert_eq!(
            redact_uri("mongodb+srv://u:p%40x@h/db"),
            "mongodb+srv://u:***@h/db"
        );
        assert_eq!(redact_uri("not a uri"), "not a uri");
    }
}
