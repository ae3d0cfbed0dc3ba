//! The text protocols, written from the `tally.v1` request a batch would
//! be: InfluxDB line protocol and Graphite plaintext (see
//! [`crate::protocol`] for how the fleet's series map to them).
//!
//! Values are written with Rust's shortest round-trip formatting, which
//! never uses an exponent, so every value reads back as the same f64; the
//! daemon reads the lines with the same rules as any agent's.

use std::collections::HashMap;
use std::fmt::Write as _;

use tally_proto::v1 as pb;

/// The tag that names the source, tallyd's default `influx.source_tag`.
pub const SOURCE_TAG: &str = "host";

/// `req` as line protocol at millisecond precision, appended to `out`: one
/// line per source, measurement, label set and timestamp, holding every
/// field of them.
pub fn influx(req: &pb::PushRequest, out: &mut String) {
    // (line head, timestamp) -> the line's fields.
    let mut lines: Vec<(usize, i64, String)> = Vec::new();
    let mut heads: Vec<String> = Vec::new();
    let mut at: HashMap<(usize, i64), usize> = HashMap::new();
    let mut head_of: HashMap<String, usize> = HashMap::new();
    for src in &req.sources {
        lines.clear();
        heads.clear();
        at.clear();
        head_of.clear();
        let mut head = String::new();
        for s in &src.series {
            let (measurement, field) = s.metric.split_once('_').unwrap_or((&s.metric, "value"));
            head.clear();
            escape(&mut head, measurement, &[',', ' ']);
            head.push(',');
            head.push_str(SOURCE_TAG);
            head.push('=');
            escape(&mut head, &src.source, &[',', '=', ' ']);
            for l in &s.labels {
                head.push(',');
                escape(&mut head, &l.name, &[',', '=', ' ']);
                head.push('=');
                escape(&mut head, &l.value, &[',', '=', ' ']);
            }
            let h = match head_of.get(&head) {
                Some(h) => *h,
                None => {
                    heads.push(head.clone());
                    head_of.insert(head.clone(), heads.len() - 1);
                    heads.len() - 1
                }
            };
            for (t, v) in s.timestamps_ms.iter().zip(&s.values) {
                let i = *at.entry((h, *t)).or_insert_with(|| {
                    lines.push((h, *t, String::new()));
                    lines.len() - 1
                });
                let fields = &mut lines[i].2;
                if !fields.is_empty() {
                    fields.push(',');
                }
                escape(fields, field, &[',', '=', ' ']);
                let _ = write!(fields, "={v}");
            }
        }
        for (h, t, fields) in &lines {
            let _ = writeln!(out, "{} {fields} {t}", heads[*h]);
        }
    }
}

/// `text` with a backslash before each of `special` (and before a
/// backslash).
fn escape(out: &mut String, text: &str, special: &[char]) {
    for c in text.chars() {
        if c == '\\' || special.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// `req` as Graphite plaintext, appended to `out`: one line per sample,
/// `<source>.<metric>[;name=value…] <value> <seconds>.<milliseconds>`.
pub fn graphite(req: &pb::PushRequest, out: &mut String) {
    let mut path = String::new();
    for src in &req.sources {
        for s in &src.series {
            path.clear();
            path.push_str(&src.source);
            path.push('.');
            path.push_str(&s.metric);
            for l in &s.labels {
                let _ = write!(path, ";{}={}", l.name, l.value);
            }
            for (t, v) in s.timestamps_ms.iter().zip(&s.values) {
                let (secs, ms) = (t.div_euclid(1000), t.rem_euclid(1000));
                let _ = writeln!(out, "{path} {v} {secs}.{ms:03}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(metric: &str, labels: &[(&str, &str)], samples: &[(i64, f64)]) -> pb::SeriesSamples {
        pb::SeriesSamples {
            metric: metric.into(),
            kind: pb::SampleKind::Gauge as i32,
            timestamps_ms: samples.iter().map(|s| s.0).collect(),
            values: samples.iter().map(|s| s.1).collect(),
            start_times_ms: Vec::new(),
            labels: labels
                .iter()
                .map(|(n, v)| pb::Label {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
        }
    }

    fn req() -> pb::PushRequest {
        pb::PushRequest {
            sources: vec![pb::SourceBatch {
                source: "src-1".into(),
                series: vec![
                    series("m_0001", &[], &[(1_000, 1.5), (2_000, -3.0)]),
                    series("m_0002", &[], &[(1_000, 0.1)]),
                    series("m_0001", &[("cpu", "0")], &[(1_000, 7.0)]),
                ],
                groups: Vec::new(),
            }],
        }
    }

    #[test]
    fn line_protocol_shares_lines_per_tick_and_label_set() {
        let mut out = String::new();
        influx(&req(), &mut out);
        assert_eq!(
            out,
            "m,host=src-1 0001=1.5,0002=0.1 1000\n\
             m,host=src-1 0001=-3 2000\n\
             m,host=src-1,cpu=0 0001=7 1000\n"
        );
    }

    #[test]
    fn graphite_writes_a_line_per_sample_with_milliseconds() {
        let mut out = String::new();
        graphite(&req(), &mut out);
        assert_eq!(
            out,
            "src-1.m_0001 1.5 1.000\nsrc-1.m_0001 -3 2.000\nsrc-1.m_0002 0.1 1.000\n\
             src-1.m_0001;cpu=0 7 1.000\n"
        );
    }

    #[test]
    fn values_read_back_exactly() {
        for v in [
            0.1,
            1e-7,
            123_456_789.123_456_78,
            -2.5e12,
            f64::MIN_POSITIVE * 1e10,
        ] {
            let text = format!("{v}");
            assert_eq!(text.parse::<f64>().unwrap(), v, "{text}");
            assert!(!text.contains('e'), "{text}");
        }
    }

    #[test]
    fn special_characters_are_escaped() {
        let mut out = String::new();
        escape(&mut out, "a b,c=d\\", &[',', '=', ' ']);
        assert_eq!(out, "a\\ b\\,c\\=d\\\\");
    }
}
