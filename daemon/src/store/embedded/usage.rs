//! Where the file's bytes go, table by table: what `tallyd store-usage`
//! prints, with tallyd stopped. `tally_store_file_bytes` and
//! `tally_store_document_bytes` say how far the file is from its documents;
//! this says why: the documents' own bytes (hour documents and minute
//! blocks packed), the checkpoint log, the room the engine's pages leave
//! empty (a value that fills more than half a page leaves the rest; a
//! compressed log chunk takes a page of a power-of-two size), and the
//! pages the file holds free for later commits.
//!
//! Counting walks every page of every table, so it is not a metric: at a
//! gigabyte it reads the whole file. The file's length is not what it
//! takes: the engine grows it ahead, past the first gigabyte a gigabyte at
//! a time, and what it has not written yet takes no disk, so both are
//! shown (`tally_store_file_bytes` is the second).

use std::fmt;
use std::path::Path;

use redb::{ReadableDatabase, ReadableTableMetadata, TableHandle};

use super::engine;
use super::errors::{db_err, invalid};
use super::layout::{
    DAY_MINUTES, DAY_MINUTES_LEN, DAY_SUMMARY, DAY_SUMMARY_LEN, FILE_NAME, HOUR_DOCS, HOUR_DOC_LEN,
    LEGACY_DAY_MINUTES, LEGACY_DAY_SUMMARY, LEGACY_HOUR_DOCS,
};
use super::EmbeddedConfig;
use crate::store::StoreError;

/// One table's share of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableUsage {
    pub name: String,
    pub entries: u64,
    /// Keys and values as stored (a compressed log chunk as compressed).
    pub stored_bytes: u64,
    /// Branch pages' keys and the pages' own headers.
    pub metadata_bytes: u64,
    /// Room left empty in the table's pages.
    pub fragmented_bytes: u64,
    pub leaf_pages: u64,
    pub branch_pages: u64,
}

impl TableUsage {
    /// The bytes of the pages the table holds.
    pub fn page_bytes(&self) -> u64 {
        self.stored_bytes + self.metadata_bytes + self.fragmented_bytes
    }
}

/// The whole file's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileUsage {
    /// The file's length.
    pub file_bytes: u64,
    /// What it takes on disk: the engine grows its file ahead, up to the
    /// next gigabyte past the first, and pages not yet written take none.
    pub disk_bytes: u64,
    pub page_size: u64,
    /// Pages in use by tables and by the engine's own bookkeeping.
    pub allocated_pages: u64,
    pub tables: Vec<TableUsage>,
}

impl FileUsage {
    /// Bytes the file holds that no page in use covers: free pages, kept
    /// for later commits, and the room it was grown ahead by.
    pub fn free_bytes(&self) -> u64 {
        self.file_bytes
            .saturating_sub(self.allocated_pages * self.page_size)
    }

    /// The free bytes that take disk: pages once written and freed since.
    pub fn free_disk_bytes(&self) -> u64 {
        let never_written = self.file_bytes.saturating_sub(self.disk_bytes);
        self.free_bytes().saturating_sub(never_written)
    }

    /// The stored bytes of the hour and day documents and their keys (hour
    /// documents and minute blocks packed, `packed.rs`).
    pub fn document_bytes(&self) -> u64 {
        self.tables
            .iter()
            .filter(|t| value_len(&t.name).is_some())
            .map(|t| t.stored_bytes)
            .sum()
    }

    /// The bytes of the hour and day documents unpacked, as
    /// `tally_store_document_bytes` counts them: each table's entries times
    /// its values' length.
    pub fn document_value_bytes(&self) -> u64 {
        self.tables
            .iter()
            .filter_map(|t| value_len(&t.name).map(|len| t.entries * len as u64))
            .sum()
    }
}

