//! The store's settings (`[mongodb]` in the config file), their checks, and
//! how they become driver options. They live with the store, which knows
//! MongoDB's limits and names, so the daemon's configuration only composes
//! them and does not need to know MongoDB.

use std::time::Duration;

use bson::raw::RawDocumentBuf;
use mongodb::error::ErrorKind;
use mongodb::options::{Acknowledgment, ClientOptions};
use serde::{Deserialize, Serialize};

use crate::store::{Cause, StoreError};
use crate::validate::Problems;

/// Where each writer's flush-id reservation lives (one tiny document per
/// writer, in [`MongoDbConfig::database`]).
pub(super) const WRITERS_COLLECTION: &str = "tally_writers";

/// MongoDB refuses larger write batches (`maxWriteBatchSize`, since 3.6).
pub(super) const MAX_WRITE_BATCH: usize = 100_000;

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
    /// The most update statements per second this daemon sends; flushes
    /// are spaced to stay under it (reads still see the data in between,
    /// from memory). 0: no bound.
    pub max_statements_per_s: u64,
    /// How long sealing a closed hour into the day documents is spread
    /// over: each flush seals a share of the hour's series, so a large
    /// fleet does not double one flush's statements at every hour.
    #[serde(with = "humantime_serde")]
    pub seal_spread: Duration,
    /// No longer used (day documents are sealed when an hour closes);
    /// accepted so that an older configuration still starts, with a
    /// warning.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub day_write_delay: Option<Duration>,
}

/// The longest `mongodb.seal_spread`: day documents lag their hours by up
/// to an hour plus this, and reads cover the lag from the hour documents.
pub(super) const MAX_SEAL_SPREAD: Duration = Duration::from_secs(1800);

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
            timeout: Duration::from_secs(10),
            max_statements_per_s: 0,
            seal_spread: Duration::from_secs(300),
            day_write_delay: None,
        }
    }
}

impl MongoDbConfig {
    /// Adds what is wrong with the settings, in the order the daemon's
    /// startup check reports them.
    pub(crate) fn check(&self, p: &mut Problems) {
        let uri_ok = self.uri.starts_with("mongodb://") || self.uri.starts_with("mongodb+srv://");
        p.require(
            uri_ok,
            "mongodb.uri",
            "must start with mongodb:// or mongodb+srv://",
        );
        let names = [
            ("mongodb.database", check_database_name(&self.database)),
            (
                "mongodb.hour_collection",
                check_collection_name(&self.hour_collection),
            ),
            (
                "mongodb.day_collection",
                check_collection_name(&self.day_collection),
            ),
        ];
        for (key, check) in names {
            if let Err(why) = check {
                p.fail(key, why);
            }
        }
        p.require(
            self.hour_collection != self.day_collection,
            "mongodb.day_collection",
            "must differ from mongodb.hour_collection: the two document shapes cannot share a collection",
        );
        if let Err(why) = check_collection_name(&self.series_collection) {
            p.fail("mongodb.series_collection", why);
        }
        p.require(
            ![&self.hour_collection, &self.day_collection].contains(&&self.series_collection)
                && self.series_collection != WRITERS_COLLECTION,
            "mongodb.series_collection",
            format!(
                "must differ from mongodb.hour_collection, mongodb.day_collection and {WRITERS_COLLECTION}: catalog entries cannot share a collection"
            ),
        );
        p.require(
            (1..=MAX_WRITE_BATCH).contains(&self.statements_per_batch),
            "mongodb.statements_per_batch",
            format!("must be between 1 and {MAX_WRITE_BATCH} (MongoDB's write batch limit)"),
        );
        p.at_least(
            self.max_concurrent_batches,
            1,
            "mongodb.max_concurrent_batches",
        );
        p.positive(self.timeout, "mongodb.timeout");
        p.require(
            self.seal_spread <= MAX_SEAL_SPREAD,
            "mongodb.seal_spread",
            "must be at most 30m: day documents lag their hours by up to an hour plus this",
        );
    }

