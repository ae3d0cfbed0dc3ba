//! A [`PushView`] written out as a `tally.v1.PushRequest`, straight from
//! its borrowed columns, with no owned request built to encode it: the
//! record logs held before the compact form (tests write such logs, and
//! the log's encoding benchmark weighs the two). The bytes are what prost
//! would write for the same request (a test holds them to it).

use prost::encoding::{
    double, encode_key, encode_varint, encoded_len_varint, int32, int64, key_len, WireType,
};

use super::{PushView, SeriesView, SourceView};

impl PushView<'_> {
    /// Bytes [`PushView::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        self.sources().map(|s| nested_len(1, source_len(&s))).sum()
    }

    /// Appends the request's `tally.v1.PushRequest` encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for src in self.sources() {
            encode_key(1, WireType::LengthDelimited, out);
            encode_varint(source_len(&src) as u64, out);
            put_str(1, src.source(), out);
            for s in src.series() {
                encode_key(2, WireType::LengthDelimited, out);
                encode_varint(series_len(&s) as u64, out);
                put_series(&s, out);
            }
            for g in src.groups() {
                // A repeated field keeps its empty elements.
                put_bytes(3, g, out);
            }
        }
    }
}

fn put_series(s: &SeriesView<'_>, out: &mut Vec<u8>) {
    put_str(1, s.metric, out);
    if s.kind != 0 {
        int32::encode(2, &s.kind, out);
    }
    int64::encode_packed(3, s.timestamps_ms, out);
    double::encode_packed(4, s.values, out);
    for (name, value) in s.labels {
        encode_key(5, WireType::LengthDelimited, out);
        encode_varint(label_len(name, value) as u64, out);
        put_str(1, name, out);
        put_str(2, value, out);
    }
    int64::encode_packed(6, s.start_times_ms, out);
}

/// A singular string field; proto3 leaves out an empty one.
fn put_str(tag: u32, s: &str, out: &mut Vec<u8>) {
    if !s.is_empty() {
        put_bytes(tag, s, out);
    }
}

fn put_bytes(tag: u32, s: &str, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

fn str_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        nested_len(tag, s.len())
    }
}

/// A length-delimited field of `len` bytes, with its key and length.
fn nested_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn label_len(name: &str, value: &str) -> usize {
    str_len(1, name) + str_len(2, value)
}

fn series_len(s: &SeriesView<'_>) -> usize {
    let kind = if s.kind != 0 {
        int32::encoded_len(2, &s.kind)
    } else {
        0
    };
    str_len(1, s.metric)
        + kind
        + int64::encoded_len_packed(3, s.timestamps_ms)
        + double::encoded_len_packed(4, s.values)
        + s.labels
            .iter()
            .map(|(n, v)| nested_len(5, label_len(n, v)))
            .sum::<usize>()
        + int64::encoded_len_packed(6, s.start_times_ms)
}

fn source_len(src: &SourceView<'_, '_>) -> usize {
    str_len(1, src.source())
        + src
            .series()
            .map(|s| nested_len(2, series_len(&s)))
            .sum::<usize>()
        + src
            .groups()
            .iter()
            .map(|g| nested_len(3, g.len()))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use prost::Message as _;
    use tally_proto::v1 as pb;

    use super::*;

    fn label() -> impl Strategy<Value = pb::Label> {
        ("[a-z]{0,3}", "[a-z0-9]{0,3}").prop_map(|(name, value)| pb::Label { name, value })
    }

    fn series() -> impl Strategy<Value = pb::SeriesSamples> {
        (
            "[a-z_]{0,4}",
            -1i32..4,
            prop::collection::vec(label(), 0..3),
            prop::collection::vec((any::<i64>(), any::<f64>()), 0..4),
            prop::collection::vec(any::<i64>(), 0..2),
        )
            .prop_map(|(metric, kind, labels, samples, start_times_ms)| {
                pb::SeriesSamples {
                    metric,
                    kind,
                    labels,
                    timestamps_ms: samples.iter().map(|s| s.0).collect(),
                    values: samples.iter().map(|s| s.1).collect(),
                    start_times_ms,
                }
            })
    }

    fn request() -> impl Strategy<Value = pb::PushRequest> {
        let source = (
            "[a-z]{0,3}",
            prop::collection::vec(series(), 0..3),
            prop::collection::vec("[a-z]{0,2}", 0..2),
        )
            .prop_map(|(source, series, groups)| pb::SourceBatch {
                source,
                series,
                groups,
            });
        prop::collection::vec(source, 0..4).prop_map(|sources| pb::PushRequest { sources })
    }

    proptest! {
        /// The view's encoding is prost's, byte for byte, and its length
        /// is what it says.
        #[test]
        fn a_view_encodes_as_prost_encodes_its_request(req in request()) {
            let view = PushView::of(&req);
            let mut out = Vec::new();
            view.encode(&mut out);
            prop_assert_eq!(out.len(), view.encoded_len());
            prop_assert_eq!(out, req.encode_to_vec());
        }
    }
}