/// The unpacked length of a document table's values; `None` for the other
/// tables.
fn value_len(name: &str) -> Option<usize> {
    [
        (HOUR_DOCS.name(), HOUR_DOC_LEN),
        (DAY_SUMMARY.name(), DAY_SUMMARY_LEN),
        (DAY_MINUTES.name(), DAY_MINUTES_LEN),
        (LEGACY_HOUR_DOCS.name(), HOUR_DOC_LEN),
        (LEGACY_DAY_SUMMARY.name(), DAY_SUMMARY_LEN),
        (LEGACY_DAY_MINUTES.name(), DAY_MINUTES_LEN),
    ]
    .into_iter()
    .find_map(|(table, len)| (table == name).then_some(len))
}

/// Counts what the store file in `dir` holds. The file must not be open in
/// a running tallyd (the storage engine holds it exclusively); opening it
/// here repairs it first if a crash left it without its allocator state.
pub fn file_usage(dir: &Path) -> Result<FileUsage, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(FILE_NAME);
    let meta = std::fs::metadata(&path)
        .map_err(|e| invalid(format!("no store file at {}: {e}", path.display())))?;
    let db = engine::open_existing(&path, &EmbeddedConfig::default())?;
    let read = db.begin_read().map_err(db_err)?;
    let mut tables = Vec::new();
    for handle in read.list_tables().map_err(db_err)? {
        let name = handle.name().to_string();
        let table = read.open_untyped_table(handle).map_err(db_err)?;
        let stats = table.stats().map_err(db_err)?;
        tables.push(TableUsage {
            name,
            entries: table.len().map_err(db_err)?,
            stored_bytes: stats.stored_bytes(),
            metadata_bytes: stats.metadata_bytes(),
            fragmented_bytes: stats.fragmented_bytes(),
            leaf_pages: stats.leaf_pages(),
            branch_pages: stats.branch_pages(),
        });
    }
    drop(read);
    // Only a write transaction counts the allocated pages; it is dropped
    // without a commit, so nothing is written.
    let whole = db.begin_write().map_err(db_err)?.stats().map_err(db_err)?;
    tables.sort_by_key(|t| std::cmp::Reverse(t.page_bytes()));
    Ok(FileUsage {
        file_bytes: meta.len(),
        disk_bytes: (meta.blocks() * 512).min(meta.len()),
        page_size: whole.page_size() as u64,
        allocated_pages: whole.allocated_pages(),
        tables,
    })
}

impl fmt::Display for FileUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        writeln!(
            f,
            "{:<26} {:>12} {:>11} {:>11} {:>11} {:>11} {:>10}",
            "table", "entries", "stored MB", "meta MB", "empty MB", "pages MB", "of disk"
        )?;
        for t in &self.tables {
            writeln!(
                f,
                "{:<26} {:>12} {:>11.1} {:>11.1} {:>11.1} {:>11.1} {:>9.1}%",
                t.name,
                t.entries,
                mb(t.stored_bytes),
                mb(t.metadata_bytes),
                mb(t.fragmented_bytes),
                mb(t.page_bytes()),
                percent(t.page_bytes(), self.disk_bytes),
            )?;
        }
        let in_tables: u64 = self.tables.iter().map(TableUsage::page_bytes).sum();
        let engine = (self.allocated_pages * self.page_size).saturating_sub(in_tables);
        writeln!(
            f,
            "engine bookkeeping {:.1} MB; free pages {:.1} MB, {:.1} of them on disk \
             (the rest is room the file was grown ahead by, never written)",
            mb(engine),
            mb(self.free_bytes()),
            mb(self.free_disk_bytes()),
        )?;
        writeln!(
            f,
            "file {:.1} MB long, {:.1} MB on disk",
            mb(self.file_bytes),
            mb(self.disk_bytes),
        )?;
        let docs = self.document_value_bytes();
        if docs > 0 {
            writeln!(
                f,
                "documents {:.1} MB ({:.1} MB as stored, packed, with their keys): \
                 the file takes {:.2} times their bytes on disk",
                mb(docs),
                mb(self.document_bytes()),
                self.disk_bytes as f64 / docs as f64
            )?;
        }
        Ok(())
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}
