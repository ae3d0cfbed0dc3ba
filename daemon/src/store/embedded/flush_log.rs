//! The logs of pending minutes in the store file: what makes the minutes
//! not yet folded into their documents (see `pending.rs`) survive a crash.
//!
//! * `checkpoint_log`: each checkpoint (see `checkpoint.rs`) writes the
//!   minutes changed since the one before, as they then stand, of every
//!   series it finds changed. Loading sets each minute to its latest entry.
//! * `flush_log`: what layout 3 wrote instead, at every flush: that flush's
//!   minutes, each added to the minute. Files of that layout keep their
//!   entries until the series are folded; nothing new is written there.
//!
//! # Encoding
//!
//! Both tables map `(id, chunk)` to up to [`CHUNK_BYTES`] of entries as
//! stored, so that no value grows with the fleet (an entry longer than that
//! is a chunk of its own); `id` is the flush or checkpoint. An entry is one series,
//! all integers little-endian:
//!
//! | bytes | field                                                   |
//! |-------|---------------------------------------------------------|
//! | 2     | source length `s`                                       |
//! | `s`   | source                                                  |
//! | 2     | metric key length `k` ([`SeriesId::metric_key`])        |
//! | `k`   | metric key (metric and canonical labels)                |
//! | 1     | kind code                                               |
//! | 8     | `checkpoint_log` only: the series' watermark then       |
//! | 4     | number of minutes `n`                                   |
//! | 56 n  | per minute: epoch minute (i64), slot (48 bytes, as in documents) |
//!
//! A `checkpoint_log` chunk is stored compressed (zstd, level 1): every
//! checkpoint writes an entry for every series that changed, and their
//! names (a host's name beside each of its metrics, a metric's beside each
//! host) were most of its bytes. `flush_log` chunks are stored as they are.
//!
//! Layout 2 wrote 32-byte slots (40 bytes a minute) in `flush_log`; opening
//! such a file rewrites its log once ([`upgrade_legacy`]).
//!
//! # Which minutes load
//!
//! An entry's minutes are skipped where their document's watermark is at or
//! past the entry's (the flush id in `flush_log`, the series' watermark in
//! `checkpoint_log`): a fold wrote them there, and the entry was not
//! trimmed yet. A fold takes a series' whole pending run, so every entry
//! logged before it has a watermark at or below the fold's.

use std::borrow::Cow;
use std::sync::Arc;

use hashbrown::HashMap;
use redb::{Database, ReadableDatabase, ReadableTable, Table};

use super::codec::{legacy_slot_at, put_slot, slot_at, stored_watermark};
use super::errors::{db_err, invalid};
use super::layout::{
    FlushLogKey, HourKey, CHECKPOINT_LOG, DAY_SUMMARY, DAY_SUMMARY_LEN, FLUSH_LOG, HOUR_DOCS,
    HOUR_DOC_LEN, LEGACY_SLOT_LEN, SLOT_LEN,
};
use super::pending::Pending;
use crate::labels::split_metric_key;
use crate::model::{EpochMinute, SampleKind, SeriesId, SeriesRef, Slot, Tier};
use crate::store::{Cause, StoreError};

/// The most bytes a chunk is stored in. The storage engine gives a value a
/// page of a power-of-two size, so a chunk just over 1 MiB would take a
/// 2 MiB page: half of it empty, yet held in the page cache and written to
/// the file all the same. This leaves room for the leaf page's header and
/// the key.
pub(super) const CHUNK_BYTES: usize = (1 << 20) - 256;

const MINUTE_LEN: usize = 8 + SLOT_LEN;
const LEGACY_MINUTE_LEN: usize = 8 + LEGACY_SLOT_LEN;

pub(super) type LogTable<'txn> = Table<'txn, FlushLogKey, &'static [u8]>;

/// Which log an entry is in: how it is encoded, and how it loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// Layout 2's `flush_log`: one flush's minutes, 32-byte slots.
    Legacy,
    /// `flush_log`: one flush's minutes, added to the minutes.
    Flush,
    /// `checkpoint_log`: minutes as a checkpoint found them, with the
    /// series' watermark then; they replace the minutes.
    Checkpoint,
}

