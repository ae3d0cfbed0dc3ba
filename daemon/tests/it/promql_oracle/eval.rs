//! Evaluates the corpus on both sides, as Grafana asks (form POSTs to
//! `query` and `query_range`), and tells what agrees.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};

use super::compare::{compare, parse_answer, summary, Answer};
use super::corpus::{Feed, Modes, Query, CLASSES};
use super::remote_write::trim;

/// Queries in flight at once, per side.
const CONCURRENCY: usize = 4;

/// One side's Prometheus API, up to and including `/api/v1`.
#[derive(Clone)]
pub(super) struct Side {
    pub(super) name: &'static str,
    pub(super) api: String,
}

/// One evaluation of a query.
#[derive(Debug, Clone, Copy)]
pub(super) enum Eval {
    Instant(i64),
    /// An instant query at this many milliseconds before the wall clock's
    /// now, read when the query is sent (the same instant to both sides):
    /// inside the minute in progress, as stat panels and alert rules ask.
    /// Both sides are asked once the feed's Prometheus reports it has sent
    /// Tally samples past that instant (see [`delivered`]).
    BeforeNow(i64),
    /// The same, resolved: Unix milliseconds.
    InstantMs(i64),
    Range {
        start: i64,
        end: i64,
        step: i64,
    },
}

impl std::fmt::Display for Eval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Eval::Instant(t) => write!(f, "query time={t}"),
            Eval::BeforeNow(ms) => write!(f, "query time=now-{ms}ms"),
            Eval::InstantMs(t) => write!(f, "query time={:.3}", *t as f64 / 1000.0),
            Eval::Range { start, end, step } => {
                write!(f, "query_range start={start} end={end} step={step}")
            }
        }
    }
}

/// Grafana aligns a range's start and end down to a multiple of its step.
pub(super) fn aligned(start: i64, end: i64, step: i64) -> Eval {
    Eval::Range {
        start: start.div_euclid(step) * step,
        end: end.div_euclid(step) * step,
        step,
    }
}

/// Where and when one feed's queries are evaluated.
pub(super) struct Setting {
    pub(super) feed: Feed,
    pub(super) prometheus: Side,
    pub(super) tally: Side,
    pub(super) instants: Vec<i64>,
    /// Instants before now ([`Eval::BeforeNow`]), in milliseconds.
    pub(super) before_now: Vec<i64>,
    pub(super) ranges: Vec<Eval>,
    /// Placeholders and their values.
    pub(super) vars: Vec<(&'static str, String)>,
}

impl Setting {
    fn text(&self, q: &Query) -> String {
        self.vars
            .iter()
            .fold(q.text.clone(), |t, (k, v)| t.replace(k, v))
    }

