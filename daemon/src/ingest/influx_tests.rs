use proptest::prelude::*;

use super::*;

const BUDGET: Budget = Budget {
    samples: 10_000,
    bytes: 1 << 20,
};

/// An arena for a test's request, kept to the end of the test run.
fn arena() -> &'static Bump {
    Box::leak(Box::new(Bump::new()))
}

fn run(body: &str, precision: Precision) -> InfluxRequest<'_> {
    convert(
        body.as_bytes(),
        arena(),
        precision,
        7_000,
        &InfluxConfig::default(),
        10,
        BUDGET,
    )
    .unwrap()
}

fn labels(s: &pb::SeriesSamples) -> Vec<(String, String)> {
    s.labels
        .iter()
        .map(|l| (l.name.clone(), l.value.clone()))
        .collect()
}

#[test]
fn fields_become_metrics_and_tags_labels() {
    let body = "cpu,host=web-1,cpu=cpu0,k.x=1 usage_idle=97.5,ticks=12i,free=3u,up=t,note=\"ok\" 1700000000123456789\n\
                # a comment\n\
                \n\
                mem,host=web-2 used=1e3 1700000000\n";
    let r = run(body, Precision::Nanoseconds);
    assert_eq!(r.lines, 2);
    assert_eq!(r.string_fields, 1);
    let req = &r.view.to_request();
    assert_eq!(req.sources.len(), 2);
    let web1 = &req.sources[0];
    assert_eq!(web1.source, "web-1");
    let names: Vec<&str> = web1.series.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(names, ["cpu_usage_idle", "cpu_ticks", "cpu_free", "cpu_up"]);
    let values: Vec<f64> = web1.series.iter().map(|s| s.values[0]).collect();
    assert_eq!(values, [97.5, 12.0, 3.0, 1.0]);
    for s in &web1.series {
        assert_eq!(s.kind, pb::SampleKind::Gauge as i32);
        assert_eq!(s.timestamps_ms, [1_700_000_000_123]);
        assert_eq!(
            labels(s),
            [("cpu".into(), "cpu0".into()), ("k_x".into(), "1".into())]
        );
    }
    // Nanoseconds: 1700000000 ns is 1700 ms.
    assert_eq!(req.sources[1].series[0].timestamps_ms, [1_700]);
    assert_eq!(r.refused.rejected, 0);
}

/// Names are kept from the line before only while they are the same: a
/// tag or field that changes at the same place, or a source tag that
/// moves, is named afresh.
#[test]
fn names_kept_from_the_line_before_follow_each_line() {
    let body = "m,host=a,x=1 v=1\n\
                m,host=a,y=2 v=2\n\
                m,y=3,host=a w=3\n\
                m,z.z=4,host=a w=4\n";
    let req = run(body, Precision::Seconds).view.to_request();
    let series = &req.sources[0].series;
    let got: Vec<(&str, Vec<(String, String)>)> = series
        .iter()
        .map(|s| (s.metric.as_str(), labels(s)))
        .collect();
    let label = |n: &str, v: &str| vec![(n.to_owned(), v.to_owned())];
    assert_eq!(
        got,
        [
            ("m_v", label("x", "1")),
            ("m_v", label("y", "2")),
            ("m_w", label("y", "3")),
            ("m_w", label("z_z", "4")),
        ]
    );
}

#[test]
fn precisions_and_the_time_of_arrival() {
    for (p, ts, ms) in [
        (Precision::Seconds, "1700000000", 1_700_000_000_000),
        (Precision::Milliseconds, "1700000000123", 1_700_000_000_123),
        (
            Precision::Microseconds,
            "1700000000123999",
            1_700_000_000_123,
        ),
        (Precision::Minutes, "2", 120_000),
        (Precision::Hours, "1", 3_600_000),
        (Precision::Nanoseconds, "-1", -1),
    ] {
        let body = format!("m,host=h v=1 {ts}");
        let r = run(&body, p);
        assert_eq!(r.view.to_request().sources[0].series[0].timestamps_ms, [ms]);
    }
    let r = run("m,host=h v=1", Precision::Seconds);
    assert_eq!(
        r.view.to_request().sources[0].series[0].timestamps_ms,
        [7_000]
    );
    for (text, p) in [
        ("ns", Precision::Nanoseconds),
        ("n", Precision::Nanoseconds),
        ("", Precision::Nanoseconds),
        ("u", Precision::Microseconds),
        ("us", Precision::Microseconds),
        ("ms", Precision::Milliseconds),
        ("s", Precision::Seconds),
        ("m", Precision::Minutes),
        ("h", Precision::Hours),
    ] {
        assert_eq!(Precision::parse(text), Some(p), "{text}");
    }
    assert_eq!(Precision::parse("d"), None);
}