/// The log entries of one flush or checkpoint, written chunk by chunk.
pub(super) struct LogWriter {
    id: u64,
    form: Form,
    chunk: u32,
    buf: Vec<u8>,
    /// Where each entry in `buf` starts: the places a chunk may end.
    starts: Vec<usize>,
    entries: usize,
    /// Stored bytes per entry byte, as the last chunk packed.
    packing: f64,
}

/// How close to [`CHUNK_BYTES`] a compressed chunk is aimed: a chunk that
/// packs a little worse than the one before still fits its page.
const PACKING_AIM: f64 = 0.95;

/// The most entry bytes a compressed chunk gathers, however well they pack.
const MAX_CHUNK_ENTRIES_BYTES: usize = 16 << 20;

impl LogWriter {
    pub(super) fn new(id: u64, form: Form) -> LogWriter {
        LogWriter {
            id,
            form,
            chunk: 0,
            buf: Vec::new(),
            starts: Vec::new(),
            entries: 0,
            packing: 1.0,
        }
    }

    /// Starts from how the last log's chunks packed, so that the first
    /// chunk of this one fills its page too.
    pub(super) fn packing_like(mut self, packing: f64) -> LogWriter {
        if packing.is_finite() && packing > 0.0 {
            self.packing = packing;
        }
        self
    }

    /// Stored bytes per entry byte, as the last chunk written packed.
    pub(super) fn packing(&self) -> f64 {
        self.packing
    }

    /// How many entry bytes make a chunk. A compressed chunk gathers as
    /// many as the last one's packing says fill [`CHUNK_BYTES`] stored:
    /// the storage engine gives a value a page of a power-of-two size, so
    /// a chunk of a megabyte of entries, packed to about a third of it,
    /// took a 512 KiB page and left a third of that empty.
    fn entries_bytes(&self) -> usize {
        match self.form {
            Form::Checkpoint => {
                let aim = CHUNK_BYTES as f64 * PACKING_AIM / self.packing;
                (aim as usize).clamp(CHUNK_BYTES / 2, MAX_CHUNK_ENTRIES_BYTES)
            }
            Form::Flush | Form::Legacy => CHUNK_BYTES,
        }
    }

    /// Appends one series' minutes, with its `watermark` (written in the
    /// checkpoint form only); writes a chunk when one is full.
    pub(super) fn push(
        &mut self,
        table: &mut LogTable<'_>,
        series: &SeriesId,
        kind: SampleKind,
        watermark: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) -> Result<(), StoreError> {
        self.starts.push(self.buf.len());
        self.append(series, kind, watermark, minutes)?;
        while self.buf.len() > self.entries_bytes() {
            // The chunk without this entry, which starts the next one.
            match self.starts.last() {
                Some(&start) if start > 0 => self.write_chunk_of(table, start)?,
                _ => break,
            }
        }
        Ok(())
    }

    /// Encodes one series' minutes into the chunk being built.
    fn append(
        &mut self,
        series: &SeriesId,
        kind: SampleKind,
        watermark: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) -> Result<(), StoreError> {
        let metric_key = series.metric_key();
        put_str(&mut self.buf, &series.source, series)?;
        put_str(&mut self.buf, &metric_key, series)?;
        self.buf.push(kind.code());
        if self.form == Form::Checkpoint {
            self.buf.extend_from_slice(&watermark.to_le_bytes());
        }
        let count_at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        let mut n: u32 = 0;
        for (m, slot) in minutes {
            self.buf.extend_from_slice(&m.to_le_bytes());
            let at = self.buf.len();
            self.buf.resize(at + SLOT_LEN, 0);
            put_slot(&mut self.buf, at, 0, &slot);
            n += 1;
        }
        self.buf[count_at..count_at + 4].copy_from_slice(&n.to_le_bytes());
        self.entries += 1;
        Ok(())
    }

    /// Writes what is left; returns whether the flush logged anything.
    pub(super) fn finish(mut self, table: &mut LogTable<'_>) -> Result<bool, StoreError> {
        while !self.buf.is_empty() {
            self.write_chunk_of(table, self.buf.len())?;
        }
        Ok(self.entries > 0)
    }

