//! What the log holds, and its encoding.
//!
//! - [`Record::Request`]: an admitted request, as the `tally.v1` request it
//!   was folded from (whatever protocol it came in), with the wall clock it
//!   was checked against and the sources its token was refused, so that a
//!   replay makes the same decisions. It is logged compact (kind 6,
//!   `compact`: names once per segment, samples against predictions), which
//!   needs the segment's earlier records to read ([`SegmentDecoder`]); logs
//!   written before keep it as `tally.v1` bytes (kind 1), still read.
//! - [`Record::Marker`]: a flush was cut here. Every request before it in
//!   the log was folded into that flush or an earlier one, every request
//!   after it into a later one. One in about ten seconds carries the
//!   cumulative-counter baselines that changed since the previous one that
//!   did; the others (kind 8) carry none (`crate::aggregator::BaselineLog`).
//! - [`Record::Checkpoint`]: every baseline as of the markers before it;
//!   each segment starts with one, so a segment's predecessors can go.
//!
//! Markers and checkpoints carry each baseline's arrival time (when its
//! series was last pushed), by which baselines are kept; logs written
//! before they did (kinds 2 and 3) are still read, their baselines' arrival
//! unknown. They are written packed with zstd (kind 7, when that is
//! smaller); unpacked ones, as older logs hold, are still read.
//!
//! Integers are little-endian; strings are a `u32` length and UTF-8.

use std::sync::Arc;

use prost::Message as _;
use tally_proto::v1 as pb;

use crate::labels::Labels;
use crate::model::{series_hash, SeriesId};

/// A cumulative counter's baseline: the last sample its next delta is
/// taken from.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// The aggregator's id of the series, shared.
    pub series: Arc<SeriesId>,
    pub ts_ms: i64,
    pub value: f64,
    /// When its series was last pushed, Unix ms; [`UNKNOWN_ARRIVAL`] when
    /// read from a log written before arrivals were kept.
    pub arrived_ms: i64,
    /// `series`' hash by [`crate::model::series_hasher`], which the
    /// aggregator already holds: the log's table of every counter's
    /// baseline takes each flush's without hashing their names again.
    hash: u64,
}

/// The arrival of a baseline read from an older log.
pub const UNKNOWN_ARRIVAL: i64 = i64::MIN;

impl Baseline {
    pub fn new(series: Arc<SeriesId>, ts_ms: i64, value: f64, arrived_ms: i64) -> Baseline {
        let hash = series_hash(series.series_ref());
        Baseline::hashed(series, hash, ts_ms, value, arrived_ms)
    }

    /// [`Baseline::new`] for a series whose hash by
    /// [`crate::model::series_hasher`] is `hash`.
    pub fn hashed(
        series: Arc<SeriesId>,
        hash: u64,
        ts_ms: i64,
        value: f64,
        arrived_ms: i64,
    ) -> Baseline {
        debug_assert_eq!(hash, series_hash(series.series_ref()));
        Baseline {
            series,
            ts_ms,
            value,
            arrived_ms,
            hash,
        }
    }

