//! Compact request records: a request as the log keeps it since kind 6,
//! about a third of its `tally.v1` size at one sample per series per
//! second, for a few tens of nanoseconds per sample.
//!
//! A `tally.v1` request spells out every series' source, metric and labels
//! and an 8-byte value in every request. Here, as in Prometheus' log, a
//! segment names each source and series once (`crate::ingest::dict`) and
//! later records refer to it by number; samples are written against what
//! the series' previous sample predicts:
//!
//! - the series: its number is usually the one after the previous series'
//!   (agents send their series in the same order each time), which costs
//!   one bit;
//! - the timestamp: the previous one plus the previous interval (costs
//!   nothing when it holds), else the difference as a zigzag varint;
//! - the value: the previous value again (nothing), else the shortest of
//!   a decimal `m / 10^k` (`k ≤ 7`, checked to give the same bits back)
//!   as `m` or as the difference from the previous `m`, or the raw 8 bytes.
//!
//! A record (after its kind byte): a flags byte (bit 0: forget the
//! dictionaries first: written after a failed write took back records
//! whose definitions the encoder had counted, and at the start of each
//! segment), the clock (`i64` LE), the
//! refused sources, then per source its reference, groups and series.
//! A series opens with a head byte: bit 7 its number is not the predicted
//! one (a varint follows: 0 a new series defined here, 1 one spelled out
//! and not numbered, `n + 2` series `n`), bit 6 it has other than one
//! sample with no start time (counts follow and every timestamp and value
//! is written), bit 5 its timestamp is not the predicted one, bits 0–4 its
//! value's code. Varints are LEB128, as protobuf's.
//!
//! Both sides build the dictionary and predictions from the same records
//! in the same order, and start again with each segment: a segment reads
//! on its own.

use prost::encoding::encoded_len_varint;
use tally_proto::v1 as pb;

use super::decode::DecodeError;
use crate::ingest::dict::Dict;
use crate::ingest::text::same_bytes;
use crate::ingest::view::fast::read_varint;
use crate::ingest::view::{PushView, SeriesView};

/// What a series' previous sample in the segment predicts.
#[derive(Debug, Clone, Copy)]
pub struct SeriesState {
    last_ts: i64,
    last_delta: i64,
    prev_bits: u64,
    /// The previous value as a decimal `prev_m / 10^prev_k`, if it was one.
    prev_m: i64,
    prev_k: u8,
}

const NO_K: u8 = u8::MAX;

impl SeriesState {
    /// A series new to the segment: its first timestamp is predicted to
    /// be the record's clock.
    fn new(now_ms: i64) -> SeriesState {
        SeriesState {
            last_ts: now_ms,
            last_delta: 0,
            prev_bits: 0,
            prev_m: 0,
            prev_k: NO_K,
        }
    }

    fn predicted_ts(&self) -> i64 {
        self.last_ts.wrapping_add(self.last_delta)
    }

    fn saw_ts(&mut self, ts: i64) {
        self.last_delta = ts.wrapping_sub(self.last_ts);
        self.last_ts = ts;
    }
}

/// Bit 0 of a record's flags: forget the dictionaries before reading it.
const RESET: u8 = 1;

const OTHER_REF: u8 = 0x80;
const GENERAL: u8 = 0x40;
const OTHER_TS: u8 = 0x20;
const CODE: u8 = 0x1f;

/// Reference codes after [`OTHER_REF`] (series) and of a source.
const SERIES_DEFINE: u64 = 0;
const SERIES_LITERAL: u64 = 1;
const SERIES_ID: u64 = 2;
const SOURCE_NEXT: u64 = 0;
const SOURCE_DEFINE: u64 = 1;
const SOURCE_LITERAL: u64 = 2;
const SOURCE_ID: u64 = 3;

/// Value codes.
const RAW: u8 = 0;
const REPEAT: u8 = 1;
const DECIMAL: u8 = 2;
const DELTA: u8 = DECIMAL + POW10.len() as u8;
const CODES: u8 = DELTA + POW10.len() as u8;

const POW10: [f64; 8] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7];
/// Largest decimal mantissa kept, so that differences cannot overflow.
const MAX_MANTISSA: f64 = (1u64 << 62) as f64;

