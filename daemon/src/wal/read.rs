//! Reading the log back at start, in two passes so that a long log is
//! never held in memory whole:
//! - [`recover`] checks every frame and record once, cuts a damaged tail,
//!   and keeps only what each record is ([`Entry`]): enough to find where
//!   replay starts and which segment holds which flush;
//! - [`RecoveredSegment::records`] then reads a segment's records again,
//!   one at a time, for replay.
//!
//! Decoding the whole log up front held every request of it in memory at
//! once: a 45 MB log took about 250 MB of heap, and the allocator kept much
//! of that resident after replay had finished with it.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use tracing::warn;

use tally_proto::v1 as pb;

use super::record::{Record, SegmentDecoder};
use super::segment::{self, Frames};
use super::WalError;

/// What a record is, without what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Request,
    /// A request some of whose sources declare rollup groups: replay does
    /// not merge the flush before it with the flush it begins (see
    /// `crate::recovery`).
    Declaring,
    /// A flush's marker that carries baselines, with its id.
    Marker(u64),
    /// A flush's marker that carries none, with its id.
    Bare(u64),
    Checkpoint,
}

impl Entry {
    /// A marker's flush id, whether it carries baselines or not.
    pub fn flush_id(&self) -> Option<u64> {
        match self {
            Entry::Marker(id) | Entry::Bare(id) => Some(*id),
            _ => None,
        }
    }

    fn of(record: &Record) -> Entry {
        match record {
            Record::Request { request, .. }
                if request.sources.iter().any(|s| !s.groups.is_empty()) =>
            {
                Entry::Declaring
            }
            Record::Request { .. } => Entry::Request,
            Record::Marker {
                flush_id,
                baselines: Some(_),
            } => Entry::Marker(*flush_id),
            Record::Marker { flush_id, .. } => Entry::Bare(*flush_id),
            Record::Checkpoint { .. } => Entry::Checkpoint,
        }
    }
}

/// One segment read back at start: its intact records, in order.
#[derive(Debug)]
pub struct RecoveredSegment {
    pub number: u64,
    pub path: PathBuf,
    pub entries: Vec<Entry>,
}

impl RecoveredSegment {
    /// Its flushes' ids, in order.
    pub fn markers(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().filter_map(Entry::flush_id)
    }

    /// The ids of its flushes whose markers carry baselines, in order.
    pub fn baseline_markers(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().filter_map(|e| match e {
            Entry::Marker(id) => Some(*id),
            _ => None,
        })
    }

    /// Its records, read again from the file one at a time: as many as
    /// [`recover`] found intact.
    pub fn records(&self) -> Result<SegmentRecords, WalError> {
        let frames = Frames::open(&self.path).map_err(|e| WalError::Io {
            dir: self.path.display().to_string(),
            reason: format!("opening it again for replay: {e}"),
        })?;
        Ok(SegmentRecords {
            frames,
            decoder: SegmentDecoder::default(),
            spare: pb::PushRequest::default(),
            left: self.entries.len(),
            path: self.path.clone(),
        })
    }
}

/// [`RecoveredSegment::records`].
pub struct SegmentRecords {
    frames: Frames<BufReader<File>>,
    decoder: SegmentDecoder,
    /// A request handed back by [`SegmentRecords::recycle`], decoded into
    /// again.
    spare: pb::PushRequest,
    left: usize,
    path: PathBuf,
}