#[test]
fn bad_lines_are_refused_by_number_and_the_rest_kept() {
    let long = format!("m,host=h v=1,pad=\"{}\"", "x".repeat(70_000));
    let body = [
        "m,host=h good=1 1000",             // 1
        "m,host=h v=1,v=2 1000",            // 2: duplicate field
        "m,host=h v=NaN",                   // 3: NaN
        "m,host=h v=",                      // 4: missing value
        &long,                              // 5: too long
        "m,host=h,host=i v=1",              // 6: duplicate tag
        "m,room=a v=1",                     // 7: no source
        "m,host=h v=1 12x",                 // 8: bad timestamp
        "m,host=h v=99999999999999999999i", // 9: integer too large
        "m,host=h good=2 2000\r",           // 10: CRLF is fine
        // 11: ends in an escape (an escaped newline would join it to
        // the next line, as in InfluxDB, so it is the last)
        "m,host=h,room=a\\",
    ]
    .join("\n");
    let r = run(&body, Precision::Milliseconds);
    assert_eq!(r.lines, 11);
    let kept: Vec<f64> = r.view.to_request().sources[0]
        .series
        .iter()
        .map(|s| s.values[0])
        .collect();
    assert_eq!(kept, [1.0, 2.0]);
    let out = r.refused.clone();
    assert_eq!(out.rejected, 9);
    assert_eq!(
        out.rejected_by_reason[RejectReason::MissingSource as usize],
        1
    );
    let (problems, count) = r.refused_lines(&out, 100);
    assert_eq!(count, 9);
    let lines: Vec<u32> = problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7, 8, 9, 11]);
    let why = |line: u32| {
        problems
            .iter()
            .find(|p| p.line == line)
            .unwrap()
            .why
            .clone()
    };
    assert!(why(11).contains("backslash"), "{}", why(11));
    assert!(why(2).contains("field \"v\" is given twice"), "{}", why(2));
    assert!(why(3).contains("NaN"), "{}", why(3));
    assert!(why(3).contains("\"v=NaN\""), "{}", why(3));
    assert!(why(4).contains("invalid field set"), "{}", why(4));
    assert!(why(5).contains("influx.max_line_bytes"), "{}", why(5));
    assert!(why(5).len() < 400, "the line is quoted in part: {}", why(5));
    assert!(why(6).contains("tag \"host\" is given twice"), "{}", why(6));
    assert!(why(7).contains("influx.source_tag"), "{}", why(7));
    assert!(
        why(8).contains("unable to parse 'm,host=h v=1 12x'"),
        "{}",
        why(8)
    );
    assert!(why(9).contains("99999999999999999999"), "{}", why(9));
    // At most `cap` listed, all counted.
    let (few, count) = r.refused_lines(&out, 3);
    assert_eq!((few.len(), count), (3, 9));
}

#[test]
fn bytes_that_are_not_utf8_refuse_their_line_only() {
    let mut body = b"m,host=h a=1\nm,host=h b=".to_vec();
    body.extend_from_slice(&[0xff, 0xfe]);
    body.extend_from_slice("\nm,host=h,t=\u{fffd} c=3\n".as_bytes());
    let r = convert(
        &body,
        arena(),
        Precision::Nanoseconds,
        0,
        &InfluxConfig::default(),
        10,
        BUDGET,
    )
    .unwrap();
    let out = r.refused.clone();
    let (problems, _) = r.refused_lines(&out, 10);
    // Line 3's U+FFFD is also refused: the body was not UTF-8, so it cannot
    // be told from a replaced byte.
    assert_eq!(problems.iter().map(|p| p.line).collect::<Vec<_>>(), [2, 3]);
    assert!(problems[0].why.contains("not UTF-8"));
    // In a UTF-8 body, U+FFFD is an ordinary character.
    let r = run("m,host=h,t=\u{fffd} c=3", Precision::Nanoseconds);
    assert_eq!(r.refused.rejected, 0);
}

