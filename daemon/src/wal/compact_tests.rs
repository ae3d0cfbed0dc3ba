use proptest::prelude::*;

use super::*;

/// The request with every value as its bits, so that NaNs compare.
fn bits(req: &pb::PushRequest) -> (pb::PushRequest, Vec<Vec<u64>>) {
    let mut plain = req.clone();
    let mut values = Vec::new();
    for src in &mut plain.sources {
        for s in &mut src.series {
            values.push(s.values.iter().map(|v| v.to_bits()).collect());
            s.values.clear();
        }
    }
    (plain, values)
}

fn round_trip(enc: &mut Encoder, dec: &mut Decoder, req: &pb::PushRequest) -> usize {
    let mut out = Vec::new();
    enc.encode(1_700_000_000_000, &[1, 3], &PushView::of(req), &mut out);
    let (now_ms, refused, got) = dec.decode(&out).unwrap();
    assert_eq!((now_ms, refused), (1_700_000_000_000, vec![1, 3]));
    assert_eq!(bits(&got), bits(req));
    out.len()
}

/// [`round_trip`], decoded into `spare`, the request decoded before.
fn round_trip_reusing(
    enc: &mut Encoder,
    dec: &mut Decoder,
    req: &pb::PushRequest,
    spare: &mut pb::PushRequest,
) {
    let mut out = Vec::new();
    enc.encode(1_700_000_000_000, &[2], &PushView::of(req), &mut out);
    let (now_ms, refused) = dec.decode_into(&out, spare).unwrap();
    assert_eq!((now_ms, refused), (1_700_000_000_000, vec![2]));
    assert_eq!(bits(spare), bits(req));
}

/// `sources` hosts of `metrics` gauges, one sample each at `ts`.
fn fleet(sources: usize, metrics: usize, ts: i64, value: impl Fn(usize) -> f64) -> pb::PushRequest {
    let sources = (0..sources)
        .map(|h| pb::SourceBatch {
            source: format!("host-{h:04}"),
            groups: vec![],
            series: (0..metrics)
                .map(|m| pb::SeriesSamples {
                    metric: format!("node_metric_{m:02}"),
                    labels: vec![pb::Label {
                        name: "cpu".into(),
                        value: (m % 4).to_string(),
                    }],
                    timestamps_ms: vec![ts],
                    values: vec![value(h * metrics + m)],
                    ..Default::default()
                })
                .collect(),
        })
        .collect();
    pb::PushRequest { sources }
}

#[test]
fn decimals_are_found_exactly_and_only_when_exact() {
    assert_eq!(decimal(0.0), Some((0, 0)));
    assert_eq!(decimal(12.34), Some((1234, 2)));
    assert_eq!(decimal(-0.5), Some((-5, 1)));
    assert_eq!(decimal(1e9 + 17.0), Some((1_000_000_017, 0)));
    assert_eq!(decimal(0.1234567), Some((1_234_567, 7)));
    assert_eq!(decimal(0.12345678), None);
    assert_eq!(decimal(-0.0), None, "the sign of zero is kept");
    assert_eq!(decimal(f64::NAN), None);
    assert_eq!(decimal(f64::INFINITY), None);
    assert_eq!(decimal(1e300), None);
    assert_eq!(decimal(std::f64::consts::PI), None);
}

#[test]
fn a_steady_fleet_costs_a_few_bytes_per_sample() {
    let (mut enc, mut dec) = (Encoder::default(), Decoder::default());
    let first = round_trip(&mut enc, &mut dec, &fleet(50, 20, 1_000, |i| i as f64));
    let mut later = 0;
    for k in 1..5i64 {
        let req = fleet(50, 20, 1_000 + k * 1000, |i| {
            (i as f64 + k as f64 * 0.25) * 2.0
        });
        later = round_trip(&mut enc, &mut dec, &req);
    }
    // A head byte and a one- or two-byte value per sample once the series
    // are known.
    assert!(later < 1000 * 3 + 200, "{later} bytes");
    assert!(first > later * 3, "the first record defines the series");
}