/// `v` as `m / 10^k` with the smallest `k`, computed as the reader will,
/// if that gives `v`'s bits back.
fn decimal(v: f64) -> Option<(i64, u8)> {
    if v.is_nan() || v.abs() >= MAX_MANTISSA {
        return None;
    }
    // A quick refusal of values with more decimals (most measured
    // fractions): scaled by the largest power, a decimal is within rounding
    // of an integer, anything else almost never. (Past 2^53 every value is
    // an integer.)
    let x = v * POW10[POW10.len() - 1];
    if x.abs() < EXACT && (x - nearest(x) as f64).abs() > x.abs() * 1e-15 {
        return None;
    }
    for (k, p) in POW10.iter().enumerate() {
        let scaled = v * p;
        if scaled.is_nan() || scaled.abs() >= MAX_MANTISSA {
            return None;
        }
        let m = nearest(scaled);
        // If m / p rounds to v, v * p is within two roundings of m
        // (relatively, 2^-52 and a little): anything farther cannot come
        // back, and its division, the slow step here, is skipped.
        if (scaled - m as f64).abs() > scaled.abs() * (4.0 * f64::EPSILON) {
            continue;
        }
        // Through the integer, as the reader has it (-0.0 becomes 0);
        // an integer (counters, most gauges of counts) needs no division.
        let back = if k == 0 { m as f64 } else { m as f64 / p };
        if back.to_bits() == v.to_bits() {
            return Some((m, k as u8));
        }
    }
    None
}

/// Integers from here on are all exact in an `f64`.
const EXACT: f64 = (1u64 << 53) as f64;

/// `x` rounded half away from zero, for `|x| < 2^62`. `f64::round` is a
/// library call on the baseline x86-64 target, and this is called up to
/// nine times a sample.
fn nearest(x: f64) -> i64 {
    (x + 0.5f64.copysign(x)) as i64
}