#[test]
fn the_budget_refuses_the_whole_body() {
    let body = "m,host=h a=1,b=2,c=3\n".repeat(10);
    let small = Budget {
        samples: 20,
        bytes: 1 << 20,
    };
    let r = convert(
        body.as_bytes(),
        arena(),
        Precision::Nanoseconds,
        0,
        &InfluxConfig::default(),
        10,
        small,
    );
    assert!(r.is_err());
}

#[test]
fn many_fields_are_checked_for_duplicates_with_a_set() {
    let fields: Vec<String> = (0..40).map(|i| format!("f{i}=1")).collect();
    let ok = format!("m,host=h {}", fields.join(","));
    assert_eq!(run(&ok, Precision::Nanoseconds).refused.rejected, 0);
    let dup = format!("{ok},f7=2");
    let r = run(&dup, Precision::Nanoseconds);
    let (p, _) = r.refused_lines(&r.refused, 10);
    assert!(p[0].why.contains("field \"f7\" is given twice"), "{:?}", p);
}

#[test]
fn the_source_tag_is_configurable() {
    let cfg = InfluxConfig {
        source_tag: "device".into(),
        ..InfluxConfig::default()
    };
    let r = convert(
        b"t,device=d1,host=h v=1",
        arena(),
        Precision::Nanoseconds,
        0,
        &cfg,
        10,
        BUDGET,
    )
    .unwrap();
    let req = r.view.to_request();
    let s = &req.sources[0];
    assert_eq!(s.source, "d1");
    assert_eq!(labels(&s.series[0]), [("host".into(), "h".into())]);
}

