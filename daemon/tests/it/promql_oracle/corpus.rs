//! The query corpus (`corpus.txt`) and its tolerance classes.
//!
//! Each line of the corpus is `class | query` or `class mode | query`,
//! under a `[live]` or `[synthetic]` heading naming the feed it queries;
//! `mode` is `instant` or `range` when only one of the two applies, and
//! both are evaluated otherwise. `#` starts a comment line. In queries,
//! `$node`, `$prom` and `$tally` are the `instance` of the live feed's node
//! exporter, Prometheus and tallyd, as a Grafana variable would be, and
//! `$at` a time inside the feed's data (Unix seconds) for `@`.
//!
//! A class says how close Tally's values must be to Prometheus', and why
//! they may differ at all: Tally keeps per-minute count, sum, minimum,
//! maximum and last sample, not every sample. The table is [`CLASSES`];
//! `docs/testing.md` ("How the API is checked against Prometheus") gives
//! the same table to readers.

/// The feed a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Feed {
    Live,
    Synthetic,
}

/// Which evaluations apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Modes {
    Both,
    Instant,
    Range,
}

/// How close two values must be: within `rel` of the larger of the two,
/// or `scale` of the largest finite value in Prometheus' whole answer (so
/// a series near zero is judged against its neighbours), or `abs`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Class {
    pub(super) name: &'static str,
    pub(super) rel: f64,
    pub(super) scale: f64,
    pub(super) abs: f64,
    /// Where Prometheus answers NaN, any value of Tally's is accepted.
    pub(super) nan_is_any: bool,
    /// Prometheus refuses the query (it is valid, but cannot be answered):
    /// Tally must refuse it too, with the same HTTP status.
    pub(super) refused: bool,
    pub(super) why: &'static str,
}

pub(super) const CLASSES: [Class; 10] = [
    Class {
        name: "exact",
        rel: 1e-9,
        scale: 1e-12,
        abs: 0.0,
        nan_is_any: false,
        refused: false,
        why: "determined by the minute slots: bare selectors (the minute's last sample; \
              evaluation times are whole minutes and no sample falls on one), \
              *_over_time over whole minutes, aggregations, arithmetic, comparisons, \
              label functions, time(), vector(), absent(); only the order of float \
              additions differs",
    },
    Class {
        name: "time",
        rel: 0.0,
        scale: 0.0,
        abs: 0.001,
        nan_is_any: false,
        refused: false,
        why: "timestamp(): the time of the sample a bare selector picks, which both keep to \
              the millisecond (a relative tolerance would allow seconds)",
    },
    Class {
        name: "rate",
        rel: 0.10,
        scale: 0.02,
        abs: 0.0,
        nan_is_any: false,
        refused: false,
        why: "rate, increase, delta: Prometheus extrapolates the first and last samples \
              in the window to its edges; Tally adds up the increases of the samples in \
              the window's minutes (from the sample before) and does not extrapolate. \
              The two differ by about one sample interval's increase: a few percent of \
              a window, more for a bursty counter",
    },
    Class {
        name: "irate",
        rel: 0.5,
        scale: 0.1,
        abs: 0.0,
        nan_is_any: false,
        refused: false,
        why: "irate, idelta: Prometheus takes the last two samples (one scrape \
              interval), Tally the last minute (it keeps no two samples of a minute); \
              equal for a steady counter, apart by how much the rate varies from one \
              interval to the next otherwise. A factor such as 60, or a missing point, \
              still fails",
    },
    Class {
        name: "rounded",
        rel: 0.2,
        scale: 0.05,
        abs: 0.0,
        nan_is_any: false,
        refused: false,
        why: "a range that is not whole minutes ([75s], [90s], Grafana's \
              $__rate_interval) is rounded to whole minutes by Tally, so the window \
              holds a different stretch of samples, and a noisy series differs by its \
              noise over that stretch",
    },
    Class {
        name: "quantile",
        rel: 0.10,
        scale: 0.02,
        abs: 0.0,
        nan_is_any: false,
        refused: false,
        why: "histogram_quantile interpolates within a bucket from bucket rates, each \
              within the rate tolerance; a shift between buckets moves the estimate more",
    },
    Class {
        name: "regression",
        rel: 0.10,
        scale: 0.05,
        abs: 0.0,
        nan_is_any: false,
        refused: false,
        why: "deriv, predict_linear: a least-squares fit over the minutes' last samples \
              in Tally, over every sample in Prometheus",
    },
    Class {
        name: "distribution",
        rel: 0.35,
        scale: 0.05,
        abs: 0.0,
        nan_is_any: false,
        refused: false,
        why: "quantile_over_time, stddev_over_time, stdvar_over_time: Tally applies \
              Prometheus' definition to each minute's last sample, not to every \
              sample; over ten minutes that estimate is off by about a quarter",
    },
    Class {
        name: "nan",
        rel: 1e-9,
        scale: 1e-12,
        abs: 0.0,
        nan_is_any: true,
        refused: false,
        why: "series with NaN samples: Prometheus lets a NaN into sums and averages \
              (the result is NaN), Tally keeps NaN out of the minute's count, sum, \
              minimum and maximum (issue #29), so where Prometheus answers NaN Tally \
              may answer a number, or nothing for a window of NaN samples only; \
              elsewhere exact",
    },
    Class {
        name: "refused",
        rel: 0.0,
        scale: 0.0,
        abs: 0.0,
        nan_is_any: false,
        refused: true,
        why: "a valid query Prometheus refuses (two series of the \"one\" side of a match \
              with the same matching labels, even unmatched): Tally must refuse it too, \
              with the same HTTP status",
    },
];