/// A LEB128 varint, as protobuf's. Nearly every varint of a record fits a
/// byte (lengths, codes, small differences): that case is a push here,
/// where the general encoder is a call with a loop.
#[inline]
fn put_varint(v: u64, out: &mut Vec<u8>) {
    if v < 0x80 {
        out.push(v as u8);
    } else {
        prost::encoding::encode_varint(v, out);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Writes `v`'s payload and returns its code.
fn put_value(state: &mut SeriesState, v: f64, out: &mut Vec<u8>) -> u8 {
    let bits = v.to_bits();
    if bits == state.prev_bits {
        return REPEAT;
    }
    state.prev_bits = bits;
    let Some((m, k)) = decimal(v) else {
        state.prev_k = NO_K;
        out.extend_from_slice(&bits.to_le_bytes());
        return RAW;
    };
    let whole = zigzag(m);
    let code = match state.prev_k == k {
        true => {
            let diff = zigzag(m.wrapping_sub(state.prev_m));
            if encoded_len_varint(diff) < encoded_len_varint(whole) {
                put_varint(diff, out);
                DELTA + k
            } else {
                put_varint(whole, out);
                DECIMAL + k
            }
        }
        false => {
            put_varint(whole, out);
            DECIMAL + k
        }
    };
    state.prev_m = m;
    state.prev_k = k;
    code
}

fn get_value(state: &mut SeriesState, code: u8, r: &mut &[u8]) -> Result<f64, DecodeError> {
    let v = match code {
        REPEAT => return Ok(f64::from_bits(state.prev_bits)),
        RAW => {
            state.prev_k = NO_K;
            f64::from_bits(u64_le(r)?)
        }
        c if c < DELTA => {
            let k = c - DECIMAL;
            decimal_value(state, unzigzag(varint(r)?), k)
        }
        c if c < CODES => {
            let k = c - DELTA;
            let m = state.prev_m.wrapping_add(unzigzag(varint(r)?));
            decimal_value(state, m, k)
        }
        c => return Err(DecodeError::Compact(format!("unknown value code {c}"))),
    };
    state.prev_bits = v.to_bits();
    Ok(v)
}

fn decimal_value(state: &mut SeriesState, m: i64, k: u8) -> f64 {
    state.prev_m = m;
    state.prev_k = k;
    m as f64 / POW10[k as usize]
}

fn put_str(s: &str, out: &mut Vec<u8>) {
    put_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// A series' key after its source's number: metric, kind, labels.
fn put_series_key(s: &SeriesView<'_>, out: &mut Vec<u8>) {
    put_str(s.metric, out);
    put_varint(zigzag(s.kind.into()), out);
    put_varint(s.labels.len() as u64, out);
    for (name, value) in s.labels {
        put_str(name, out);
        put_str(value, out);
    }
}

/// The appenders' side (behind the log's front lock): encodes requests
/// against the open segment's dictionaries, in log order.
pub struct Encoder {
    sources: Dict<()>,
    series: Dict<SeriesState>,
    last_source: u32,
    last_series: u32,
    /// The next record must tell the reader to forget the dictionaries.
    reset: bool,
    key: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Encoder {
        let mut e = Encoder {
            sources: Dict::default(),
            series: Dict::default(),
            last_source: 0,
            last_series: 0,
            reset: false,
            key: Vec::new(),
        };
        e.forget();
        e
    }
}

impl Encoder {
    /// A new segment begins: it starts with empty dictionaries.
    pub fn new_segment(&mut self) {
        self.forget();
        self.reset = false;
    }

    /// A write failed and its records were taken back, with the
    /// definitions in them: the next record starts the dictionaries again,
    /// in the reader too.
    pub fn lost(&mut self) {
        self.forget();
        self.reset = true;
    }

    fn forget(&mut self) {
        self.sources.clear();
        self.series.clear();
        self.last_source = u32::MAX;
        self.last_series = u32::MAX;
    }

    /// Appends the record of `req` (after its kind byte) to `out`.
    pub fn encode(&mut self, now_ms: i64, refused: &[u32], req: &PushView<'_>, out: &mut Vec<u8>) {
        if self.reset {
            self.forget();
        }
        out.push(if self.reset { RESET } else { 0 });
        self.reset = false;
        out.extend_from_slice(&now_ms.to_le_bytes());
        put_varint(refused.len() as u64, out);
        for s in refused {
            put_varint(u64::from(*s), out);
        }
        put_varint(req.sources().len() as u64, out);
        for src in req.sources() {
            let source = self.put_source(src.source(), out);
            put_varint(src.groups().len() as u64, out);
            for g in src.groups() {
                put_str(g, out);
            }
            put_varint(src.series_len() as u64, out);
            for s in src.series() {
                self.put_series(now_ms, source, &s, out);
            }
        }
    }

    /// Writes a source's reference; its number, unless it is spelled out.
    fn put_source(&mut self, name: &str, out: &mut Vec<u8>) -> Option<u32> {
        let next = self.last_source.wrapping_add(1);
        let id = match self.sources.find(name.as_bytes(), next) {
            Some(id) if id == next => {
                put_varint(SOURCE_NEXT, out);
                id
            }
            Some(id) => {
                put_varint(SOURCE_ID + u64::from(id), out);
                id
            }
            None => match self.sources.insert(name.as_bytes(), ()) {
                Some(id) => {
                    put_varint(SOURCE_DEFINE, out);
                    put_str(name, out);
                    id
                }
                None => {
                    put_varint(SOURCE_LITERAL, out);
                    put_str(name, out);
                    return None;
                }
            },
        };
        self.last_source = id;
        Some(id)
    }

    fn put_series(
        &mut self,
        now_ms: i64,
        source: Option<u32>,
        s: &SeriesView<'_>,
        out: &mut Vec<u8>,
    ) {
        let head_at = out.len();
        out.push(0);
        let mut head = 0;
        let mut fresh = SeriesState::new(now_ms);
        let state = match source {
            Some(source) => {
                let next = self.last_series.wrapping_add(1);
                let id = match self.series.key(next) {
                    // Agents send their series in the same order each
                    // time: the predicted entry is read in place, and the
                    // key is only built when it is not the one.
                    Some(key) if key_is(key, source, s) => Some(next),
                    _ => self.find_series(source, s),
                };
                let id = match id {
                    Some(id) if id == next => Some(id),
                    Some(id) => {
                        head |= OTHER_REF;
                        put_varint(SERIES_ID + u64::from(id), out);
                        Some(id)
                    }
                    None => {
                        head |= OTHER_REF;
                        // `find_series` left the key built.
                        let id = self.series.insert(&self.key, fresh);
                        let code = if id.is_some() {
                            SERIES_DEFINE
                        } else {
                            SERIES_LITERAL
                        };
                        put_varint(code, out);
                        let rest = encoded_len_varint(u64::from(source));
                        out.extend_from_slice(&self.key[rest..]);
                        id
                    }
                };
                match id.and_then(|id| self.series.entry_mut(id)) {
                    Some((_, state)) => {
                        self.last_series = id.unwrap_or(self.last_series);
                        state
                    }
                    None => &mut fresh,
                }
            }
            None => {
                head |= OTHER_REF;
                put_varint(SERIES_LITERAL, out);
                put_series_key(s, out);
                &mut fresh
            }
        };
        if let ([ts], [v], []) = (s.timestamps_ms, s.values, s.start_times_ms) {
            if *ts != state.predicted_ts() {
                head |= OTHER_TS;
                put_varint(zigzag(ts.wrapping_sub(state.predicted_ts())), out);
            }
            state.saw_ts(*ts);
            head |= put_value(state, *v, out);
        } else {
            head |= GENERAL;
            put_general(state, s, out);
        }
        out[head_at] = head;
    }

    /// The number of series `s` of source `source` by its key's hash,
    /// leaving the key built in `self.key`.
    fn find_series(&mut self, source: u32, s: &SeriesView<'_>) -> Option<u32> {
        self.key.clear();
        put_varint(u64::from(source), &mut self.key);
        put_series_key(s, &mut self.key);
        self.series.find_by_hash(&self.key)
    }
}

/// Whether `key`, a key [`put_series_key`] wrote after a source's number,
/// is the one it would write for series `s` of source `source`. The
/// writer's varints are the shortest, so reading the fields back and
/// comparing them is comparing the bytes.
fn key_is(mut key: &[u8], source: u32, s: &SeriesView<'_>) -> bool {
    #[inline(always)]
    fn number(k: &mut &[u8], n: u64) -> bool {
        varint(k).is_ok_and(|v| v == n)
    }
    #[inline(always)]
    fn text(k: &mut &[u8], t: &str) -> bool {
        number(k, t.len() as u64) && take(k, t.len()).is_ok_and(|b| same_bytes(b, t.as_bytes()))
    }
    let k = &mut key;
    number(k, u64::from(source))
        && text(k, s.metric)
        && number(k, zigzag(s.kind.into()))
        && number(k, s.labels.len() as u64)
        && s.labels
            .iter()
            .all(|(name, value)| text(k, name) && text(k, value))
        && k.is_empty()
}

/// Every sample of a series that has other than exactly one sample and no
/// start time: counts, then each timestamp, value (code and payload) and
/// start time.
fn put_general(state: &mut SeriesState, s: &SeriesView<'_>, out: &mut Vec<u8>) {
    put_varint(s.timestamps_ms.len() as u64, out);
    put_varint(s.values.len() as u64, out);
    put_varint(s.start_times_ms.len() as u64, out);
    for ts in s.timestamps_ms {
        put_varint(zigzag(ts.wrapping_sub(state.predicted_ts())), out);
        state.saw_ts(*ts);
    }
    for v in s.values {
        let at = out.len();
        out.push(0);
        out[at] = put_value(state, *v, out);
    }
    let mut prev = 0i64;
    for st in s.start_times_ms {
        put_varint(zigzag(st.wrapping_sub(prev)), out);
        prev = *st;
    }
}

/// A varint, a one-byte one inline: `key_is` reads four a series.
#[inline(always)]
fn varint(r: &mut &[u8]) -> Result<u64, DecodeError> {
    read_varint(r).map_err(|_| DecodeError::Short)
}

fn byte(r: &mut &[u8]) -> Result<u8, DecodeError> {
    let (&b, rest) = r.split_first().ok_or(DecodeError::Short)?;
    *r = rest;
    Ok(b)
}

fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if r.len() < n {
        return Err(DecodeError::Short);
    }
    let (head, rest) = r.split_at(n);
    *r = rest;
    Ok(head)
}

fn u64_le(r: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut a = [0u8; 8];
    a.copy_from_slice(take(r, 8)?);
    Ok(u64::from_le_bytes(a))
}

fn str<'a>(r: &mut &'a [u8]) -> Result<&'a str, DecodeError> {
    let n = usize::try_from(varint(r)?).map_err(|_| DecodeError::Short)?;
    std::str::from_utf8(take(r, n)?).map_err(|_| DecodeError::Utf8)
}

