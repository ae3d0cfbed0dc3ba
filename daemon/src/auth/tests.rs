use std::io::Write as _;

use super::tokens::TokenSet;
use super::*;

const INGEST: &str = "ingest-token-0123456789";
const READ: &str = "read-token-0123456789ab";
const ADMIN: &str = "admin-token-0123456789a";

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn tokens_text() -> String {
    format!(
        r#"
[[token]]
name = "web-agents"
role = "ingest"
sources = ["web-*", "cdn-?"]
token = "{INGEST}"

[[token]]
name = "grafana"
role = "read"
sha256 = "{}"

[[token]]
name = "ops"
role = "admin"
token = "{ADMIN}"
"#,
        sha256_hex(READ)
    )
}

fn authenticator(text: &str) -> (Authenticator, tempfile::NamedTempFile) {
    let f = file(text);
    let auth = Authenticator::load(&AuthConfig {
        tokens_file: f.path().to_path_buf(),
    })
    .unwrap();
    (auth, f)
}

fn bearer_of(token: &str) -> Vec<u8> {
    format!("Bearer {token}").into_bytes()
}

#[test]
fn roles_decide_what_a_token_may_do() {
    let (auth, _f) = authenticator(&tokens_text());
    let ok = |token: &str, need| auth.authorize(Some(&bearer_of(token)), need).is_ok();
    assert!(ok(INGEST, Need::Ingest) && !ok(INGEST, Need::Read));
    assert!(ok(READ, Need::Read) && !ok(READ, Need::Ingest));
    assert!(ok(ADMIN, Need::Read) && ok(ADMIN, Need::Ingest));

    let denied = auth
        .authorize(Some(&bearer_of(READ)), Need::Ingest)
        .unwrap_err();
    assert!(denied.is_forbidden());
    assert_eq!(
        denied.to_string(),
        "token \"grafana\" has role read; this needs a token with role ingest or admin"
    );
}

#[test]
fn missing_malformed_and_unknown_tokens_are_unauthenticated() {
    let (auth, _f) = authenticator(&tokens_text());
    let deny = |header: Option<&[u8]>| auth.authorize(header, Need::Read).unwrap_err();
    assert_eq!(deny(None), Denied::Missing);
    assert_eq!(deny(Some(b"Basic abc")), Denied::Malformed);
    assert_eq!(deny(Some(b"Bearer ")), Denied::Malformed);
    assert_eq!(deny(Some(b"Bearer")), Denied::Malformed);
    assert_eq!(deny(Some(b"Bearerx abcdefgh")), Denied::Malformed);
    assert_eq!(
        deny(Some(&bearer_of("nope-nope-nope-nope"))),
        Denied::Unknown
    );
    // One character off is as unknown as anything else.
    let mut near = READ.to_string();
    near.pop();
    assert_eq!(deny(Some(&bearer_of(&near))), Denied::Unknown);
    for d in [Denied::Missing, Denied::Malformed, Denied::Unknown] {
        assert!(!d.is_forbidden());
    }
    // The scheme is case-insensitive and surrounding blanks are ignored.
    assert!(auth
        .authorize(Some(format!("bEaReR  {READ} ").as_bytes()), Need::Read)
        .is_ok());
}

#[test]
fn off_means_everything_is_allowed() {
    let auth = Authenticator::load(&AuthConfig::default()).unwrap();
    assert!(!auth.enabled());
    let grant = auth.authorize(None, Need::Ingest).unwrap();
    assert!(!grant.limits_sources());
    assert_eq!(grant.source_refusal("anything"), None);
    assert!(auth.reload().unwrap().is_empty());
}

#[test]
fn ingest_tokens_push_only_their_sources() {
    let (auth, _f) = authenticator(&tokens_text());
    let grant = auth
        .authorize(Some(&bearer_of(INGEST)), Need::Ingest)
        .unwrap();
    assert!(grant.limits_sources());
    for allowed in ["web-1", "web-", "cdn-a"] {
        assert_eq!(grant.source_refusal(allowed), None, "{allowed}");
    }
    let why = grant.source_refusal("db-1").unwrap();
    assert_eq!(
        why,
        "token \"web-agents\" may push only sources matching web-*, cdn-?"
    );
    assert!(grant.source_refusal("cdn-ab").is_some());
    assert!(grant.source_refusal("xweb-1").is_some());

    let admin = auth
        .authorize(Some(&bearer_of(ADMIN)), Need::Ingest)
        .unwrap();
    assert!(!admin.limits_sources());
}

#[test]
fn reload_rotates_tokens_and_keeps_them_on_a_bad_file() {
    let (auth, f) = authenticator(&tokens_text());
    let new = "rotated-token-0123456789";
    std::fs::write(
        f.path(),
        format!("[[token]]\nname = \"grafana\"\nrole = \"read\"\ntoken = \"{new}\"\n"),
    )
    .unwrap();
    assert_eq!(auth.reload().unwrap(), vec!["grafana".to_string()]);
    assert_eq!(
        auth.authorize(Some(&bearer_of(READ)), Need::Read)
            .unwrap_err(),
        Denied::Unknown
    );
    assert!(auth.authorize(Some(&bearer_of(new)), Need::Read).is_ok());

    std::fs::write(f.path(), "[[token]]\nname = \"x\"\n").unwrap();
    assert!(auth.reload().is_err());
    assert!(auth.authorize(Some(&bearer_of(new)), Need::Read).is_ok());
}

