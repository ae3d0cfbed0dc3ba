use super::*;
use crate::model::{SeriesMinutes, Slot};

fn rollups() -> Rollups {
    Rollups::new(RollupConfig {
        all: true,
        prefix_delimiter: "-".into(),
        groups: vec![GroupRule {
            name: "edge".into(),
            sources: vec!["web-0*".into(), "cdn*".into()],
        }],
        max_series: 100,
        agent_groups: true,
        max_agent_groups: 3,
    })
    .unwrap()
}

fn member(source: &str, metric: &str, kind: SampleKind, m: &[(i64, f64)]) -> SeriesMinutes {
    SeriesMinutes {
        catalog: crate::model::CatalogDue::Unknown,
        series: Arc::new(SeriesId::new(source, metric)),
        kind,
        minutes: m.iter().map(|(t, v)| (*t, Slot::of(*v))).collect(),
    }
}

#[test]
fn membership() {
    let r = rollups();
    let names = |s: &str| -> Vec<String> { r.groups_of(s).iter().map(|g| g.to_string()).collect() };
    assert_eq!(names("web-01"), ["all", "web", "edge"]);
    assert_eq!(names("web-11"), ["all", "web"]);
    assert_eq!(names("cdn7"), ["all", "edge"]);
    // A named group owns its name: no prefix membership in it.
    assert_eq!(names("edge-1"), ["all"]);
    assert!(r.member_matcher("").is_none() && r.member_matcher("a b").is_none());
    for known in ["web", "edge", "all"] {
        assert!(r.member_matcher(known).is_some(), "{known}");
    }
    assert!(r.member_matcher("we-b").is_none());
    let web = r.member_matcher("web").unwrap();
    assert!(web.matches("web-9") && !web.matches("webby-9"));
    assert_eq!(
        r.group_for(&NameMatcher::parse_list("web-0*,cdn*").unwrap()),
        Some("edge")
    );
    assert_eq!(r.group_for(&NameMatcher::any()), Some("all"));
    assert_eq!(r.group_for(&NameMatcher::exact("web-1")), None);
}

#[test]
fn rollup_slots_are_the_merge_of_member_slots() {
    let r = rollups();
    let out = r.expand(vec![
        member("web-01", "cpu", SampleKind::Gauge, &[(10, 1.0), (11, 5.0)]),
        member("web-11", "cpu", SampleKind::Gauge, &[(10, 3.0)]),
        member("db-1", "cpu", SampleKind::Gauge, &[(10, -2.0)]),
    ]);
    let get = |src: &str| {
        out.iter()
            .find(|s| *s.series == Rollups::series(src, "cpu"))
            .map(|s| s.minutes.to_vec())
    };
    let mut m10 = Slot::of(1.0);
    m10.merge(&Slot::of(3.0));
    m10.merge(&Slot::of(-2.0));
    assert_eq!(get("all").unwrap(), vec![(10, m10), (11, Slot::of(5.0))]);
    let mut web10 = Slot::of(1.0);
    web10.merge(&Slot::of(3.0));
    assert_eq!(get("web").unwrap(), vec![(10, web10), (11, Slot::of(5.0))]);
    assert_eq!(
        get("edge").unwrap(),
        vec![(10, Slot::of(1.0)), (11, Slot::of(5.0))]
    );
    assert_eq!(get("db").unwrap(), vec![(10, Slot::of(-2.0))]);
    assert!(get("cdn").is_none());
}

#[test]
fn kind_conflicts_and_the_series_bound_leave_members_out() {
    let r = Rollups::new(RollupConfig {
        all: true,
        max_series: 1,
        ..RollupConfig::none()
    })
    .unwrap();
    let out = r.expand(vec![
        member("a", "x", SampleKind::CumulativeCounter, &[(1, 2.0)]),
        member("b", "x", SampleKind::Gauge, &[(1, 7.0)]),
        member("a", "y", SampleKind::Gauge, &[(1, 7.0)]),
    ]);
    let rolled: Vec<_> = out
        .iter()
        .filter(|s| Rollups::is_rollup_source(&s.series.source))
        .collect();
    assert_eq!(rolled.len(), 1);
    assert_eq!(rolled[0].kind, SampleKind::DeltaCounter);
    assert_eq!(rolled[0].minutes.to_vec(), vec![(1, Slot::of(2.0))]);
}