    /// Its series' hash by [`crate::model::series_hasher`].
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// When its series was last pushed, if the log said.
    pub fn arrived_ms(&self) -> Option<i64> {
        (self.arrived_ms != UNKNOWN_ARRIVAL).then_some(self.arrived_ms)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Request {
        now_ms: i64,
        /// Indices of `request.sources` its token could not push.
        refused_sources: Vec<u32>,
        request: pb::PushRequest,
    },
    Marker {
        flush_id: u64,
        /// None: a marker that carries no baselines.
        baselines: Option<Vec<Baseline>>,
    },
    Checkpoint {
        baselines: Vec<Baseline>,
    },
}

const REQUEST: u8 = 1;
/// Markers and checkpoints without arrival times, as older logs have them.
const MARKER_V1: u8 = 2;
const CHECKPOINT_V1: u8 = 3;
const MARKER: u8 = 4;
const CHECKPOINT: u8 = 5;
/// A request in the compact form (`compact`).
pub const COMPACT: u8 = 6;
/// A marker or checkpoint packed with zstd: the kind, the unpacked length
/// (`u32`), the zstd frame.
const PACKED: u8 = 7;
/// A marker without baselines: the kind and the flush id.
const BARE_MARKER: u8 = 8;
/// zstd's level for markers and checkpoints: its fastest positive one.
const PACK_LEVEL: i32 = 1;
/// Largest unpacked record read (as `segment::MAX_RECORD`): a larger
/// length is corruption, refused before memory is reserved for it.
const MAX_UNPACKED: usize = 1 << 30;

pub use super::decode::DecodeError;

/// Reads one segment's records in order: a compact request is read against
/// the dictionary its segment's earlier records built.
#[derive(Default)]
pub struct SegmentDecoder {
    compact: super::compact::Decoder,
}

impl SegmentDecoder {
    /// Decodes the segment's next record; a compact request is decoded
    /// into `spare` (a request read before, its strings and vectors
    /// reused).
    pub fn decode_reusing(
        &mut self,
        bytes: &[u8],
        mut spare: pb::PushRequest,
    ) -> Result<Record, DecodeError> {
        match bytes.split_first() {
            Some((&COMPACT, rest)) => {
                let (now_ms, refused_sources) = self.compact.decode_into(rest, &mut spare)?;
                Ok(Record::Request {
                    now_ms,
                    refused_sources,
                    request: spare,
                })
            }
            _ => decode(bytes),
        }
    }
}

/// Encodes a request record as `tally.v1` bytes (kind 1), the form logs
/// written before the compact one hold: tests write older logs with it.
#[cfg(test)]
pub fn encode_request(
    now_ms: i64,
    refused_sources: &[u32],
    request: &dyn EncodeRequest,
) -> Vec<u8> {
    let mut out = request_head(now_ms, refused_sources, request.request_len());
    request.encode_to(&mut out);
    out
}

/// A request record's fields before the request, in a buffer with room for
/// `request_len` more bytes. Followed by a `tally.v1.PushRequest` as its
/// sender encoded it, it is that request's record: any valid encoding of a
/// request decodes to the same request on replay, so the bytes need not be
/// prost's own.
#[cfg(test)]
pub fn request_head(now_ms: i64, refused_sources: &[u32], request_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(request_len + 13 + 4 * refused_sources.len());
    out.push(REQUEST);
    out.extend_from_slice(&now_ms.to_le_bytes());
    put_u32(&mut out, refused_sources.len() as u32);
    for s in refused_sources {
        put_u32(&mut out, *s);
    }
    out
}

/// A marker, packed (markers carry every cumulative counter that moved
/// since the previous flush, names spelled out: at one sample per second
/// they outweighed the compact requests).
pub fn encode_marker(flush_id: u64, baselines: &[Baseline]) -> Vec<u8> {
    let mut out = vec![MARKER];
    out.extend_from_slice(&flush_id.to_le_bytes());
    put_baselines(&mut out, baselines);
    pack(out)
}

/// A marker that carries no baselines: 9 bytes, not packed.
pub fn encode_bare_marker(flush_id: u64) -> Vec<u8> {
    let mut out = vec![BARE_MARKER];
    out.extend_from_slice(&flush_id.to_le_bytes());
    out
}

/// A checkpoint, packed.
pub fn encode_checkpoint<'a>(baselines: impl ExactSizeIterator<Item = &'a Baseline>) -> Vec<u8> {
    let mut out = vec![CHECKPOINT];
    put_u32(&mut out, baselines.len() as u32);
    for b in baselines {
        put_baseline(&mut out, b);
    }
    pack(out)
}

/// `record` packed with zstd, or as it is when that is not smaller (or
/// fails, which compressing into memory does not).
fn pack(record: Vec<u8>) -> Vec<u8> {
    let Ok(packed) = zstd::bulk::compress(&record, PACK_LEVEL) else {
        return record;
    };
    if packed.len() + 5 >= record.len() {
        return record;
    }
    let mut out = Vec::with_capacity(packed.len() + 5);
    out.push(PACKED);
    put_u32(&mut out, record.len() as u32);
    out.extend_from_slice(&packed);
    out
}

