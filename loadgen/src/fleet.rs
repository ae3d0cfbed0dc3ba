//! The simulated fleet: `sources × metrics × label sets` series, each
//! metric with a kind, and every sample value a pure function of
//! `(seed, series, tick)`.
//!
//! A source's series are numbered `0..per_source()`: series `j` is metric
//! `j / sets` with label set `j % sets` (see `labels`). Without labels there
//! is one set, so `j` is the metric and every value is what it was before
//! labels existed.
//!
//! Values are computed, never stored or drawn from a stateful RNG, so that
//! - a batch can be rebuilt for a retry without keeping a copy of it,
//! - the expectation of what the daemon acknowledged is recomputed on ack,
//! - `--verify-only` can regenerate a whole earlier run from its flags.
//!
//! Cumulative counters must be non-decreasing between resets, which a
//! per-sample hash cannot give by itself; they are built from a linear ramp
//! plus bounded noise (see [`Fleet::value`]), with resets at a per-series
//! period, so they stay pure functions of the tick too.

use std::fmt;
use std::str::FromStr;

use tally_proto::v1 as pb;

use crate::labels::LabelSpec;

/// How a metric's values are read; mirrors `tally.v1.SampleKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Gauge,
    Delta,
    Cumulative,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Gauge, Kind::Delta, Kind::Cumulative];

    pub fn proto(self) -> pb::SampleKind {
        match self {
            Kind::Gauge => pb::SampleKind::Gauge,
            Kind::Delta => pb::SampleKind::DeltaCounter,
            Kind::Cumulative => pb::SampleKind::CumulativeCounter,
        }
    }

    /// The name the daemon's JSON read API uses (`"kind": "delta_counter"`).
    pub fn api_name(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Delta => "delta_counter",
            Kind::Cumulative => "cumulative_counter",
        }
    }

    /// The short name used in `--kinds`.
    pub fn flag_name(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Delta => "delta",
            Kind::Cumulative => "cumulative",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    #[error("--kinds {0:?}: expected a list like gauge=50,delta=25,cumulative=25 ({1})")]
    BadKinds(String, String),
    #[error("--sources and --metrics must be at least 1")]
    Empty,
    #[error("{sources} sources × {metrics} metrics × {sets} label sets is {series} series; the load generator handles at most {max}")]
    TooManySeries {
        sources: usize,
        metrics: usize,
        sets: usize,
        series: u128,
        max: usize,
    },
    #[error("--source-prefix {0:?}: {1}")]
    BadPrefix(String, String),
}

/// Relative weights of the three kinds among the metrics, from `--kinds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindMix {
    weights: [u32; 3],
}

impl KindMix {
    /// True when some metrics will be delta counters.
    pub fn has_delta(&self) -> bool {
        self.weights[Kind::Delta as usize] > 0
    }

    /// True when some metrics will be counters of either kind.
    pub fn has_counters(&self) -> bool {
        self.has_delta() || self.weights[Kind::Cumulative as usize] > 0
    }
}

impl Default for KindMix {
    fn default() -> Self {
        KindMix {
            weights: [50, 25, 25],
        }
    }
}

impl FromStr for KindMix {
    type Err = FleetError;

    fn from_str(s: &str) -> Result<Self, FleetError> {
        let bad = |why: String| FleetError::BadKinds(s.to_string(), why);
        let mut weights = [0u32; 3];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} has no `=`")))?;
            let kind = match name.trim() {
                "gauge" | "gauges" => Kind::Gauge,
                "delta" | "delta_counter" | "deltas" => Kind::Delta,
                "cumulative" | "cumulative_counter" | "cumulatives" => Kind::Cumulative,
                other => {
                    return Err(bad(format!(
                        "unknown kind {other:?}; use gauge, delta or cumulative"
                    )))
                }
            };
            weights[kind as usize] = weight
                .trim()
                .parse()
                .map_err(|_| bad(format!("weight {weight:?} is not a whole number")))?;
        }
        if weights.iter().all(|&w| w == 0) {
            return Err(bad("at least one weight must be positive".into()));
        }
        Ok(KindMix { weights })
    }
}

