use super::*;

/// The operator with no memory limit but the default points limit.
fn binary(
    op: BinOp,
    lhs: Value,
    rhs: Value,
    matching: Option<&Matching>,
    return_bool: bool,
) -> EvalResult<Value> {
    super::binary(
        op,
        lhs,
        rhs,
        matching,
        return_bool,
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

fn vector(v: EvalResult<Value>) -> Vec<Series> {
    match v.unwrap() {
        Value::Vector(v) => v,
        other => panic!("{other:?}"),
    }
}

fn on(labels: &[&str], card: Card, include: &[&str]) -> Matching {
    Matching {
        card,
        on: true,
        labels: labels.iter().map(|s| s.to_string()).collect(),
        include: include.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn scalars_and_vectors() {
    assert_eq!(scalar_op(BinOp::Mod, -7.0, 3.0), -1.0);
    assert_eq!(scalar_op(BinOp::Pow, 2.0, 10.0), 1024.0);
    assert_eq!(scalar_op(BinOp::Ge, 1.0, 1.0), 1.0);
    let v = vec![series(
        &[("__name__", "m"), ("a", "1")],
        &[Some(2.0), Some(5.0)],
    )];
    // Arithmetic drops the name; a comparison filters and keeps it.
    let out = vector(binary(
        BinOp::Mul,
        Value::Vector(v.clone()),
        Value::Scalar(vec![3.0, 3.0]),
        None,
        false,
    ));
    assert_eq!(out[0].values, vec![Some(6.0), Some(15.0)]);
    assert_eq!(out[0].labels.get("__name__"), None);
    let out = vector(binary(
        BinOp::Gt,
        Value::Vector(v.clone()),
        Value::Scalar(vec![3.0, 3.0]),
        None,
        false,
    ));
    assert_eq!(out[0].values, vec![None, Some(5.0)]);
    assert_eq!(out[0].labels.get("__name__"), Some("m"));
    // A scalar on the left: the vector's value stays.
    let out = vector(binary(
        BinOp::Lt,
        Value::Scalar(vec![3.0, 3.0]),
        Value::Vector(v.clone()),
        None,
        false,
    ));
    assert_eq!(out[0].values, vec![None, Some(5.0)]);
    let out = vector(binary(
        BinOp::Gt,
        Value::Vector(v),
        Value::Scalar(vec![3.0, 3.0]),
        None,
        true,
    ));
    assert_eq!(out[0].values, vec![Some(0.0), Some(1.0)]);
    assert_eq!(out[0].labels.get("__name__"), None);
}

#[test]
fn one_to_one_matching_ignores_the_name() {
    let avail = vec![
        series(&[("__name__", "avail"), ("i", "a")], &[Some(1.0)]),
        series(&[("__name__", "avail"), ("i", "b")], &[Some(2.0)]),
    ];
    let total = vec![
        series(&[("__name__", "total"), ("i", "a")], &[Some(4.0)]),
        series(&[("__name__", "total"), ("i", "c")], &[Some(8.0)]),
    ];
    let out = vector(binary(
        BinOp::Div,
        Value::Vector(avail.clone()),
        Value::Vector(total.clone()),
        None,
        false,
    ));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].values, vec![Some(0.25)]);
    assert_eq!(out[0].labels.iter().collect::<Vec<_>>(), vec![("i", "a")]);
    // on(...) keeps only the matching labels.
    let withx = vec![series(
        &[("__name__", "x"), ("i", "a"), ("j", "1")],
        &[Some(1.0)],
    )];
    let out = vector(binary(
        BinOp::Add,
        Value::Vector(withx),
        Value::Vector(total),
        Some(&on(&["i"], Card::OneToOne, &[])),
        false,
    ));
    assert_eq!(out[0].labels.iter().collect::<Vec<_>>(), vec![("i", "a")]);
}

#[test]
fn group_left_takes_labels_from_the_one_side() {
    let cpu = vec![
        series(&[("i", "a"), ("mode", "idle")], &[Some(3.0)]),
        series(&[("i", "a"), ("mode", "user")], &[Some(1.0)]),
    ];
    let info = vec![series(
        &[("__name__", "info"), ("i", "a"), ("os", "linux")],
        &[Some(1.0)],
    )];
    let out = vector(binary(
        BinOp::Mul,
        Value::Vector(cpu.clone()),
        Value::Vector(info.clone()),
        Some(&on(&["i"], Card::ManyToOne, &["os"])),
        false,
    ));
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].labels.get("os"), Some("linux"));
    // group_right: the same with sides swapped, values in operator order.
    let out = vector(binary(
        BinOp::Sub,
        Value::Vector(info),
        Value::Vector(cpu.clone()),
        Some(&on(&["i"], Card::OneToMany, &[])),
        false,
    ));
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].values, vec![Some(-2.0)]);
    // One-to-one where the left has two matches: an error.
    let total = vec![series(&[("i", "a")], &[Some(1.0)])];
    let e = binary(
        BinOp::Mul,
        Value::Vector(cpu),
        Value::Vector(total),
        Some(&on(&["i"], Card::OneToOne, &[])),
        false,
    );
    assert!(matches!(
        e,
        Err(super::super::value::EvalError::Execution(_))
    ));
}

