//! Answers of the two sides, read alike, and the comparison of one
//! evaluation under a tolerance class.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::corpus::Class;
use super::remote_write::trim;

/// `{label: value}` of a result series, `__name__` included when present.
pub(super) type Labels = BTreeMap<String, String>;

/// Any result as series of `(t, v)` points: a vector's or scalar's single
/// point, or a matrix's points. A scalar has no labels.
#[derive(Debug, Clone, Default)]
pub(super) struct Answer {
    pub(super) series: BTreeMap<Labels, Vec<(f64, f64)>>,
}

/// Reads a Prometheus API body (`{"status":…, "data":{"resultType":…}}`).
pub(super) fn parse_answer(status: u16, body: &str) -> Result<Answer, String> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| format!("HTTP {status}, not JSON ({e}): {}", trim(body, 300)))?;
    if status != 200 || v["status"] != "success" {
        return Err(format!(
            "HTTP {status}: {} {}",
            v["errorType"].as_str().unwrap_or(""),
            trim(v["error"].as_str().unwrap_or(body), 400)
        ));
    }
    let data = &v["data"];
    let point = |p: &Value| -> Result<(f64, f64), String> {
        let t = p[0]
            .as_f64()
            .ok_or(format!("a point without a time: {p}"))?;
        let v = p[1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or(format!("a point without a value: {p}"))?;
        Ok((t, v))
    };
    let mut out = Answer::default();
    match data["resultType"].as_str() {
        Some("scalar") => {
            out.series
                .insert(Labels::new(), vec![point(&data["result"])?]);
        }
        Some(kind @ ("vector" | "matrix")) => {
            for s in data["result"].as_array().ok_or("no result array")? {
                let labels: Labels = s["metric"]
                    .as_object()
                    .ok_or(format!("a series without labels: {s}"))?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect();
                let points = if kind == "vector" {
                    vec![point(&s["value"])?]
                } else {
                    s["values"]
                        .as_array()
                        .ok_or(format!("a series without values: {s}"))?
                        .iter()
                        .map(point)
                        .collect::<Result<_, _>>()?
                };
                if out.series.insert(labels.clone(), points).is_some() {
                    return Err(format!("the label set {labels:?} twice"));
                }
            }
        }
        other => return Err(format!("result type {other:?}")),
    }
    Ok(out)
}

/// Whether Tally's `t` is close enough to Prometheus' `p`.
fn close(class: &Class, p: f64, t: f64, scale: f64) -> bool {
    if p.is_nan() {
        return t.is_nan() || class.nan_is_any;
    }
    if p.is_infinite() || t.is_infinite() || t.is_nan() {
        return p == t;
    }
    let allowed = (class.rel * p.abs().max(t.abs()))
        .max(class.scale * scale)
        .max(class.abs);
    (p - t).abs() <= allowed
}

/// Both answers without the points where Prometheus answers NaN, and
/// without the series left with no points: where a window holds only NaN
/// samples Tally, which keeps NaN out of its minutes, has nothing.
fn without_nan_points(prom: &Answer, tally: &Answer) -> (Answer, Answer) {
    let mut p = Answer::default();
    let mut t = Answer::default();
    for (labels, pts) in &prom.series {
        let nan_at: Vec<f64> = pts.iter().filter(|x| x.1.is_nan()).map(|x| x.0).collect();
        let keep = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
            pts.iter()
                .copied()
                .filter(|x| !nan_at.contains(&x.0))
                .collect()
        };
        let kept = keep(pts);
        if !kept.is_empty() {
            p.series.insert(labels.clone(), kept);
        }
        if let Some(tp) = tally.series.get(labels) {
            let kept = keep(tp);
            if !kept.is_empty() {
                t.series.insert(labels.clone(), kept);
            }
        }
    }
    for (labels, pts) in &tally.series {
        if !prom.series.contains_key(labels) {
            t.series.insert(labels.clone(), pts.clone());
        }
    }
    (p, t)
}