impl fmt::Display for KindMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = Kind::ALL
            .iter()
            .filter(|k| self.weights[**k as usize] > 0)
            .map(|k| format!("{}={}", k.flag_name(), self.weights[*k as usize]))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl KindMix {
    /// How many of `metrics` metrics get each kind: proportional to the
    /// weights, remainders going to the largest fractions, so the counts
    /// always add up to `metrics`.
    fn counts(&self, metrics: usize) -> [usize; 3] {
        let total: u64 = self.weights.iter().map(|&w| w as u64).sum();
        let mut counts = [0usize; 3];
        let mut rems = [(0u64, 0usize); 3];
        for (i, &w) in self.weights.iter().enumerate() {
            let exact = metrics as u64 * w as u64;
            counts[i] = (exact / total) as usize;
            rems[i] = (exact % total, i);
        }
        let mut left = metrics - counts.iter().sum::<usize>();
        rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (rem, i) in rems {
            if left == 0 {
                break;
            }
            if rem > 0 {
                counts[i] += 1;
                left -= 1;
            }
        }
        counts
    }
}

/// What the fleet looks like; everything else is derived from it.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub sources: usize,
    pub metrics: usize,
    pub seed: u64,
    pub kinds: KindMix,
    pub source_prefix: String,
    /// Mean samples between cumulative counter resets; 0 means never.
    pub reset_every: u64,
    /// The label sets of every metric (`--labels`).
    pub labels: LabelSpec,
}

/// Largest fleet accepted: series ids and per-series state must stay cheap.
pub const MAX_SERIES: usize = 50_000_000;

/// The fleet, with names and kinds resolved once.
#[derive(Debug)]
pub struct Fleet {
    spec: FleetSpec,
    source_names: Vec<String>,
    metric_names: Vec<String>,
    metric_kinds: Vec<Kind>,
    /// `spec.labels.sets()`, which every sample's value needs.
    label_sets: usize,
}

impl Fleet {
    pub fn new(spec: FleetSpec) -> Result<Fleet, FleetError> {
        if spec.sources == 0 || spec.metrics == 0 {
            return Err(FleetError::Empty);
        }
        let sets = spec.labels.sets();
        let series = spec.sources as u128 * spec.metrics as u128 * sets as u128;
        if series > MAX_SERIES as u128 {
            return Err(FleetError::TooManySeries {
                sources: spec.sources,
                metrics: spec.metrics,
                sets,
                series,
                max: MAX_SERIES,
            });
        }
        check_prefix(&spec.source_prefix)?;
        // Zero-padded so names sort in index order, like real host names.
        let sw = digits(spec.sources).max(6);
        let mw = digits(spec.metrics).max(4);
        let source_names = (1..=spec.sources)
            .map(|i| format!("{}{i:0sw$}", spec.source_prefix))
            .collect();
        let metric_names = (1..=spec.metrics).map(|j| format!("m_{j:0mw$}")).collect();
        let metric_kinds = assign_kinds(&spec.kinds, spec.metrics, spec.seed);
        Ok(Fleet {
            spec,
            source_names,
            metric_names,
            metric_kinds,
            label_sets: sets,
        })
    }

    /// The same fleet with every cumulative counter's name ending in
    /// `_total`, the convention by which a receiver of untyped samples
    /// (remote-write) tells a counter from a gauge.
    pub fn with_total_suffix(mut self) -> Fleet {
        for (name, kind) in self.metric_names.iter_mut().zip(&self.metric_kinds) {
            if *kind == Kind::Cumulative {
                name.push_str("_total");
            }
        }
        self
    }

    pub fn spec(&self) -> &FleetSpec {
        &self.spec
    }

    pub fn sources(&self) -> usize {
        self.spec.sources
    }