/// One corpus query.
#[derive(Debug, Clone)]
pub(super) struct Query {
    pub(super) feed: Feed,
    pub(super) class: &'static Class,
    pub(super) modes: Modes,
    /// As written, placeholders included.
    pub(super) text: String,
    /// Line in `corpus.txt`.
    pub(super) line: usize,
}

/// The corpus as shipped.
pub(super) fn load() -> Vec<Query> {
    parse(include_str!("corpus.txt")).unwrap_or_else(|e| panic!("corpus.txt: {e}"))
}

pub(super) fn parse(text: &str) -> Result<Vec<Query>, String> {
    let mut feed = None;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line {
            "[live]" => feed = Some(Feed::Live),
            "[synthetic]" => feed = Some(Feed::Synthetic),
            _ => {
                let feed =
                    feed.ok_or(format!("line {}: a query before [live]/[synthetic]", i + 1))?;
                let (head, query) = line
                    .split_once('|')
                    .ok_or(format!("line {}: no `class |` before the query", i + 1))?;
                let mut words = head.split_whitespace();
                let class_name = words.next().unwrap_or("");
                let class = CLASSES
                    .iter()
                    .find(|c| c.name == class_name)
                    .ok_or(format!("line {}: unknown class {class_name:?}", i + 1))?;
                let modes = match words.next() {
                    None => Modes::Both,
                    Some("instant") => Modes::Instant,
                    Some("range") => Modes::Range,
                    Some(m) => return Err(format!("line {}: unknown mode {m:?}", i + 1)),
                };
                out.push(Query {
                    feed,
                    class,
                    modes,
                    text: query.trim().to_string(),
                    line: i + 1,
                });
            }
        }
    }
    Ok(out)
}

#[test]
fn the_corpus_parses_and_every_query_is_promql() {
    let corpus = load();
    assert!(corpus.len() >= 150, "only {} queries", corpus.len());
    let mut seen = std::collections::BTreeSet::new();
    for q in &corpus {
        let text = q
            .text
            .replace("$node", "127.0.0.1:9100")
            .replace("$prom", "127.0.0.1:9090")
            .replace("$tally", "127.0.0.1:8080")
            .replace("$at", "1700000000");
        if let Err(e) = promql_parser::parser::parse(&text) {
            panic!("corpus.txt line {}: {e}: {}", q.line, q.text);
        }
        assert!(
            seen.insert((q.feed, q.text.clone())),
            "corpus.txt line {}: a duplicate",
            q.line
        );
    }
    for feed in [Feed::Live, Feed::Synthetic] {
        assert!(
            corpus.iter().filter(|q| q.feed == feed).count() >= 50,
            "{feed:?} has few queries"
        );
    }
    assert!(parse("exact | up").is_err(), "a query before a feed");
    assert!(parse("[live]\nbogus | up").is_err(), "an unknown class");
}

/// A tolerance as `docs/testing.md` writes it: `5%`, `1e-9`, `1 s`, `0`.
fn as_written(x: f64, seconds: bool) -> String {
    match x {
        0.0 => "0".into(),
        x if seconds => format!("{} ms", x * 1000.0),
        x if x >= 0.01 => format!("{}%", (x * 100.0).round()),
        x => format!("{x:e}"),
    }
}

#[test]
fn the_docs_give_the_same_tolerance_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/testing.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    for c in &CLASSES {
        let row = format!(
            "| `{}` | {} | {} | {} |",
            c.name,
            as_written(c.rel, false),
            as_written(c.scale, false),
            as_written(c.abs, true)
        );
        assert!(
            docs.contains(&row),
            "docs/testing.md has no row starting {row:?}"
        );
    }
}
