//! Reads a remote-write 1.0 `prometheus.WriteRequest` from its
//! decompressed bytes straight into a [`PushView`]: every name and label a
//! slice of those bytes, every sample appended to the view's columns, the
//! request's metadata into the [`MetadataBook`]. No owned message is made
//! on the way, neither Prometheus' nor `tally.v1`'s.
//!
//! A series in the layout every sender writes is read by the tight pass
//! of the sibling `fast` module. Any other is decoded with prost's
//! primitives (keys, varints, doubles, skipping unknown fields, nested
//! lengths) and the view's own string checks, so a body prost refuses is
//! refused here with the same message; a test holds the parse to prost's
//! decoding of the same bytes, read through the mapping of the parent
//! module.

use hashbrown::HashMap;
use prost::encoding::{check_wire_type, double, int32, int64, skip_field, DecodeContext, WireType};

use super::{family_type_of, fast, kind_by_metadata, KindRule, KnownKind, RemoteWriteConfig};
use crate::aggregator::{IngestOutcome, RejectReason};
use crate::ingest::builder::Budget;
use crate::ingest::text::{same, NameTable};
use crate::ingest::view::fast::{delimited, key as wire_key};
pub use crate::ingest::view::ParseError;
use crate::ingest::view::{borrow_str, nested, Mark, PushView, ViewBuilder, ViewError};
use crate::metadata::{FamilyType, MetadataBook};

/// `WriteRequest.timeseries`' key: field 1, length-delimited.
const SERIES: u8 = 0x0a;
/// The label that names a series' metric.
const NAME: &str = "__name__";

/// What a parse needs besides the bytes.
pub struct Parse<'c> {
    pub cfg: &'c RemoteWriteConfig,
    pub book: &'c MetadataBook,
    /// Rejection details kept.
    pub cap: usize,
    pub budget: Budget,
    pub known: KnownKind<'c>,
}

