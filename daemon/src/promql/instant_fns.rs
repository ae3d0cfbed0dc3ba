//! The functions of instant vectors and scalars: arithmetic (`abs`,
//! `round`, `clamp`...), trigonometry, time and date, labels
//! (`label_replace`, `label_join`), conversions (`vector`, `scalar`),
//! ordering (`sort`...) and `absent`. They read values already evaluated,
//! never the store, so they are exact by construction and as in
//! Prometheus; the metric name is dropped wherever Prometheus drops it.

use chrono::{DateTime, Datelike, Timelike};

use super::held::Held;
use super::value::{bad, EvalResult, Labels, Series, Value};
use crate::query::QueryConfig;

/// Whether `name` is one of the functions this module evaluates.
pub fn is_instant_fn(name: &str) -> bool {
    simple(name).is_some()
        || matches!(
            name,
            "round"
                | "clamp"
                | "clamp_min"
                | "clamp_max"
                | "time"
                | "pi"
                | "vector"
                | "scalar"
                | "sort"
                | "sort_desc"
                | "sort_by_label"
                | "sort_by_label_desc"
                | "label_replace"
                | "label_join"
                | "absent"
                | "timestamp"
                | "histogram_count"
                | "histogram_sum"
                | "histogram_avg"
                | "histogram_fraction"
                | "histogram_stddev"
                | "histogram_stdvar"
        )
        || date(name).is_some()
}

/// Element-wise functions of one vector.
fn simple(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "abs" => f64::abs,
        "ceil" => f64::ceil,
        "floor" => f64::floor,
        "exp" => f64::exp,
        "ln" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "sqrt" => f64::sqrt,
        "sgn" => |v: f64| {
            if v < 0.0 {
                -1.0
            } else if v > 0.0 {
                1.0
            } else {
                v
            }
        },
        "sin" => f64::sin,
        "cos" => f64::cos,
        "tan" => f64::tan,
        "asin" => f64::asin,
        "acos" => f64::acos,
        "atan" => f64::atan,
        "sinh" => f64::sinh,
        "cosh" => f64::cosh,
        "tanh" => f64::tanh,
        "asinh" => f64::asinh,
        "acosh" => f64::acosh,
        "atanh" => f64::atanh,
        "deg" => |v: f64| v * 180.0 / std::f64::consts::PI,
        "rad" => |v: f64| v * std::f64::consts::PI / 180.0,
        _ => return None,
    })
}

/// The date functions, of Unix seconds in UTC.
fn date(name: &str) -> Option<fn(DateTime<chrono::Utc>) -> f64> {
    Some(match name {
        "year" => |t| f64::from(t.year()),
        "month" => |t| f64::from(t.month()),
        "day_of_month" => |t| f64::from(t.day()),
        "day_of_year" => |t| f64::from(t.ordinal()),
        "day_of_week" => |t| f64::from(t.weekday().num_days_from_sunday()),
        "hour" => |t| f64::from(t.hour()),
        "minute" => |t| f64::from(t.minute()),
        "days_in_month" => |t| {
            let (y, m) = (t.year(), t.month());
            let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            let first = chrono::NaiveDate::from_ymd_opt(y, m, 1);
            let following = chrono::NaiveDate::from_ymd_opt(next.0, next.1, 1);
            match (first, following) {
                (Some(a), Some(b)) => (b - a).num_days() as f64,
                _ => f64::NAN,
            }
        },
        _ => return None,
    })
}

fn utc(secs: f64) -> Option<DateTime<chrono::Utc>> {
    if !secs.is_finite() {
        return None;
    }
    DateTime::from_timestamp(secs.floor() as i64, 0)
}

fn vector(v: Value, what: &str) -> EvalResult<Vec<Series>> {
    match v {
        Value::Vector(s) => Ok(s),
        other => Err(bad(format!(
            "expected an instant vector for {what}, got {}",
            other.type_name()
        ))),
    }
}

fn scalar(v: &Value, what: &str) -> EvalResult<Vec<f64>> {
    match v {
        Value::Scalar(s) => Ok(s.clone()),
        other => Err(bad(format!(
            "expected a scalar for {what}, got {}",
            other.type_name()
        ))),
    }
}

fn string(v: &Value, what: &str) -> EvalResult<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(bad(format!(
            "expected a string for {what}, got {}",
            other.type_name()
        ))),
    }
}

/// `f` of every value, the metric name dropped.
fn map(series: Vec<Series>, f: impl Fn(f64, usize) -> Option<f64>) -> Vec<Series> {
    series
        .into_iter()
        .map(|s| Series {
            labels: s.labels.without_name(),
            values: s
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| v.and_then(|v| f(v, i)))
                .collect(),
        })
        .filter(Series::has_any)
        .collect()
}

