use super::*;
use crate::promql::value::EvalError;
use crate::query::QueryConfig;

fn p(q: &str) -> Plan {
    plan(q, &QueryConfig::default(), 1_000_000, 2_000_000).unwrap()
}

#[test]
fn ranges_round_to_the_nearest_minute() {
    let r = |s: i64| round_range_ms(s * 1000) / 1000;
    assert_eq!(r(90), 120);
    assert_eq!(r(75), 60);
    assert_eq!(r(30), 60);
    assert_eq!(r(1), 60);
    assert_eq!(r(60), 60);
    assert_eq!(r(149), 120);
    assert_eq!(r(150), 180);
    assert_eq!(r(3600), 3600);
    let plan = p("rate(x[90s])");
    let Node::Call { args, .. } = &plan.root else {
        panic!()
    };
    assert!(matches!(
        args[0],
        Node::Matrix {
            range_ms: 120_000,
            ..
        }
    ));
}

#[test]
fn modifiers_are_settled() {
    let plan = p("x offset 5m @ end()");
    assert!(matches!(
        plan.root,
        Node::Invariant(ref n) if matches!(**n, Node::Selector {
            mods: Mods { offset_ms: 300_000, at_ms: Some(2_000_000) }, ..
        })
    ));
    let plan = p("x @ 100 offset -1m");
    let Node::Invariant(n) = &plan.root else {
        panic!("{:?}", plan.root)
    };
    assert!(matches!(
        **n,
        Node::Selector {
            mods: Mods {
                offset_ms: -60_000,
                at_ms: Some(100_000)
            },
            ..
        }
    ));
    let plan = p("max_over_time(rate(x[5m])[1h:])");
    let Node::Call { args, .. } = &plan.root else {
        panic!()
    };
    assert!(matches!(
        args[0],
        Node::Subquery {
            range_ms: 3_600_000,
            step_ms: 60_000,
            ..
        }
    ));
}

#[test]
fn invariant_subtrees_are_marked() {
    // sum(x @ 100) is invariant as a whole; time() is not.
    let plan = p("sum(x @ 100) + time()");
    let Node::Binary { lhs, rhs, .. } = &plan.root else {
        panic!()
    };
    assert!(matches!(**lhs, Node::Invariant(_)));
    assert!(matches!(**rhs, Node::Call { func: "time", .. }));
    assert!(!matches!(p("rate(x[5m])").root, Node::Invariant(_)));
    assert!(matches!(p("rate(x[5m] @ 100)").root, Node::Invariant(_)));
    assert!(!matches!(p("timestamp(x @ 100)").root, Node::Invariant(_)));
}

#[test]
fn selectors_are_numbered_and_know_their_context() {
    let plan = p("sum(rate(a[5m])) / b");
    assert_eq!(plan.selectors.len(), 2);
    assert!(plan.selectors[0].fan_out);
    assert!(!plan.selectors[1].fan_out);
    assert_eq!(plan.aggregates, 1);
    let plan = p("x{a=\"1\" or b=\"2\"}");
    assert_eq!(plan.selectors[0].alternatives.len(), 2);
}

#[test]
fn matching_and_types() {
    let plan = p("a / on(x) group_left(y) b");
    let Node::Binary { matching, .. } = &plan.root else {
        panic!()
    };
    assert_eq!(
        matching.as_ref().unwrap(),
        &Matching {
            card: Card::ManyToOne,
            on: true,
            labels: vec!["x".into()],
            include: vec!["y".into()],
        }
    );
    assert_eq!(p("1 + 2").root.ty(), Ty::Scalar);
    assert!(matches!(p("2 * 3").root, Node::Number(v) if v == 6.0));
    assert_eq!(p("a > bool 1").root.ty(), Ty::Vector);
    assert_eq!(p("x[5m]").root.ty(), Ty::Matrix);
    let plan = p("a and b");
    let Node::Binary { matching, .. } = &plan.root else {
        panic!()
    };
    assert_eq!(matching.as_ref().unwrap().card, Card::ManyToMany);
}

#[test]
fn invalid_queries_are_bad_data() {
    for q in [
        "",
        "sum(",
        "rate(x)",
        "x[5m] + 1",
        "1 and 2",
        "limitk(2, x)",
        "first_over_time(x[5m])",
    ] {
        let e = plan(q, &QueryConfig::default(), 0, 0).unwrap_err();
        assert!(matches!(e, EvalError::BadData(_)), "{q}: {e}");
    }
}
