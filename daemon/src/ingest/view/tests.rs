//! The borrowed view against prost's own decoding of the same bytes.

use super::*;
use proptest::prelude::*;
use prost::encoding::{encode_key, encode_varint};
use prost::Message;

/// The view back in the generated types, to compare by encoding (which
/// compares doubles bit for bit, NaNs included).
fn owned(v: &PushView<'_>) -> pb::PushRequest {
    v.to_request()
}

/// Decodes `bytes` both ways and requires the same request or the same
/// error message.
fn agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    match (
        PushView::decode(bytes, usize::MAX),
        pb::PushRequest::decode(bytes),
    ) {
        (Ok(view), Ok(req)) => {
            prop_assert_eq!(owned(&view).encode_to_vec(), req.encode_to_vec());
            let samples: usize = req
                .sources
                .iter()
                .flat_map(|s| &s.series)
                .map(|s| s.values.len().max(s.timestamps_ms.len()))
                .sum();
            prop_assert_eq!(view.samples(), samples);
            prop_assert_eq!(
                owned(&PushView::of(&req)).encode_to_vec(),
                req.encode_to_vec()
            );
        }
        (Err(ours), Err(theirs)) => prop_assert_eq!(ours.to_string(), theirs.to_string()),
        (ours, theirs) => prop_assert!(
            false,
            "view {:?} but prost {:?}",
            ours.map(|v| v.series_len()),
            theirs.map(|r| r.sources.len())
        ),
    }
    Ok(())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(&["", "cpu", "node_cpu_seconds_total", "é|{\"}"][..])
            .prop_map(str::to_owned),
        "[a-z_]{1,12}",
        any::<String>(),
    ]
}

fn series() -> impl Strategy<Value = pb::SeriesSamples> {
    (
        text(),
        any::<i32>(),
        proptest::collection::vec((text(), text()), 0..4),
        proptest::collection::vec(any::<i64>(), 0..5),
        proptest::collection::vec(any::<f64>(), 0..5),
        proptest::collection::vec(any::<i64>(), 0..3),
    )
        .prop_map(
            |(metric, kind, labels, timestamps_ms, values, start_times_ms)| pb::SeriesSamples {
                metric,
                kind,
                labels: labels
                    .into_iter()
                    .map(|(name, value)| pb::Label { name, value })
                    .collect(),
                timestamps_ms,
                values,
                start_times_ms,
            },
        )
}

