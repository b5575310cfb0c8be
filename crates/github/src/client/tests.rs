//! The client's header handling, and that it never shows its token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::UNIX_EPOCH;

use super::*;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

#[test]
fn rate_limits_say_how_long_to_wait() {
    let now = UNIX_EPOCH + Duration::from_secs(1_000);
    let wait = |h: &[(&'static str, &str)], body: &str| rate_limit_wait(&headers(h), body, now).map(|(d, _)| d);
    assert_eq!(wait(&[("retry-after", "3")], ""), Some(Duration::from_secs(3)));
    let primary = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1030")];
    assert_eq!(wait(&primary, ""), Some(Duration::from_secs(30)));
    let past = [("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "10")];
    assert_eq!(wait(&past, ""), Some(Duration::from_secs(1)), "a reset in the past: a second");
    let secondary = r#"{"message":"You have exceeded a secondary rate limit. Please wait."}"#;
    assert_eq!(wait(&[], secondary), Some(SECONDARY_WAIT));
    assert_eq!(wait(&[("x-ratelimit-remaining", "12")], r#"{"message":"Resource not accessible"}"#), None);
}

#[test]
fn the_next_page_comes_from_the_link_header() {
    let h = headers(&[(
        "link",
        r#"<https://api.github.com/repos/o/r/issues/1/comments?per_page=100&page=2>; rel="next", <https://api.github.com/repos/o/r/issues/1/comments?per_page=100&page=5>; rel="last""#,
    )]);
    assert_eq!(next_link(&h).unwrap(), "https://api.github.com/repos/o/r/issues/1/comments?per_page=100&page=2");
    let last = headers(&[("link", r#"<https://a/x?page=1>; rel="prev", <https://a/x?page=1>; rel="first""#)]);
    assert_eq!(next_link(&last), None);
    assert_eq!(next_page("https://a/x?per_page=100").unwrap(), "https://a/x?per_page=100&page=2");
    assert_eq!(next_page("https://a/x?per_page=100&page=2").unwrap(), "https://a/x?per_page=100&page=3");
}

#[test]
fn the_client_never_shows_its_token() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "ghp_verysecret\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut settings = GithubSettings::resolve(Default::default(), |p: &str| PathBuf::from(p), |_| true).unwrap();
    settings.token = clawboard_core::secret::SecretSource::file(&file, "github.token_file");
    settings.repository = Some(Repository { owner: "o".into(), name: "r".into() });
    let mut c = Client::new(&settings, PathBuf::from("/nonexistent")).unwrap();
    c.begin().unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("ghp_verysecret") && shown.contains("***"), "{shown}");
    let e = Error::Unauthorized { message: "Bad credentials".into() }.to_string();
    assert_eq!(e, "GitHub refused the token (401 Bad credentials): check github.token_env / github.token_file");
}
