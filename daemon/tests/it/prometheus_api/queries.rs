//! PromQL evaluated against what this module's parent computes from the
//! pushed samples: range functions, aggregations, the rollup path against
//! the fan-out path, hour slots against minute slots.

use tally_testkit::client::now_ms;

use super::fixture::{assert_matrix, assert_same, labels, shown, Fixture, Labels, Matrix};
use super::{close, window, Kind, HOUR_S, METRICS, SOURCES};

/// Every range function of every series at every minute, against the
/// model; `avg_over_time(x[1m])` also against the native 1m average.
pub(super) async fn check_range_functions(fx: &Fixture) {
    let (start, end) = fx.span();
    let times: Vec<i64> = (start..=end).step_by(60).collect();
    for (metric, prom, kind) in METRICS {
        // A cumulative counter's *_over_time read its raw values (each
        // minute's last sample); the slots determine the rest exactly.
        let mut funcs = vec!["count_over_time"];
        if kind != Kind::Cumulative {
            funcs.extend([
                "avg_over_time",
                "min_over_time",
                "max_over_time",
                "sum_over_time",
            ]);
        }
        if kind != Kind::Gauge {
            funcs.extend(["rate", "increase"]);
        }
        for func in funcs {
            for r in [60, 180] {
                let q = format!("{func}({prom}[{}m])", r / 60);
                let (got, rollup) = fx.range(&q, start, end, "60").await;
                assert_eq!(rollup, None, "{q} reads series, not rollups");
                let want = SOURCES
                    .iter()
                    .map(|src| {
                        let s = fx.series(src, metric);
                        (
                            shown(src, metric),
                            times.iter().map(|t| (*t, window(s, func, *t, r))).collect(),
                        )
                    })
                    .collect();
                assert_matrix(&q, &got, &want);
            }
        }
        // The native API's 1m buckets are labelled by their start; a
        // Prometheus point by the end of its window. (A cumulative
        // counter's native average is of its increases, PromQL's of its
        // values.)
        for src in SOURCES.iter().filter(|_| kind != Kind::Cumulative) {
            let q = format!("avg_over_time({prom}{{instance=\"{src}\"}}[1m])");
            let (got, _) = fx.range(&q, start, end, "1m").await;
            let native = fx.native(src, metric, start - 60, end, "1m").await;
            let pts = &got[&shown(src, metric)];
            assert_eq!(pts.len(), native.len(), "{q}: {pts:?} vs native {native:?}");
            for (t, v) in pts {
                let n = &native[&(*t as i64 - 60)];
                assert!(close(*v, n["avg"].as_f64().expect("avg")), "{q} at {t}");
            }
        }
    }
    // Sub-minute steps evaluate every step; the data changes per minute.
    // The newest point, inside a (past) minute, reads that minute too.
    let q = "max_over_time(temp{instance=\"web-1\"}[1m])";
    let (got, _) = fx.range(q, start, start + 45, "15s").await;
    let pts = &got[&shown("web-1", "temp")];
    let temp = fx.series("web-1", "temp");
    let want = window(temp, "max_over_time", start, 60).expect("data");
    let newest = window(temp, "max_over_time", start + 60, 120).expect("data");
    assert_eq!(pts.len(), 4, "{pts:?}");
    assert!(pts[..3].iter().all(|(_, v)| *v == want), "{pts:?}");
    assert_eq!(pts[3].1, newest, "{pts:?}");
    // Arithmetic with numbers.
    let q = "rate(requests{instance=\"web-2\"}[2m]) * 120";
    let (got, _) = fx.range(q, start, end, "60").await;
    let s = fx.series("web-2", "requests");
    let want = [(
        shown("web-2", "requests"),
        times
            .iter()
            .map(|t| (*t, window(s, "increase", *t, 120)))
            .collect(),
    )]
    .into_iter()
    .collect();
    assert_matrix(q, &got, &want);
}

/// `func` over the last `r` seconds at `t` of `metric` of every source
/// that has data there.
fn per_source(fx: &Fixture, metric: &str, func: &str, t: i64, r: i64) -> Vec<(&'static str, f64)> {
    SOURCES
        .iter()
        .filter_map(|src| window(fx.series(src, metric), func, t, r).map(|v| (*src, v)))
        .collect()
}

/// The aggregation `op` of `vals`; `None` over nothing.
fn reduce(op: &str, vals: &[(&str, f64)]) -> Option<f64> {
    if vals.is_empty() {
        return None;
    }
    let it = vals.iter().map(|x| x.1);
    Some(match op {
        "sum" => it.sum(),
        "avg" => it.sum::<f64>() / vals.len() as f64,
        "min" => it.fold(f64::INFINITY, f64::min),
        "max" => it.fold(f64::NEG_INFINITY, f64::max),
        "count" => vals.len() as f64,
        _ => unreachable!(),
    })
}