fn request() -> impl Strategy<Value = pb::PushRequest> {
    let source = (
        text(),
        proptest::collection::vec(series(), 0..5),
        proptest::collection::vec(text(), 0..3),
    )
        .prop_map(|(source, series, groups)| pb::SourceBatch {
            source,
            series,
            groups,
        });
    proptest::collection::vec(source, 0..4).prop_map(|sources| pb::PushRequest { sources })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn a_valid_request_decodes_to_what_prost_makes_of_it(req in request()) {
        let bytes = req.encode_to_vec();
        agree(&bytes)?;
        let view = PushView::decode(&bytes, usize::MAX).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(owned(&view), req);
    }

    #[test]
    fn corrupted_bytes_fail_or_succeed_as_prost_does(
        req in request(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut bytes = req.encode_to_vec();
        for (at, x, how) in edits {
            if bytes.is_empty() {
                bytes.push(x);
                continue;
            }
            let i = at % bytes.len();
            match how {
                0 => bytes[i] ^= x.max(1),
                1 => bytes.truncate(i),
                _ => bytes.insert(i, x),
            }
        }
        agree(&bytes)?;
    }

    #[test]
    fn noise_fails_or_succeeds_as_prost_does(bytes in any::<Vec<u8>>()) {
        agree(&bytes)?;
    }
}

/// Appends a field of every wire type with an unknown tag.
fn unknown_fields(out: &mut Vec<u8>) {
    encode_key(90, WireType::Varint, out);
    encode_varint(300, out);
    encode_key(91, WireType::SixtyFourBit, out);
    out.extend_from_slice(&[1; 8]);
    encode_key(92, WireType::ThirtyTwoBit, out);
    out.extend_from_slice(&[2; 4]);
    encode_key(93, WireType::LengthDelimited, out);
    encode_varint(3, out);
    out.extend_from_slice(b"abc");
    encode_key(94, WireType::StartGroup, out);
    encode_key(1, WireType::Varint, out);
    encode_varint(7, out);
    encode_key(94, WireType::EndGroup, out);
}

fn delimited(tag: u32, body: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

#[test]
fn split_repeated_fields_unknown_fields_and_repeated_scalars_read_as_prost_does() {
    let mut label = Vec::new();
    unknown_fields(&mut label);
    delimited(1, b"mode", &mut label);
    delimited(2, b"user", &mut label);
    delimited(2, b"idle", &mut label); // the last value wins
    let mut series = Vec::new();
    delimited(1, b"cpu", &mut series);
    // Timestamps packed, then one unpacked, around values and a label.
    let mut packed = Vec::new();
    encode_varint(1_000, &mut packed);
    encode_varint(2_000, &mut packed);
    delimited(3, &packed, &mut series);
    encode_key(4, WireType::SixtyFourBit, &mut series);
    series.extend_from_slice(&1.5f64.to_le_bytes());
    delimited(5, &label, &mut series);
    unknown_fields(&mut series);
    encode_key(3, WireType::Varint, &mut series);
    encode_varint(3_000, &mut series);
    delimited(
        4,
        &[2.5f64.to_le_bytes(), 3.5f64.to_le_bytes()].concat(),
        &mut series,
    );
    encode_key(2, WireType::Varint, &mut series);
    encode_varint(1, &mut series);
    let mut source = Vec::new();
    delimited(1, b"first", &mut source);
    delimited(2, &series, &mut source);
    unknown_fields(&mut source);
    delimited(3, b"rack-1", &mut source);
    delimited(1, b"web-1", &mut source); // the last source name wins
    delimited(2, &series, &mut source);
    let mut bytes = Vec::new();
    unknown_fields(&mut bytes);
    delimited(1, &source, &mut bytes);
    delimited(1, &source, &mut bytes);
    unknown_fields(&mut bytes);

    let view = PushView::decode(&bytes, usize::MAX).expect("decodes");
    let req = pb::PushRequest::decode(&bytes[..]).expect("prost decodes");
    assert_eq!(owned(&view), req);
    let src = view.sources().next().expect("a source");
    assert_eq!(src.source(), "web-1");
    assert_eq!(src.groups(), ["rack-1"]);
    let s = src.series().next().expect("a series");
    assert_eq!(s.timestamps_ms, [1_000, 2_000, 3_000]);
    assert_eq!(s.values, [1.5, 2.5, 3.5]);
    assert_eq!(s.labels, [("mode", "idle")]);
    assert_eq!(s.kind, 1);
    assert_eq!(view.samples(), 2 * 2 * 3);
}

#[test]
fn errors_name_the_field_as_prost_does() {
    let cases: [&[u8]; 5] = [
        // SourceBatch.source is not UTF-8.
        b"\x0a\x03\x0a\x01\xff",
        // A label value is not UTF-8.
        b"\x0a\x08\x12\x06\x2a\x04\x12\x02\xc3\x28",
        // A metric's length runs past its series.
        b"\x0a\x06\x12\x04\x0a\x05abcd",
        // A value sent as a varint.
        b"\x0a\x04\x12\x02\x20\x01",
        // A source's length runs past the request.
        b"\x0a\x09\x0a\x01a",
    ];
    for bytes in cases {
        let ours = PushView::decode(bytes, usize::MAX)
            .expect_err("refused")
            .to_string();
        let theirs = pb::PushRequest::decode(bytes)
            .expect_err("prost refuses")
            .to_string();
        assert_eq!(ours, theirs);
    }
    let ours = PushView::decode(cases[0], usize::MAX)
        .expect_err("refused")
        .to_string();
    assert!(ours.contains("SourceBatch.source"), "{ours}");
}

#[test]
fn series_and_sources_beyond_the_limit_are_refused_while_decoding() {
    let series = |n: usize| {
        let mut source = Vec::new();
        for _ in 0..n {
            delimited(2, b"", &mut source);
        }
        let mut bytes = Vec::new();
        delimited(1, &source, &mut bytes);
        bytes
    };
    assert_eq!(
        PushView::decode(&series(3), 3)
            .expect("at the limit")
            .series_len(),
        3
    );
    let e = PushView::decode(&series(4), 3).expect_err("over the limit");
    assert!(matches!(e, ViewError::TooManySeries { limit: 3 }), "{e}");
    assert!(e.to_string().contains("ingest.max_batch_samples"), "{e}");
    // Sources without series count too.
    let sources = [b"\x0a\x00".as_slice(); 4].concat();
    assert_eq!(
        PushView::decode(&sources[..6], 3)
            .expect("at the limit")
            .sources()
            .len(),
        3
    );
    assert!(matches!(
        PushView::decode(&sources, 3),
        Err(ViewError::TooManySeries { limit: 3 })
    ));
}