impl Parse<'_> {
    /// The request in `bytes` as a view, and what the mapping refused
    /// (series without a name or a source). Metadata decides the kinds of
    /// the series beside it, so it is recorded before any series is
    /// mapped.
    ///
    /// Prometheus sends metadata in requests of their own, and an encoder
    /// writes it after the series (field order): the series are read in
    /// one pass, metadata read in place while none has come before it,
    /// and only a request whose metadata follows a series is read again,
    /// its metadata first. (Stepping over every series to look for
    /// metadata first was about a twentieth of the parse.)
    pub fn view<'a>(&self, bytes: &'a [u8]) -> Result<(PushView<'a>, IngestOutcome), ParseError> {
        let mut ahead = None;
        loop {
            // Twice at most: with the types read ahead, a pass finishes.
            if let Some(done) = self.read(bytes, ahead.take())? {
                return Ok(done);
            }
            ahead = Some(self.metadata(bytes)?);
        }
    }

    /// One pass over the request; None when metadata comes after a
    /// series and `known` (the request's metadata, read beforehand) is
    /// None.
    fn read<'a>(
        &self,
        bytes: &'a [u8],
        known: Option<HashMap<&'a str, FamilyType>>,
    ) -> Result<Option<(PushView<'a>, IngestOutcome)>, ParseError> {
        let read_ahead = known.is_some();
        let mut types = known.unwrap_or_default();
        let mut b = ViewBuilder::new(self.cap, self.budget);
        // A series of a name, a source and a sample is about 32 bytes;
        // most senders' have a label or so besides.
        b.reserve_for(bytes.len(), 32, 3);
        let mut by_name = NameTable::with_cap(usize::MAX);
        let mut texts = fast::Texts::default();
        let mut series_seen = false;
        let mut buf = bytes;
        while !buf.is_empty() {
            let (tag, wire_type) = wire_key(&mut buf)?;
            match tag {
                1 => {
                    check_wire_type(WireType::LengthDelimited, wire_type)
                        .map_err(|e| ViewError::Wire(e).at("WriteRequest", "timeseries"))?;
                    series_seen = true;
                    let mut said = Said {
                        types: &types,
                        by_name: &mut by_name,
                    };
                    self.series(&mut b, &mut buf, &mut said, &mut texts)?;
                }
                3 if !read_ahead => {
                    if series_seen {
                        return Ok(None);
                    }
                    self.one_metadata(wire_type, &mut buf, &mut types)?;
                }
                _ => skip_field(wire_type, tag, &mut buf, DecodeContext::default())?,
            }
        }
        Ok(Some(b.finish()))
    }

    /// The request's metadata, by family, recorded in the book too.
    fn metadata<'a>(&self, mut buf: &'a [u8]) -> Result<HashMap<&'a str, FamilyType>, ParseError> {
        let mut types = HashMap::new();
        while let Some((&key, rest)) = buf.split_first() {
            // Series, nearly all of a body, stepped over without prost's
            // generic skip (a fortieth of the parse).
            if key == SERIES {
                if let Some((_, after)) = delimited(rest) {
                    buf = after;
                    continue;
                }
            }
            let (tag, wire_type) = wire_key(&mut buf)?;
            if tag != 3 {
                skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
                continue;
            }
            self.one_metadata(wire_type, &mut buf, &mut types)?;
        }
        Ok(types)
    }

    /// One `MetricMetadata` at the front of `buf`, recorded in the book
    /// and in `types`.
    fn one_metadata<'a>(
        &self,
        wire_type: WireType,
        buf: &mut &'a [u8],
        types: &mut HashMap<&'a str, FamilyType>,
    ) -> Result<(), ParseError> {
        check_wire_type(WireType::LengthDelimited, wire_type)?;
        let (mut kind, mut family, mut help, mut unit) = (0i32, "", "", "");
        nested(buf, |buf, tag, wire_type| {
            let named = |field| move |e: ViewError| e.at("MetricMetadata", field);
            match tag {
                1 => int32::merge(wire_type, &mut kind, buf, DecodeContext::default())
                    .map_err(|e| ViewError::Wire(e).at("MetricMetadata", "type")),
                2 => borrow_str(wire_type, buf)
                    .map(|s| family = s)
                    .map_err(named("metric_family_name")),
                4 => borrow_str(wire_type, buf)
                    .map(|s| help = s)
                    .map_err(named("help")),
                5 => borrow_str(wire_type, buf)
                    .map(|s| unit = s)
                    .map_err(named("unit")),
                _ => Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?),
            }
        })
        .map_err(|e| e.at("WriteRequest", "metadata"))?;
        let t = family_type_of(kind);
        self.book.record(family, t, help, unit);
        types.insert(family, t);
        Ok(())
    }

    /// One `TimeSeries`: appended, mapped and ended, or refused and taken
    /// back.
    fn series<'a>(
        &self,
        b: &mut ViewBuilder<'a>,
        buf: &mut &'a [u8],
        said: &mut Said<'_, 'a>,
        texts: &mut fast::Texts<'a>,
    ) -> Result<(), ParseError> {
        let mark = b.mark();
        if !fast::series(b, buf, texts) {
            nested(buf, |buf, tag, wire_type| match tag {
                1 => label(b, wire_type, buf).map_err(|e| e.at("TimeSeries", "labels")),
                2 => sample(b, wire_type, buf).map_err(|e| e.at("TimeSeries", "samples")),
                _ => Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?),
            })
            .map_err(|e| e.at("WriteRequest", "timeseries"))?;
        }
        let count = b.samples_since(mark) as u64;
        if count == 0 {
            b.drop_series(mark);
            return Ok(());
        }
        let Some(id) = self.identity(b, mark, count) else {
            b.drop_series(mark);
            return Ok(());
        };
        b.retain_labels(mark, |n| !same(n, NAME) && !same(n, id.source_label));
        let labels = b.labels_since(mark);
        let rule = said.rule(id.name, |types| {
            KindRule::of(id.name, kind_by_metadata(id.name, types, self.book))
        });
        let kind = rule.kind(|| (self.known)(id.source, id.name, &*labels));
        b.end_series(mark, id.source, id.name, kind as i32)?;
        Ok(())
    }

    /// The series' source and metric name; None (and counted) when it
    /// lacks either.
    fn identity<'a>(
        &self,
        b: &mut ViewBuilder<'a>,
        mark: Mark,
        count: u64,
    ) -> Option<Identity<'a>> {
        let labels = b.labels_since(mark);
        let Some(&(_, name)) = labels.iter().find(|l| same(l.0, NAME)) else {
            b.refuse(count, RejectReason::InvalidPoint, || {
                "a series without a __name__ label".into()
            });
            return None;
        };
        let source = self.cfg.source_labels.iter().find_map(|s| {
            labels
                .iter()
                .find(|l| same(l.0, s) && !l.1.is_empty())
                .copied()
        });
        let Some(source) = source else {
            b.refuse(count, RejectReason::MissingSource, || {
                format!(
                    "series {:?} has none of the source labels {} (remote_write.source_labels)",
                    name,
                    self.cfg.source_labels.join(", ")
                )
            });
            return None;
        };
        Some(Identity {
            source_label: source.0,
            source: source.1,
            name,
        })
    }
}