/// A count read from the record, which cannot exceed the bytes left (each
/// item takes at least one): anything larger is corrupt, and refused
/// before memory is reserved for it.
fn count(r: &mut &[u8]) -> Result<usize, DecodeError> {
    let n = varint(r)?;
    if n > r.len() as u64 {
        return Err(DecodeError::Short);
    }
    Ok(n as usize)
}

/// A series' key as [`put_series_key`] wrote it, into `out`'s metric,
/// kind and labels.
fn read_series_key(r: &mut &[u8], out: &mut pb::SeriesSamples) -> Result<(), DecodeError> {
    set(&mut out.metric, str(r)?);
    out.kind = i32::try_from(unzigzag(varint(r)?))
        .map_err(|_| DecodeError::Compact("kind out of range".into()))?;
    let n = count(r)?;
    reuse(&mut out.labels, n);
    for label in &mut out.labels {
        set(&mut label.name, str(r)?);
        set(&mut label.value, str(r)?);
    }
    Ok(())
}

/// `s` made `to`, in the room it has.
fn set(s: &mut String, to: &str) {
    s.clear();
    s.push_str(to);
}

/// `v` made `n` long, keeping the items (and the room they hold) it has;
/// each is overwritten whole by its reader.
fn reuse<T: Default>(v: &mut Vec<T>, n: usize) {
    v.truncate(n);
    v.resize_with(n, T::default);
}