    /// Writes the first `len` bytes as a chunk, or fewer, ending at an
    /// entry, where they packed worse than the last chunk and so would
    /// take a page twice the size; keeps the rest. An entry alone past
    /// [`CHUNK_BYTES`] is written whole.
    fn write_chunk_of(&mut self, table: &mut LogTable<'_>, len: usize) -> Result<(), StoreError> {
        let mut len = len;
        let stored = loop {
            let stored = pack(self.form, &self.buf[..len])?;
            if stored.len() <= CHUNK_BYTES {
                break stored;
            }
            let fits = len as f64 * CHUNK_BYTES as f64 * PACKING_AIM / stored.len() as f64;
            match self
                .starts
                .iter()
                .rev()
                .find(|&&s| s > 0 && s as f64 <= fits)
            {
                Some(&shorter) => len = shorter,
                None => break stored,
            }
        };
        if self.form == Form::Checkpoint && len > 0 {
            self.packing = stored.len() as f64 / len as f64;
        }
        table
            .insert((self.id, self.chunk), &*stored)
            .map_err(db_err)?;
        drop(stored);
        self.chunk += 1;
        self.buf.drain(..len);
        self.starts.retain(|&s| s >= len);
        for s in &mut self.starts {
            *s -= len;
        }
        Ok(())
    }
}

/// The zstd level of checkpoint chunks: the fastest, which already takes
/// the names' repetition.
const CHUNK_LEVEL: i32 = 1;

/// Most bytes a stored chunk may unpack to: a chunk gathers at most
/// [`MAX_CHUNK_ENTRIES_BYTES`] of entries (or one entry past it), so more is
/// a damaged value, and must not take the memory it claims.
const MAX_CHUNK_PLAIN: usize = 64 << 20;

/// A chunk's entries as stored: compressed in the checkpoint form.
fn pack(form: Form, plain: &[u8]) -> Result<Cow<'_, [u8]>, StoreError> {
    match form {
        Form::Checkpoint => zstd::bulk::compress(plain, CHUNK_LEVEL)
            .map(Cow::Owned)
            .map_err(|e| {
                StoreError::Io(Cause::of(format!("compressing a checkpoint chunk: {e}"), e))
            }),
        Form::Flush | Form::Legacy => Ok(Cow::Borrowed(plain)),
    }
}

/// A stored chunk's entries.
fn unpack(key: FlushLogKey, form: Form, stored: &[u8]) -> Result<Cow<'_, [u8]>, StoreError> {
    match form {
        Form::Checkpoint => zstd::bulk::decompress(stored, MAX_CHUNK_PLAIN)
            .map(Cow::Owned)
            .map_err(|_| corrupt(key, form)),
        Form::Flush | Form::Legacy => Ok(Cow::Borrowed(stored)),
    }
}

fn put_str(buf: &mut Vec<u8>, s: &str, series: &SeriesId) -> Result<(), StoreError> {
    let len = u16::try_from(s.len()).map_err(|_| {
        invalid(format!(
            "{series}: a name of {} bytes is too long to log",
            s.len()
        ))
    })?;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
    Ok(())
}

/// Deletes the entries of both logs below `id` (a flush or checkpoint id):
/// every series in them has been folded since.
pub(super) fn trim_below(txn: &redb::WriteTransaction, id: u64) -> Result<(), StoreError> {
    for def in [FLUSH_LOG, CHECKPOINT_LOG] {
        let mut table = txn.open_table(def).map_err(db_err)?;
        table
            .retain_in(..(id, 0u32), |_, _| false)
            .map_err(db_err)?;
    }
    Ok(())
}

/// [`forget_series_in`] both logs.
pub(super) fn forget_series(
    txn: &redb::WriteTransaction,
    series: &SeriesId,
) -> Result<(), StoreError> {
    let mut log = txn.open_table(FLUSH_LOG).map_err(db_err)?;
    forget_series_in(&mut log, Form::Flush, series)?;
    let mut log = txn.open_table(CHECKPOINT_LOG).map_err(db_err)?;
    forget_series_in(&mut log, Form::Checkpoint, series)
}