/// Evaluates the instant function `name` of `args` at `times` (ms).
/// `absent`'s labels come from the caller, which knows its argument's
/// matchers.
pub fn call(
    name: &str,
    mut args: Vec<Value>,
    times: &[i64],
    absent_labels: Labels,
    limits: &QueryConfig,
    held: &Held<'_>,
) -> EvalResult<Value> {
    let n = times.len();
    if let Some(f) = simple(name) {
        let v = vector(args.remove(0), name)?;
        return Ok(Value::Vector(map(v, |x, _| Some(f(x)))));
    }
    if let Some(f) = date(name) {
        if args.is_empty() {
            return Ok(Value::Vector(vec![Series {
                labels: Labels::empty(),
                values: times
                    .iter()
                    .map(|&t| utc(t as f64 / 1000.0).map(f))
                    .collect(),
            }]));
        }
        let v = vector(args.remove(0), name)?;
        return Ok(Value::Vector(map(v, |x, _| {
            Some(utc(x).map_or(f64::NAN, f))
        })));
    }
    Ok(match name {
        "time" => Value::Scalar(times.iter().map(|&t| t as f64 / 1000.0).collect()),
        "pi" => Value::Scalar(vec![std::f64::consts::PI; n]),
        "vector" => Value::Vector(vec![Series {
            labels: Labels::empty(),
            values: scalar(&args[0], name)?.into_iter().map(Some).collect(),
        }]),
        "scalar" => {
            let v = vector(args.remove(0), name)?;
            Value::Scalar(
                (0..n)
                    .map(|i| {
                        let mut present = v.iter().filter_map(|s| s.values[i]);
                        match (present.next(), present.next()) {
                            (Some(x), None) => x,
                            _ => f64::NAN,
                        }
                    })
                    .collect(),
            )
        }
        "round" | "clamp" | "clamp_min" | "clamp_max" => bounded(name, args)?,
        "timestamp" => {
            // Of a selector the evaluator answers with the samples' own
            // times; of anything else, the evaluation time.
            let v = vector(args.remove(0), name)?;
            Value::Vector(map(v, |_, i| Some(times[i] as f64 / 1000.0)))
        }
        // Ordering matters to instant queries only; the caller keeps it.
        "sort" | "sort_desc" | "sort_by_label" | "sort_by_label_desc" => {
            let v = vector(args.remove(0), name)?;
            Value::Vector(order(name, v, &args)?)
        }
        "label_replace" | "label_join" => relabel(name, args, limits, held)?,
        "absent" => {
            let v = vector(args.remove(0), name)?;
            let values: Vec<Option<f64>> = (0..n)
                .map(|i| (!v.iter().any(|s| s.values[i].is_some())).then_some(1.0))
                .collect();
            let out = Series {
                labels: absent_labels,
                values,
            };
            Value::Vector(if out.has_any() { vec![out] } else { Vec::new() })
        }
        // Native histograms: Tally keeps none, so these answer nothing, as
        // Prometheus does for float series.
        n if n.starts_with("histogram_") => Value::Vector(Vec::new()),
        other => return Err(bad(format!("unknown function {other}()"))),
    })
}

/// `round`, `clamp`, `clamp_min`, `clamp_max`: a vector and scalars.
fn bounded(name: &str, mut args: Vec<Value>) -> EvalResult<Value> {
    let n = match args.first() {
        Some(Value::Vector(v)) => v.first().map_or(0, |s| s.values.len()),
        _ => 0,
    };
    Ok(match name {
        "round" => {
            let to = match args.get(1) {
                Some(a) => scalar(a, name)?,
                None => vec![1.0; n],
            };
            let v = vector(args.remove(0), name)?;
            Value::Vector(map(v, |x, i| {
                // As Prometheus: the inverse avoids some float error.
                let inv = 1.0 / to[i];
                Some((x * inv + 0.5).floor() / inv)
            }))
        }
        "clamp" => {
            let (lo, hi) = (scalar(&args[1], name)?, scalar(&args[2], name)?);
            let v = vector(args.remove(0), name)?;
            Value::Vector(map(v, |x, i| {
                (hi[i] >= lo[i]).then(|| go_max(lo[i], go_min(hi[i], x)))
            }))
        }
        "clamp_min" | "clamp_max" => {
            let bound = scalar(&args[1], name)?;
            let v = vector(args.remove(0), name)?;
            let min = name == "clamp_min";
            Value::Vector(map(v, |x, i| {
                Some(if min {
                    go_max(bound[i], x)
                } else {
                    go_min(bound[i], x)
                })
            }))
        }
        other => return Err(bad(format!("unknown function {other}()"))),
    })
}

/// Go's `math.Max`, which Prometheus clamps with: NaN wins over any
/// number but +Inf (Rust's `f64::max` ignores NaN, so `clamp` of NaN
/// would answer the bound), and +0 is larger than -0.
fn go_max(a: f64, b: f64) -> f64 {
    if a == f64::INFINITY || b == f64::INFINITY {
        f64::INFINITY
    } else if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() {
            b
        } else {
            a
        }
    } else if a > b {
        a
    } else {
        b
    }
}

/// Go's `math.Min`: NaN wins over any number but -Inf, and -0 is smaller
/// than +0.
fn go_min(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY || b == f64::NEG_INFINITY {
        f64::NEG_INFINITY
    } else if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else if a < b {
        a
    } else {
        b
    }
}