#[test]
fn a_reset_record_starts_the_reader_again() {
    let (mut enc, mut dec) = (Encoder::default(), Decoder::default());
    let req = fleet(3, 4, 5_000, |i| i as f64 * 0.5);
    round_trip(&mut enc, &mut dec, &req);
    // A write failed: the next record's definitions replace what the
    // reader had, which it must forget.
    enc.lost();
    round_trip(&mut enc, &mut dec, &fleet(2, 2, 6_000, |i| i as f64));
    round_trip(&mut enc, &mut dec, &req);
    // A new segment: a new reader reads it on its own.
    enc.new_segment();
    round_trip(&mut enc, &mut Decoder::default(), &req);
}

#[test]
fn a_full_dictionary_spells_series_out() {
    let (mut enc, mut dec) = (Encoder::default(), Decoder::default());
    // Fill the dictionaries as if the segment had met their bound.
    let big = "x".repeat(crate::ingest::dict::MAX_KEY_BYTES - 40);
    let filler = pb::PushRequest {
        sources: vec![pb::SourceBatch {
            source: big,
            ..Default::default()
        }],
    };
    round_trip(&mut enc, &mut dec, &filler);
    for _ in 0..3 {
        round_trip(&mut enc, &mut dec, &fleet(4, 3, 7_000, |i| i as f64));
    }
}

