use proptest::prelude::*;

use super::*;

fn set(pairs: &[(&str, &str)]) -> Result<Labels, LabelError> {
    Labels::from_pairs(pairs.iter().copied(), 16)
}

#[test]
fn encoding_is_sorted_and_escaped() {
    let l = set(&[("mode", "idle"), ("cpu", "0")]).unwrap();
    assert_eq!(l.as_str(), r#"cpu="0",mode="idle""#);
    let l = set(&[("path", "a\"b\\c\nd")]).unwrap();
    assert_eq!(l.as_str(), r#"path="a\"b\\c\nd""#);
    assert_eq!(l.get("path").unwrap(), "a\"b\\c\nd");
    assert_eq!(l.to_string(), r#"{path="a\"b\\c\nd"}"#);
}

#[test]
fn empty_values_are_absent_and_no_labels_is_the_empty_string() {
    let l = set(&[("mode", ""), ("cpu", "")]).unwrap();
    assert!(l.is_empty());
    assert_eq!(l, Labels::none());
    assert_eq!(l.to_string(), "");
    assert_eq!(metric_key("m", l.as_str()), "m");
}

#[test]
fn bad_sets_are_refused_with_their_reason() {
    assert_eq!(set(&[("", "x")]), Err(LabelError::EmptyName));
    assert!(matches!(
        set(&[("1cpu", "x")]),
        Err(LabelError::BadName { at: 0, .. })
    ));
    assert!(matches!(
        set(&[("cpu-id", "x")]),
        Err(LabelError::BadName { ch: '-', at: 3, .. })
    ));
    assert!(matches!(
        set(&[("çpu", "x")]),
        Err(LabelError::BadName { ch: 'ç', .. })
    ));
    assert_eq!(
        set(&[("__name__", "x")]),
        Err(LabelError::Reserved("__name__".into()))
    );
    assert_eq!(
        set(&[("source", "x")]),
        Err(LabelError::Reserved("source".into()))
    );
    assert_eq!(
        set(&[("tally_metric", "x")]),
        Err(LabelError::Reserved("tally_metric".into()))
    );
    assert!(set(&[("tally_metrics", "x")]).is_ok());
    assert_eq!(
        set(&[("a", "x"), ("a", "y")]),
        Err(LabelError::Duplicate("a".into()))
    );
    let long = "v".repeat(MAX_LABEL_VALUE_LEN + 1);
    assert!(matches!(
        set(&[("a", &long)]),
        Err(LabelError::ValueTooLong { len: 257, .. })
    ));
    let name = "n".repeat(MAX_LABEL_NAME_LEN + 1);
    assert!(matches!(
        set(&[(&name, "x")]),
        Err(LabelError::NameTooLong { len: 129, .. })
    ));
    let many: Vec<(String, String)> = (0..17).map(|i| (format!("l{i}"), "x".into())).collect();
    let many = many.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    assert_eq!(
        Labels::from_pairs(many, 16),
        Err(LabelError::TooMany { count: 17, max: 16 })
    );
    assert!(set(&[("_ok", "x"), ("A9_", "y")]).is_ok());
}

#[test]
fn metric_keys_split_back() {
    let l = set(&[("a", "}{,\"")]).unwrap();
    let key = metric_key("m.x", l.as_str());
    assert_eq!(split_metric_key(&key), Some(("m.x", l.as_str())));
    assert_eq!(split_metric_key("m"), Some(("m", "")));
    assert_eq!(split_metric_key("m{a=\"x\""), None);
    assert_eq!(Labels::from_encoded(l.as_str()), Some(l));
    // Not canonical: unsorted, unescaped, or a bad name.
    assert_eq!(Labels::from_encoded(r#"b="1",a="2""#), None);
    assert_eq!(
        Labels::from_encoded(r#"a="1""#).map(|l| l.to_string()),
        Some(r#"{a="1"}"#.into())
    );
    assert_eq!(Labels::from_encoded(r#"a="x"y""#), None);
    assert_eq!(Labels::from_encoded(r#"a-b="1""#), None);
}

#[test]
fn retain_keeps_the_chosen_labels_in_canonical_form() {
    let l = set(&[("cpu", "0"), ("mode", "id\"le"), ("host", "h")]).unwrap();
    let kept = l.retain(|n| n != "host");
    assert_eq!(kept, set(&[("mode", "id\"le"), ("cpu", "0")]).unwrap());
    assert!(l.retain(|_| false).is_empty());
}

fn label_name() -> impl Strategy<Value = String> {
    "[a-c_][a-c0-9_]{0,3}".prop_filter("reserved", |n| !n.starts_with("__"))
}

fn label_value() -> impl Strategy<Value = String> {
    // Separators, quotes, escapes, braces and non-ASCII are the cases an
    // encoding could confuse.
    proptest::collection::vec(
        prop_oneof![
            Just(","),
            Just("="),
            Just("\""),
            Just("\\"),
            Just("\n"),
            Just("{"),
            Just("}"),
            Just("a"),
            Just("b"),
            Just("é"),
            Just("n"),
        ],
        1..6,
    )
    .prop_map(|parts| parts.concat())
}

fn label_set() -> impl Strategy<Value = std::collections::BTreeMap<String, String>> {
    proptest::collection::btree_map(label_name(), label_value(), 0..5)
}

proptest! {
    #[test]
    fn distinct_sets_never_share_an_encoding(a in label_set(), b in label_set()) {
        let ea = Labels::from_pairs(a.iter().map(|(n, v)| (n.as_str(), v.as_str())), 16).unwrap();
        let eb = Labels::from_pairs(b.iter().map(|(n, v)| (n.as_str(), v.as_str())), 16).unwrap();
        prop_assert_eq!(a == b, ea == eb);
        // Nor a series key: the metric key splits back to the same set.
        let ka = metric_key("m", ea.as_str());
        let kb = metric_key("m", eb.as_str());
        prop_assert_eq!(a == b, ka == kb);
    }

    #[test]
    fn order_in_the_request_does_not_matter(
        a in label_set(),
        seed in any::<u64>(),
    ) {
        let mut shuffled: Vec<(&str, &str)> = a.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        // A deterministic permutation from the seed.
        let len = shuffled.len().max(1);
        shuffled.rotate_left((seed as usize) % len);
        if seed & 1 == 1 {
            shuffled.reverse();
        }
        let sorted = Labels::from_pairs(a.iter().map(|(n, v)| (n.as_str(), v.as_str())), 16).unwrap();
        let other = Labels::from_pairs(shuffled, 16).unwrap();
        prop_assert_eq!(&sorted, &other);
    }

    #[test]
    fn encodings_decode_to_their_pairs(a in label_set()) {
        let l = Labels::from_pairs(a.iter().map(|(n, v)| (n.as_str(), v.as_str())), 16).unwrap();
        let back: Vec<(String, String)> = l.pairs().into_iter().map(|(n, v)| (n.to_string(), v.into_owned())).collect();
        let want: Vec<(String, String)> = a.into_iter().collect();
        prop_assert_eq!(back, want);
        prop_assert_eq!(Labels::from_encoded(l.as_str()), Some(l.clone()));
    }
}