/// `label_replace` and `label_join`. The label values they build are
/// charged to `held` before they are built: a value can be longer than
/// its sources (`$1$1`, a long separator), so nesting them can double
/// the labels' size at each level.
fn relabel(
    name: &str,
    mut args: Vec<Value>,
    limits: &QueryConfig,
    held: &Held<'_>,
) -> EvalResult<Value> {
    Ok(match name {
        "label_replace" => {
            let dst = string(&args[1], name)?;
            let repl = string(&args[2], name)?;
            let src = string(&args[3], name)?;
            let re = string(&args[4], name)?;
            let v = vector(args.remove(0), name)?;
            // Each `$` reference expands to at most the whole source value.
            let refs = repl.matches('$').count();
            let bytes = v.iter().fold(0usize, |acc, s| {
                let value = s.labels.value(&src).len();
                acc.saturating_add(s.labels.weight())
                    .saturating_add(repl.len())
                    .saturating_add(refs.saturating_mul(value))
            });
            held.charge("label_replace()", v.len(), 0, bytes)?;
            Value::Vector(label_replace(v, &dst, &repl, &src, &re, limits)?)
        }
        "label_join" => {
            let dst = string(&args[1], name)?;
            let sep = string(&args[2], name)?;
            let srcs = args[3..]
                .iter()
                .map(|a| string(a, name))
                .collect::<EvalResult<Vec<_>>>()?;
            let v = vector(args.remove(0), name)?;
            let seps = sep.len().saturating_mul(srcs.len().saturating_sub(1));
            let bytes = v.iter().fold(0usize, |acc, s| {
                let joined = srcs.iter().map(|n| s.labels.value(n).len()).sum::<usize>();
                acc.saturating_add(s.labels.weight())
                    .saturating_add(joined)
                    .saturating_add(seps)
            });
            held.charge("label_join()", v.len(), 0, bytes)?;
            Value::Vector(label_join(v, &dst, &sep, &srcs)?)
        }
        other => return Err(bad(format!("unknown function {other}()"))),
    })
}

/// `sort` and `sort_desc` by value (NaN last), `sort_by_label(_desc)` by
/// the named labels; effective for instant queries.
fn order(name: &str, mut v: Vec<Series>, args: &[Value]) -> EvalResult<Vec<Series>> {
    let val = |s: &Series| s.values.first().copied().flatten().unwrap_or(f64::NAN);
    match name {
        "sort" | "sort_desc" => {
            let desc = name == "sort_desc";
            v.sort_by(|a, b| {
                let (x, y) = (val(a), val(b));
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if desc => y.total_cmp(&x),
                    _ => x.total_cmp(&y),
                }
            });
        }
        _ => {
            let names = args[1..]
                .iter()
                .map(|a| string(a, name))
                .collect::<EvalResult<Vec<_>>>()?;
            let key = |s: &Series| -> Vec<String> {
                names
                    .iter()
                    .map(|n| s.labels.value(n).to_string())
                    .collect()
            };
            v.sort_by(|a, b| key(a).cmp(&key(b)).then_with(|| a.labels.cmp(&b.labels)));
            if name.ends_with("_desc") {
                v.reverse();
            }
        }
    }
    Ok(v)
}

/// Whether `name` is a valid label name.
fn valid_label(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn label_replace(
    v: Vec<Series>,
    dst: &str,
    repl: &str,
    src: &str,
    re: &str,
    limits: &QueryConfig,
) -> EvalResult<Vec<Series>> {
    if re.len() > limits.max_pattern_bytes {
        return Err(bad(format!(
            "the regular expression in label_replace() is {} bytes; the limit is {} (query.max_pattern_bytes)",
            re.len(),
            limits.max_pattern_bytes
        )));
    }
    let regex = regex::RegexBuilder::new(&format!("^(?:{re})$"))
        .size_limit(limits.max_pattern_compiled_bytes)
        .build()
        .map_err(|_| {
            bad(format!(
                "invalid regular expression in label_replace(): {re}"
            ))
        })?;
    if !valid_label(dst) {
        return Err(bad(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    Ok(v.into_iter()
        .map(|mut s| {
            let value = s.labels.value(src).to_string();
            if let Some(caps) = regex.captures(&value) {
                let mut out = String::new();
                caps.expand(repl, &mut out);
                s.labels.set(dst, &out);
            }
            s
        })
        .collect())
}

fn label_join(v: Vec<Series>, dst: &str, sep: &str, srcs: &[String]) -> EvalResult<Vec<Series>> {
    if let Some(bad_src) = srcs.iter().find(|s| !valid_label(s)) {
        return Err(bad(format!(
            "invalid source label name in label_join(): {bad_src}"
        )));
    }
    if !valid_label(dst) {
        return Err(bad(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    Ok(v.into_iter()
        .map(|mut s| {
            let joined: Vec<&str> = srcs.iter().map(|n| s.labels.value(n)).collect();
            let joined = joined.join(sep);
            s.labels.set(dst, &joined);
            s
        })
        .collect())
}

#[cfg(test)]
#[path = "instant_fns_tests.rs"]
mod tests;
