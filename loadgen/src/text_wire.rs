//! The text protocols, written from the `tally.v1` request a batch would
//! be: InfluxDB line protocol and Graphite plaintext (see
//! [`crate::protocol`] for how the fleet's series map to them).
//!
//! Values are written as the shortest decimal that reads back as the same
//! f64 (an exponent where that is shorter, which both protocols accept);
//! the daemon reads the lines with the same rules as any agent's. Writing
//! the text is a large share of the load generator's work on these
//! protocols, so nothing here goes through `fmt` or allocates per sample.

use hashbrown::HashMap;
use tally_proto::v1 as pb;

/// The tag that names the source, tallyd's default `influx.source_tag`.
pub const SOURCE_TAG: &str = "host";

/// Buffers [`influx`] reuses from one request to the next.
#[derive(Default)]
pub struct InfluxScratch {
    /// The distinct line heads (measurement and tags) of one source, back
    /// to back; head `h` is `heads[head_ends[h - 1]..head_ends[h]]`.
    heads: String,
    head_ends: Vec<usize>,
    head_of: HashMap<Box<str>, u32>,
    head: String,
    /// One per sample of the source: (head, timestamp, series, sample).
    points: Vec<(u32, i64, u32, u32)>,
}

impl InfluxScratch {
    fn head(&self, h: u32) -> &str {
        let h = h as usize;
        let start = if h == 0 { 0 } else { self.head_ends[h - 1] };
        &self.heads[start..self.head_ends[h]]
    }

    /// The index of the line head in `self.head`, added if new.
    fn intern_head(&mut self) -> u32 {
        if let Some(h) = self.head_of.get(self.head.as_str()) {
            return *h;
        }
        let h = self.head_ends.len() as u32;
        self.heads.push_str(&self.head);
        self.head_ends.push(self.heads.len());
        self.head_of.insert(self.head.as_str().into(), h);
        h
    }
}

/// `req` as line protocol at millisecond precision, appended to `out`: one
/// line per source, measurement, label set and timestamp, holding every
/// field of them.
pub fn influx(req: &pb::PushRequest, out: &mut String, s: &mut InfluxScratch) {
    let mut num = zmij::Buffer::new();
    let mut int = itoa::Buffer::new();
    for src in &req.sources {
        s.heads.clear();
        s.head_ends.clear();
        s.head_of.clear();
        s.points.clear();
        for (i, series) in src.series.iter().enumerate() {
            let (measurement, _) = split_metric(&series.metric);
            s.head.clear();
            escape(&mut s.head, measurement, &[',', ' ']);
            s.head.push(',');
            s.head.push_str(SOURCE_TAG);
            s.head.push('=');
            escape(&mut s.head, &src.source, &[',', '=', ' ']);
            for l in &series.labels {
                s.head.push(',');
                escape(&mut s.head, &l.name, &[',', '=', ' ']);
                s.head.push('=');
                escape(&mut s.head, &l.value, &[',', '=', ' ']);
            }
            let h = s.intern_head();
            for (k, t) in series.timestamps_ms.iter().enumerate() {
                s.points.push((h, *t, i as u32, k as u32));
            }
        }
        // Lines by head then time; within a line, fields in series order.
        s.points.sort_unstable();
        let mut at = 0;
        while at < s.points.len() {
            let (h, t, _, _) = s.points[at];
            let end = at
                + s.points[at..]
                    .iter()
                    .take_while(|p| p.0 == h && p.1 == t)
                    .count();
            out.push_str(s.head(h));
            let mut sep = ' ';
            for &(_, _, i, k) in &s.points[at..end] {
                let series = &src.series[i as usize];
                out.push(sep);
                sep = ',';
                escape(out, split_metric(&series.metric).1, &[',', '=', ' ']);
                out.push('=');
                out.push_str(num.format(series.values[k as usize]));
            }
            out.push(' ');
            out.push_str(int.format(t));
            out.push('\n');
            at = end;
        }
    }
}

/// A metric's measurement and field: around its first `_`, else the whole
/// name and `value`.
fn split_metric(metric: &str) -> (&str, &str) {
    metric.split_once('_').unwrap_or((metric, "value"))
}

/// `text` with a backslash before each of `special` (and before a
/// backslash).
fn escape(out: &mut String, text: &str, special: &[char]) {
    if !text.contains(|c| c == '\\' || special.contains(&c)) {
        out.push_str(text);
        return;
    }
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
    let mut num = zmij::Buffer::new();
    let mut int = itoa::Buffer::new();
    let mut path = String::new();
    for src in &req.sources {
        for s in &src.series {
            path.clear();
            path.push_str(&src.source);
            path.push('.');
            path.push_str(&s.metric);
            for l in &s.labels {
                path.push(';');
                path.push_str(&l.name);
                path.push('=');
                path.push_str(&l.value);
            }
            for (t, v) in s.timestamps_ms.iter().zip(&s.values) {
                let (secs, ms) = (t.div_euclid(1000), t.rem_euclid(1000));
                out.push_str(&path);
                out.push(' ');
                out.push_str(num.format(*v));
                out.push(' ');
                out.push_str(int.format(secs));
                out.push('.');
                // Three digits, zero-padded: 1.005 is not 1.5.
                let ms = ms as u32;
                for d in [ms / 100, ms / 10 % 10, ms % 10] {
                    out.push(char::from(b'0' + d as u8));
                }
                out.push('\n');
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
        let mut scratch = InfluxScratch::default();
        influx(&req(), &mut out, &mut scratch);
        let want = "m,host=src-1 0001=1.5,0002=0.1 1000\n\
                    m,host=src-1 0001=-3.0 2000\n\
                    m,host=src-1,cpu=0 0001=7.0 1000\n";
        assert_eq!(out, want);
        // The scratch carries nothing from one request to the next.
        out.clear();
        influx(&req(), &mut out, &mut scratch);
        assert_eq!(out, want);
    }

    #[test]
    fn graphite_writes_a_line_per_sample_with_milliseconds() {
        let mut out = String::new();
        graphite(&req(), &mut out);
        assert_eq!(
            out,
            "src-1.m_0001 1.5 1.000\nsrc-1.m_0001 -3.0 2.000\nsrc-1.m_0002 0.1 1.000\n\
             src-1.m_0001;cpu=0 7.0 1.000\n"
        );
    }

    #[test]
    fn values_read_back_exactly() {
        let mut num = zmij::Buffer::new();
        for v in [
            0.1,
            1e-7,
            123_456_789.123_456_78,
            -2.5e12,
            1e300,
            f64::MIN_POSITIVE * 1e10,
        ] {
            let text = num.format(v);
            assert_eq!(text.parse::<f64>().unwrap(), v, "{text}");
        }
    }

    #[test]
    fn milliseconds_are_zero_padded() {
        let mut r = req();
        r.sources[0].series.truncate(1);
        r.sources[0].series[0].timestamps_ms = vec![1_005, 2_050];
        r.sources[0].series[0].values = vec![1.0, 2.0];
        let mut out = String::new();
        graphite(&r, &mut out);
        assert_eq!(out, "src-1.m_0001 1.0 1.005\nsrc-1.m_0001 2.0 2.050\n");
    }

    #[test]
    fn special_characters_are_escaped() {
        let mut out = String::new();
        escape(&mut out, "a b,c=d\\", &[',', '=', ' ']);
        assert_eq!(out, "a\\ b\\,c\\=d\\\\");
    }
}