/// A packed record's inner record: a marker or a checkpoint.
fn unpack(bytes: &[u8]) -> Result<Record, DecodeError> {
    let mut r = Reader(bytes);
    let len = r.u32()? as usize;
    if len > MAX_UNPACKED {
        return Err(DecodeError::Packed(format!("{len} bytes unpacked")));
    }
    let inner = zstd::bulk::decompress(r.0, len).map_err(|e| DecodeError::Packed(e.to_string()))?;
    if inner.len() != len {
        return Err(DecodeError::Packed("shorter than it says".into()));
    }
    match inner.first() {
        Some(&(MARKER | CHECKPOINT | MARKER_V1 | CHECKPOINT_V1)) => decode(&inner),
        Some(&k) => Err(DecodeError::Packed(format!("holds kind {k}"))),
        None => Err(DecodeError::Short),
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

fn put_baseline(out: &mut Vec<u8>, b: &Baseline) {
    put_str(out, &b.series.source);
    put_str(out, &b.series.metric);
    put_str(out, b.series.labels.as_str());
    out.extend_from_slice(&b.ts_ms.to_le_bytes());
    out.extend_from_slice(&b.value.to_le_bytes());
    out.extend_from_slice(&b.arrived_ms.to_le_bytes());
}

fn put_baselines(out: &mut Vec<u8>, baselines: &[Baseline]) {
    put_u32(out, baselines.len() as u32);
    for b in baselines {
        put_baseline(out, b);
    }
}

/// A cursor over one record's bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Short);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn str(&mut self) -> Result<&'a str, DecodeError> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        std::str::from_utf8(b).map_err(|_| DecodeError::Utf8)
    }

    fn series(&mut self) -> Result<SeriesId, DecodeError> {
        let (source, metric, labels) = (self.str()?, self.str()?, self.str()?);
        // Written from a validated label set, under the record's checksum:
        // trusted as the log trusts its requests (refusing it would set the
        // rest of the log aside).
        Ok(SeriesId::with_labels(
            source,
            metric,
            Labels::from_validated(labels),
        ))
    }

    /// A list of baselines; `arrivals`: each has its arrival time (the
    /// current kinds), else it is unknown.
    fn baselines(&mut self, arrivals: bool) -> Result<Vec<Baseline>, DecodeError> {
        let n = self.u32()? as usize;
        // Each takes at least 28 bytes: a count past what is left is corrupt.
        if n > self.0.len() / 28 {
            return Err(DecodeError::Short);
        }
        (0..n)
            .map(|_| {
                let series = Arc::new(self.series()?);
                let ts_ms = self.u64()? as i64;
                let value = f64::from_bits(self.u64()?);
                let arrived_ms = match arrivals {
                    true => self.u64()? as i64,
                    false => UNKNOWN_ARRIVAL,
                };
                Ok(Baseline::new(series, ts_ms, value, arrived_ms))
            })
            .collect()
    }
}

/// Decodes a record that needs no earlier one: any but a compact request.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let mut r = Reader(bytes);
    let kind = r.u8()?;
    match kind {
        REQUEST => {
            let now_ms = r.u64()? as i64;
            let n = r.u32()? as usize;
            if n > r.0.len() / 4 {
                return Err(DecodeError::Short);
            }
            let refused_sources = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
            let request =
                pb::PushRequest::decode(r.0).map_err(|e| DecodeError::Request(e.to_string()))?;
            Ok(Record::Request {
                now_ms,
                refused_sources,
                request,
            })
        }
        MARKER | MARKER_V1 => Ok(Record::Marker {
            flush_id: r.u64()?,
            baselines: Some(r.baselines(kind == MARKER)?),
        }),
        BARE_MARKER => Ok(Record::Marker {
            flush_id: r.u64()?,
            baselines: None,
        }),
        CHECKPOINT | CHECKPOINT_V1 => Ok(Record::Checkpoint {
            baselines: r.baselines(kind == CHECKPOINT)?,
        }),
        PACKED => unpack(r.0),
        k => Err(DecodeError::Kind(k)),
    }
}

