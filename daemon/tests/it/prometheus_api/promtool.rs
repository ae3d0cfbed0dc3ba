//! `promtool` (Debian's `prometheus` package) reads the same values
//! through its own client as the native API does.

use std::time::Duration;

use tally_testkit::client::now_ms;

use super::fixture::{parse_matrix, shown, Fixture};
use super::{close, window, SOURCES};

/// Runs promtool with `args`, bounded in time; its stdout.
pub(super) async fn promtool(args: &[String]) -> String {
    let found = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "promtool is not on PATH: run scripts/setup-test-deps (it installs Debian's `prometheus` package)"
    );
    let mut cmd = tokio::process::Command::new("promtool");
    cmd.args(args).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("promtool {args:?} did not finish within 30 s"))
        .expect("running promtool");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

pub(super) async fn check_promtool(fx: &Fixture) {
    let server = format!("{}/prometheus", fx.d.http_url());
    check_promtool_range(fx, &server).await;
    check_promtool_instant(fx, &server).await;
    check_promtool_series_and_label_values(fx, &server).await;
}

fn s(x: &str) -> String {
    x.to_string()
}

/// Range: promtool's JSON output against the native API and the model.
async fn check_promtool_range(fx: &Fixture, server: &str) {
    let (start, end) = fx.span();
    let q = "avg_over_time(cpu_load[1m])";
    let out = promtool(&[
        s("query"),
        s("range"),
        s("-o"),
        s("json"),
        format!("--start={start}"),
        format!("--end={end}"),
        s("--step=1m"),
        s(server),
        s(q),
    ])
    .await;
    let got = parse_matrix(
        &serde_json::from_str(&out).unwrap_or_else(|e| panic!("promtool output ({e}): {out}")),
        "values",
    );
    assert_eq!(got.len(), SOURCES.len(), "{out}");
    for src in SOURCES {
        let native = fx.native(src, "cpu.load", start - 60, end, "1m").await;
        let pts = &got[&shown(src, "cpu.load")];
        assert_eq!(pts.len(), native.len(), "{src}: {pts:?} vs {native:?}");
        for (t, v) in pts {
            let n = native[&(*t as i64 - 60)]["avg"].as_f64().expect("avg");
            assert!(close(*v, n), "{src} at {t}: promtool {v}, native {n}");
            let m = window(fx.series(src, "cpu.load"), "avg_over_time", *t as i64, 60);
            assert_eq!(m, Some(*v));
        }
    }
}

/// Instant: the default (PromQL text) output, one line per series.
async fn check_promtool_instant(fx: &Fixture, server: &str) {
    let t = fx.t0 + 6 * 60;
    let out = promtool(&[
        s("query"),
        s("instant"),
        format!("--time={t}"),
        s(server),
        s("sum by (instance) (increase(requests[5m]))"),
    ])
    .await;
    let mut lines = 0;
    for src in SOURCES {
        let want = window(fx.series(src, "requests"), "increase", t, 300).expect("data");
        let line = out
            .lines()
            .find(|l| l.contains(&format!("instance=\"{src}\"")))
            .unwrap_or_else(|| panic!("no {src} in {out}"));
        // `{instance="web-1"} => 42 @[1700000000]`
        let v: f64 = line
            .split("=>")
            .nth(1)
            .and_then(|r| r.split('@').next())
            .map(str::trim)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("cannot read {line:?}"));
        assert_eq!(v, want, "{line}");
        lines += 1;
    }
    assert_eq!(lines, SOURCES.len());
}

async fn check_promtool_series_and_label_values(fx: &Fixture, server: &str) {
    let out = promtool(&[
        s("query"),
        s("series"),
        s("--match=temp"),
        format!("--start={}", fx.t0 - 600),
        format!("--end={}", now_ms() / 1000),
        s(server),
    ])
    .await;
    for src in SOURCES {
        assert!(
            out.lines().any(|l| l.contains("__name__=\"temp\"")
                && l.contains(&format!("instance=\"{src}\""))
                && !l.contains("tally_metric")),
            "{src} missing from promtool's series: {out}"
        );
    }
    assert_eq!(
        out.lines().filter(|l| !l.trim().is_empty()).count(),
        SOURCES.len(),
        "{out}"
    );
    let out = promtool(&[s("query"), s("labels"), s(server), s("instance")]).await;
    let listed: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(listed, SOURCES, "{out}");
    let out = promtool(&[s("query"), s("labels"), s(server), s("__name__")]).await;
    let listed: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        listed,
        ["bytes_out", "cpu_load", "requests", "temp"],
        "{out}"
    );
}
