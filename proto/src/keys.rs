//! `tally.v1`'s field keys as the single bytes they are on the wire (field
//! number << 3 | wire type), for the hand-written readers and writers that
//! skip prost's generic walk: the daemon's one-pass `SeriesSamples`
//! reader and the load generator's encoder. Every field number here is
//! below 16, so each key is one byte. The tests hold each to what prost
//! writes for the generated types, so a change to the `.proto` that moves
//! a field fails here, not as silently misread requests.

/// Wire type 0 (varint) and 2 (length-delimited) in a key's low bits.
const VARINT: u8 = 0;
const LEN: u8 = 2;

/// `PushRequest.sources`.
pub const PUSH_SOURCES: u8 = 1 << 3 | LEN;
/// `SourceBatch.source` and `SourceBatch.series`.
pub const SOURCE_NAME: u8 = 1 << 3 | LEN;
pub const SOURCE_SERIES: u8 = 2 << 3 | LEN;
/// `SeriesSamples`' fields; the arrays packed.
pub const SERIES_METRIC: u8 = 1 << 3 | LEN;
pub const SERIES_KIND: u8 = 2 << 3 | VARINT;
pub const SERIES_TIMESTAMPS: u8 = 3 << 3 | LEN;
pub const SERIES_VALUES: u8 = 4 << 3 | LEN;
pub const SERIES_LABELS: u8 = 5 << 3 | LEN;
pub const SERIES_START_TIMES: u8 = 6 << 3 | LEN;
/// `Label.name` and `Label.value`.
pub const LABEL_NAME: u8 = 1 << 3 | LEN;
pub const LABEL_VALUE: u8 = 2 << 3 | LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1 as pb;

    /// The first byte prost writes for a message with only one field set.
    fn first(m: impl prost::Message) -> u8 {
        m.encode_to_vec()[0]
    }

    #[test]
    fn keys_are_what_prost_writes() {
        let series = pb::SeriesSamples::default;
        let push = pb::PushRequest {
            sources: vec![pb::SourceBatch::default()],
        };
        assert_eq!(first(push), PUSH_SOURCES);
        let named = pb::SourceBatch {
            source: "s".into(),
            ..Default::default()
        };
        assert_eq!(first(named), SOURCE_NAME);
        let with_series = pb::SourceBatch {
            series: vec![series()],
            ..Default::default()
        };
        assert_eq!(first(with_series), SOURCE_SERIES);
        let cases = [
            (
                pb::SeriesSamples {
                    metric: "m".into(),
                    ..series()
                },
                SERIES_METRIC,
            ),
            (
                pb::SeriesSamples {
                    kind: 1,
                    ..series()
                },
                SERIES_KIND,
            ),
            (
                pb::SeriesSamples {
                    timestamps_ms: vec![1],
                    ..series()
                },
                SERIES_TIMESTAMPS,
            ),
            (
                pb::SeriesSamples {
                    values: vec![1.0],
                    ..series()
                },
                SERIES_VALUES,
            ),
            (
                pb::SeriesSamples {
                    labels: vec![pb::Label::default()],
                    ..series()
                },
                SERIES_LABELS,
            ),
            (
                pb::SeriesSamples {
                    start_times_ms: vec![1],
                    ..series()
                },
                SERIES_START_TIMES,
            ),
        ];
        for (m, key) in cases {
            assert_eq!(first(m), key);
        }
        let name = pb::Label {
            name: "n".into(),
            value: String::new(),
        };
        assert_eq!(first(name), LABEL_NAME);
        let value = pb::Label {
            name: String::new(),
            value: "v".into(),
        };
        assert_eq!(first(value), LABEL_VALUE);
    }
}