/// `sum`, `avg`, `min`, `max`, `count`, `topk`, `bottomk`, with and
/// without grouping, against the model.
pub(super) async fn check_aggregations(fx: &Fixture) {
    let (start, end) = fx.span();
    let times: Vec<i64> = (start..=end).step_by(60).collect();
    for (op, func, metric, prom) in [
        ("sum", "rate", "requests", "requests"),
        ("avg", "avg_over_time", "cpu.load", "cpu_load"),
        ("min", "min_over_time", "temp", "temp"),
        ("max", "max_over_time", "cpu.load", "cpu_load"),
        ("count", "count_over_time", "requests", "requests"),
        ("max", "increase", "bytes/out", "bytes_out"),
    ] {
        check_aggregation_with_and_without_grouping(fx, &times, op, func, metric, prom).await;
    }
    let t = fx.t0 + 5 * 60;
    check_topk_and_bottomk(fx, &times, t).await;
    check_instant_vector_and_scalar(fx, t).await;
}

/// `op(func(prom[2m]))` over a source regex, `by (instance)` and
/// `without (instance)`, every minute of `times`.
async fn check_aggregation_with_and_without_grouping(
    fx: &Fixture,
    times: &[i64],
    op: &str,
    func: &str,
    metric: &str,
    prom: &str,
) {
    let (start, end) = fx.span();
    // A source regex that is not a rollup group: the fan-out path.
    let q = format!("{op}({func}({prom}{{instance=~\"(web|db)-.*\"}}[2m]))");
    let (got, _) = fx.range(&q, start, end, "60").await;
    let want = [(
        Labels::new(),
        times
            .iter()
            .map(|t| (*t, reduce(op, &per_source(fx, metric, func, *t, 120))))
            .collect(),
    )]
    .into_iter()
    .collect();
    assert_matrix(&q, &got, &want);

    let q = format!("{op} by (instance) ({func}({prom}[2m]))");
    let (got, _) = fx.range(&q, start, end, "60").await;
    let want = SOURCES
        .iter()
        .map(|src| {
            (
                labels(&[("instance", src)]),
                times
                    .iter()
                    .map(|t| {
                        let v = window(fx.series(src, metric), func, *t, 120);
                        (*t, v.map(|v| if op == "count" { 1.0 } else { v }))
                    })
                    .collect(),
            )
        })
        .collect();
    assert_matrix(&q, &got, &want);

    let q = format!("{op} without (instance) ({func}({prom}[2m]))");
    let (got, _) = fx.range(&q, start, end, "60").await;
    let rest: Labels = super::fixture::tally_metric(metric)
        .map(|m| labels(&[("tally_metric", m)]))
        .unwrap_or_default();
    assert_eq!(got.keys().collect::<Vec<_>>(), vec![&rest], "{q}");
}

/// topk / bottomk at one time `t`, and per step over a range.
async fn check_topk_and_bottomk(fx: &Fixture, times: &[i64], t: i64) {
    let (start, end) = fx.span();
    let mut ranked = per_source(fx, "temp", "avg_over_time", t, 300);
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let got = fx.instant("topk(2, avg_over_time(temp[5m]))", t).await;
    let want: Vec<(&str, f64)> = ranked[..2].to_vec();
    assert_eq!(got.len(), 2, "{got:?}");
    for (src, v) in &want {
        let pts = &got[&shown(src, "temp")];
        assert_eq!(pts, &vec![(t as f64, *v)]);
    }
    let got = fx.instant("bottomk(1, avg_over_time(temp[5m]))", t).await;
    let low = ranked.last().expect("a source");
    assert_eq!(got[&shown(low.0, "temp")], vec![(t as f64, low.1)]);
    let (got, _) = fx
        .range("topk(1, increase(requests[1m]))", start, end, "60")
        .await;
    for t in times {
        let best = per_source(fx, "requests", "increase", *t, 60)
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let chosen: Vec<(&Labels, f64)> = got
            .iter()
            .filter_map(|(l, pts)| pts.iter().find(|p| p.0 == *t as f64).map(|p| (l, p.1)))
            .collect();
        match best {
            None => assert!(chosen.is_empty()),
            Some((src, v)) => assert_eq!(chosen, vec![(&shown(src, "requests"), v)], "topk at {t}"),
        }
    }
}