fn dict_full(what: &str) -> DecodeError {
    DecodeError::Compact(format!("more {what} than a segment's dictionary holds"))
}

fn unknown(what: &str, id: u64) -> DecodeError {
    DecodeError::Compact(format!("unknown {what} number {id}"))
}

/// The reader's side: decodes a segment's compact records, in order.
pub struct Decoder {
    sources: Dict<()>,
    series: Dict<SeriesState>,
    last_source: u32,
    last_series: u32,
    key: Vec<u8>,
}

/// A compact record read back: the clock, the refused sources, the request.
pub type Decoded = (i64, Vec<u32>, pb::PushRequest);

impl Default for Decoder {
    fn default() -> Decoder {
        let mut d = Decoder {
            sources: Dict::default(),
            series: Dict::default(),
            last_source: 0,
            last_series: 0,
            key: Vec::new(),
        };
        d.forget();
        d
    }
}

impl Decoder {
    fn forget(&mut self) {
        self.sources.clear();
        self.series.clear();
        self.last_source = u32::MAX;
        self.last_series = u32::MAX;
    }

    /// Decodes a record (after its kind byte).
    pub fn decode(&mut self, r: &[u8]) -> Result<Decoded, DecodeError> {
        let mut request = pb::PushRequest::default();
        let (now_ms, refused) = self.decode_into(r, &mut request)?;
        Ok((now_ms, refused, request))
    }

    /// [`Decoder::decode`] into `out`, reusing its strings and vectors
    /// (on an error, `out` holds a part of the record). Replay reads every
    /// record of the log: a new request for each made about eight
    /// allocations per series, freed a moment later, among the long-lived
    /// ones the aggregator makes for the same series as it folds them.
    pub fn decode_into(
        &mut self,
        mut r: &[u8],
        out: &mut pb::PushRequest,
    ) -> Result<(i64, Vec<u32>), DecodeError> {
        let r = &mut r;
        if byte(r)? & RESET != 0 {
            self.forget();
        }
        let now_ms = u64_le(r)? as i64;
        let n = count(r)?;
        let refused = (0..n)
            .map(|_| u32::try_from(varint(r)?).map_err(|_| DecodeError::Short))
            .collect::<Result<_, _>>()?;
        let n = count(r)?;
        reuse(&mut out.sources, n);
        for src in &mut out.sources {
            let id = self.read_source(r, &mut src.source)?;
            let n = count(r)?;
            reuse(&mut src.groups, n);
            for group in &mut src.groups {
                set(group, str(r)?);
            }
            let n = count(r)?;
            reuse(&mut src.series, n);
            for series in &mut src.series {
                self.read_series(now_ms, id, r, series)?;
            }
        }
        if !r.is_empty() {
            return Err(DecodeError::Compact("bytes after the last series".into()));
        }
        Ok((now_ms, refused))
    }