/// What the request's and the book's metadata say of each metric name seen
/// so far in a request: a request repeats a few names over thousands of
/// series, and each look into the book takes its lock.
struct Said<'t, 'a> {
    types: &'t HashMap<&'a str, FamilyType>,
    /// A request's names are bounded by its size.
    by_name: &'t mut NameTable<'a, KindRule>,
}

impl<'a> Said<'_, 'a> {
    /// The rule for `name`'s series, decided by `decide` the first time.
    fn rule(
        &mut self,
        name: &'a str,
        decide: impl FnOnce(&HashMap<&'a str, FamilyType>) -> KindRule,
    ) -> KindRule {
        let types = self.types;
        self.by_name.get_or_make(name, || decide(types))
    }
}

/// Who a series is: its source (and the label that named it) and metric.
struct Identity<'a> {
    source_label: &'a str,
    source: &'a str,
    name: &'a str,
}

fn label<'a>(
    b: &mut ViewBuilder<'a>,
    wire_type: WireType,
    buf: &mut &'a [u8],
) -> Result<(), ViewError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let (mut name, mut value) = ("", "");
    nested(buf, |buf, tag, wire_type| match tag {
        1 => borrow_str(wire_type, buf)
            .map(|s| name = s)
            .map_err(|e| e.at("Label", "name")),
        2 => borrow_str(wire_type, buf)
            .map(|s| value = s)
            .map_err(|e| e.at("Label", "value")),
        _ => Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?),
    })?;
    b.label(name, value);
    Ok(())
}

