//! The dead-letter file: one JSON document per refused flush, readable by
//! an operator, with every float exact (see `exact`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::DeadLetterError;
use crate::model::{hour_slot, EpochMinute, SampleKind, SeriesId, SeriesMinutes, Slot};

/// The format's version; a reader refuses any other.
pub(super) const VERSION: u32 = 1;

/// The file of one flush's dead letters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LetterFile {
    pub version: u32,
    /// The flush they were refused from.
    pub flush_id: u64,
    /// The store that refused them (`mongodb`, `embedded`).
    pub store: String,
    /// When the file was written, Unix milliseconds.
    pub written_ms: i64,
    pub letters: Vec<Letter>,
}

/// One refused document's worth of a series: its minutes and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Letter {
    /// The series key (`source|metric{labels}`), as documents are named.
    pub series: String,
    pub kind: SampleKind,
    /// The store's error, as it gave it.
    pub error: String,
    pub minutes: Vec<StoredSlot>,
}

/// A minute slot with its minute.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StoredSlot {
    /// Minutes since the Unix epoch.
    pub minute: EpochMinute,
    pub n: u64,
    #[serde(with = "exact")]
    pub sum: f64,
    #[serde(with = "exact")]
    pub min: f64,
    #[serde(with = "exact")]
    pub max: f64,
    #[serde(with = "exact")]
    pub last: f64,
    pub last_ms: i64,
}

impl StoredSlot {
    pub fn slot(&self) -> Slot {
        Slot {
            n: self.n,
            sum: self.sum,
            min: self.min,
            max: self.max,
            last: self.last,
            last_ms: self.last_ms,
        }
    }
}

impl Letter {
    /// The minutes of `sm` (of the hour starting at `hour_start`, Unix
    /// seconds, when given) refused with `error`.
    pub fn of(sm: &SeriesMinutes, hour_start: Option<i64>, error: &str) -> Letter {
        let in_hour = |m: EpochMinute| hour_start.is_none_or(|h| hour_slot(m).hour_start == h);
        Letter {
            series: sm.series.key(),
            kind: sm.kind,
            error: error.to_owned(),
            minutes: sm
                .minutes
                .iter()
                .filter(|(m, _)| in_hour(*m))
                .map(|&(minute, s)| StoredSlot {
                    minute,
                    n: s.n,
                    sum: s.sum,
                    min: s.min,
                    max: s.max,
                    last: s.last,
                    last_ms: s.last_ms,
                })
                .collect(),
        }
    }

    /// Samples the letter holds (the sum of its minutes' counts).
    pub fn samples(&self) -> u64 {
        self.minutes.iter().map(|s| s.n).sum()
    }

    /// The letter as a flush's series, minutes ascending.
    pub(super) fn series_minutes(&self) -> Result<SeriesMinutes, DeadLetterError> {
        let series = SeriesId::from_key(&self.series).ok_or_else(|| DeadLetterError::Format {
            path: PathBuf::new(),
            reason: format!("{:?} is not a series key", self.series),
        })?;
        let mut minutes: crate::model::Minutes =
            self.minutes.iter().map(|s| (s.minute, s.slot())).collect();
        minutes.sort_by_key(|&(m, _)| m);
        let mut sm = SeriesMinutes {
            catalog: crate::model::CatalogDue::Unknown,
            series: std::sync::Arc::new(series),
            kind: self.kind,
            minutes: Default::default(),
        };
        for (m, slot) in minutes {
            match sm.minutes.last_mut() {
                Some((last, s)) if *last == m => s.merge(&slot),
                _ => sm.minutes.push((m, slot)),
            }
        }
        Ok(sm)
    }
}

/// The file name of flush `flush_id`'s letters: zero-padded, so names sort
/// in flush order.
pub(super) fn name(flush_id: u64) -> String {
    format!("flush-{flush_id:020}.json")
}

/// The file name of the letters of `series_key`'s pending minutes from
/// flush `since` on, which the embedded store found it could not store (a
/// damaged document): its own scheme, so that no flush's file replaces it,
/// and named by the run's first flush and the series, so that keeping the
/// same run again (after a crash) replaces it. The series goes in as a
/// hash, since keys hold characters file names cannot.
pub(super) fn damaged_name(since: u64, series_key: &str) -> String {
    format!("damaged-{since:020}-{:016x}.json", fnv1a(series_key))
}