/// Deletes every entry of `series` from the log: a commit that forgets its
/// pending minutes (its document is damaged, and they were set aside) must
/// not leave them to come back at the next open. A chunk left empty goes.
/// Rare (a damaged document), so two passes over the log: one to find the
/// chunks holding the series, keeping only their keys, one to rewrite them.
fn forget_series_in(
    table: &mut LogTable<'_>,
    form: Form,
    series: &SeriesId,
) -> Result<(), StoreError> {
    let metric_key = series.metric_key();
    let is_series = |e: &EntryRef<'_>| e.source == &*series.source && e.metric_key == &*metric_key;
    let mut holding = Vec::new();
    for row in table.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let key = k.value();
        let plain = unpack(key, form, v.value())?;
        if entries(key, form, &plain)?
            .iter()
            .any(|(e, _)| is_series(e))
        {
            holding.push(key);
        }
    }
    for key in holding {
        let kept: Vec<u8> = {
            let Some(v) = table.get(key).map_err(db_err)? else {
                continue;
            };
            let plain = unpack(key, form, v.value())?;
            entries(key, form, &plain)?
                .iter()
                .filter(|(e, _)| !is_series(e))
                .flat_map(|(_, raw)| raw.iter().copied())
                .collect()
        };
        if kept.is_empty() {
            table.remove(key).map_err(db_err)?;
        } else {
            table.insert(key, &*pack(form, &kept)?).map_err(db_err)?;
        }
    }
    Ok(())
}

/// The entries of one chunk, each with its bytes as they lie in it.
fn entries(
    key: FlushLogKey,
    form: Form,
    chunk: &[u8],
) -> Result<Vec<(EntryRef<'_>, &[u8])>, StoreError> {
    let mut out = Vec::new();
    let mut rest = chunk;
    while !rest.is_empty() {
        let before = rest;
        let entry = decode_entry(&mut rest, key.0, form).ok_or_else(|| corrupt(key, form))?;
        out.push((entry, &before[..before.len() - rest.len()]));
    }
    Ok(out)
}

/// One entry as it lies in the log: a series' minutes from one flush, its
/// names borrowed. Start reads one per series per flush still in the log
/// (millions at a million series), so nothing is allocated for an entry
/// whose series was met before.
struct EntryRef<'a> {
    source: &'a str,
    metric_key: &'a str,
    kind: SampleKind,
    /// The flush id of a flush entry, the series' watermark of a
    /// checkpoint entry.
    watermark: u64,
    raw: &'a [u8],
    legacy: bool,
}

/// The error for a malformed chunk of `form`'s table.
fn corrupt(key: FlushLogKey, form: Form) -> StoreError {
    let doc = match form {
        Form::Checkpoint => super::layout::checkpoint_log_name(key.0, key.1),
        Form::Flush | Form::Legacy => super::layout::flush_log_name(key.0, key.1),
    };
    StoreError::Corrupt {
        doc,
        reason: "a log entry is cut short or malformed".into(),
    }
}

impl EntryRef<'_> {
    fn minutes(&self) -> impl Iterator<Item = (EpochMinute, Slot)> + '_ {
        let (len, slot) = if self.legacy {
            (
                LEGACY_MINUTE_LEN,
                legacy_slot_at as fn(&[u8], usize, usize) -> Slot,
            )
        } else {
            (MINUTE_LEN, slot_at as fn(&[u8], usize, usize) -> Slot)
        };
        self.raw.chunks_exact(len).map(move |c| {
            let mut m = [0u8; 8];
            m.copy_from_slice(&c[..8]);
            (i64::from_le_bytes(m), slot(c, 8, 0))
        })
    }

    /// Its series by name, if the names are a series' (checked only where
    /// they are stored: [`SeriesId::from_metric_key`]).
    fn series_ref(&self) -> Option<SeriesRef<'_>> {
        let (metric, labels) = split_metric_key(self.metric_key)?;
        Some(SeriesRef {
            source: self.source,
            metric,
            labels,
        })
    }

    fn series(&self) -> Option<SeriesId> {
        SeriesId::from_metric_key(self.source, self.metric_key)
    }
}