proptest::proptest! {
    /// Every rollup series is the slot-wise merge of exactly its
    /// members' slots (the members of its group with its metric and label
    /// set), whatever the batch looks like.
    #[test]
    fn rollups_equal_the_merge_of_their_members(
        members in proptest::collection::vec(
            (0usize..5, 0usize..2, 0usize..3, proptest::collection::vec((0i64..4, -50i32..50), 1..4)),
            0..12,
        ),
        declarations in proptest::collection::vec(
            (0usize..5, proptest::collection::vec(0usize..3, 0..3)),
            0..6,
        ),
    ) {
        const SOURCES: [&str; 5] = ["web-01", "web-11", "db-1", "cdn7", "solo"];
        const METRICS: [&str; 2] = ["cpu", "mem"];
        const LABELS: [&str; 3] = ["", r#"mode="a""#, r#"mode="b""#];
        // Declared names overlap a prefix group and a named one.
        const DECLARED: [&str; 3] = ["blue", "web", "edge"];
        let r = rollups();
        // Each source's declared groups: the latest non-empty list.
        let mut declared: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (s, gs) in &declarations {
            let names: Vec<String> = gs.iter().map(|g| DECLARED[*g].to_string()).collect();
            r.declare(SOURCES[*s], &names, 0);
            if !names.is_empty() {
                let mut names: Vec<&str> = gs.iter().map(|g| DECLARED[*g]).collect();
                names.dedup();
                declared.insert(SOURCES[*s], names);
            }
        }
        // Membership as the configuration alone gives it, plus the declarations.
        let configured = rollups();
        let groups_of = |source: &str| -> Vec<String> {
            let mut g: Vec<String> =
                configured.groups_of(source).iter().map(|g| g.to_string()).collect();
            for d in declared.get(source).into_iter().flatten() {
                if !g.iter().any(|x| x == d) {
                    g.push(d.to_string());
                }
            }
            g
        };
        let drained: Vec<SeriesMinutes> = members
            .iter()
            .map(|(s, m, l, mins)| {
                let mut by_minute: BTreeMap<i64, Slot> = BTreeMap::new();
                for (t, v) in mins {
                    by_minute.entry(*t).or_default().add_value(*v as f64);
                }
                SeriesMinutes {
                    catalog: crate::model::CatalogDue::Unknown,
                    series: Arc::new(SeriesId::with_labels(
                        SOURCES[*s],
                        METRICS[*m],
                        Labels::from_encoded(LABELS[*l]).unwrap_or_default(),
                    )),
                    kind: SampleKind::Gauge,
                    minutes: by_minute.into_iter().collect(),
                }
            })
            .collect();
        let out = r.expand(drained.clone());
        proptest::prop_assert_eq!(&out[..drained.len()], &drained[..], "members pass through");
        let mut want: BTreeMap<SeriesId, BTreeMap<i64, Slot>> = BTreeMap::new();
        for m in &drained {
            for g in groups_of(&m.series.source) {
                let id = SeriesId::with_labels(
                    &Rollups::source(&g),
                    &m.series.metric,
                    m.series.labels.clone(),
                );
                let slots = want.entry(id).or_default();
                for (t, s) in &m.minutes {
                    slots.entry(*t).or_default().merge(s);
                }
            }
        }
        let got: BTreeMap<SeriesId, BTreeMap<i64, Slot>> = out[drained.len()..]
            .iter()
            .map(|s| ((*s.series).clone(), s.minutes.iter().copied().collect()))
            .collect();
        proptest::prop_assert_eq!(got, want);
    }
}

#[test]
fn agents_declare_groups_within_bounds() {
    let r = rollups();
    let names = |s: &str| -> Vec<String> { r.groups_of(s).iter().map(|g| g.to_string()).collect() };
    let list = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    r.declare("db-1", &list(&["blue", "edge", "blue"]), 100);
    assert_eq!(names("db-1"), ["all", "db", "blue", "edge"]);
    // An empty list keeps the membership.
    r.declare::<&str>("db-1", &[], 200);
    assert_eq!(names("db-1"), ["all", "db", "blue", "edge"]);
    // A new list replaces it.
    r.declare("db-1", &list(&["green"]), 200);
    assert_eq!(names("db-1"), ["all", "db", "green"]);
    r.declare("web-01", &list(&["green", "red"]), 300);
    // The cap is 3 distinct names: "blue" left with db-1, so "amber" fits; "pink" does not.
    r.declare("cdn7", &list(&["amber", "pink"]), 300);
    assert_eq!(names("cdn7"), ["all", "edge", "amber"]);

    // Members: the configured rule (here the prefix rule, which every
    // name has) and the declarations together.
    let green = r.members("green").unwrap();
    assert!(green
        .rule
        .is_some_and(|m| m.matches("green-1") && !m.matches("db-1")));
    assert_eq!(green.declared, ["db-1", "web-01"]);
    let edge = r.members("edge").unwrap();
    assert!(edge.rule.is_some() && edge.declared.is_empty());
    assert!(r.members("pink").unwrap().declared.is_empty());
    assert!(r.members("blue").unwrap().declared.is_empty());
    let listed: Vec<(String, &str, usize)> = r
        .listed()
        .into_iter()
        .map(|g| (g.name, g.rule, g.declared_members))
        .collect();
    assert_eq!(
        listed,
        [
            ("all".to_string(), "all", 0),
            ("edge".to_string(), "globs", 0),
            ("amber".to_string(), "agent", 1),
            ("green".to_string(), "agent", 2),
            ("red".to_string(), "agent", 1),
        ]
    );

    // Rollups for declared groups.
    let out = r.expand(vec![
        member("db-1", "cpu", SampleKind::Gauge, &[(10, 1.0)]),
        member("web-01", "cpu", SampleKind::Gauge, &[(10, 4.0)]),
    ]);
    let green_cpu = out
        .iter()
        .find(|s| *s.series == Rollups::series("green", "cpu"))
        .unwrap();
    let mut want = Slot::of(1.0);
    want.merge(&Slot::of(4.0));
    assert_eq!(green_cpu.minutes.to_vec(), vec![(10, want)]);

    // Sources silent since before the cutoff are forgotten, with their
    // groups once no member is left.
    assert_eq!(r.forget_idle(250), 1);
    assert_eq!(r.members("green").unwrap().declared, ["web-01"]);
    assert_eq!(names("db-1"), ["all", "db"]);
    assert_eq!(r.forget_idle(1_000), 2);
    assert!(r.listed().iter().all(|g| g.rule != "agent"));
}

#[test]
fn declarations_are_checked_and_can_be_turned_off() {
    let list = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    assert!(Rollups::check_declaration(&list(&["blue", "eu-west-1", "a.b:c"])).is_ok());
    for bad in [&["bad name"][..], &[""], &["@all"], &["x/y"]] {
        let e = Rollups::check_declaration(&list(bad)).unwrap_err();
        assert!(e.contains("group name"), "{e}");
    }
    let nine: Vec<String> = (0..9).map(|i| format!("g{i}")).collect();
    let e = Rollups::check_declaration(&nine).unwrap_err();
    assert!(e.contains("at most 8"), "{e}");

    let off = Rollups::new(RollupConfig {
        all: true,
        max_series: 10,
        ..RollupConfig::none()
    })
    .unwrap();
    off.declare("a", &list(&["blue"]), 0);
    assert_eq!(&*off.groups_of("a"), &[Arc::<str>::from("all")]);
    // Without a prefix rule, a name no one declared is no group.
    assert!(off.members("blue").is_none());
    let on = Rollups::new(RollupConfig {
        agent_groups: true,
        max_agent_groups: 10,
        max_series: 10,
        ..RollupConfig::none()
    })
    .unwrap();
    on.declare("a", &list(&["blue"]), 0);
    let blue = on.members("blue").unwrap();
    assert!(blue.rule.is_none() && blue.declared == ["a"]);
}

#[test]
fn bad_groups_are_refused() {
    let bad = |name: &str, globs: &[&str]| {
        Rollups::new(RollupConfig {
            groups: vec![GroupRule {
                name: name.into(),
                sources: globs.iter().map(|s| s.to_string()).collect(),
            }],
            ..RollupConfig::none()
        })
        .is_err()
    };
    assert!(bad("a b", &["x*"]));
    assert!(bad("ok", &[]));
    assert!(bad("all", &["x*"]));
    assert!(!bad("ok", &["x*"]));
}

#[test]
fn a_member_that_would_overflow_the_rollup_is_left_out() {
    let r = rollups();
    let members: Vec<SeriesMinutes> = (0..4)
        .map(|i| member(&format!("db-{i}"), "big", SampleKind::Gauge, &[(10, 6e299)]))
        .collect();
    let out = r.expand(members);
    let all = out
        .iter()
        .find(|s| *s.series == Rollups::series("all", "big"))
        .unwrap();
    // 6e299 + 6e299 is beyond 1e300: only the first member is merged.
    assert_eq!(all.minutes[0].1, Slot::of(6e299));
}

/// Rollup series exist only at drain time, so the aggregator cannot
/// pre-allocate their next documents: the rollups do, by the same rule,
/// once each, and only for rollup series active in the current period.
#[test]
fn rollup_series_are_preallocated_once_each() {
    use crate::model::{Tier, DAY_S, HOUR_S};
    let r = rollups();
    let day = 20_000 * DAY_S;
    let minute = |s: i64| s / 60;
    // Active at 23:10 (web-01 is in `all`, `web` and `edge`), and an older
    // series of another metric whose last data is in an earlier hour.
    r.expand(vec![member(
        "web-01",
        "cpu",
        SampleKind::Gauge,
        &[(minute(day + 23 * HOUR_S + 600), 1.0)],
    )]);
    r.expand(vec![member(
        "db-1",
        "mem",
        SampleKind::Gauge,
        &[(minute(day + 22 * HOUR_S), 1.0)],
    )]);

    // Before the final windows nothing is due.
    assert!(PreallocWindow::at(day + 23 * HOUR_S + 1200, 600, 600).is_none());
    // At the very end of the day, with 10-minute windows, everything due is.
    let w = PreallocWindow::at(day + DAY_S - 1, 600, 600).unwrap();
    let mut due = r.due_preallocations(&w, 1000);
    due.sort();
    let cpu_groups = ["@all", "@edge", "@web"];
    let mut want: Vec<DocKey> = cpu_groups
        .iter()
        .flat_map(|g| {
            [(Tier::Hour, day + DAY_S), (Tier::Day, day + DAY_S)].map(|(tier, start)| DocKey {
                series: SeriesId::new(g, "cpu"),
                tier,
                period_start: start,
            })
        })
        .collect();
    // db-1's rollups were active today, not this hour: their next day only.
    for g in ["@all", "@db"] {
        want.push(DocKey {
            series: SeriesId::new(g, "mem"),
            tier: Tier::Day,
            period_start: day + DAY_S,
        });
    }
    want.sort();
    assert_eq!(due, want);
    assert!(r.due_preallocations(&w, 1000).is_empty(), "asked once");
    // The limit holds.
    let r = rollups();
    r.expand(vec![member(
        "web-01",
        "cpu",
        SampleKind::Gauge,
        &[(minute(day + 23 * HOUR_S + 600), 1.0)],
    )]);
    assert!(r.due_preallocations(&w, 2).len() <= 3);
}
