//! With tokens on: the page loads without one, asks for a read token,
//! says in words that it was refused, and works once given one; the token
//! stays in the tab's sessionStorage only.

use serde_json::json;
use tally_proto::v1 as pb;
use tally_testkit::client::{push_of, series};
use tally_testkit::Daemon;

use super::browser::Browser;
use super::clean_page;
use crate::tallyd;

const INGEST: &str = "web-ingest-token-0123456789";
const READ: &str = "web-read-token-0123456789ab";

fn tokens_toml() -> String {
    format!(
        "[[token]]\nname = \"agents\"\nrole = \"ingest\"\nsources = [\"tok-*\"]\ntoken = \"{INGEST}\"\n\n\
         [[token]]\nname = \"dashboards\"\nrole = \"read\"\ntoken = \"{READ}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_a_read_token_and_shows_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, tokens_toml()).unwrap();
    let d = Daemon::start_async(
        tallyd()
            .flush_interval("200ms")
            .env("TALLYD_AUTH_TOKENS_FILE", tokens.to_str().unwrap()),
    )
    .await;
    let Some(b) = Browser::start(&d.http_url()).await else {
        return;
    };
    let mut ingest = d.ingest_client().await;
    let now = tally_testkit::client::now_ms();
    let mut push = tonic::Request::new(push_of(
        "tok-1",
        vec![series("load", pb::SampleKind::Gauge, &[(now - 1000, 1.0)])],
    ));
    push.metadata_mut()
        .insert("authorization", format!("Bearer {INGEST}").parse().unwrap());
    let resp = ingest.push(push).await.unwrap().into_inner();
    assert_eq!(resp.accepted, 1, "{resp:?}");

    // No token: the prompt opens with the refusal; cancelled, the view
    // says it in words.
    b.open("/?view=fleet").await;
    let why = b
        .wait_js(
            "the token prompt",
            r#"const d = document.getElementById('token-dialog');
               return d.open ? document.getElementById('token-why').textContent : null;"#,
        )
        .await;
    assert!(why.as_str().unwrap().starts_with("Token refused:"), "{why}");
    b.js(r#"const d = document.getElementById('token-dialog');
            d.querySelector('button[value=cancel]').click(); return true;"#)
        .await;
    let shown = b
        .wait_js(
            "the refusal in the fleet view",
            r#"const e = document.querySelector('.fleet .error');
               return e && !e.hidden ? e.textContent : null;"#,
        )
        .await;
    assert!(
        shown.as_str().unwrap().starts_with("Token refused:"),
        "{shown}"
    );
    // What the browser logged is the refused requests, nothing else.
    let errors = b.console_errors().await;
    assert!(!errors.is_empty());
    assert!(
        errors.iter().all(|e| e["message"]
            .as_str()
            .unwrap()
            .contains("401 (Unauthorized)")),
        "{errors:#?}"
    );

    // A read token: the fleet shows the source pushed.
    b.js(r#"document.getElementById('token-button').click(); return true;"#)
        .await;
    b.wait_js(
        "the prompt again",
        "return document.getElementById('token-dialog').open",
    )
    .await;
    b.js(&format!(
        r#"const d = document.getElementById('token-dialog');
           document.getElementById('token-input').value = '{READ}';
           d.querySelector('button[value=use]').click(); return true;"#
    ))
    .await;
    let rows = b
        .wait_js(
            "the fleet with a read token",
            r#"const f = document.querySelector('.fleet');
               if (!f || f.dataset.state !== 'drawn') return null;
               const rows = [...f.querySelectorAll('.rows .row')].map((r) => r.dataset.source);
               return rows.length ? rows : null;"#,
        )
        .await;
    assert_eq!(rows, json!(["tok-1"]));
    // The old view may have been refused once more while the prompt was
    // open; from here on nothing may be.
    let before = b.console_errors().await;
    assert!(
        before.iter().all(|e| e["message"]
            .as_str()
            .unwrap()
            .contains("401 (Unauthorized)")),
        "{before:#?}"
    );
    let kept = b
        .js("return [sessionStorage.getItem('tally.read-token'), localStorage.length, document.cookie]")
        .await;
    assert_eq!(kept, json!([READ, 0, ""]));
    b.open("/?view=daemon").await;
    b.wait_js(
        "the daemon view with a read token",
        r#"const v = document.querySelector('.daemon');
           return v && v.dataset.state === 'drawn';"#,
    )
    .await;
    clean_page(&b, "the views with a read token").await;
    b.close().await;
}