/// A sample; a staleness marker is one too (it ends its series).
fn sample(b: &mut ViewBuilder<'_>, wire_type: WireType, buf: &mut &[u8]) -> Result<(), ViewError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let (mut value, mut ts) = (0f64, 0i64);
    nested(buf, |buf, tag, wire_type| {
        let ctx = DecodeContext::default();
        match tag {
            1 => double::merge(wire_type, &mut value, buf, ctx)
                .map_err(|e| ViewError::Wire(e).at("Sample", "value")),
            2 => int64::merge(wire_type, &mut ts, buf, ctx)
                .map_err(|e| ViewError::Wire(e).at("Sample", "timestamp")),
            _ => Ok(skip_field(wire_type, tag, buf, ctx)?),
        }
    })?;
    b.sample(ts, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use prost::Message as _;
    use tally_proto::prometheus as rw;
    use tally_proto::v1 as pb;

    use super::*;

    fn request() -> impl Strategy<Value = rw::WriteRequest> {
        let label = prop_oneof![
            Just("__name__".to_owned()),
            Just("instance".to_owned()),
            "[a-z]{1,2}",
        ]
        .prop_flat_map(|name| {
            // Some over 127 bytes: a length of two varint bytes.
            prop_oneof![4 => "[a-zé€]{0,2}_?(total)?", 1 => "[a-z€]{100,140}"].prop_map(
                move |value| rw::Label {
                    name: name.clone(),
                    value,
                },
            )
        });
        let value = prop_oneof![
            any::<f64>(),
            Just(crate::model::stale_marker()),
            Just(f64::NAN)
        ];
        let sample =
            (value, any::<i64>()).prop_map(|(value, timestamp)| rw::Sample { value, timestamp });
        let series = (
            prop::collection::vec(label, 0..4),
            prop::collection::vec(sample, 0..3),
        )
            .prop_map(|(labels, samples)| rw::TimeSeries { labels, samples });
        prop::collection::vec(series, 0..6).prop_map(|timeseries| rw::WriteRequest {
            timeseries,
            metadata: vec![],
        })
    }

    /// What the parse must make of a decoded request: series with samples
    /// (staleness markers included), a name and a source, grouped by
    /// source in order of first appearance, without those two labels.
    fn expected(req: &rw::WriteRequest) -> (pb::PushRequest, u64) {
        let mut out = pb::PushRequest::default();
        let mut refused = 0;
        for ts in &req.timeseries {
            let fresh: Vec<&rw::Sample> = ts.samples.iter().collect();
            if fresh.is_empty() {
                continue;
            }
            let name = ts.labels.iter().find(|l| l.name == "__name__");
            let source = ts
                .labels
                .iter()
                .find(|l| l.name == "instance" && !l.value.is_empty());
            let (Some(name), Some(source)) = (name, source) else {
                refused += fresh.len() as u64;
                continue;
            };
            let at = match out.sources.iter().position(|s| s.source == source.value) {
                Some(at) => at,
                None => {
                    out.sources.push(pb::SourceBatch {
                        source: source.value.clone(),
                        ..Default::default()
                    });
                    out.sources.len() - 1
                }
            };
            out.sources[at].series.push(pb::SeriesSamples {
                metric: name.value.clone(),
                kind: super::super::kind_by_name(&name.value) as i32,
                labels: ts
                    .labels
                    .iter()
                    .filter(|l| l.name != "__name__" && l.name != "instance")
                    .map(|l| pb::Label {
                        name: l.name.clone(),
                        value: l.value.clone(),
                    })
                    .collect(),
                timestamps_ms: fresh.iter().map(|s| s.timestamp).collect(),
                values: fresh.iter().map(|s| s.value).collect(),
                start_times_ms: vec![],
            });
        }
        (out, refused)
    }

    /// `bytes` parsed with the default mapping, metadata recorded in
    /// `book`.
    fn parse_into(book: &MetadataBook, bytes: &[u8]) -> Result<(pb::PushRequest, u64), ParseError> {
        let cfg = RemoteWriteConfig::default();
        let p = Parse {
            cfg: &cfg,
            book,
            cap: 10,
            budget: Budget {
                samples: usize::MAX,
                bytes: usize::MAX,
            },
            known: &|_, _, _| None,
        };
        p.view(bytes).map(|(v, out)| (v.to_request(), out.rejected))
    }

    fn parse(bytes: &[u8]) -> Result<(pb::PushRequest, u64), ParseError> {
        parse_into(&MetadataBook::new(), bytes)
    }

    /// Metadata decides the kinds of every series of its request, before
    /// them, after them (the encoders' order) or between them, and a
    /// request of metadata alone is recorded.
    #[test]
    fn metadata_anywhere_in_a_request_decides_its_kinds() {
        use rw::metric_metadata::MetricType as T;
        let one = |name: &str, host: &str| rw::TimeSeries {
            labels: vec![
                rw::Label {
                    name: "__name__".into(),
                    value: name.into(),
                },
                rw::Label {
                    name: "instance".into(),
                    value: host.into(),
                },
            ],
            samples: vec![rw::Sample {
                value: 1.0,
                timestamp: 1000,
            }],
        };
        let series = |ts: Vec<rw::TimeSeries>| {
            rw::WriteRequest {
                timeseries: ts,
                metadata: vec![],
            }
            .encode_to_vec()
        };
        let (a, b) = (
            series(vec![one("requests", "h1")]),
            series(vec![one("requests", "h2")]),
        );
        let meta = rw::WriteRequest {
            timeseries: vec![],
            metadata: vec![rw::MetricMetadata {
                r#type: T::Counter as i32,
                metric_family_name: "requests".into(),
                ..Default::default()
            }],
        }
        .encode_to_vec();
        let counter = pb::SampleKind::CumulativeCounter as i32;
        for body in [
            [&meta[..], &a, &b].concat(),
            [&a[..], &meta, &b].concat(),
            [&a[..], &b, &meta].concat(),
        ] {
            let book = MetadataBook::new();
            let req = parse_into(&book, &body).unwrap().0;
            let kinds: Vec<i32> = req.sources.iter().map(|s| s.series[0].kind).collect();
            assert_eq!(kinds, [counter, counter]);
            assert_eq!(
                book.get("requests").map(|f| f.kind),
                Some(FamilyType::Counter)
            );
        }
        // Without the metadata the name alone says gauge.
        let req = parse(&[&a[..], &b].concat()).unwrap().0;
        assert_eq!(req.sources[0].series[0].kind, pb::SampleKind::Gauge as i32);
        let only = MetadataBook::new();
        assert!(parse_into(&only, &meta).unwrap().0.sources.is_empty());
        assert_eq!(
            only.get("requests").map(|f| f.kind),
            Some(FamilyType::Counter)
        );
    }

    proptest! {
        #[test]
        fn a_request_parses_as_its_decoded_form_maps(req in request()) {
            let bytes = req.encode_to_vec();
            let got = parse(&bytes).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            // From what the wire says (a -0.0 is sent as no value at all).
            let want = expected(&rw::WriteRequest::decode(&bytes[..])?);
            prop_assert_eq!(got.0.encode_to_vec(), want.0.encode_to_vec());
            prop_assert_eq!(got.1, want.1);
        }

        /// Damaged bytes are refused exactly when prost refuses them.
        #[test]
        fn damaged_bytes_fail_as_prost_fails(
            req in request(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = req.encode_to_vec();
            if bytes.is_empty() {
                return Ok(());
            }
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= b;
            }
            bytes.truncate(cut.index(bytes.len() + 1));
            let ours = parse(&bytes);
            let theirs = rw::WriteRequest::decode(&bytes[..]);
            prop_assert_eq!(ours.is_err(), theirs.is_err(), "ours {:?}", ours.err());
        }
    }
}