#[test]
fn set_operators_at_each_time() {
    let l = vec![
        series(&[("__name__", "l"), ("i", "a")], &[Some(1.0), Some(1.0)]),
        series(&[("__name__", "l"), ("i", "b")], &[Some(2.0), None]),
    ];
    let r = vec![series(&[("__name__", "r"), ("i", "a")], &[None, Some(9.0)])];
    let m = Matching {
        card: Card::ManyToMany,
        on: false,
        labels: vec![],
        include: vec![],
    };
    let and = vector(binary(
        BinOp::And,
        Value::Vector(l.clone()),
        Value::Vector(r.clone()),
        Some(&m),
        false,
    ));
    assert_eq!(and.len(), 1);
    assert_eq!(and[0].values, vec![None, Some(1.0)]);
    let unless = vector(binary(
        BinOp::Unless,
        Value::Vector(l.clone()),
        Value::Vector(r.clone()),
        Some(&m),
        false,
    ));
    assert_eq!(unless.len(), 2);
    assert_eq!(unless[0].values, vec![Some(1.0), None]);
    let or = vector(binary(
        BinOp::Or,
        Value::Vector(l),
        Value::Vector(r),
        Some(&m),
        false,
    ));
    // `r{i=a}` only where no `l{i=a}` is: never.
    assert_eq!(or.len(), 2);
    assert_eq!(labels_text(&or[0].labels), "{__name__=\"l\", i=\"a\"}");
}

#[test]
fn duplicates_on_the_one_side_are_refused_even_unmatched() {
    // Prometheus 2.42 refuses the "one" side's duplicate signatures at any
    // time both sides have series, before looking for matches.
    let l = vec![series(&[("__name__", "l"), ("i", "x")], &[Some(1.0), None])];
    let r = vec![
        series(
            &[("__name__", "r"), ("i", "a"), ("j", "1")],
            &[Some(1.0), Some(1.0)],
        ),
        series(
            &[("__name__", "r"), ("i", "a"), ("j", "2")],
            &[Some(2.0), Some(2.0)],
        ),
    ];
    let e = binary(
        BinOp::Add,
        Value::Vector(l.clone()),
        Value::Vector(r.clone()),
        Some(&on(&["i"], Card::OneToOne, &[])),
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("found duplicate series for the match group {i=\"a\"} on the right hand-side"),
        "{e}"
    );
    // group_right: the left side is the "one".
    let e = binary(
        BinOp::Add,
        Value::Vector(r.clone()),
        Value::Vector(l.clone()),
        Some(&on(&["i"], Card::OneToMany, &[])),
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("left hand-side"), "{e}");
    // Where the other side has nothing, nothing is matched: no error.
    let later = vec![series(&[("__name__", "l"), ("i", "x")], &[None, None])];
    let out = vector(binary(
        BinOp::Add,
        Value::Vector(later),
        Value::Vector(r),
        Some(&on(&["i"], Card::OneToOne, &[])),
        false,
    ));
    assert!(out.is_empty());
}

#[test]
fn atan2_keeps_the_metric_name_of_the_side_whose_labels_it_keeps() {
    let l = vec![series(&[("__name__", "l"), ("i", "a")], &[Some(1.0)])];
    let r = vec![series(&[("__name__", "r"), ("i", "a")], &[Some(1.0)])];
    let out = vector(binary(
        BinOp::Atan2,
        Value::Vector(l.clone()),
        Value::Vector(r.clone()),
        None,
        false,
    ));
    assert_eq!(out[0].labels.get("__name__"), Some("l"));
    assert!((out[0].values[0].unwrap() - std::f64::consts::FRAC_PI_4).abs() < 1e-12);
    let out = vector(binary(
        BinOp::Atan2,
        Value::Vector(l.clone()),
        Value::Vector(r.clone()),
        Some(&on(&["i"], Card::OneToMany, &[])),
        false,
    ));
    assert_eq!(out[0].labels.get("__name__"), Some("r"));
    let out = vector(binary(
        BinOp::Atan2,
        Value::Vector(l),
        Value::Scalar(vec![1.0]),
        None,
        false,
    ));
    assert_eq!(out[0].labels.get("__name__"), Some("l"));
}

#[test]
fn pairs_a_changing_one_side_makes_are_charged_before_they_are_made() {
    // One series on the left; on the right, a different series of the
    // same signature at each of three times: three pairs of three slots.
    let l = vec![series(&[("i", "a"), ("k", "l")], &[Some(1.0); 3])];
    let r: Vec<Series> = (0..3)
        .map(|t| {
            let mut v = vec![None; 3];
            v[t] = Some(t as f64);
            series(&[("i", "a"), ("v", &t.to_string())], &v)
        })
        .collect();
    let m = on(&["i"], Card::ManyToOne, &["v"]);
    let run = |max: u64| {
        super::binary(
            BinOp::Add,
            Value::Vector(l.clone()),
            Value::Vector(r.clone()),
            Some(&m),
            false,
            &Held::unlimited(max),
        )
    };
    let e = run(8).unwrap_err();
    assert!(e.to_string().contains("query.max_total_points"), "{e}");
    assert_eq!(vector(run(9)).len(), 3);
}