/// Instant queries at `t`: a vector, and a scalar.
async fn check_instant_vector_and_scalar(fx: &Fixture, t: i64) {
    let got = fx
        .instant("sum_over_time(cpu_load{instance=\"db-1\"}[5m])", t)
        .await;
    let want = window(fx.series("db-1", "cpu.load"), "sum_over_time", t, 300).expect("data");
    assert_eq!(got[&shown("db-1", "cpu.load")], vec![(t as f64, want)]);
    let data = fx
        .ok(
            "query",
            &[("query", "1 + 2 * 3".into()), ("time", t.to_string())],
        )
        .await;
    assert_eq!(data["resultType"], "scalar");
    assert_eq!(data["result"], serde_json::json!([t, "7"]));
}

/// The rollup path (no source matcher: the `all` group) and the fan-out
/// path (a source regex) give the same answers; the header says which ran.
pub(super) async fn check_rollups(fx: &Fixture) {
    let (start, end) = fx.span();
    for (op, func, prom) in [
        ("sum", "sum_over_time", "cpu_load"),
        ("sum", "count_over_time", "requests"),
        ("sum", "rate", "requests"),
        ("sum", "increase", "bytes_out"),
        ("sum", "count_over_time", "temp"),
        ("min", "min_over_time", "temp"),
        ("max", "max_over_time", "cpu_load"),
    ] {
        for by in ["", " by (tally_metric)"] {
            let rolled = format!("{op}{by} ({func}({prom}[3m]))");
            let fanned = format!("{op}{by} ({func}({prom}{{instance=~\".+\"}}[3m]))");
            let (r, header) = fx.range(&rolled, start, end, "60").await;
            assert_eq!(header.as_deref(), Some("all"), "{rolled} reads the rollup");
            let (f, header) = fx.range(&fanned, start, end, "60").await;
            assert_eq!(header, None, "{fanned} fans out");
            assert!(!r.is_empty(), "{rolled}: no data");
            assert_same(&rolled, &r, &f);
        }
    }
    // Several metrics through one name regex.
    let q = "sum by (tally_metric) (count_over_time({__name__=~\"cpu_load|temp\"}[2m]))";
    let (r, header) = fx.range(q, start, end, "60").await;
    assert_eq!(header.as_deref(), Some("all"));
    let fanned = q
        .replace("[2m]", "")
        .replace("\"}", "\", instance!=\"\"}[2m]");
    let (f, _) = fx.range(&fanned, start, end, "60").await;
    assert_eq!(r.len(), 2, "{r:?}");
    assert_same(q, &r, &f);
    // Instant queries too.
    let t = fx.t0 + 6 * 60;
    assert_eq!(
        fx.instant("sum(increase(requests[5m]))", t).await,
        fx.instant("sum(increase(requests{instance=~\".*-.*\"}[5m]))", t)
            .await
    );
}

/// Whole-hour windows at whole hours are read from hour slots (and whole
/// days from day slots); the answer equals the minute slots'.
pub(super) async fn check_tiers(fx: &Fixture) {
    let now = now_ms() / 1000;
    let h = (now / HOUR_S + 1) * HOUR_S;
    for (func, prom, metric) in [
        ("sum_over_time", "cpu_load", "cpu.load"),
        ("max_over_time", "temp", "temp"),
        ("increase", "bytes_out", "bytes/out"),
    ] {
        let q = format!("{func}({prom}[2h])");
        let (hours, _) = fx.range(&q, h, h + HOUR_S, "1h").await;
        let (minutes, _) = fx.range(&q, h, h + HOUR_S, "30m").await;
        let want = SOURCES
            .iter()
            .map(|src| {
                let s = fx.series(src, metric);
                (
                    shown(src, metric),
                    [h, h + HOUR_S]
                        .iter()
                        .map(|t| (*t, window(s, func, *t, 2 * HOUR_S)))
                        .collect(),
                )
            })
            .collect();
        assert_matrix(&q, &hours, &want);
        let thinned: Matrix = minutes
            .into_iter()
            .map(|(l, pts)| {
                (
                    l,
                    pts.into_iter()
                        .filter(|p| p.0 as i64 % HOUR_S == 0)
                        .collect(),
                )
            })
            .filter(|(_, pts): &(Labels, Vec<(f64, f64)>)| !pts.is_empty())
            .collect();
        assert_eq!(hours, thinned, "{q}: hour slots vs minute slots");
        let day = (now / 86_400 + 1) * 86_400;
        let q = format!("{func}({prom}[1d])");
        let got = fx.instant(&q, day).await;
        let want = SOURCES
            .iter()
            .map(|src| {
                (
                    shown(src, metric),
                    vec![(day, window(fx.series(src, metric), func, day, 86_400))],
                )
            })
            .collect();
        assert_matrix(&q, &got, &want);
    }
}