    pub fn metrics(&self) -> usize {
        self.spec.metrics
    }

    /// Label sets per metric (1 without labels).
    pub fn label_sets(&self) -> usize {
        self.label_sets
    }

    /// Series per source: every metric with every label set.
    pub fn per_source(&self) -> usize {
        self.spec.metrics * self.label_sets()
    }

    pub fn series(&self) -> usize {
        self.spec.sources * self.per_source()
    }

    /// `(metric, label set)` of a source's series `j`.
    pub fn column(&self, j: usize) -> (usize, usize) {
        let sets = self.label_sets();
        (j / sets, j % sets)
    }

    pub fn labels(&self) -> &LabelSpec {
        &self.spec.labels
    }

    /// A series for people: `source/metric`, or `source/metric{labels}`.
    pub fn series_name(&self, source: usize, j: usize) -> String {
        let (metric, set) = self.column(j);
        let name = format!("{}/{}", self.source_name(source), self.metric_name(metric));
        match self.spec.labels.canonical(set) {
            labels if labels.is_empty() => name,
            labels => format!("{name}{{{labels}}}"),
        }
    }

    pub fn source_name(&self, source: usize) -> &str {
        &self.source_names[source]
    }

    pub fn metric_name(&self, metric: usize) -> &str {
        &self.metric_names[metric]
    }

    /// Every source sends all metrics, and a metric has one kind fleet-wide,
    /// as with real agents of one version.
    pub fn kind(&self, metric: usize) -> Kind {
        self.metric_kinds[metric]
    }

    /// How many metrics have each kind, indexed like [`Kind::ALL`].
    pub fn kind_counts(&self) -> [usize; 3] {
        let mut c = [0; 3];
        for k in &self.metric_kinds {
            c[*k as usize] += 1;
        }
        c
    }