/// FNV-1a, 64 bits: stable across builds and versions (the standard
/// library's hasher is not), so a name made before a restart is made the
/// same after it.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DeadLetterError + '_ {
    move |source| DeadLetterError::Io {
        path: path.to_owned(),
        source,
    }
}

/// `value` as the JSON a file holds.
pub(super) fn encode<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, DeadLetterError> {
    serde_json::to_vec_pretty(value).map_err(|e| DeadLetterError::Format {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Writes `value` as `path` durably: a temporary file written and synced,
/// renamed into place, the directory synced.
pub(super) fn write_synced<T: Serialize>(
    dir: &Path,
    path: &Path,
    value: &T,
) -> Result<(), DeadLetterError> {
    write_bytes_synced(dir, path, &encode(path, value)?)
}

/// [`write_synced`] of bytes already encoded.
pub(super) fn write_bytes_synced(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
) -> Result<(), DeadLetterError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(dir)
}

/// The size of `path` in bytes; 0 when it is not there.
pub(super) fn size(path: &Path) -> Result<u64, DeadLetterError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Removes `path` if it is there, durably.
pub(super) fn remove_synced(dir: &Path, path: &Path) -> Result<(), DeadLetterError> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn sync_dir(dir: &Path) -> Result<(), DeadLetterError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Reads a JSON file written by [`write_synced`].
pub(super) fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, DeadLetterError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    serde_json::from_slice(&bytes).map_err(|e| DeadLetterError::Format {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Whether `path` is named as a letter file: a flush's ([`name`]) or a
/// damaged document's ([`damaged_name`]).
fn is_letter(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        (n.starts_with("flush-") || n.starts_with("damaged-")) && n.ends_with(".json")
    })
}

/// How many letter files `dir` holds.
pub(super) fn count(dir: &Path) -> Result<usize, DeadLetterError> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(Result::ok)
            .filter(|e| is_letter(&e.path()))
            .count()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// The letter files in `dir`, by name (so in flush order); none when
/// the directory does not exist.
fn paths(dir: &Path) -> Result<Vec<PathBuf>, DeadLetterError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(io_err(dir))?.path();
        if is_letter(&path) {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Every letter file in `dir`, by name (so in flush order); none when the
/// directory does not exist.
pub(super) fn read_all(dir: &Path) -> Result<Vec<(PathBuf, LetterFile)>, DeadLetterError> {
    let mut out = Vec::new();
    for path in paths(dir)? {
        // A file gone since the listing was removed by this process.
        if let Some(f) = read_letters(&path)? {
            out.push((path, f));
        }
    }
    Ok(out)
}

/// The letter files in `dir` by name, in flush order, with their sizes in
/// bytes: what a replay plans its parts with, no file read.
pub(super) fn sizes(dir: &Path) -> Result<Vec<(String, u64)>, DeadLetterError> {
    let mut out = Vec::new();
    for path in paths(dir)? {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        match std::fs::metadata(&path) {
            Ok(m) => out.push((name.to_owned(), m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    Ok(out)
}

/// One letter file, its version checked; None when it is not there.
pub(super) fn read_letters(path: &Path) -> Result<Option<LetterFile>, DeadLetterError> {
    if !path.exists() {
        return Ok(None);
    }
    let f: LetterFile = read(path)?;
    if f.version != VERSION {
        return Err(DeadLetterError::Format {
            path: path.to_owned(),
            reason: format!("version {} (this tallyd reads {VERSION})", f.version),
        });
    }
    Ok(Some(f))
}

/// Floats that survive JSON exactly: written as strings in Rust's shortest
/// round-trip form and read back with Rust's correctly rounded parser (a
/// JSON number would go through the JSON parser's own float reading, which
/// may be a unit in the last place off); NaN and the infinities as the
/// strings Prometheus uses for them. A plain number is read too.
mod exact {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v.is_infinite() {
            s.serialize_str(if *v > 0.0 { "+Inf" } else { "-Inf" })
        } else {
            s.serialize_str(&v.to_string())
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(v) => Ok(v),
            Repr::Text(t) => match t.as_str() {
                "NaN" => Ok(f64::NAN),
                "+Inf" => Ok(f64::INFINITY),
                "-Inf" => Ok(f64::NEG_INFINITY),
                other => other
                    .parse::<f64>()
                    .map_err(|_| serde::de::Error::custom(format!("{other:?} is not a number"))),
            },
        }
    }
}