#[test]
fn expired_tokens_are_refused() {
    let text = format!(
        "[[token]]\nname = \"old\"\nrole = \"read\"\ntoken = \"{READ}\"\nexpires = \"2020-01-01T00:00:00Z\"\n\
         [[token]]\nname = \"new\"\nrole = \"read\"\ntoken = \"{ADMIN}\"\nexpires = \"2999-01-01T00:00:00+02:00\"\n"
    );
    let (auth, _f) = authenticator(&text);
    assert_eq!(
        auth.authorize(Some(&bearer_of(READ)), Need::Read)
            .unwrap_err(),
        Denied::Expired { name: "old".into() }
    );
    assert!(auth.authorize(Some(&bearer_of(ADMIN)), Need::Read).is_ok());
}

fn parse_err(text: &str) -> String {
    match TokenSet::parse(text) {
        Ok(_) => panic!("parsed {text}"),
        Err((line, message)) => match line {
            Some(n) => format!("line {n}: {message}"),
            None => message,
        },
    }
}

#[test]
fn bad_files_are_explained_without_quoting_secrets() {
    let secret = "s3cret-s3cret-s3cret";
    let entry = |extra: &str| format!("[[token]]\nname = \"a\"\nrole = \"read\"\n{extra}\n");
    let cases = [
        (entry(""), "exactly one of `token` and `sha256`"),
        (
            entry(&format!("token = \"{secret}\"\nsha256 = \"{}\"", sha256_hex("x"))),
            "exactly one",
        ),
        (entry("token = \"short\""), "16 to 4096 characters"),
        (entry("token = \"has space in the token\""), "may hold only"),
        (entry("sha256 = \"abc\""), "64 hex digits"),
        (entry(&format!("tokn = \"{secret}\"")), "line 4: unknown field `tokn`"),
        (entry("token = 1234567890123456"), "must be a quoted string"),
        (entry(&format!("token = \"{secret}\"\nsources = [\"a\"]")), "limits ingest tokens only"),
        (
            format!("[[token]]\nname = \"a\"\nrole = \"ingest\"\ntoken = \"{secret}\"\n"),
            "needs `sources`",
        ),
        (
            format!("[[token]]\nname = \"a\"\nrole = \"ingest\"\nsources = [\"a,b\"]\ntoken = \"{secret}\"\n"),
            "source glob \"a,b\"",
        ),
        (entry(&format!("token = \"{secret}\"\nexpires = \"tomorrow\"")), "RFC 3339"),
        (entry(&format!("role = \"root\"\ntoken = \"{secret}\"")), "line 4"),
        (String::new(), "defines no [[token]]"),
        (
            format!("{}{}", entry(&format!("token = \"{secret}\"")), entry(&format!("token = \"{secret}x\""))),
            "two tokens are named \"a\"",
        ),
        (
            format!(
                "{}[[token]]\nname = \"b\"\nrole = \"admin\"\nsha256 = \"{}\"\n",
                entry(&format!("token = \"{secret}\"")),
                sha256_hex(secret)
            ),
            "tokens \"a\" and \"b\" have the same secret",
        ),
        (
            "[[token]]\nname = \"bad name\"\nrole = \"read\"\n".to_string(),
            "token name \"bad name\"",
        ),
    ];
    for (text, expected) in cases {
        let err = parse_err(&text);
        assert!(
            err.contains(expected),
            "{text}\n=> {err}\n(expected {expected})"
        );
        assert!(!err.contains("s3cret"), "{err}");
        assert!(!err.contains("1234567890123456"), "{err}");
    }
}

#[test]
fn reading_names_the_file() {
    let err = match Authenticator::load(&AuthConfig {
        tokens_file: "/nonexistent/tokens.toml".into(),
    }) {
        Ok(_) => panic!("loaded a missing file"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("/nonexistent/tokens.toml"), "{err}");
    let (_, f) = authenticator(&tokens_text());
    std::fs::write(f.path(), "[[token]]\nname = 1\n").unwrap();
    let err = match Authenticator::load(&AuthConfig {
        tokens_file: f.path().to_path_buf(),
    }) {
        Ok(_) => panic!("loaded a bad file"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&format!("{} line 2", f.path().display())),
        "{err}"
    );
}

#[test]
fn debug_output_shows_names_only() {
    let set = TokenSet::parse(&tokens_text()).unwrap();
    let token = set.find(INGEST.as_bytes()).unwrap();
    let shown = format!("{token:?}");
    assert!(
        shown.contains("web-agents") && !shown.contains(INGEST),
        "{shown}"
    );
    let grant = Grant { token: Some(token) };
    assert!(!format!("{grant:?}").contains(INGEST));
}