/// Lines of interleaved hosts are grouped by host in the view, and a
/// sample the admission refuses is still reported at the line it came on.
#[test]
fn refusals_find_their_line_through_the_grouping_by_host() {
    let body = "m,host=a v=1\nm,host=b v=2\nm,host=a w=3\nm,host=b w=4\n";
    let r = run(body, Precision::Nanoseconds);
    let req = r.view.to_request();
    let hosts: Vec<(&str, Vec<f64>)> = req
        .sources
        .iter()
        .map(|s| {
            (
                s.source.as_str(),
                s.series.iter().map(|x| x.values[0]).collect(),
            )
        })
        .collect();
    assert_eq!(hosts, [("a", vec![1.0, 3.0]), ("b", vec![2.0, 4.0])]);
    // The admission refuses host a's second series (line 3) and host b's
    // first (line 2).
    let mut out = IngestOutcome::listing(10);
    for (source_index, series_index) in [(0, 1), (1, 0)] {
        let series = &req.sources[source_index as usize].series[series_index as usize];
        let b = crate::aggregator::SeriesBatch {
            source: "",
            metric: &series.metric,
            labels: "",
            kind: None,
            timestamps_ms: &series.timestamps_ms,
            values: &series.values,
            start_times_ms: &[],
            source_index,
            series_index,
        };
        out.reject_series(&b, RejectReason::TooOld, || "too old".into());
    }
    let (problems, count) = r.refused_lines(&out, 10);
    assert_eq!(problems.iter().map(|p| p.line).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(count, 2);
}

#[test]
fn metric_names_follow_each_line_when_fields_change_order_or_measurement() {
    let body = "m,host=a x=1,y=2 1\nm,host=a y=3,x=4 2\nn,host=a x=5 3\nm,host=a s=\"t\",x=6 4\nm,host=a y=7 5\n";
    let r = run(body, Precision::Seconds);
    let req = &r.view.to_request();
    let mut got: Vec<(String, f64)> = req.sources[0]
        .series
        .iter()
        .flat_map(|s| s.values.iter().map(|v| (s.metric.clone(), *v)))
        .collect();
    got.sort_by(|a, b| a.1.total_cmp(&b.1));
    let want = [
        ("m_x", 1.0),
        ("m_y", 2.0),
        ("m_y", 3.0),
        ("m_x", 4.0),
        ("n_x", 5.0),
        ("m_x", 6.0),
        ("m_y", 7.0),
    ];
    let want: Vec<(String, f64)> = want.iter().map(|(m, v)| (m.to_string(), *v)).collect();
    assert_eq!(got, want);
}

/// A line of few keys, some given twice, some string fields: (measurement,
/// fields as key and whether it is a string).
fn keyed_line() -> impl Strategy<Value = (bool, Vec<(u8, bool)>)> {
    (
        any::<bool>(),
        proptest::collection::vec((0u8..2, any::<bool>()), 1..4),
    )
}

#[test]
fn names_kept_after_a_string_field_vouch_for_no_line() {
    // The second line leaves `y` as the first name kept; the third, whose
    // first field is a string, must not leave `y` kept twice.
    let body =
        "m,host=a x=1,y=1 1\nm,host=a y=1,x=\"s\" 1\nm,host=a x=\"s\",y=1 1\nm,host=a y=1,y=2 1\n";
    let r = run(body, Precision::Seconds);
    let (problems, _) = r.refused_lines(&r.refused, 10);
    let got: Vec<u32> = problems.iter().map(|p| p.line).collect();
    assert_eq!(got, [4], "{problems:?}");
}

proptest! {
    /// Whatever the lines before it, a line is refused for a field given
    /// twice exactly when it gives one twice (the names kept from the
    /// line before must never vouch for keys they do not cover).
    #[test]
    fn a_field_given_twice_is_refused_whatever_came_before(lines in proptest::collection::vec(keyed_line(), 1..24)) {
        let mut body = String::new();
        let mut want = Vec::new();
        for (i, (m, fields)) in lines.iter().enumerate() {
            body.push_str(if *m { "m,host=a " } else { "n,host=a " });
            let text: Vec<String> = fields
                .iter()
                .map(|&(k, string)| {
                    let key = ["x", "y"][usize::from(k)];
                    if string { format!("{key}=\"s\"") } else { format!("{key}=1") }
                })
                .collect();
            body.push_str(&text.join(","));
            body.push_str(" 1\n");
            let mut keys: Vec<u8> = fields.iter().map(|f| f.0).collect();
            keys.sort_unstable();
            if keys.windows(2).any(|w| w[0] == w[1]) {
                want.push(i as u32 + 1);
            }
        }
        let cfg = InfluxConfig::default();
        let r = convert(body.as_bytes(), arena(), Precision::Seconds, 0, &cfg, 100, BUDGET).unwrap();
        let (problems, _) = r.refused_lines(&r.refused, 100);
        let got: Vec<u32> = problems.iter().map(|p| p.line).collect();
        prop_assert_eq!(got, want, "{}", body);
    }

    /// Splitting at newlines is InfluxDB's own rule for bodies without
    /// quotes or backslashes.
    #[test]
    fn plain_bodies_split_as_influxdb_splits_them(body in "[a-c,= \n0-9.\r#]{0,200}") {
        let theirs: Vec<&str> = split_lines(&body).collect();
        let fast: Vec<&str> = lines(&body, false).collect();
        prop_assert_eq!(&fast, &theirs);
        if line::plain_body(body.as_bytes()) {
            let known: Vec<&str> = lines(&body, true).collect();
            prop_assert_eq!(known, theirs);
        }
    }

    /// Any bytes: no panic, and every line is either kept or refused.
    #[test]
    fn any_body_converts_without_panicking(body in proptest::collection::vec(any::<u8>(), 0..400)) {
        let r = convert(&body, arena(), Precision::Nanoseconds, 0, &InfluxConfig::default(), 5, BUDGET).unwrap();
        let (_, refused) = r.refused_lines(&r.refused, 5);
        prop_assert!(refused <= u64::from(r.lines));
    }

    /// Line-protocol-shaped text, from the characters that matter to it.
    #[test]
    fn line_shaped_bodies_convert_without_panicking(body in "[a-c,= \\\\\"\\n0-9.ituf\\-]{0,200}") {
        let r = convert(body.as_bytes(), arena(), Precision::Seconds, 0, &InfluxConfig::default(), 5, BUDGET).unwrap();
        let (_, refused) = r.refused_lines(&r.refused, 5);
        prop_assert!(refused <= u64::from(r.lines));
    }
}