    fn evals(&self, q: &Query) -> Vec<Eval> {
        let mut out = Vec::new();
        if q.modes != Modes::Range {
            out.extend(self.instants.iter().map(|t| Eval::Instant(*t)));
            out.extend(self.before_now.iter().map(|ms| Eval::BeforeNow(*ms)));
        }
        if q.modes != Modes::Instant {
            out.extend(self.ranges.iter().copied());
        }
        out
    }
}

/// Asks `side` for `q` at `eval`: its answer and how long it took.
pub(super) async fn ask(
    http: &reqwest::Client,
    side: &Side,
    q: &str,
    eval: Eval,
) -> (Result<Answer, String>, Duration) {
    let (path, params) = match eval {
        Eval::Instant(t) => (
            "query",
            vec![("query", q.to_string()), ("time", t.to_string())],
        ),
        Eval::InstantMs(t) | Eval::BeforeNow(t) => (
            "query",
            vec![
                ("query", q.to_string()),
                ("time", format!("{:.3}", t as f64 / 1000.0)),
            ],
        ),
        Eval::Range { start, end, step } => (
            "query_range",
            vec![
                ("query", q.to_string()),
                ("start", start.to_string()),
                ("end", end.to_string()),
                ("step", step.to_string()),
            ],
        ),
    };
    let url = format!("{}/{path}", side.api);
    let started = Instant::now();
    let resp = http.post(&url).form(&params).send().await;
    let answer = match resp {
        Ok(r) => {
            let status = r.status().as_u16();
            match r.text().await {
                Ok(body) => parse_answer(status, &body),
                Err(e) => Err(format!("reading the answer: {e}")),
            }
        }
        Err(e) => Err(format!("{} at {url}: {e}", side.name)),
    };
    (answer, started.elapsed())
}

/// One evaluation where the sides disagree.
pub(super) struct Disagreement {
    pub(super) eval: Eval,
    pub(super) why: String,
    pub(super) prometheus: String,
    pub(super) tally: String,
}

/// What one corpus query did.
pub(super) struct Outcome {
    pub(super) query: Query,
    /// With its placeholders replaced.
    pub(super) text: String,
    pub(super) disagreements: Vec<Disagreement>,
    /// Tally answered an error where Prometheus answered.
    pub(super) tally_errors: usize,
    /// Prometheus refused it: the corpus is wrong.
    pub(super) prometheus_error: Option<String>,
    /// Prometheus' answer was empty in every evaluation.
    pub(super) prometheus_empty: bool,
    pub(super) evaluations: usize,
}

impl Outcome {
    pub(super) fn agrees(&self) -> bool {
        self.disagreements.is_empty() && self.prometheus_error.is_none()
    }
}

async fn evaluate(http: &reqwest::Client, setting: &Setting, q: &Query) -> Outcome {
    let text = setting.text(q);
    let mut out = Outcome {
        query: q.clone(),
        text: text.clone(),
        disagreements: Vec::new(),
        tally_errors: 0,
        prometheus_error: None,
        prometheus_empty: true,
        evaluations: 0,
    };
    for eval in setting.evals(q) {
        let eval = match eval {
            Eval::BeforeNow(ms) => {
                let t = tally_testkit::client::now_ms() - ms;
                delivered(http, &setting.prometheus, t).await;
                Eval::InstantMs(t)
            }
            e => e,
        };
        out.evaluations += 1;
        let (prom, _) = ask(http, &setting.prometheus, &text, eval).await;
        let (tally, _) = ask(http, &setting.tally, &text, eval).await;
        if prom.as_ref().is_ok_and(|p| !p.series.is_empty()) {
            out.prometheus_empty = false;
        }
        let why = match (&prom, &tally) {
            _ if q.class.refused => match refusals(&prom, &tally) {
                Err(corpus) => {
                    out.prometheus_error = Some(format!("{eval}: {corpus}"));
                    continue;
                }
                Ok(why) => why,
            },
            (Err(e), _) => {
                out.prometheus_error = Some(format!("{eval}: Prometheus refuses it: {e}"));
                continue;
            }
            (Ok(_), Err(_)) => {
                out.tally_errors += 1;
                Some("Tally answered an error".to_string())
            }
            (Ok(p), Ok(t)) => compare(q.class, p, t),
        };
        if let Some(why) = why {
            out.disagreements.push(Disagreement {
                eval,
                why,
                prometheus: summary(&prom),
                tally: summary(&tally),
            });
        }
    }
    out
}

/// For a query of the `refused` class: why the two sides disagree (Tally
/// answers, or refuses with another status), or, as `Err`, why the corpus
/// is wrong (Prometheus answers it).
fn refusals(
    prom: &Result<Answer, String>,
    tally: &Result<Answer, String>,
) -> Result<Option<String>, String> {
    // Errors read "HTTP <status>: <errorType> <message>".
    let status = |e: &str| e.split(':').next().unwrap_or("").to_string();
    match (prom, tally) {
        (Ok(_), _) => Err("Prometheus answers a query the corpus expects it to refuse".into()),
        (Err(_), Ok(_)) => Ok(Some("Tally answered where Prometheus refuses".into())),
        (Err(p), Err(t)) if status(p) != status(t) => Ok(Some(format!(
            "both refuse, Prometheus with {}, Tally with {}",
            status(p),
            status(t)
        ))),
        (Err(_), Err(_)) => Ok(None),
    }
}

/// Evaluates every query of `corpus` for `setting`'s feed.
pub(super) async fn run(
    http: &reqwest::Client,
    setting: &Setting,
    corpus: &[Query],
) -> Vec<Outcome> {
    let mine: Vec<&Query> = corpus.iter().filter(|q| q.feed == setting.feed).collect();
    let mut out: Vec<Outcome> = stream::iter(mine)
        .map(|q| evaluate(http, setting, q))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    out.sort_by_key(|o| o.query.line);
    out
}

/// How long an instant before now waits for its samples to be sent.
const DELIVERY: Duration = Duration::from_secs(10);

/// Waits until the Prometheus behind `prometheus` has sent Tally samples
/// after `t_ms` (at most [`DELIVERY`]). A remote-write receiver cannot
/// answer at `t` with samples its sender scraped before `t` and still
/// holds in its queue (up to the batch deadline, more on a busy machine),
/// while Prometheus answers from its own head: compared at once, the
/// sender's queue would be measured, not the answer at `t`. So both sides
/// are asked for `t` once it is past, as a rule evaluator that lags its
/// data by a moment asks; `t` stays inside the minute in progress.
async fn delivered(http: &reqwest::Client, prometheus: &Side, t_ms: i64) {
    let deadline = Instant::now() + DELIVERY;
    while Instant::now() < deadline {
        if highest_sent(http, &prometheus.api)
            .await
            .is_some_and(|s| s * 1000.0 > t_ms as f64)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The newest sample time (Unix seconds) the Prometheus whose API is
/// `api` has sent over remote-write, by its own metric.
pub(super) async fn highest_sent(http: &reqwest::Client, api: &str) -> Option<f64> {
    let r = http
        .get(format!("{api}/query"))
        .query(&[(
            "query",
            "min(prometheus_remote_storage_queue_highest_sent_timestamp_seconds)",
        )])
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    let a = parse_answer(status, &r.text().await.ok()?).ok()?;
    a.series.values().next()?.first().map(|p| p.1)
}

/// Asks Tally alone, at now, every instant query of `setting`'s feed, the
/// answers not compared: what a dashboard's stat panels or a rule
/// evaluator ask while the data comes in.
pub(super) async fn read_now(http: &reqwest::Client, setting: &Setting, corpus: &[Query]) {
    let mine = corpus
        .iter()
        .filter(|q| q.feed == setting.feed && q.modes != Modes::Range && !q.class.refused);
    for q in mine {
        let eval = Eval::InstantMs(tally_testkit::client::now_ms());
        let _ = ask(http, &setting.tally, &setting.text(q), eval).await;
    }
}

/// The report: totals per feed and class, then every disagreeing query
/// with both answers.
pub(super) fn report(outcomes: &[Outcome]) -> String {
    let mut r = String::new();
    let agreed = outcomes.iter().filter(|o| o.agrees()).count();
    let _ = writeln!(
        r,
        "{agreed} of {} queries agree ({:.1}%)",
        outcomes.len(),
        100.0 * agreed as f64 / outcomes.len().max(1) as f64
    );
    for feed in [Feed::Live, Feed::Synthetic] {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.query.feed == feed).collect();
        let ok = of.iter().filter(|o| o.agrees()).count();
        let _ = writeln!(r, "  {feed:?}: {ok} of {}", of.len());
    }
    for class in &CLASSES {
        let of: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.query.class.name == class.name)
            .collect();
        if of.is_empty() {
            continue;
        }
        let ok = of.iter().filter(|o| o.agrees()).count();
        let _ = writeln!(r, "  class {}: {ok} of {}", class.name, of.len());
        if ok < of.len() {
            let _ = writeln!(r, "    (tolerance: {})", class.why);
        }
    }
    let errors = outcomes.iter().filter(|o| o.tally_errors > 0).count();
    let _ = writeln!(r, "Tally errors where Prometheus answers: {errors} queries");
    for o in outcomes.iter().filter(|o| o.prometheus_error.is_some()) {
        let _ = writeln!(
            r,
            "CORPUS is wrong at line {} `{}`: {}",
            o.query.line,
            o.text,
            o.prometheus_error.as_deref().unwrap_or("")
        );
    }
    for o in outcomes
        .iter()
        .filter(|o| o.prometheus_empty && o.prometheus_error.is_none() && !o.query.class.refused)
    {
        let _ = writeln!(
            r,
            "note: Prometheus' answer is empty: line {} `{}`",
            o.query.line, o.text
        );
    }
    for o in outcomes.iter().filter(|o| !o.disagreements.is_empty()) {
        let _ = writeln!(
            r,
            "\nDISAGREES line {} [{:?}, {}] {}",
            o.query.line, o.query.feed, o.query.class.name, o.text
        );
        // The first evaluation tells what is wrong; the others are counted.
        let d = &o.disagreements[0];
        let _ = writeln!(r, "  {}: {}", d.eval, d.why);
        let _ = writeln!(r, "    Prometheus: {}", trim(&d.prometheus, 400));
        let _ = writeln!(r, "    Tally:      {}", trim(&d.tally, 400));
        if o.disagreements.len() > 1 {
            let _ = writeln!(
                r,
                "  ({} of {} evaluations disagree)",
                o.disagreements.len(),
                o.evaluations
            );
        }
    }
    r
}
