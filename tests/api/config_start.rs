//! Settings that are mistakes, with the built binary: a URL where `SYNC_ALLOWED_HOSTS` wants a
//! host, `API_TOKENS` or `API_TOKENS_FILE` set but blank stop start-up naming the setting and
//! what to give instead; a `FEEDS_DIR` that is not a directory is a start-up warning.

use std::time::Duration;

use crate::config_redis::refused_start_up;
use crate::helpers::Service;

/// An environment, and the words start-up's refusal of it must say.
type Mistake = (
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

#[test]
fn a_url_for_a_host_and_a_blank_token_setting_stop_start_up_saying_what_to_give() {
    let cases: [Mistake; 4] = [
        (
            &[("SYNC_ALLOWED_HOSTS", "http://feeds.example.com/x")],
            &[
                "SYNC_ALLOWED_HOSTS",
                "is a URL: give its host alone (`feeds.example.com`)",
            ],
        ),
        (
            &[("API_TOKENS", "")],
            &["API_TOKENS is set but blank", "unset it"],
        ),
        (&[("API_TOKENS", "  ")], &["API_TOKENS is set but blank"]),
        (
            &[("API_TOKENS_FILE", "")],
            &["API_TOKENS_FILE", "a value is required"],
        ),
    ];
    for (env, words) in cases {
        let log = refused_start_up(env);
        for w in words {
            assert!(log.contains(w), "{env:?}: no {w:?} in:\n{log}");
        }
    }
}

#[tokio::test]
async fn a_feeds_dir_that_is_not_a_directory_is_a_start_up_warning() {
    let svc = Service::embedded()
        .env("FEEDS_DIR", "/nonexistent/feeds")
        .start()
        .await;
    let log = svc
        .wait_for_log("FEEDS_DIR is not a directory", Duration::from_secs(10))
        .await;
    assert!(log.contains("/nonexistent/feeds"), "{log}");
    assert_eq!(svc.readyz().await.status(), 200, "a warning, not a refusal");
}
