use super::*;

/// The function with the default limits and no memory limit.
fn call(
    name: &str,
    args: Vec<Value>,
    times: &[i64],
    absent: Labels,
    limits: &QueryConfig,
) -> EvalResult<Value> {
    super::call(
        name,
        args,
        times,
        absent,
        limits,
        &Held::unlimited(10_000_000),
    )
}

fn series(pairs: &[(&str, &str)], values: &[Option<f64>]) -> Series {
    Series {
        labels: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        values: values.to_vec(),
    }
}

fn run(name: &str, args: Vec<Value>, times: &[i64]) -> Value {
    call(name, args, times, Labels::empty(), &QueryConfig::default()).unwrap()
}

fn vec_of(v: Value) -> Vec<Series> {
    match v {
        Value::Vector(v) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn element_wise_functions_drop_the_name() {
    let x = series(&[("__name__", "m"), ("a", "1")], &[Some(-2.5), None]);
    let out = vec_of(run("abs", vec![Value::Vector(vec![x.clone()])], &[0, 1]));
    assert_eq!(out[0].values, vec![Some(2.5), None]);
    assert_eq!(out[0].labels.get("__name__"), None);
    let out = vec_of(run("round", vec![Value::Vector(vec![x.clone()])], &[0, 1]));
    assert_eq!(out[0].values[0], Some(-2.0), "ties round up");
    let out = vec_of(run(
        "round",
        vec![
            Value::Vector(vec![x.clone()]),
            Value::Scalar(vec![0.2, 0.2]),
        ],
        &[0, 1],
    ));
    assert!((out[0].values[0].unwrap() + 2.4).abs() < 1e-12);
    let out = vec_of(run(
        "clamp",
        vec![
            Value::Vector(vec![x.clone()]),
            Value::Scalar(vec![-1.0, -1.0]),
            Value::Scalar(vec![1.0, 1.0]),
        ],
        &[0, 1],
    ));
    assert_eq!(out[0].values[0], Some(-1.0));
    // clamp with max < min answers nothing.
    let out = vec_of(run(
        "clamp",
        vec![
            Value::Vector(vec![x.clone()]),
            Value::Scalar(vec![1.0, 1.0]),
            Value::Scalar(vec![-1.0, -1.0]),
        ],
        &[0, 1],
    ));
    assert!(out.is_empty());
    let out = vec_of(run("sgn", vec![Value::Vector(vec![x])], &[0, 1]));
    assert_eq!(out[0].values[0], Some(-1.0));
}

#[test]
fn time_and_dates() {
    // 2024-02-29T13:45:00Z
    let t = 1_709_214_300_000;
    let Value::Scalar(s) = run("time", vec![], &[t]) else {
        panic!()
    };
    assert_eq!(s, vec![t as f64 / 1000.0]);
    for (f, want) in [
        ("year", 2024.0),
        ("month", 2.0),
        ("day_of_month", 29.0),
        ("day_of_week", 4.0),
        ("day_of_year", 60.0),
        ("hour", 13.0),
        ("minute", 45.0),
        ("days_in_month", 29.0),
    ] {
        let out = vec_of(run(f, vec![], &[t]));
        assert_eq!(out[0].values, vec![Some(want)], "{f}");
        let arg = series(&[("a", "1")], &[Some(t as f64 / 1000.0)]);
        let out = vec_of(run(f, vec![Value::Vector(vec![arg])], &[0]));
        assert_eq!(out[0].values, vec![Some(want)], "{f} of a vector");
    }
}

#[test]
fn conversions_and_ordering() {
    let one = series(&[("a", "1")], &[Some(3.0), Some(1.0)]);
    let two = series(&[("a", "2")], &[None, Some(2.0)]);
    let Value::Scalar(s) = run(
        "scalar",
        vec![Value::Vector(vec![one.clone(), two.clone()])],
        &[0, 1],
    ) else {
        panic!()
    };
    assert_eq!(s[0], 3.0);
    assert!(s[1].is_nan(), "two series: NaN");
    let out = vec_of(run("vector", vec![Value::Scalar(vec![4.0])], &[0]));
    assert!(out[0].labels.is_empty());
    let a = series(&[("a", "1")], &[Some(3.0)]);
    let b = series(&[("a", "2")], &[Some(f64::NAN)]);
    let c = series(&[("a", "3")], &[Some(1.0)]);
    let sorted = vec_of(run(
        "sort",
        vec![Value::Vector(vec![a.clone(), b.clone(), c.clone()])],
        &[0],
    ));
    let order: Vec<&str> = sorted.iter().map(|s| s.labels.value("a")).collect();
    assert_eq!(order, vec!["3", "1", "2"]);
    let sorted = vec_of(run("sort_desc", vec![Value::Vector(vec![a, b, c])], &[0]));
    let order: Vec<&str> = sorted.iter().map(|s| s.labels.value("a")).collect();
    assert_eq!(order, vec!["1", "3", "2"]);
}

#[test]
fn labels_are_rewritten_as_prometheus_does() {
    let x = series(
        &[("__name__", "up"), ("instance", "host-1:9100")],
        &[Some(1.0)],
    );
    let out = vec_of(run(
        "label_replace",
        vec![
            Value::Vector(vec![x.clone()]),
            Value::String("host".into()),
            Value::String("$1".into()),
            Value::String("instance".into()),
            Value::String("(.*):.*".into()),
        ],
        &[0],
    ));
    assert_eq!(out[0].labels.get("host"), Some("host-1"));
    assert_eq!(
        out[0].labels.get("__name__"),
        Some("up"),
        "label_replace keeps the name"
    );
    // No match: unchanged.
    let out = vec_of(run(
        "label_replace",
        vec![
            Value::Vector(vec![x.clone()]),
            Value::String("host".into()),
            Value::String("$1".into()),
            Value::String("instance".into()),
            Value::String("nomatch".into()),
        ],
        &[0],
    ));
    assert_eq!(out[0].labels.get("host"), None);
    let out = vec_of(run(
        "label_join",
        vec![
            Value::Vector(vec![x.clone()]),
            Value::String("both".into()),
            Value::String("/".into()),
            Value::String("__name__".into()),
            Value::String("instance".into()),
        ],
        &[0],
    ));
    assert_eq!(out[0].labels.get("both"), Some("up/host-1:9100"));
    let bad = call(
        "label_replace",
        vec![
            Value::Vector(vec![x]),
            Value::String("1bad".into()),
            Value::String("".into()),
            Value::String("a".into()),
            Value::String(".*".into()),
        ],
        &[0],
        Labels::empty(),
        &QueryConfig::default(),
    );
    assert!(bad.is_err());
}

#[test]
fn absent_answers_where_nothing_is() {
    let labels: Labels = [("job".to_string(), "x".to_string())].into_iter().collect();
    let v = series(&[("a", "1")], &[Some(1.0), None]);
    let out = call(
        "absent",
        vec![Value::Vector(vec![v])],
        &[0, 1],
        labels.clone(),
        &QueryConfig::default(),
    )
    .unwrap();
    let out = vec_of(out);
    assert_eq!(out[0].values, vec![None, Some(1.0)]);
    assert_eq!(out[0].labels, labels);
    assert!(is_instant_fn("label_join") && is_instant_fn("sqrt") && !is_instant_fn("rate"));
}

#[test]
fn clamp_of_nan_is_nan_as_in_prometheus() {
    let x = series(&[("__name__", "m")], &[Some(f64::NAN), Some(-0.0)]);
    let nan = |name: &str, bounds: Vec<Value>| {
        let mut args = vec![Value::Vector(vec![x.clone()])];
        args.extend(bounds);
        vec_of(run(name, args, &[0, 1])).remove(0).values
    };
    let s = |v: f64| Value::Scalar(vec![v, v]);
    for (name, bounds) in [
        ("clamp", vec![s(0.0), s(1.0)]),
        ("clamp_min", vec![s(0.0)]),
        ("clamp_max", vec![s(1.0)]),
    ] {
        let out = nan(name, bounds);
        assert!(out[0].is_some_and(f64::is_nan), "{name}: {out:?}");
    }
    // Go's Max and Min: an infinite bound wins over NaN, +0 over -0.
    assert_eq!(
        nan("clamp_min", vec![s(f64::INFINITY)])[0],
        Some(f64::INFINITY)
    );
    let zero = nan("clamp_min", vec![s(0.0)])[1].unwrap();
    assert!(zero == 0.0 && zero.is_sign_positive());
    // A NaN bound answers NaN.
    assert!(nan("clamp_max", vec![s(f64::NAN)])[1].is_some_and(f64::is_nan));
}

#[test]
fn label_values_built_are_charged_before_they_are_built() {
    let long = "x".repeat(1 << 20);
    let x = series(&[("a", long.as_str())], &[Some(1.0)]);
    let held = Held::new(None, 1_000, 0, 4 << 20);
    let args = |repl: &str| {
        vec![
            Value::Vector(vec![x.clone()]),
            Value::String("b".into()),
            Value::String(repl.into()),
            Value::String("a".into()),
            Value::String("(.*)".into()),
        ]
    };
    let limits = QueryConfig::default();
    // `$1` eight times: 8 MiB of label from a 1 MiB one.
    let e = super::call(
        "label_replace",
        args("$1$1$1$1$1$1$1$1"),
        &[0],
        Labels::empty(),
        &limits,
        &held,
    )
    .unwrap_err();
    assert!(e.to_string().contains("query.read_budget_bytes"), "{e}");
    let held = Held::new(None, 1_000, 0, 4 << 20);
    let out = super::call(
        "label_replace",
        args("$1"),
        &[0],
        Labels::empty(),
        &limits,
        &held,
    );
    assert_eq!(vec_of(out.unwrap())[0].labels.value("b").len(), 1 << 20);
    let join = vec![
        Value::Vector(vec![x.clone()]),
        Value::String("b".into()),
        Value::String(",".into()),
        Value::String("a".into()),
        Value::String("a".into()),
        Value::String("a".into()),
        Value::String("a".into()),
    ];
    let e = super::call("label_join", join, &[0], Labels::empty(), &limits, &held).unwrap_err();
    assert!(e.to_string().contains("query.read_budget_bytes"), "{e}");
}
