//! A naive reference of what Tally keeps per minute for samples of each
//! kind, independent of the daemon's code: a gauge's count, sum, min and
//! max; a counter's increases (a cumulative counter's first sample is only
//! its baseline, and a decrease is a reset that counts from zero).

use std::collections::BTreeMap;

use serde_json::Value;

/// A series as the native API names it: metric and labels.
pub type Key = (String, BTreeMap<String, String>);

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Gauge,
    Delta,
    Cumulative,
}

/// One minute's slot: count, sum, min, max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    pub n: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Slot {
    fn add(&mut self, v: f64) {
        self.n += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
}

/// Series → minute (Unix seconds) → slot.
#[derive(Debug, Default)]
pub struct Reference {
    pub series: BTreeMap<Key, BTreeMap<i64, Slot>>,
    kinds: BTreeMap<Key, Kind>,
    /// Each cumulative series' samples, folded once all are in.
    cumulative: BTreeMap<Key, Vec<(i64, f64)>>,
}

impl Reference {
    pub fn sample(&mut self, key: Key, kind: Kind, ts_ms: i64, v: f64) {
        let prev = self.kinds.insert(key.clone(), kind);
        assert!(prev.is_none_or(|k| k == kind), "{key:?} changed kind");
        match kind {
            Kind::Cumulative => self.cumulative.entry(key).or_default().push((ts_ms, v)),
            _ => self.fold(key, ts_ms, v),
        }
    }

    fn fold(&mut self, key: Key, ts_ms: i64, v: f64) {
        let minute = ts_ms.div_euclid(60_000) * 60;
        self.series
            .entry(key)
            .or_default()
            .entry(minute)
            .or_insert(Slot {
                n: 0,
                sum: 0.0,
                min: f64::INFINITY,
                max: f64::NEG_INFINITY,
            })
            .add(v);
    }

    /// Folds the cumulative series: increases between consecutive samples.
    pub fn finish(mut self) -> Reference {
        for (key, mut samples) in std::mem::take(&mut self.cumulative) {
            samples.sort_by_key(|s| s.0);
            self.series.entry(key.clone()).or_default();
            for w in samples.windows(2) {
                let ((_, prev), (ts, v)) = (w[0], w[1]);
                self.fold(key.clone(), ts, if v >= prev { v - prev } else { v });
            }
        }
        self
    }

    pub fn kind(&self, key: &Key) -> Kind {
        self.kinds[key]
    }
}

/// Compares the native range read of every series of `reference` whose
/// metric is `metric` with what it should hold. `body` is the
/// `/api/v1/range` answer (step 1m, every aggregate) for the source and
/// metric.
pub fn check_metric(reference: &Reference, metric: &str, body: &Value) {
    let mut got: BTreeMap<BTreeMap<String, String>, BTreeMap<i64, Slot>> = BTreeMap::new();
    for s in body["series"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
    {
        let labels: BTreeMap<String, String> = s["labels"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let points = got.entry(labels).or_default();
        for p in s["points"].as_array().unwrap() {
            let Some(n) = p["n"].as_u64().filter(|n| *n > 0) else {
                continue;
            };
            let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
            points.insert(
                p["t"].as_i64().unwrap(),
                Slot {
                    n,
                    sum: f("sum"),
                    min: f("min"),
                    max: f("max"),
                },
            );
        }
    }
    let want: BTreeMap<_, _> = reference
        .series
        .iter()
        .filter(|((m, _), _)| m == metric)
        .map(|((m, l), slots)| ((m.clone(), l.clone()), slots))
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().map(|(_, l)| l).collect::<Vec<_>>(),
        "label sets of {metric}: {body}"
    );
    for (key, slots) in want {
        let have = &got[&key.1];
        assert_eq!(
            have.keys().collect::<Vec<_>>(),
            slots.keys().collect::<Vec<_>>(),
            "minutes of {key:?}"
        );
        for (minute, w) in slots {
            let h = have[minute];
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
            let gauge = reference.kind(&key) == Kind::Gauge;
            let ok = h.n == w.n
                && close(h.sum, w.sum)
                && (!gauge || (close(h.min, w.min) && close(h.max, w.max)));
            assert!(ok, "{key:?} minute {minute}: Tally {h:?}, reference {w:?}");
        }
    }
}