    /// The value of series `j` (see [`Fleet::column`]) of `source` at
    /// `tick` (0-based sample number).
    ///
    /// - Gauges: a per-series level and a triangle wave of per-series period
    ///   plus noise; fractional, some negative, so sums exercise rounding.
    /// - Delta counters: whole numbers around a per-series mean, never negative.
    /// - Cumulative counters: `base + floor(rate·pos + r)` with `pos` the ticks
    ///   since the last reset and `0 ≤ r < 0.99·rate`: consecutive values
    ///   differ by `rate + r' − r > 0` before flooring, so the counter never
    ///   goes down between resets. Resets happen every `P` ticks (`P` per
    ///   series, around `--reset-every`); after one, the counter restarts
    ///   from zero like a restarted process.
    pub fn value(&self, source: usize, j: usize, tick: u64) -> f64 {
        let series = (source * self.per_source() + j) as u64;
        let seed = self.spec.seed;
        // The series' profile (level, rate, period…): one hash, then one
        // cheap mix per parameter.
        let profile = hash3(seed, series, PROFILE);
        let p = |salt: u64| unit(mix(profile ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let noise = unit(hash3(seed, series, tick));
        match self.kind(self.column(j).0) {
            Kind::Gauge => {
                let base = p(1) * 1000.0 - 100.0;
                let amp = (0.05 + 0.3 * p(2)) * (base.abs() + 1.0);
                let period = 30 + (p(3) * 570.0) as u64;
                let phase = (p(4) * period as f64) as u64;
                let x = ((tick + phase) % period) as f64 / period as f64;
                let tri = 4.0 * (x - 0.5).abs() - 1.0;
                base + amp * tri + (noise - 0.5) * amp * 0.2
            }
            Kind::Delta => {
                let mean = (p(1) * 500.0).floor();
                (2.0 * mean * noise).floor()
            }
            Kind::Cumulative => {
                let rate = 1.0 + (p(1) * 200.0).floor();
                let base0 = (p(2) * 1e9).floor();
                let r = noise * 0.99 * rate;
                let (epoch, pos) = match self.spec.reset_every {
                    0 => (0, tick),
                    mean => {
                        let period = ((0.5 + p(3)) * mean as f64).max(2.0) as u64;
                        let phase = (p(4) * period as f64) as u64;
                        ((tick + phase) / period, (tick + phase) % period)
                    }
                };
                let base = if epoch == 0 { base0 } else { 0.0 };
                base + (rate * pos as f64 + r).floor()
            }
        }
    }
}

/// Salt separating per-series profile draws from per-tick noise.
const PROFILE: u64 = 0xA076_1D64_78BD_642F;

fn digits(n: usize) -> usize {
    n.to_string().len()
}

fn check_prefix(prefix: &str) -> Result<(), FleetError> {
    let bad = |why: &str| FleetError::BadPrefix(prefix.to_string(), why.to_string());
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._:-".contains(*c)))
    {
        return Err(bad(&format!(
            "{c:?} is not allowed in a source name (letters, digits and ._:- are)"
        )));
    }
    // Leave room for the zero-padded number within the daemon's 128 bytes.
    if prefix.len() > 100 {
        return Err(bad("longer than 100 bytes"));
    }
    Ok(())
}

/// Kinds per metric: the counts from the mix, in a seeded shuffle so that
/// `m_0001` is not always a gauge.
fn assign_kinds(mix: &KindMix, metrics: usize, seed: u64) -> Vec<Kind> {
    let counts = mix.counts(metrics);
    let mut kinds: Vec<Kind> = Kind::ALL
        .iter()
        .flat_map(|&k| std::iter::repeat_n(k, counts[k as usize]))
        .collect();
    // Fisher–Yates driven by the seed: deterministic across runs.
    for i in (1..kinds.len()).rev() {
        let j = (hash3(seed, i as u64, 0x005E_ED0F_C1D5) % (i as u64 + 1)) as usize;
        kinds.swap(i, j);
    }
    kinds
}

/// SplitMix64's finalizer: a fast, well-mixed 64-bit permutation.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hash3(a: u64, b: u64, c: u64) -> u64 {
    mix(a.wrapping_add(0x9E37_79B9_7F4A_7C15) ^ mix(b.wrapping_add(0x6A09_E667_F3BC_C909) ^ mix(c)))
}

/// A hash as a uniform number in [0, 1).
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(sources: usize, metrics: usize, kinds: &str, reset_every: u64) -> Fleet {
        Fleet::new(FleetSpec {
            sources,
            metrics,
            seed: 7,
            kinds: kinds.parse().unwrap(),
            source_prefix: "src-".into(),
            reset_every,
            labels: LabelSpec::default(),
        })
        .unwrap()
    }

    #[test]
    fn names_are_padded_and_valid() {
        let f = fleet(3, 12, "gauge=1", 0);
        assert_eq!(f.source_name(0), "src-000001");
        assert_eq!(f.metric_name(11), "m_0012");
        let big = fleet(1_234_567, 1, "gauge=1", 0);
        assert_eq!(big.source_name(0), "src-0000001");
    }

    #[test]
    fn kind_mix_parses_and_splits_exactly() {
        let mix: KindMix = "gauge=50, delta=25,cumulative=25".parse().unwrap();
        assert_eq!(mix.counts(20), [10, 5, 5]);
        assert_eq!(mix.counts(3).iter().sum::<usize>(), 3);
        assert_eq!(mix.to_string(), "gauge=50,delta=25,cumulative=25");
        let only: KindMix = "cumulative=1".parse().unwrap();
        assert_eq!(only.counts(4), [0, 0, 4]);
        for bad in ["", "gauge", "gauge=x", "histogram=3", "gauge=0"] {
            assert!(bad.parse::<KindMix>().is_err(), "{bad:?} parsed");
        }
        let f = fleet(1, 20, "gauge=50,delta=25,cumulative=25", 0);
        assert_eq!(f.kind_counts(), [10, 5, 5]);
    }