impl Iterator for SegmentRecords {
    type Item = Result<Record, WalError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let read = match self.frames.next() {
            Ok(Some(payload)) => self
                .decoder
                .decode_reusing(payload, std::mem::take(&mut self.spare))
                .map_err(|e| e.to_string()),
            // The first pass read and cut this file: only a change to it
            // since then gets here.
            Ok(None) => Err("a record read at start is gone".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        if read.is_err() {
            self.left = 0;
        }
        Some(read.map_err(|reason| WalError::Io {
            dir: self.path.display().to_string(),
            reason: format!("reading it again for replay: {reason}"),
        }))
    }
}

impl SegmentRecords {
    /// Hands back a request read from a record, once done with it: the
    /// next is decoded into it, so that replaying a long log reuses one
    /// request's memory rather than allocating each anew.
    pub fn recycle(&mut self, request: pb::PushRequest) {
        self.spare = request;
    }
}

fn io_error(path: &Path, e: &std::io::Error) -> WalError {
    WalError::Io {
        dir: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Reads every segment in `dir` (created if missing), cutting a torn or
/// corrupt tail off the segment it is in. Segments after a damaged one
/// cannot follow on from it: they are renamed `*.log.after-damage` and left
/// for the operator, not replayed.
pub fn recover(dir: &Path) -> Result<Vec<RecoveredSegment>, WalError> {
    let io = |e: std::io::Error| io_error(dir, &e);
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut out = Vec::new();
    let mut damaged = false;
    for (number, path) in segment::list(dir).map_err(io)? {
        if damaged {
            let aside = path.with_extension("log.after-damage");
            warn!(segment = %path.display(), "write-ahead log: segment follows a damaged one; set aside, not replayed");
            std::fs::rename(&path, aside).map_err(io)?;
            continue;
        }
        let (entries, valid) = check(&path)?;
        let len = std::fs::metadata(&path).map_err(io)?.len();
        if valid < len {
            warn!(
                segment = %path.display(),
                kept_bytes = valid,
                dropped_bytes = len - valid,
                "write-ahead log: torn or corrupt tail cut off (records past it were never acknowledged, or the disk damaged them)"
            );
            segment::truncate(&path, valid).map_err(io)?;
            damaged = true;
        }
        out.push(RecoveredSegment {
            number,
            path,
            entries,
        });
    }
    Ok(out)
}

/// The first pass over one segment: every intact frame decoded (and then
/// dropped), up to the first that is damaged or does not decode. Returns
/// what each record is and the bytes they take.
fn check(path: &Path) -> Result<(Vec<Entry>, u64), WalError> {
    let mut frames = Frames::open(path).map_err(|e| io_error(path, &e))?;
    let mut entries = Vec::new();
    let mut decoder = SegmentDecoder::default();
    let mut spare = pb::PushRequest::default();
    loop {
        let before = frames.valid();
        let Some(payload) = frames.next().map_err(|e| io_error(path, &e))? else {
            return Ok((entries, frames.valid()));
        };
        match decoder.decode_reusing(payload, std::mem::take(&mut spare)) {
            Ok(r) => {
                entries.push(Entry::of(&r));
                if let Record::Request { request, .. } = r {
                    spare = request;
                }
            }
            Err(e) => {
                warn!(segment = %path.display(), error = %e, "write-ahead log: undecodable record");
                return Ok((entries, before));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tally_proto::v1 as pb;

    use super::*;
    use crate::model::SeriesId;
    use crate::wal::record::{self, encode_checkpoint, encode_marker, encode_request, Baseline};

    fn request(source: &str) -> pb::PushRequest {
        pb::PushRequest {
            sources: vec![pb::SourceBatch {
                source: source.into(),
                ..Default::default()
            }],
        }
    }

    fn write(path: &Path, payloads: &[Vec<u8>], tail: &[u8]) {
        let mut bytes = Vec::new();
        for p in payloads {
            segment::frame(&mut bytes, p);
        }
        bytes.extend_from_slice(tail);
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn the_second_pass_reads_back_what_the_first_checked() {
        let dir = tempfile::tempdir().unwrap();
        let baseline = Baseline::new(Arc::new(SeriesId::new("h", "c")), 1, 2.0, 3);
        let records = [
            encode_checkpoint([baseline.clone()].iter()),
            encode_request(5, &[0], &request("a")),
            encode_marker(9, std::slice::from_ref(&baseline)),
            encode_request(6, &[], &request("b")),
            record::encode_bare_marker(10),
        ];
        write(&dir.path().join(segment::name(1)), &records, &[]);
        // A torn frame: a whole header whose length has too few bytes after it.
        let torn = dir.path().join(segment::name(2));
        write(&torn, &records[1..2], &[40, 0, 0, 0, 1, 2, 3, 4, 5]);
        write(&dir.path().join(segment::name(3)), &records[..1], &[]);

        let segments = recover(dir.path()).unwrap();
        assert_eq!(
            segments.len(),
            2,
            "the segment after the damaged one is set aside"
        );
        assert_eq!(
            segments[0].entries,
            [
                Entry::Checkpoint,
                Entry::Request,
                Entry::Marker(9),
                Entry::Request,
                Entry::Bare(10)
            ]
        );
        assert_eq!(segments[0].markers().collect::<Vec<_>>(), [9, 10]);
        assert_eq!(segments[0].baseline_markers().collect::<Vec<_>>(), [9]);
        assert_eq!(segments[1].entries, [Entry::Request]);
        assert_eq!(
            std::fs::metadata(&torn).unwrap().len(),
            8 + records[1].len() as u64,
            "the torn frame is cut off"
        );
        assert!(dir
            .path()
            .join("wal-0000000000000003.log.after-damage")
            .exists());

        let read: Vec<Record> = segments[0].records().unwrap().map(Result::unwrap).collect();
        let want: Vec<Record> = records.iter().map(|r| record::decode(r).unwrap()).collect();
        assert_eq!(read, want);
        let second: Vec<Record> = segments[1].records().unwrap().map(Result::unwrap).collect();
        assert_eq!(second, want[1..2]);
    }

    /// A compact request record as the writer frames it.
    fn compact(
        enc: &mut crate::wal::CompactEncoder,
        now_ms: i64,
        req: &pb::PushRequest,
    ) -> Vec<u8> {
        let mut out = vec![record::COMPACT];
        enc.encode(
            now_ms,
            &[0],
            &crate::ingest::view::PushView::of(req),
            &mut out,
        );
        out
    }

    #[test]
    fn requests_that_declare_groups_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let mut declaring = request("b");
        declaring.sources[0].groups = vec!["web".into()];
        let mut enc = crate::wal::CompactEncoder::default();
        let records = [
            compact(&mut enc, 5, &request("a")),
            compact(&mut enc, 5, &declaring),
            encode_marker(3, &[]),
        ];
        write(&dir.path().join(segment::name(1)), &records, &[]);
        let segments = recover(dir.path()).unwrap();
        assert_eq!(
            segments[0].entries,
            [Entry::Request, Entry::Declaring, Entry::Marker(3)]
        );
    }

    #[test]
    fn a_log_written_before_compact_records_replays_beside_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        // Segment 1 from an older daemon: requests as `tally.v1` bytes.
        let old = [
            encode_request(5, &[0], &request("a")),
            encode_marker(3, &[]),
        ];
        write(&dir.path().join(segment::name(1)), &old, &[]);
        // Segment 2 from the upgraded one: the same request compact, twice
        // (defined, then referred to), the second segment reading alone.
        let mut enc = crate::wal::CompactEncoder::default();
        let new = [
            encode_checkpoint(std::iter::empty()),
            compact(&mut enc, 5, &request("a")),
            compact(&mut enc, 5, &request("a")),
        ];
        write(&dir.path().join(segment::name(2)), &new, &[]);
        let segments = recover(dir.path()).unwrap();
        assert_eq!(segments[0].entries, [Entry::Request, Entry::Marker(3)]);
        assert_eq!(
            segments[1].entries,
            [Entry::Checkpoint, Entry::Request, Entry::Request]
        );
        let want = Record::Request {
            now_ms: 5,
            refused_sources: vec![0],
            request: request("a"),
        };
        let first: Vec<Record> = segments[0].records().unwrap().map(Result::unwrap).collect();
        assert_eq!(first[0], want);
        let second: Vec<Record> = segments[1].records().unwrap().map(Result::unwrap).collect();
        assert_eq!(second[1..], [want.clone(), want]);
    }

    #[test]
    fn a_compact_record_whose_definitions_are_gone_ends_the_segment_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(segment::name(1));
        let mut enc = crate::wal::CompactEncoder::default();
        let defining = compact(&mut enc, 5, &request("a"));
        let referring = compact(&mut enc, 5, &request("a"));
        let good = encode_checkpoint(std::iter::empty());
        write(&path, &[good.clone(), referring], &[]);
        drop(defining);
        let segments = recover(dir.path()).unwrap();
        assert_eq!(segments[0].entries, [Entry::Checkpoint]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            8 + good.len() as u64
        );
    }

    #[test]
    fn a_record_that_does_not_decode_ends_the_segment_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(segment::name(1));
        let good = encode_request(5, &[], &request("a"));
        write(&path, &[good.clone(), vec![99, 1, 2]], &[]);
        let segments = recover(dir.path()).unwrap();
        assert_eq!(segments[0].entries, [Entry::Request]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            8 + good.len() as u64,
            "cut after the last record that decodes"
        );
    }

    #[test]
    fn a_segment_changed_after_the_first_pass_fails_replay_instead_of_skipping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(segment::name(1));
        let good = encode_request(5, &[], &request("a"));
        write(&path, &[good.clone(), good], &[]);
        let segments = recover(dir.path()).unwrap();
        std::fs::write(&path, b"").unwrap();
        let mut records = segments[0].records().unwrap();
        assert!(matches!(records.next(), Some(Err(WalError::Io { .. }))));
        assert!(records.next().is_none());
    }
}