    /// The checks `connect` cannot do without: names the server would refuse
    /// or that would mix documents of different shapes. Looser than
    /// [`Self::problems`], because tools and tests connect with settings the
    /// daemon's startup check never saw.
    pub(super) fn check_names(&self) -> Result<(), StoreError> {
        for (what, name) in [
            ("database", &self.database),
            ("hour_collection", &self.hour_collection),
            ("day_collection", &self.day_collection),
            ("series_collection", &self.series_collection),
        ] {
            if name.is_empty() || name.contains('\0') || name.contains('$') {
                return Err(StoreError::Invalid(
                    format!("mongodb.{what} {name:?} is not a usable name").into(),
                ));
            }
        }
        if self.hour_collection == self.day_collection {
            return Err(StoreError::Invalid(
                "mongodb.hour_collection and mongodb.day_collection must differ".into(),
            ));
        }
        if [&self.hour_collection, &self.day_collection].contains(&&self.series_collection)
            || self.series_collection == WRITERS_COLLECTION
        {
            return Err(StoreError::Invalid(
                format!(
                    "mongodb.series_collection must differ from mongodb.hour_collection, \
                 mongodb.day_collection and {WRITERS_COLLECTION}"
                )
                .into(),
            ));
        }
        Ok(())
    }

    /// The driver's options from `uri`, with `timeout` filling in what the
    /// URI leaves, and the write concern to attach to commands (`None` for
    /// the server's default).
    pub(super) async fn client_options(
        &self,
    ) -> Result<(ClientOptions, Option<RawDocumentBuf>), StoreError> {
        let mut options = ClientOptions::parse(&self.uri).await.map_err(|e| {
            let dns = matches!(&*e.kind, ErrorKind::DnsResolve { .. });
            let cause = Cause::of(format!("mongodb.uri: {e}"), e);
            if dns {
                StoreError::Unavailable(cause)
            } else {
                StoreError::Invalid(cause)
            }
        })?;
        // Explicit URI options win.
        options.server_selection_timeout.get_or_insert(self.timeout);
        options.connect_timeout.get_or_insert(self.timeout);
        options.app_name.get_or_insert_with(|| "tallyd".to_string());
        let write_concern = match &options.write_concern {
            Some(wc) if matches!(wc.w, Some(Acknowledgment::Nodes(0))) => {
                return Err(StoreError::Invalid(
                    "mongodb.uri asks for w=0: unacknowledged writes cannot be exactly-once".into(),
                ))
            }
            Some(wc) => {
                let d = bson::to_document(wc).map_err(|e| {
                    StoreError::Invalid(Cause::of(format!("write concern: {e}"), e))
                })?;
                if d.is_empty() {
                    None
                } else {
                    Some(RawDocumentBuf::from_document(&d).map_err(|e| {
                        StoreError::Invalid(Cause::of(format!("write concern: {e}"), e))
                    })?)
                }
            }
            None => None,
        };
        Ok((options, write_concern))
    }
}

/// A retention the TTL index can hold: MongoDB keeps `expireAfterSeconds` as
/// a 32-bit integer. `retention` is (hour documents, day documents) in
/// seconds.
pub(super) fn check_retention(retention: (u64, u64)) -> Result<(), StoreError> {
    for (what, secs) in [("hour", retention.0), ("day", retention.1)] {
        if secs > i32::MAX as u64 {
            return Err(StoreError::Invalid(
                format!(
                    "{what} retention of {secs} s is longer than a TTL index allows ({} s)",
                    i32::MAX
                )
                .into(),
            ));
        }
    }
    Ok(())
}

// MongoDB's own naming rules; checking them at startup turns a failure on
// the first write into an error that names the setting.
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

/// The connection string with its password masked, for logs and the
/// effective configuration. The credentials end at the last `@` (a password
/// may hold an unescaped one) and the user name at the first `:` before it.
/// A user without a password has nothing to hide and is kept; anything that
/// is not `scheme://...@...` is returned as it is. An `@` in the options
/// after the host would mask more than the password: erring towards hiding.
pub fn redact_uri(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    let Some((credentials, hosts)) = rest.rsplit_once('@') else {
        return uri.to_string();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{hosts}"),
        None => uri.to_string(),
    }
}