    #[test]
    fn values_are_deterministic_and_seed_dependent() {
        let a = fleet(10, 10, "gauge=1,delta=1,cumulative=1", 50);
        let b = fleet(10, 10, "gauge=1,delta=1,cumulative=1", 50);
        let mut other_spec = a.spec().clone();
        other_spec.seed = 8;
        let c = Fleet::new(other_spec).unwrap();
        let mut differ = 0;
        for s in 0..10 {
            for m in 0..10 {
                for t in 0..20 {
                    assert_eq!(a.value(s, m, t).to_bits(), b.value(s, m, t).to_bits());
                    if a.kind(m) == c.kind(m) && a.value(s, m, t) != c.value(s, m, t) {
                        differ += 1;
                    }
                }
            }
        }
        assert!(differ > 100, "seed barely matters: {differ}");
    }

    #[test]
    fn counters_are_whole_and_cumulatives_only_drop_at_resets() {
        let f = fleet(20, 3, "delta=1,cumulative=2", 40);
        let mut resets = 0;
        for s in 0..20 {
            for m in 0..3 {
                let mut prev: Option<f64> = None;
                for t in 0..400 {
                    let v = f.value(s, m, t);
                    assert!(v.is_finite() && v >= 0.0 && v.fract() == 0.0, "{v}");
                    if f.kind(m) == Kind::Cumulative {
                        if let Some(p) = prev {
                            if v < p {
                                resets += 1;
                                // A restarted process counts from zero.
                                assert!(v < 202.0, "reset to {v}");
                            }
                        }
                        prev = Some(v);
                    }
                }
            }
        }
        // ~40 series × 400 ticks / ~40 ticks per period.
        assert!((200..=800).contains(&resets), "{resets} resets");
        let never = fleet(5, 1, "cumulative=1", 0);
        for s in 0..5 {
            for t in 1..1000 {
                assert!(never.value(s, 0, t) >= never.value(s, 0, t - 1));
            }
        }
    }

    #[test]
    fn label_sets_multiply_series_and_leave_unlabelled_values_alone() {
        let plain = fleet(3, 4, "gauge=1,delta=1,cumulative=1", 30);
        let mut spec = plain.spec().clone();
        spec.labels = "cpu=2,mode=3".parse().unwrap();
        let labelled = Fleet::new(spec.clone()).unwrap();
        assert_eq!((labelled.per_source(), labelled.series()), (24, 72));
        assert_eq!(labelled.column(13), (2, 1));
        assert_eq!(
            labelled.series_name(1, 13),
            r#"src-000002/m_0003{cpu="0",mode="1"}"#
        );
        assert_eq!(plain.series_name(1, 2), "src-000002/m_0003");
        // Every series of the labelled fleet has its own values.
        let firsts: std::collections::BTreeSet<u64> =
            (0..24).map(|j| labelled.value(0, j, 0).to_bits()).collect();
        assert!(firsts.len() > 20, "{firsts:?}");
        // One value per label: the same series numbers, so the same values.
        spec.labels = "region=1".parse().unwrap();
        let one = Fleet::new(spec).unwrap();
        for (s, j, t) in [(0, 0, 0), (2, 3, 17), (1, 2, 99)] {
            assert_eq!(one.value(s, j, t).to_bits(), plain.value(s, j, t).to_bits());
        }
    }

    #[test]
    fn bad_fleets_are_refused() {
        let spec = |prefix: &str, sources| FleetSpec {
            sources,
            metrics: 1,
            seed: 1,
            kinds: KindMix::default(),
            source_prefix: prefix.into(),
            reset_every: 0,
            labels: LabelSpec::default(),
        };
        assert_eq!(Fleet::new(spec("src-", 0)).unwrap_err(), FleetError::Empty);
        assert!(matches!(
            Fleet::new(spec("a/b", 1)).unwrap_err(),
            FleetError::BadPrefix(..)
        ));
        assert!(matches!(
            Fleet::new(spec("x", 60_000_000)).unwrap_err(),
            FleetError::TooManySeries { .. }
        ));
    }
}