/// Every entry of `table` (of `form`), oldest first, into `pending`.
/// `keep(entry, kept)` puts into `kept` the minutes of an entry that are
/// still pending (those already in their documents are not).
fn load(
    table: &impl ReadableTable<FlushLogKey, &'static [u8]>,
    form: Form,
    pending: &mut Pending,
    mut keep: impl FnMut(&EntryRef<'_>, &mut Vec<(EpochMinute, Slot)>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut kept = Vec::new();
    for row in table.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let key = k.value();
        let plain = unpack(key, form, v.value())?;
        let mut bytes: &[u8] = &plain;
        while !bytes.is_empty() {
            let entry = decode_entry(&mut bytes, key.0, form).ok_or_else(|| corrupt(key, form))?;
            kept.clear();
            keep(&entry, &mut kept)?;
            if kept.is_empty() {
                continue;
            }
            let known = entry.series_ref().ok_or_else(|| corrupt(key, form))?;
            let minutes = kept.iter().copied();
            let merged = match form {
                Form::Checkpoint => {
                    pending.replace_known(known, entry.kind, entry.watermark, minutes)
                }
                Form::Flush | Form::Legacy => {
                    pending.add_to_known(known, entry.kind, key.0, minutes)
                }
            };
            if !merged {
                let series = Arc::new(entry.series().ok_or_else(|| corrupt(key, form))?);
                let minutes = kept.iter().copied();
                match form {
                    Form::Checkpoint => {
                        pending.replace(&series, entry.kind, key.0, entry.watermark, minutes);
                    }
                    Form::Flush | Form::Legacy => pending.add(&series, entry.kind, key.0, minutes),
                }
            }
        }
    }
    Ok(())
}

/// One entry, its slots in today's encoding or, when `legacy`, layout 2's.
/// `id` is its chunk's; `form` says which table the chunk is from.
fn decode_entry<'a>(bytes: &mut &'a [u8], id: u64, form: Form) -> Option<EntryRef<'a>> {
    let legacy = form == Form::Legacy;
    let source = take_str(bytes)?;
    let metric_key = take_str(bytes)?;
    let kind = SampleKind::from_code(*take(bytes, 1)?.first()?)?;
    let watermark = match form {
        Form::Checkpoint => u64::from_le_bytes(take(bytes, 8)?.try_into().ok()?),
        Form::Flush | Form::Legacy => id,
    };
    let n = u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?) as usize;
    let len = if legacy {
        LEGACY_MINUTE_LEN
    } else {
        MINUTE_LEN
    };
    let raw = take(bytes, n.checked_mul(len)?)?;
    Some(EntryRef {
        source,
        metric_key,
        kind,
        watermark,
        raw,
        legacy,
    })
}

/// Rewrites a layout-2 flush log in today's encoding, chunk for chunk, in
/// the transaction that marks the file as today's layout: a crash leaves
/// either the old file or the new one.
pub(super) fn upgrade_legacy(table: &mut LogTable<'_>) -> Result<(), StoreError> {
    let mut rows = Vec::new();
    for row in table.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        rows.push((k.value(), v.value().to_vec()));
    }
    for ((id, chunk), old) in rows {
        let mut bytes = old.as_slice();
        let mut writer = LogWriter::new(id, Form::Flush);
        while !bytes.is_empty() {
            let corrupt = || StoreError::Corrupt {
                doc: super::layout::flush_log_name(id, chunk),
                reason: "a log entry of layout 2 is cut short or malformed".into(),
            };
            let entry = decode_entry(&mut bytes, id, Form::Legacy).ok_or_else(corrupt)?;
            let series = entry.series().ok_or_else(corrupt)?;
            writer.append(&series, entry.kind, id, entry.minutes())?;
        }
        table
            .insert((id, chunk), writer.buf.as_slice())
            .map_err(db_err)?;
    }
    Ok(())
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if bytes.len() < n {
        return None;
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Some(head)
}

fn take_str<'a>(bytes: &mut &'a [u8]) -> Option<&'a str> {
    let len = u16::from_le_bytes(take(bytes, 2)?.try_into().ok()?);
    std::str::from_utf8(take(bytes, usize::from(len))?).ok()
}

/// The pending minutes of `db`'s logs: their entries, less the minutes
/// whose documents already hold them (see the module documentation).
pub(super) fn load_pending(db: &Database) -> Result<Pending, StoreError> {
    let txn = db.begin_read().map_err(db_err)?;
    let hours = txn.open_table(HOUR_DOCS).map_err(db_err)?;
    let days = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
    let mut marks = DocWatermarks::default();
    let mut pending = Pending::default();
    for (def, form) in [(FLUSH_LOG, Form::Flush), (CHECKPOINT_LOG, Form::Checkpoint)] {
        let log = txn.open_table(def).map_err(db_err)?;
        load(&log, form, &mut pending, |entry, kept| {
            for (m, slot) in entry.minutes() {
                let stored = marks.of(&hours, &days, entry.source, entry.metric_key, m)?;
                if stored < entry.watermark {
                    kept.push((m, slot));
                }
            }
            Ok(())
        })?;
    }
    metrics::gauge!("tally_store_pending_series", "store" => "embedded").set(pending.len() as f64);
    Ok(pending)
}