/// A request that writes itself out as a `tally.v1.PushRequest` encoding:
/// the record logs before the compact form held, which tests still write.
#[cfg(test)]
pub trait EncodeRequest: Sync {
    /// Bytes [`EncodeRequest::encode_to`] appends.
    fn request_len(&self) -> usize;
    fn encode_to(&self, out: &mut Vec<u8>);
}

#[cfg(test)]
impl EncodeRequest for pb::PushRequest {
    fn request_len(&self) -> usize {
        prost::Message::encoded_len(self)
    }

    fn encode_to(&self, out: &mut Vec<u8>) {
        // Writing into a Vec cannot fail.
        let _ = prost::Message::encode(self, out);
    }
}

#[cfg(test)]
impl EncodeRequest for crate::ingest::view::PushView<'_> {
    fn request_len(&self) -> usize {
        self.encoded_len()
    }

    fn encode_to(&self, out: &mut Vec<u8>) {
        self.encode(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn baseline() -> impl Strategy<Value = Baseline> {
        (
            "[a-z]{1,8}",
            "[a-z._]{1,8}",
            proptest::collection::vec(("[a-z]{1,4}", "[a-z=\",|]{0,6}"), 0..3),
            any::<i64>(),
            any::<f64>(),
            any::<i64>(),
        )
            .prop_map(|(source, metric, pairs, ts_ms, value, arrived_ms)| {
                let mut pairs = pairs;
                pairs.sort();
                pairs.dedup_by(|a, b| a.0 == b.0);
                let labels = Labels::from_pairs(
                    pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                    usize::MAX,
                )
                .unwrap();
                let series = SeriesId::with_labels(&source, &metric, labels);
                Baseline::new(Arc::new(series), ts_ms, value, arrived_ms)
            })
    }

    /// A marker as logs written before arrival times have it.
    fn marker_v1(flush_id: u64, baselines: &[Baseline]) -> Vec<u8> {
        let mut out = vec![MARKER_V1];
        out.extend_from_slice(&flush_id.to_le_bytes());
        put_u32(&mut out, baselines.len() as u32);
        for b in baselines {
            put_str(&mut out, &b.series.source);
            put_str(&mut out, &b.series.metric);
            put_str(&mut out, b.series.labels.as_str());
            out.extend_from_slice(&b.ts_ms.to_le_bytes());
            out.extend_from_slice(&b.value.to_le_bytes());
        }
        out
    }

    #[test]
    fn older_markers_are_read_with_their_arrivals_unknown() {
        let b = Baseline::new(Arc::new(SeriesId::new("s", "c")), 1_000, 5.0, 2_000);
        assert_eq!(b.arrived_ms(), Some(2_000));
        let Record::Marker {
            flush_id,
            baselines,
        } = decode(&marker_v1(9, std::slice::from_ref(&b))).unwrap()
        else {
            panic!("not a marker");
        };
        let baselines = baselines.expect("a marker with baselines");
        assert_eq!(flush_id, 9);
        assert_eq!(baselines.len(), 1);
        assert_eq!((baselines[0].ts_ms, baselines[0].value), (1_000, 5.0));
        assert_eq!(baselines[0].arrived_ms(), None);
        let mut v1_checkpoint = marker_v1(0, &[b]);
        v1_checkpoint.drain(1..9);
        v1_checkpoint[0] = CHECKPOINT_V1;
        assert!(matches!(
            decode(&v1_checkpoint).unwrap(),
            Record::Checkpoint { baselines } if baselines[0].arrived_ms().is_none()
        ));
    }

    #[test]
    fn markers_are_packed_and_unpacked_ones_still_read() {
        let baselines: Vec<Baseline> = (0..500)
            .map(|i| {
                let series =
                    SeriesId::new(&format!("src-{:06}", i / 5), &format!("m_{:04}", i % 5));
                Baseline::new(Arc::new(series), 1_000 + i, 1e9 + i as f64, 2_000)
            })
            .collect();
        let packed = encode_marker(9, &baselines);
        let mut plain = vec![MARKER];
        plain.extend_from_slice(&9u64.to_le_bytes());
        put_baselines(&mut plain, &baselines);
        assert_eq!(packed[0], PACKED);
        assert!(
            packed.len() * 3 < plain.len(),
            "{} of {}",
            packed.len(),
            plain.len()
        );
        let want = Record::Marker {
            flush_id: 9,
            baselines: Some(baselines.clone()),
        };
        assert_eq!(decode(&packed).unwrap(), want);
        assert_eq!(decode(&plain).unwrap(), want, "as older logs hold it");
        for cut in [1, 5, packed.len() / 2, packed.len() - 1] {
            assert!(decode(&packed[..cut]).is_err(), "cut at {cut}");
        }
        // A length past what is allowed, or not what the frame unpacks to.
        let mut lying = packed.clone();
        lying[1..5].copy_from_slice(&(u32::MAX).to_le_bytes());
        assert!(matches!(decode(&lying), Err(DecodeError::Packed(_))));
        lying[1..5].copy_from_slice(&((plain.len() + 1) as u32).to_le_bytes());
        assert!(decode(&lying).is_err());
        // Only markers and checkpoints are packed.
        let odd = pack([vec![PACKED], vec![0; 64]].concat());
        assert_eq!(odd[0], PACKED);
        assert!(matches!(decode(&odd), Err(DecodeError::Packed(_))));
    }

    fn same(a: &Record, b: &Record) -> bool {
        // NaN baselines compare by bits.
        format!("{a:?}") == format!("{b:?}")
    }

    proptest! {
        #[test]
        fn records_round_trip(
            now_ms in any::<i64>(),
            refused in proptest::collection::vec(any::<u32>(), 0..4),
            sources in proptest::collection::vec("[a-z]{1,6}", 0..3),
            flush_id in any::<u64>(),
            baselines in proptest::collection::vec(baseline(), 0..5),
        ) {
            let request = pb::PushRequest {
                sources: sources.into_iter().map(|s| pb::SourceBatch { source: s, ..Default::default() }).collect(),
            };
            let r = Record::Request { now_ms, refused_sources: refused.clone(), request: request.clone() };
            prop_assert!(same(&decode(&encode_request(now_ms, &refused, &request)).unwrap(), &r));
            // Logged as its sender encoded it, which need not be prost's
            // encoding: here with an unknown field (15, a varint) after it.
            let mut wire = request.encode_to_vec();
            wire.extend_from_slice(&[15 << 3, 1]);
            let logged = [request_head(now_ms, &refused, 0), wire].concat();
            prop_assert!(same(&decode(&logged).unwrap(), &r));
            let m = Record::Marker { flush_id, baselines: Some(baselines.clone()) };
            prop_assert!(same(&decode(&encode_marker(flush_id, &baselines)).unwrap(), &m));
            let bare = Record::Marker { flush_id, baselines: None };
            prop_assert!(same(&decode(&encode_bare_marker(flush_id)).unwrap(), &bare));
            let c = Record::Checkpoint { baselines: baselines.clone() };
            prop_assert!(same(&decode(&encode_checkpoint(baselines.iter())).unwrap(), &c));
        }

        #[test]
        fn truncated_records_are_errors_not_panics(
            baselines in proptest::collection::vec(baseline(), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = encode_marker(7, &baselines);
            let at = cut.index(bytes.len());
            prop_assert!(decode(&bytes[..at]).is_err());
            let bare = encode_bare_marker(7);
            prop_assert!(decode(&bare[..cut.index(bare.len())]).is_err());
        }
    }
}