#[test]
fn damaged_records_are_errors_not_panics() {
    let mut enc = Encoder::default();
    let mut out = Vec::new();
    let req = fleet(3, 3, 1_000, |i| i as f64 * 0.1);
    enc.encode(5, &[], &PushView::of(&req), &mut out);
    for cut in 0..out.len() {
        assert!(
            Decoder::default().decode(&out[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut later = Vec::new();
    enc.encode(5, &[], &PushView::of(&req), &mut later);
    assert!(
        Decoder::default().decode(&later).is_err(),
        "refers to series a fresh reader does not know"
    );
}

fn label() -> impl Strategy<Value = pb::Label> {
    ("[a-z]{0,3}", "[a-z0-9]{0,3}").prop_map(|(name, value)| pb::Label { name, value })
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        (-1_000_000i64..1_000_000, 0usize..9).prop_map(|(m, k)| m as f64 / 10f64.powi(k as i32)),
        Just(0.0),
        Just(-0.0),
        Just(f64::NAN),
        // The staleness marker, whose bits are what it means.
        Just(crate::model::stale_marker()),
    ]
}

fn series() -> impl Strategy<Value = pb::SeriesSamples> {
    (
        "[a-c]{0,2}",
        -1i32..4,
        prop::collection::vec(label(), 0..3),
        prop::collection::vec((prop_oneof![any::<i64>(), 0i64..5_000], value()), 0..4),
        prop::collection::vec(any::<i64>(), 0..2),
        any::<bool>(),
    )
        .prop_map(|(metric, kind, labels, samples, start_times_ms, uneven)| {
            let mut values: Vec<f64> = samples.iter().map(|s| s.1).collect();
            if uneven {
                values.push(1.5);
            }
            pb::SeriesSamples {
                metric,
                kind,
                labels,
                timestamps_ms: samples.iter().map(|s| s.0).collect(),
                values,
                start_times_ms,
            }
        })
}

fn request() -> impl Strategy<Value = pb::PushRequest> {
    let source = (
        "[a-c]{0,2}",
        prop::collection::vec(series(), 0..4),
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
    /// A decimal is found with the fewest decimals that give its bits
    /// back, whichever way it was made: a mantissa over a power of ten
    /// (of any size), or any bits at all.
    #[test]
    fn decimals_take_the_fewest_digits(
        m in prop_oneof![-1_000_000i64..1_000_000, any::<i64>().prop_map(|m| m >> 8)],
        k in 0usize..9,
        bits in any::<u64>(),
    ) {
        for v in [m as f64 / 10f64.powi(k as i32), f64::from_bits(bits)] {
            let exact = |k: usize| {
                let m = nearest(v * POW10[k]);
                v.abs() * POW10[k] < MAX_MANTISSA && (m as f64 / POW10[k]).to_bits() == v.to_bits()
            };
            let fewest = (0..POW10.len()).find(|&k| !v.is_nan() && exact(k));
            match decimal(v) {
                Some((m, k)) => {
                    prop_assert_eq!((m as f64 / POW10[k as usize]).to_bits(), v.to_bits());
                    prop_assert_eq!(Some(k as usize), fewest, "{}", v);
                }
                None => prop_assert!(fewest.is_none(), "{} has {:?}", v, fewest),
            }
        }
    }
}

proptest! {
    /// Requests encoded one after another against the same dictionaries
    /// (repeating names, so that series are defined, referred to, predicted
    /// and not), with failed writes and new segments between them, decode
    /// to the requests.
    #[test]
    fn requests_round_trip(
        reqs in prop::collection::vec((request(), 0u8..8), 1..8),
    ) {
        let (mut enc, mut dec) = (Encoder::default(), Decoder::default());
        for (req, event) in &reqs {
            match event {
                0 => enc.lost(),
                1 => {
                    enc.new_segment();
                    dec = Decoder::default();
                }
                _ => {}
            }
            round_trip(&mut enc, &mut dec, req);
            // The same request again: now every series is known.
            round_trip(&mut enc, &mut dec, req);
        }
    }

    /// The same, each request decoded into the one decoded before it, as
    /// replay does: nothing of a longer or differently shaped request
    /// before is left in the next.
    #[test]
    fn requests_decoded_into_the_one_before_round_trip(
        reqs in prop::collection::vec((request(), 0u8..8), 1..8),
    ) {
        let (mut enc, mut dec) = (Encoder::default(), Decoder::default());
        let mut spare = pb::PushRequest::default();
        for (req, event) in &reqs {
            if *event == 1 {
                enc.new_segment();
                dec = Decoder::default();
            }
            round_trip_reusing(&mut enc, &mut dec, req, &mut spare);
            round_trip_reusing(&mut enc, &mut dec, req, &mut spare);
        }
    }
}

/// Calls `f` with series `s` as a view sees it.
fn with_series<R>(s: &pb::SeriesSamples, f: impl FnOnce(&SeriesView<'_>) -> R) -> R {
    let req = pb::PushRequest {
        sources: vec![pb::SourceBatch {
            series: vec![s.clone()],
            ..Default::default()
        }],
    };
    let view = PushView::of(&req);
    let series = view.sources().flat_map(|src| src.series()).next();
    f(&series.expect("one series"))
}

fn key_of(s: &pb::SeriesSamples, source: u32) -> Vec<u8> {
    let mut key = Vec::new();
    put_varint(u64::from(source), &mut key);
    with_series(s, |view| put_series_key(view, &mut key));
    key
}

fn source_number() -> impl Strategy<Value = u32> {
    // Varints of one byte and of two.
    prop_oneof![0u32..3, 126u32..130]
}

proptest! {
    /// A stored key is taken for a series in place exactly when the key
    /// built for that series is the same bytes.
    #[test]
    fn keys_are_recognised_in_place_exactly(
        a in series(),
        b in series(),
        source_a in source_number(),
        source_b in source_number(),
    ) {
        let stored = key_of(&a, source_a);
        prop_assert!(with_series(&a, |view| key_is(&stored, source_a, view)));
        let same = stored == key_of(&b, source_b);
        prop_assert_eq!(with_series(&b, |view| key_is(&stored, source_b, view)), same);
        // A key cut short, or with bytes after it, is not the series'.
        prop_assert!(!with_series(&a, |view| key_is(&stored[..stored.len() - 1], source_a, view)));
        let mut longer = stored.clone();
        longer.push(0);
        prop_assert!(!with_series(&a, |view| key_is(&longer, source_a, view)));
    }
}

#[test]
fn varints_are_protobufs_bytes() {
    for v in [
        0,
        1,
        0x7f,
        0x80,
        0x3fff,
        0x4000,
        u64::from(u32::MAX),
        u64::MAX,
    ] {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        put_varint(v, &mut ours);
        prost::encoding::encode_varint(v, &mut theirs);
        assert_eq!(ours, theirs, "{v:#x}");
    }
}