/// Documents' watermarks seen so far, by series key, then hour: the higher
/// of the hour document's and its day's. Either one at or past a flush
/// holds that flush's minutes of the hour (a fold writes both together, the
/// day one with a lower watermark when the fold is split: `split.rs`); the
/// day alone tells once the retention sweep has deleted the hour.
/// Looked up once per series and hour, with one key buffer: no allocation
/// per lookup of a series met before.
#[derive(Default)]
pub(super) struct DocWatermarks {
    known: HashMap<String, Vec<(i64, u64)>, ahash::RandomState>,
    key: String,
}

impl DocWatermarks {
    /// The watermark of minute `m`'s documents of the series named.
    pub(super) fn of(
        &mut self,
        hours: &impl ReadableTable<HourKey<'static>, &'static [u8]>,
        days: &impl ReadableTable<HourKey<'static>, &'static [u8]>,
        source: &str,
        metric_key: &str,
        m: EpochMinute,
    ) -> Result<u64, StoreError> {
        self.key.clear();
        self.key.push_str(source);
        self.key.push('|');
        self.key.push_str(metric_key);
        let known = self.known.entry_ref(self.key.as_str()).or_default();
        let hour = Tier::Hour.period_start(m);
        if let Some(&(_, w)) = known.iter().find(|(h, _)| *h == hour) {
            return Ok(w);
        }
        let day = Tier::Day.period_start(m);
        let h = hours.get((hour, source, metric_key)).map_err(db_err)?;
        let d = days.get((day, source, metric_key)).map_err(db_err)?;
        let w = stored_watermark::<HOUR_DOC_LEN>(h.as_ref().map(|v| v.value())).max(
            stored_watermark::<DAY_SUMMARY_LEN>(d.as_ref().map(|v| v.value())),
        );
        known.push((hour, w));
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use redb::{Database, ReadableDatabase, ReadableTable};

    use super::*;
    use crate::model::MINUTE_S;

    /// Chunks stay within [`CHUNK_BYTES`] (so each fits its page), and
    /// every entry is in them once, in order; a single entry longer than a
    /// chunk is written whole.
    #[test]
    fn chunks_fit_their_pages_and_keep_every_entry() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("log.redb")).unwrap();
        let t0 = 1_795_000_000 / MINUTE_S * MINUTE_S;
        // About 100 bytes an entry: ~25,000 of them fill several chunks.
        let entries: Vec<(SeriesId, usize)> = (0..25_000)
            .map(|i| (SeriesId::new(&format!("host-{i}"), "cpu"), 1))
            .chain([(SeriesId::new("big", "cpu"), CHUNK_BYTES / MINUTE_LEN + 10)])
            .chain((0..3).map(|i| (SeriesId::new(&format!("after-{i}"), "cpu"), 2)))
            .collect();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(FLUSH_LOG).unwrap();
            let mut log = LogWriter::new(7, Form::Flush);
            for (series, n) in &entries {
                let minutes = (0..*n as i64).map(|m| (t0 + m * MINUTE_S, Slot::of(1.0)));
                log.push(&mut table, series, SampleKind::Gauge, 7, minutes)
                    .unwrap();
            }
            assert!(log.finish(&mut table).unwrap());
        }
        txn.commit().unwrap();

        let txn = db.begin_read().unwrap();
        let table = txn.open_table(FLUSH_LOG).unwrap();
        let mut seen = Vec::new();
        let mut chunks = 0;
        for row in table.iter().unwrap() {
            let (k, v) = row.unwrap();
            assert_eq!(k.value(), (7, chunks));
            let mut bytes = v.value();
            let one = bytes.len() > CHUNK_BYTES;
            let before = seen.len();
            while !bytes.is_empty() {
                let entry = decode_entry(&mut bytes, 7, Form::Flush).unwrap();
                seen.push((entry.series().unwrap(), entry.minutes().count()));
            }
            assert!(
                !one || seen.len() == before + 1,
                "only a lone entry may pass the chunk size"
            );
            chunks += 1;
        }
        assert!(chunks > 3, "{chunks} chunks");
        assert_eq!(seen, entries);
    }

    type Entries = Vec<(SeriesId, Vec<f64>)>;

    /// Writes `entries` as one checkpoint's log, starting from `packing`;
    /// returns each chunk's stored size, the entries read back, and how
    /// the last chunk packed.
    fn checkpoint_log(
        entries: &[(SeriesId, Vec<f64>)],
        packing: f64,
    ) -> (Vec<usize>, Entries, f64) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("log.redb")).unwrap();
        let t0 = 1_795_000_000 / MINUTE_S * MINUTE_S;
        let txn = db.begin_write().unwrap();
        let packed = {
            let mut table = txn.open_table(CHECKPOINT_LOG).unwrap();
            let mut log = LogWriter::new(9, Form::Checkpoint).packing_like(packing);
            for (series, values) in entries {
                let minutes = values.iter().enumerate();
                let minutes = minutes.map(|(m, v)| (t0 + m as i64 * MINUTE_S, Slot::of(*v)));
                log.push(&mut table, series, SampleKind::Gauge, 9, minutes)
                    .unwrap();
            }
            let packed = log.packing();
            assert!(log.finish(&mut table).unwrap());
            packed
        };
        txn.commit().unwrap();
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(CHECKPOINT_LOG).unwrap();
        let (mut sizes, mut seen) = (Vec::new(), Vec::new());
        for row in table.iter().unwrap() {
            let (k, v) = row.unwrap();
            sizes.push(v.value().len());
            let plain = unpack(k.value(), Form::Checkpoint, v.value()).unwrap();
            let mut bytes = &plain[..];
            while !bytes.is_empty() {
                let entry = decode_entry(&mut bytes, 9, Form::Checkpoint).unwrap();
                let values = entry.minutes().map(|(_, slot)| slot.sum).collect();
                seen.push((entry.series().unwrap(), values));
            }
        }
        (sizes, seen, packed)
    }

    /// A fleet's entries as a checkpoint writes them: hosts' metrics with
    /// a few minutes of values that do not repeat.
    fn fleet_entries(series: usize, noise: u64) -> Entries {
        let mut x = noise | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..series)
            .map(|i| {
                let id = SeriesId::new(
                    &format!("host-{:05}", i / 20),
                    &format!("metric_{}", i % 20),
                );
                (id, (0..3).map(|_| next() * 1e6).collect())
            })
            .collect()
    }

    /// Compressed checkpoint chunks gather as many entries as fill the
    /// stored chunk, not a chunk's worth before packing: every chunk but
    /// the last fills most of its page once the packing is known, none
    /// passes it, and every entry reads back once, in order.
    #[test]
    fn checkpoint_chunks_fill_their_pages_once_the_packing_is_known() {
        let entries = fleet_entries(100_000, 7);
        let (first, seen, packing) = checkpoint_log(&entries, 1.0);
        assert_eq!(seen, entries);
        assert!(packing < 0.9, "the entries pack: {packing}");
        assert!(first.iter().all(|&n| n <= CHUNK_BYTES), "{first:?}");
        let (sizes, seen, _) = checkpoint_log(&entries, packing);
        assert_eq!(seen, entries);
        assert!(sizes.len() > 2, "{sizes:?}");
        assert!(sizes.iter().all(|&n| n <= CHUNK_BYTES), "{sizes:?}");
        let full = &sizes[..sizes.len() - 1];
        assert!(
            full.iter().all(|&n| n as f64 >= CHUNK_BYTES as f64 * 0.85),
            "chunks should fill their pages: {sizes:?}"
        );
        assert!(sizes.len() < first.len(), "{sizes:?} against {first:?}");
    }

    /// Entries that pack far worse than the last chunk's still stay within
    /// the page: the chunk ends earlier, at an entry.
    #[test]
    fn a_chunk_that_packs_worse_than_the_last_ends_earlier() {
        // Only names change, and very little: these pack very well.
        let mut entries: Vec<_> = (0..40_000)
            .map(|i| (SeriesId::new("host-00001", &format!("m{i}")), vec![0.0; 3]))
            .collect();
        entries.extend(fleet_entries(40_000, 11));
        let (sizes, seen, _) = checkpoint_log(&entries, 0.05);
        assert_eq!(seen, entries);
        assert!(sizes.iter().all(|&n| n <= CHUNK_BYTES), "{sizes:?}");
    }
}
