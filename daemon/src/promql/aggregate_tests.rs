use super::*;

/// The operator with no memory limit but the default points limit.
fn aggregate(
    op: AggOp,
    grouping: &Grouping,
    param: &Param,
    series: Vec<Series>,
    n: usize,
) -> EvalResult<Vec<Series>> {
    super::aggregate(op, grouping, param, series, n, &Held::unlimited(10_000_000))
}

fn series(source: &str, extra: &[(&str, &str)], values: &[Option<f64>]) -> Series {
    let mut labels: Labels = [
        ("__name__".to_string(), "m".to_string()),
        ("instance".to_string(), source.to_string()),
    ]
    .into_iter()
    .collect();
    for (k, v) in extra {
        labels.set(k, v);
    }
    Series {
        labels,
        values: values.to_vec(),
    }
}

fn input() -> Vec<Series> {
    vec![
        series("a", &[("mode", "idle")], &[Some(1.0), None, Some(3.0)]),
        series("b", &[("mode", "idle")], &[Some(5.0), Some(2.0), None]),
        series("c", &[("mode", "user")], &[Some(2.0), Some(8.0), None]),
    ]
}

fn all(op: AggOp) -> Vec<Option<f64>> {
    let out = aggregate(
        op,
        &Grouping::By(vec![]),
        &Param::Number(vec![0.5; 3]),
        input(),
        3,
    )
    .unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].labels.is_empty());
    out[0].values.clone()
}

#[test]
fn aggregations_at_each_time() {
    assert_eq!(all(AggOp::Sum), [Some(8.0), Some(10.0), Some(3.0)]);
    assert_eq!(all(AggOp::Avg), [Some(8.0 / 3.0), Some(5.0), Some(3.0)]);
    assert_eq!(all(AggOp::Min), [Some(1.0), Some(2.0), Some(3.0)]);
    assert_eq!(all(AggOp::Max), [Some(5.0), Some(8.0), Some(3.0)]);
    assert_eq!(all(AggOp::Count), [Some(3.0), Some(2.0), Some(1.0)]);
    assert_eq!(all(AggOp::Group), [Some(1.0), Some(1.0), Some(1.0)]);
    assert_eq!(all(AggOp::Quantile), [Some(2.0), Some(5.0), Some(3.0)]);
    let var = all(AggOp::Stdvar);
    assert!((var[0].unwrap() - 26.0 / 9.0).abs() < 1e-12);
    assert_eq!(var[2], Some(0.0));
    assert_eq!(all(AggOp::Stddev)[1], Some(3.0));
}

#[test]
fn grouping_by_and_without() {
    let by = aggregate(
        AggOp::Sum,
        &Grouping::By(vec!["mode".into()]),
        &Param::None,
        input(),
        3,
    )
    .unwrap();
    let got: Vec<(String, Vec<Option<f64>>)> = by
        .iter()
        .map(|s| (s.labels.value("mode").to_string(), s.values.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("idle".into(), vec![Some(6.0), Some(2.0), Some(3.0)]),
            ("user".into(), vec![Some(2.0), Some(8.0), None]),
        ]
    );
    let without = aggregate(
        AggOp::Max,
        &Grouping::Without(vec!["instance".into()]),
        &Param::None,
        input(),
        3,
    )
    .unwrap();
    assert_eq!(without.len(), 2);
    assert_eq!(
        without[0].labels.get("__name__"),
        None,
        "without drops the name"
    );
    assert_eq!(without[0].labels.get("mode"), Some("idle"));
}

#[test]
fn topk_and_bottomk_choose_at_each_time() {
    let top = aggregate(
        AggOp::Topk,
        &Grouping::By(vec![]),
        &Param::Number(vec![1.0; 3]),
        input(),
        3,
    )
    .unwrap();
    let got: Vec<(&str, Vec<Option<f64>>)> = top
        .iter()
        .map(|s| (s.labels.value("instance"), s.values.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("c", vec![None, Some(8.0), None]),
            ("b", vec![Some(5.0), None, None]),
            ("a", vec![None, None, Some(3.0)]),
        ]
    );
    assert_eq!(
        top[0].labels.get("__name__"),
        Some("m"),
        "topk keeps the labels"
    );
    let bottom = aggregate(
        AggOp::Bottomk,
        &Grouping::By(vec![]),
        &Param::Number(vec![2.0; 3]),
        input(),
        3,
    )
    .unwrap();
    assert_eq!(bottom.len(), 3);
    let none = aggregate(
        AggOp::Topk,
        &Grouping::By(vec![]),
        &Param::Number(vec![0.0; 3]),
        input(),
        3,
    )
    .unwrap();
    assert!(none.is_empty());
    assert!(aggregate(
        AggOp::Topk,
        &Grouping::By(vec![]),
        &Param::Number(vec![f64::NAN; 3]),
        input(),
        3
    )
    .is_err());
}

#[test]
fn count_values_counts_each_value() {
    let v = vec![
        series("a", &[], &[Some(1.0)]),
        series("b", &[], &[Some(1.0)]),
        series("c", &[], &[Some(2.5)]),
    ];
    let out = aggregate(
        AggOp::CountValues,
        &Grouping::By(vec![]),
        &Param::Label("v".into()),
        v,
        1,
    )
    .unwrap();
    let got: Vec<(&str, Option<f64>)> = out
        .iter()
        .map(|s| (s.labels.value("v"), s.values[0]))
        .collect();
    assert_eq!(got, vec![("1", Some(2.0)), ("2.5", Some(1.0))]);
    assert_eq!(format_value(1e21), "1000000000000000000000");
    assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
}

#[test]
fn count_values_over_changing_values_is_charged_before_it_is_made() {
    // Two members whose value changes at every one of 100 times: 200
    // series (a value and time each) of 100 slots, 20,000 points.
    let values = |k: f64| (0..100).map(|i| Some(k + i as f64)).collect::<Vec<_>>();
    let v = || {
        vec![
            series("a", &[], &values(0.5)),
            series("b", &[], &values(1_000.5)),
        ]
    };
    let by = Grouping::By(vec![]);
    let label = Param::Label("v".into());
    let e = super::aggregate(
        AggOp::CountValues,
        &by,
        &label,
        v(),
        100,
        &Held::unlimited(19_999),
    )
    .unwrap_err();
    assert!(e.to_string().contains("query.max_total_points"), "{e}");
    let out = super::aggregate(
        AggOp::CountValues,
        &by,
        &label,
        v(),
        100,
        &Held::unlimited(20_000),
    )
    .unwrap();
    assert_eq!(out.len(), 200);
    assert!(out.iter().all(|s| s.values.iter().flatten().count() == 1));
    // A steady value makes one series whatever the range.
    let steady = vec![series("a", &[], &[Some(3.0); 100])];
    let out = super::aggregate(
        AggOp::CountValues,
        &by,
        &label,
        steady,
        100,
        &Held::unlimited(100),
    )
    .unwrap();
    assert_eq!(out.len(), 1);
}

#[test]
fn topk_with_a_huge_k_holds_no_more_than_its_input() {
    let out = aggregate(
        AggOp::Topk,
        &Grouping::By(vec![]),
        &Param::Number(vec![1e18; 3]),
        input(),
        3,
    )
    .unwrap();
    assert_eq!(out.len(), 3);
}