/// Why one evaluation disagrees, `None` when it agrees.
pub(super) fn compare(class: &Class, prom: &Answer, tally: &Answer) -> Option<String> {
    if class.nan_is_any {
        let (p, t) = without_nan_points(prom, tally);
        let plain = Class {
            nan_is_any: false,
            ..*class
        };
        return compare(&plain, &p, &t);
    }
    let only_prom: Vec<&Labels> = prom
        .series
        .keys()
        .filter(|l| !tally.series.contains_key(*l))
        .collect();
    let only_tally: Vec<&Labels> = tally
        .series
        .keys()
        .filter(|l| !prom.series.contains_key(*l))
        .collect();
    if !only_prom.is_empty() || !only_tally.is_empty() {
        return Some(format!(
            "label sets differ: only in Prometheus {}; only in Tally {}",
            list(&only_prom),
            list(&only_tally)
        ));
    }
    let scale = prom
        .series
        .values()
        .flatten()
        .map(|p| p.1.abs())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    for (labels, pp) in &prom.series {
        let tp = &tally.series[labels];
        let times = |pts: &[(f64, f64)]| pts.iter().map(|p| p.0).collect::<Vec<_>>();
        if times(pp) != times(tp) {
            return Some(format!(
                "{}: points at different times: Prometheus {:?}, Tally {:?}",
                fmt_labels(labels),
                trim(&format!("{:?}", times(pp)), 200),
                trim(&format!("{:?}", times(tp)), 200)
            ));
        }
        for (p, t) in pp.iter().zip(tp) {
            if !close(class, p.1, t.1, scale) {
                return Some(format!(
                    "{} at {}: Prometheus {}, Tally {} (class {})",
                    fmt_labels(labels),
                    p.0,
                    p.1,
                    t.1,
                    class.name
                ));
            }
        }
    }
    None
}

fn list(ls: &[&Labels]) -> String {
    if ls.is_empty() {
        return "none".into();
    }
    let shown: Vec<String> = ls.iter().take(3).map(|l| fmt_labels(l)).collect();
    let more = if ls.len() > 3 {
        format!(" and {} more", ls.len() - 3)
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(", "))
}

pub(super) fn fmt_labels(l: &Labels) -> String {
    let name = l.get("__name__").map_or("", String::as_str);
    let rest: Vec<String> = l
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    format!("{name}{{{}}}", rest.join(", "))
}

/// An answer trimmed for a report: a few series, a few points each.
pub(super) fn summary(a: &Result<Answer, String>) -> String {
    let a = match a {
        Ok(a) => a,
        Err(e) => return format!("error: {}", trim(e, 300)),
    };
    if a.series.is_empty() {
        return "(empty)".into();
    }
    let mut out = String::new();
    for (labels, pts) in a.series.iter().take(3) {
        let shown: Vec<String> = pts
            .iter()
            .take(4)
            .map(|(t, v)| format!("{t}:{v}"))
            .collect();
        let more = if pts.len() > 4 { " …" } else { "" };
        let _ = write!(out, "{} [{}{more}]; ", fmt_labels(labels), shown.join(" "));
    }
    if a.series.len() > 3 {
        let _ = write!(out, "{} series in all", a.series.len());
    }
    out
}

#[test]
fn comparisons_follow_the_classes() {
    use super::corpus::CLASSES;
    let class = |n: &str| CLASSES.iter().find(|c| c.name == n).unwrap();
    let one = |v: f64| Answer {
        series: BTreeMap::from([(Labels::new(), vec![(60.0, v)])]),
    };
    assert!(compare(class("exact"), &one(1.0), &one(1.0 + 1e-12)).is_none());
    assert!(compare(class("exact"), &one(1.0), &one(1.001)).is_some());
    assert!(compare(class("rate"), &one(100.0), &one(109.0)).is_none());
    assert!(compare(class("rate"), &one(100.0), &one(112.0)).is_some());
    // irate: a factor of 60 fails.
    assert!(compare(class("irate"), &one(60.0), &one(1.0)).is_some());
    assert!(compare(class("exact"), &one(f64::NAN), &one(f64::NAN)).is_none());
    assert!(compare(class("exact"), &one(f64::NAN), &one(1.0)).is_some());
    assert!(compare(class("nan"), &one(f64::NAN), &one(1.0)).is_none());
    assert!(compare(class("nan"), &one(1.0), &one(f64::NAN)).is_some());
    // A window of NaN only: Prometheus answers NaN, Tally nothing.
    assert!(compare(class("nan"), &one(f64::NAN), &Answer::default()).is_none());
    assert!(compare(class("exact"), &one(f64::NAN), &Answer::default()).is_some());
    assert!(compare(class("time"), &one(1.7e9), &one(1.7e9 + 0.0005)).is_none());
    assert!(compare(class("time"), &one(1.7e9), &one(1.7e9 + 0.9)).is_some());
    // A series near zero is judged against the answer's largest value.
    let two = |a: f64| Answer {
        series: BTreeMap::from([
            (
                Labels::from([("m".into(), "a".into())]),
                vec![(60.0, 1000.0)],
            ),
            (Labels::from([("m".into(), "b".into())]), vec![(60.0, a)]),
        ]),
    };
    assert!(compare(class("rate"), &two(0.1), &two(15.0)).is_none());
    assert!(compare(class("rate"), &two(0.1), &two(50.0)).is_some());
    let ok = parse_answer(
        200,
        r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"value":[60,"NaN"]}]}}"#,
    )
    .unwrap();
    assert!(ok.series[&Labels::from([("a".into(), "b".into())])][0]
        .1
        .is_nan());
    assert!(parse_answer(
        400,
        r#"{"status":"error","errorType":"bad_data","error":"x"}"#
    )
    .is_err());
}
