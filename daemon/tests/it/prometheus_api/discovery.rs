//! Series, label and label-value discovery must list exactly what was
//! pushed.

use serde_json::Value;
use tally_testkit::client::now_ms;

use super::fixture::{labels, Fixture, Labels};
use super::{METRICS, SOURCES};

/// series, labels, label values, metadata and buildinfo list exactly what
/// was pushed (never the rollup series).
pub(super) async fn check_discovery(fx: &Fixture) {
    let strings = |v: Value| -> Vec<String> {
        v.as_array()
            .expect("an array")
            .iter()
            .map(|s| s.as_str().expect("a string").to_string())
            .collect()
    };
    let sources: Vec<String> = SOURCES.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        strings(fx.ok("label/instance/values", &[]).await),
        sources,
        "no rollup sources"
    );
    let mut prom: Vec<String> = METRICS.iter().map(|m| m.1.to_string()).collect();
    prom.sort();
    assert_eq!(strings(fx.ok("label/__name__/values", &[]).await), prom);
    // Only where the Prometheus name differs.
    let tally: Vec<String> = METRICS
        .iter()
        .filter(|m| m.0 != m.1)
        .map(|m| m.0.to_string())
        .collect();
    assert_eq!(
        strings(fx.ok("label/tally_metric/values", &[]).await),
        tally
    );
    assert!(strings(fx.ok("label/job/values", &[]).await).is_empty());
    assert_eq!(
        strings(
            fx.ok(
                "label/instance/values",
                &[("match[]", "requests{instance=~\"web.*\"}".into())]
            )
            .await
        ),
        ["web-1", "web-2"]
    );
    assert_eq!(
        strings(fx.ok("labels", &[]).await),
        ["__name__", "instance", "tally_metric"]
    );
    assert_eq!(
        strings(fx.ok("labels", &[("match[]", "temp".into())]).await),
        ["__name__", "instance"]
    );
    assert!(strings(fx.ok("labels", &[("match[]", "nothing_here".into())]).await).is_empty());

    let (start, end) = (fx.t0 - 600, now_ms() / 1000);
    let listed = |v: Value| -> Vec<Labels> {
        v.as_array()
            .expect("series")
            .iter()
            .map(|s| {
                s.as_object()
                    .expect("labels")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("value").to_string()))
                    .collect()
            })
            .collect()
    };
    let got = listed(
        fx.ok(
            "series",
            &[
                ("match[]", "cpu_load".into()),
                ("start", start.to_string()),
                ("end", end.to_string()),
            ],
        )
        .await,
    );
    let want: Vec<Labels> = SOURCES
        .iter()
        .map(|s| {
            labels(&[
                ("__name__", "cpu_load"),
                ("instance", s),
                ("tally_metric", "cpu.load"),
            ])
        })
        .collect();
    assert_eq!(got, want);
    let got = listed(
        fx.ok(
            "series",
            &[
                ("match[]", "{instance=\"db-1\"}".into()),
                ("match[]", "temp{tally_metric=\"\"}".into()),
            ],
        )
        .await,
    );
    assert_eq!(got.len(), 4 + 2, "{got:?}");
    let (status, body, _) = fx.call("series", &[], false).await;
    assert_eq!(
        (status, body["errorType"].as_str()),
        (400, Some("bad_data"))
    );

    let meta = fx.ok("metadata", &[]).await;
    assert_eq!(meta["cpu_load"][0]["type"], "gauge", "{meta}");
    assert_eq!(meta["requests"][0]["type"], "counter", "{meta}");
    assert_eq!(meta["bytes_out"][0]["type"], "counter", "{meta}");
    let info = fx.ok("status/buildinfo", &[]).await;
    assert_eq!(info["version"], "2.42.0");
    assert!(info["tallyVersion"].as_str().is_some_and(|v| !v.is_empty()));
}