    /// A source's reference, its name set into `name`; its number, if it
    /// has one.
    fn read_source(
        &mut self,
        r: &mut &[u8],
        name: &mut String,
    ) -> Result<Option<u32>, DecodeError> {
        let id = match varint(r)? {
            SOURCE_NEXT => self.last_source.wrapping_add(1),
            SOURCE_DEFINE => {
                let name = str(r)?;
                self.sources
                    .insert(name.as_bytes(), ())
                    .ok_or_else(|| dict_full("sources"))?
            }
            SOURCE_LITERAL => {
                set(name, str(r)?);
                return Ok(None);
            }
            code => u32::try_from(code - SOURCE_ID).map_err(|_| unknown("source", code))?,
        };
        let known = self
            .sources
            .key(id)
            .ok_or_else(|| unknown("source", id.into()))?;
        set(
            name,
            std::str::from_utf8(known).map_err(|_| DecodeError::Utf8)?,
        );
        self.last_source = id;
        Ok(Some(id))
    }

    fn read_series(
        &mut self,
        now_ms: i64,
        source: Option<u32>,
        r: &mut &[u8],
        out: &mut pb::SeriesSamples,
    ) -> Result<(), DecodeError> {
        let head = byte(r)?;
        let mut fresh = SeriesState::new(now_ms);
        let state = match head & OTHER_REF != 0 {
            false => self.known_series(self.last_series.wrapping_add(1), out)?,
            true => match varint(r)? {
                SERIES_LITERAL => {
                    read_series_key(r, out)?;
                    &mut fresh
                }
                SERIES_DEFINE => {
                    let source = source.ok_or_else(|| {
                        DecodeError::Compact("a series numbered under an unnumbered source".into())
                    })?;
                    let before = *r;
                    read_series_key(r, out)?;
                    self.key.clear();
                    put_varint(u64::from(source), &mut self.key);
                    self.key
                        .extend_from_slice(&before[..before.len() - r.len()]);
                    let id = self
                        .series
                        .insert(&self.key, fresh)
                        .ok_or_else(|| dict_full("series"))?;
                    self.last_series = id;
                    let state = self.series.entry_mut(id).map(|(_, s)| s);
                    state.ok_or_else(|| unknown("series", id.into()))?
                }
                code => {
                    let id =
                        u32::try_from(code - SERIES_ID).map_err(|_| unknown("series", code))?;
                    self.known_series(id, out)?
                }
            },
        };
        out.timestamps_ms.clear();
        out.values.clear();
        out.start_times_ms.clear();
        if head & GENERAL == 0 {
            let ts = match head & OTHER_TS != 0 {
                true => state.predicted_ts().wrapping_add(unzigzag(varint(r)?)),
                false => state.predicted_ts(),
            };
            state.saw_ts(ts);
            out.timestamps_ms.push(ts);
            out.values.push(get_value(state, head & CODE, r)?);
        } else {
            read_general(state, out, r)?;
        }
        Ok(())
    }

    /// Series `id`'s key, read into `out`, and its state; it becomes the
    /// last series.
    fn known_series(
        &mut self,
        id: u32,
        out: &mut pb::SeriesSamples,
    ) -> Result<&mut SeriesState, DecodeError> {
        let (key, state) = self
            .series
            .entry_mut(id)
            .ok_or_else(|| unknown("series", id.into()))?;
        let mut key = key;
        varint(&mut key)?;
        read_series_key(&mut key, out)?;
        self.last_series = id;
        Ok(state)
    }
}

fn read_general(
    state: &mut SeriesState,
    out: &mut pb::SeriesSamples,
    r: &mut &[u8],
) -> Result<(), DecodeError> {
    let (n_ts, n_values, n_starts) = (count(r)?, count(r)?, count(r)?);
    out.timestamps_ms.reserve(n_ts);
    for _ in 0..n_ts {
        let ts = state.predicted_ts().wrapping_add(unzigzag(varint(r)?));
        state.saw_ts(ts);
        out.timestamps_ms.push(ts);
    }
    out.values.reserve(n_values);
    for _ in 0..n_values {
        let code = byte(r)?;
        out.values.push(get_value(state, code, r)?);
    }
    out.start_times_ms.reserve(n_starts);
    let mut prev = 0i64;
    for _ in 0..n_starts {
        prev = prev.wrapping_add(unzigzag(varint(r)?));
        out.start_times_ms.push(prev);
    }
    Ok(())
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
