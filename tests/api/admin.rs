//! The admin page over plain HTTP: where it is, the headers that keep it safe, and a check
//! of its script's source that no data can ever be turned into markup. (What it does in a
//! browser is in `browser.rs`.)

use catalog_jobs::api::admin::ASSETS;
use reqwest::header;

use crate::helpers::{spawn_app, Backend};

const PAGE: &str = include_str!("../../src/api/admin/index.html");

#[tokio::test]
async fn the_root_redirects_to_the_admin_page() {
    let app = spawn_app(Backend::Memory).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client.get(app.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[header::LOCATION], "/admin");
}

#[tokio::test]
async fn the_page_its_style_and_its_scripts_are_served_with_a_strict_policy_and_no_sniffing() {
    let app = spawn_app(Backend::Memory).await;
    let files = ASSETS.map(|(name, _, media)| (format!("/admin/{name}"), media));
    for (path, media) in [("/admin".to_owned(), "text/html")]
        .into_iter()
        .chain(files)
    {
        let media = media.split(';').next().unwrap_or_default();
        let path = path.as_str();
        let r = app.get(path).await;
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert!(
            h[header::CONTENT_TYPE].to_str().unwrap().starts_with(media),
            "{path}"
        );
        let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert!(h.contains_key(header::CACHE_CONTROL), "{path}");
    }
    let page = app.get("/admin").await.text().await.unwrap();
    assert_eq!(page, PAGE, "the embedded page is the one in src/api/admin");
    for missing in ["/admin/nope.js", "/admin/%ff", "/admin/%00"] {
        let r = app.get(missing).await;
        assert_eq!(r.status(), 404, "{missing}: a file the page does not have");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            body["error"], "not_found",
            "{missing}: a JSON error: {body}"
        );
    }
}

#[test]
fn every_module_the_page_imports_is_served() {
    let served: Vec<&str> = ASSETS.iter().map(|(name, _, _)| *name).collect();
    for (name, body, _) in ASSETS {
        for line in body.lines().filter(|l| l.contains(" from './")) {
            let module = line
                .split("from './")
                .nth(1)
                .and_then(|rest| rest.split('\'').next())
                .unwrap_or_default();
            assert!(
                served.contains(&module),
                "{name} imports {module}, which is not served"
            );
        }
    }
}

#[test]
fn the_script_never_builds_markup_from_strings_and_the_page_loads_nothing_from_elsewhere() {
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "EventSource",
        "localStorage",
    ] {
        for (name, body, _) in ASSETS.iter().filter(|(name, _, _)| name.ends_with(".js")) {
            assert!(!body.contains(sink), "{name} uses {sink}");
        }
    }
    for remote in ["http://", "https://", "//cdn"] {
        assert!(!PAGE.contains(remote), "index.html loads {remote}");
    }
    assert!(
        !PAGE.contains("<script>") && !PAGE.contains(" style="),
        "nothing inline: the policy forbids it"
    );
}
