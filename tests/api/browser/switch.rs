//! The tab takes another identity (Use): nothing of the last one's page shows to the next.
//! Until the service says what a new token may do, the page below the header stays blank (no
//! overview to a tenant's token, no start to a read-only one, for even one frame), the last
//! identity's rows never show in the new one's table, and a service that does not say at all
//! shows the page anyway, 5 s later.

use serde_json::{json, Value};

use super::listing::ended_jobs;
use super::{screenshot_path, use_identity, DESKTOP};
use crate::helpers::webdriver::{Browser, WAIT};
use crate::helpers::{settings, spawn_app_with, store, test_config, unique, Backend};
use catalog_jobs::config::tokens::hash_token;
use catalog_jobs::config::Config;
use catalog_jobs::jobs::TenantId;

/// Every frame the page paints from now on, what it shows: the overview, the starts, the
/// tenants of the job rows shown, and whether a whoami was under way. `window.held` (set by
/// the test) is how a whoami is answered: after `held` frames, or never (`Infinity`).
const RECORD_FRAMES: &str = "
  const shown = (e) => Boolean(e) && e.checkVisibility({ visibilityProperty: true });
  const plain = window.fetch;
  window.asking = 0;
  window.held = 0;
  window.fetch = async (url, init) => {
    if (String(url).includes('/catalog/whoami')) {
      window.asking += 1;
      for (let n = 0; n < window.held; n += 1) await new Promise((r) => requestAnimationFrame(r));
      window.asking -= 1;
    }
    return plain(url, init);
  };
  window.frames_ = [];
  // Use pressed: the frames before it are forgotten (in the same task: no frame comes between).
  window.addEventListener('submit', () => { window.frames_ = []; }, { capture: true });
  const frame = () => {
    const rows = [...document.querySelectorAll('[data-testid=job-row]')].filter(shown);
    window.frames_.push({ asking: window.asking > 0, overview: shown(document.getElementById('overview')),
      starts: shown(document.getElementById('start-card')),
      tenants: [...new Set(rows.map((r) => r.children[2].textContent))] });
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);";

/// Types `tenant` and `token` in the header (no field's change fires: only Use takes them),
/// the service answering its whoami after `held` frames (a number, or `Infinity`), and
/// presses Use (the frames painted before it are forgotten).
async fn switch_to(b: &Browser, tenant: &str, token: &str, held: &str) {
    b.exec(
        &format!(
            "document.getElementById('tenant').value = arguments[0];
             document.getElementById('token').value = arguments[1];
             window.held = {held};"
        ),
        json!([tenant, token]),
    )
    .await;
    b.click("#use").await;
}

/// Waits until the page shows `tenant`'s jobs (every row of `rows` and only that tenant's),
/// the overview shown or not as `overview` says and the starts as `starts` says; answers
/// every frame painted since Use.
async fn settled(b: &Browser, tenant: &str, rows: usize, overview: bool, starts: bool) -> Value {
    b.wait_for(
        &format!("{tenant}'s page: its {rows} rows, the overview {overview}, the starts {starts}"),
        "const f = window.frames_[window.frames_.length - 1];
         return f && !f.asking && document.body.dataset.scope === 'known'
           && f.overview === arguments[2] && f.starts === arguments[3]
           && f.tenants.length === 1 && f.tenants[0] === arguments[0]
           && document.querySelectorAll('[data-testid=job-row]').length === arguments[1];",
        json!([tenant, rows, overview, starts]),
    )
    .await;
    b.exec("return window.frames_;", json!([])).await
}

/// No frame of `frames` showed what `forbidden` names (`overview`, `starts`) or a row of a
/// tenant other than `tenant`; some frames were painted while the whoami was under way.
fn never_shown(frames: &Value, tenant: &str, forbidden: &[&str], on: &str) {
    let frames = frames.as_array().expect("frames");
    let asking = frames.iter().filter(|f| f["asking"] == true).count();
    assert!(
        asking > 0,
        "{on}: frames painted while the whoami was under way"
    );
    for (n, f) in frames.iter().enumerate() {
        for part in forbidden {
            assert_eq!(f[part], false, "{on}: frame {n} shows the {part}: {f}");
        }
        let others: Vec<&Value> = f["tenants"]
            .as_array()
            .expect("tenants")
            .iter()
            .filter(|t| *t != tenant)
            .collect();
        assert!(others.is_empty(), "{on}: frame {n} shows {others:?}'s rows");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_token_taken_shows_nothing_of_the_last_ones_page_until_its_scope_is_known() {
    let base = unique("switch");
    let tenant = TenantId::parse(&format!("{base}-mine")).expect("a valid tenant");
    let other = TenantId::parse(&format!("{base}-other")).expect("a valid tenant");
    let (ops, shop, viewer) = (
        format!("{base}-ops"),
        format!("{base}-shop"),
        format!("{base}-viewer"),
    );
    let config = Config {
        api_tokens: Some(format!(
            "* ops {};{tenant} shop {};read:{tenant} viewer {}",
            hash_token(&ops),
            hash_token(&shop),
            hash_token(&viewer)
        )),
        ..test_config()
    };
    let s = store(Backend::Redis, settings());
    let app = spawn_app_with(config, s.clone()).await;
    const ROWS: usize = 3;
    ended_jobs(&*s, &[tenant.clone(), other.clone()], ROWS).await;
    let b = Browser::start(DESKTOP.0, DESKTOP.1).await;
    b.goto(&app.url("/admin")).await;
    use_identity(&b, "", &ops).await;
    b.wait_for(
        "the operator's page: the overview read, both tenants' rows",
        "const o = document.getElementById('overview');
         return !o.hidden && Boolean(o.dataset.readAt)
           && document.querySelectorAll('[data-testid=job-row]').length === arguments[0];",
        json!([2 * ROWS]),
    )
    .await;
    b.exec(RECORD_FRAMES, json!([])).await;
    let mine = tenant.to_string();

    // Held for a few frames: what the page paints meanwhile is what a slower answer shows.
    switch_to(&b, &mine, &shop, "3").await;
    let frames = settled(&b, &mine, ROWS, false, true).await;
    never_shown(
        &frames,
        &mine,
        &["overview"],
        "the operator's page to a tenant's token",
    );
    b.screenshot(&screenshot_path("admin-switch-tenant")).await;

    switch_to(&b, &mine, &viewer, "3").await;
    let frames = settled(&b, &mine, ROWS, false, false).await;
    never_shown(
        &frames,
        &mine,
        &["overview", "starts"],
        "a tenant's page to its read-only token",
    );

    // A service that never says: the page shows anyway, every control in it, and follows.
    switch_to(&b, &mine, &shop, "Infinity").await;
    b.wait_until(
        "the page shown anyway, its table read, the whoami still unanswered",
        "const f = window.frames_[window.frames_.length - 1];
         return f && f.asking && f.starts && document.body.dataset.scope === 'known'
           && document.querySelectorAll('[data-testid=job-row]').length === arguments[0];",
        json!([ROWS]),
        WAIT,
    )
    .await;
}
