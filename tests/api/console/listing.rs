//! Every tenant's jobs for an operator, on both stores: newest first with the filters
//! (status, kind, tenant, id prefix) and the cursor; a page examines a bounded stretch of the
//! index and goes on with its cursor; the tenant picker by prefix, most recent first, which a
//! removed tenant leaves at once; many jobs read by id in one call (`ids`), a gone job or
//! another tenant's left out; a walk drops the index's entries of gone jobs, never a live one.

use reqwest::StatusCode;
use serde_json::Value;

use crate::both_stores;
use crate::helpers::{
    create, new_job, settings, spawn_app, spawn_app_with, store, tenant, test_config, unique,
    Backend, TestApp,
};
use catalog_jobs::jobs::browse::{Browse, Position, EVERYONE_CAP, EXAMINE_PER_PAGE};
use catalog_jobs::jobs::TenantId;

both_stores!(
    every_tenants_jobs_are_listed_newest_first_filtered_and_paged_by_cursor,
    a_page_examines_a_bounded_stretch_of_the_index_and_goes_on_with_its_cursor,
    the_tenant_picker_lists_recent_tenants_by_prefix_and_a_removed_one_leaves,
    many_jobs_are_read_by_id_in_one_call_and_a_gone_one_is_left_out,
    a_walk_drops_the_entries_of_gone_jobs_from_the_index_and_a_page_after_them_is_full,
);

/// Starts `kind` for `t` and waits for its end; answers the job's id.
async fn ended_job(app: &TestApp, kind: &str, t: &TenantId) -> String {
    let id = app.start_id(kind, &[("tenant_id", t.as_str())]).await;
    app.poll_until_ended(&id).await;
    id
}

/// A listing page: its ids and its `next_cursor`.
async fn page(app: &TestApp, query: &str) -> (Vec<String>, Option<String>) {
    let body = app.get_json(&format!("/catalog/jobs?{query}")).await;
    let ids = body["jobs"]
        .as_array()
        .expect("a page of jobs")
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_owned())
        .collect();
    (ids, body["next_cursor"].as_str().map(str::to_owned))
}

async fn every_tenants_jobs_are_listed_newest_first_filtered_and_paged_by_cursor(b: Backend) {
    let app = spawn_app(b).await;
    let tenants = [tenant(), tenant(), tenant()];
    let mut made = Vec::new();
    for t in &tenants {
        made.push(ended_job(&app, "ticker", t).await);
        made.push(ended_job(&app, "fail", t).await);
    }
    // Newest first: the reverse of creation order, ties in a millisecond by id.
    let mut keyed: Vec<(String, String)> = Vec::new();
    for id in &made {
        let at = app.get_job(id).await["created_at"]
            .as_str()
            .unwrap()
            .to_owned();
        keyed.push((at, id.clone()));
    }
    keyed.sort_by(|x, y| y.cmp(x));
    let newest_first: Vec<String> = keyed.into_iter().map(|(_, id)| id).collect();
    assert_eq!(page(&app, "limit=100").await, (newest_first.clone(), None));
    let only = |keep: &dyn Fn(usize) -> bool| -> Vec<String> {
        let wanted: Vec<&String> = made
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, id)| id)
            .collect();
        newest_first
            .iter()
            .filter(|id| wanted.contains(id))
            .cloned()
            .collect()
    };
    assert_eq!(page(&app, "status=failed").await.0, only(&|i| i % 2 == 1));
    assert_eq!(page(&app, "kind=ticker").await.0, only(&|i| i % 2 == 0));
    let second = format!("tenant_id={}", tenants[1]);
    assert_eq!(page(&app, &second).await.0, only(&|i| i / 2 == 1));
    let prefix = made[2][..8].to_ascii_uppercase();
    let (found, _) = page(&app, &format!("id_prefix={prefix}")).await;
    assert!(found.contains(&made[2]), "{found:?}");
    assert!(found.iter().all(|id| id.starts_with(&made[2][..8])));
    // Page by page with the cursor: the same jobs in the same order, each once.
    let (first, cursor) = page(&app, "limit=4").await;
    let cursor = cursor.expect("more after the first page");
    let (rest, end) = page(&app, &format!("limit=4&cursor={cursor}")).await;
    assert_eq!(end, None);
    assert_eq!([first, rest].concat(), newest_first);
    let r = app.get("/catalog/jobs?id_prefix=xyz").await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (body["error"].as_str(), body["field"].as_str()),
        (Some("invalid_field"), Some("id_prefix"))
    );
}

async fn a_page_examines_a_bounded_stretch_of_the_index_and_goes_on_with_its_cursor(b: Backend) {
    let s = store(b, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    let t = tenant();
    // The one job asked for is the oldest, behind more than a page's stretch of others. A
    // kind no runner of this app runs, each ended by a cancel while queued.
    let target = new_job(&t, "k1");
    create(&*s, &target).await;
    s.cancel(&target.id, "test").await.unwrap();
    for _ in 0..EXAMINE_PER_PAGE + 50 {
        let other = new_job(&tenant(), "k1");
        create(&*s, &other).await;
        s.cancel(&other.id, "test").await.unwrap();
    }
    let query = format!("id_prefix={}", target.id);
    let (first, cursor) = page(&app, &query).await;
    assert!(first.is_empty(), "nothing in the first stretch: {first:?}");
    let cursor = cursor.expect("a short page says where to go on");
    let (second, end) = page(&app, &format!("{query}&cursor={cursor}")).await;
    assert_eq!((second, end), (vec![target.id.to_string()], None));
}

/// The picker's tenant ids for `query`.
async fn picked(app: &TestApp, query: &str) -> Vec<String> {
    let body = app.get_json(&format!("/catalog/tenants?{query}")).await;
    body["tenants"]
        .as_array()
        .expect("a list of tenants")
        .iter()
        .map(|t| {
            assert!(t["last_job_at"].is_string(), "{t}");
            t["tenant_id"].as_str().unwrap().to_owned()
        })
        .collect()
}

async fn the_tenant_picker_lists_recent_tenants_by_prefix_and_a_removed_one_leaves(b: Backend) {
    let app = spawn_app(b).await;
    let base = unique("pick");
    let named = |n: &str| TenantId::parse(&format!("{base}-{n}")).unwrap();
    let (a, b_, c) = (named("a"), named("b"), named("c"));
    for t in [&a, &b_, &c, &a] {
        ended_job(&app, "ticker", t).await;
    }
    let other = tenant();
    ended_job(&app, "ticker", &other).await;
    let ids = |ts: &[&TenantId]| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    assert_eq!(
        picked(&app, &format!("prefix={base}")).await,
        ids(&[&a, &c, &b_])
    );
    assert_eq!(
        picked(&app, &format!("prefix={base}&limit=2")).await,
        ids(&[&a, &c])
    );
    assert_eq!(
        picked(&app, "limit=1").await,
        ids(&[&other]),
        "no prefix: every tenant"
    );
    let r = app.delete_tenant(a.as_str()).await;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        picked(&app, &format!("prefix={base}")).await,
        ids(&[&c, &b_])
    );
    let r = app.get("/catalog/tenants?limit=0").await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = app.get("/catalog/tenants?tenant=x").await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// `ids` reads the jobs named, whatever their age, in the listing's order with its filters;
/// a job gone (its tenant removed), one never made or another tenant's (`tenant_id`) is
/// left out; bad `ids` are a 422 naming the field.
async fn many_jobs_are_read_by_id_in_one_call_and_a_gone_one_is_left_out(b: Backend) {
    let app = spawn_app(b).await;
    let (t1, t2) = (tenant(), tenant());
    let a = ended_job(&app, "ticker", &t1).await;
    let f = ended_job(&app, "fail", &t2).await;
    let c = ended_job(&app, "ticker", &t1).await;
    let never = uuid::Uuid::new_v4().to_string();
    let (read, next) = page(&app, &format!("ids={a},{f}&ids={c},{never},{a}")).await;
    assert_eq!((read, next), (vec![c.clone(), f.clone(), a.clone()], None));
    let (read, _) = page(&app, &format!("ids={a},{f},{c}&tenant_id={t1}")).await;
    assert_eq!(read, [c.clone(), a.clone()], "the tenant named only");
    let (read, _) = page(&app, &format!("ids={a},{f},{c}&status=failed")).await;
    assert_eq!(read, vec![f.clone()], "the filters apply");
    let (read, next) = page(&app, &format!("ids={a},{f},{c}&limit=2")).await;
    assert_eq!(read, [c.clone(), f.clone()]);
    assert!(next.is_some(), "a page of 2 goes on");
    assert_eq!(app.delete_tenant(t2.as_str()).await.status(), 200);
    let (read, _) = page(&app, &format!("ids={a},{f},{c}")).await;
    assert_eq!(
        read,
        [c.clone(), a.clone()],
        "the removed tenant's job is gone"
    );

    let many = (0..101)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect::<Vec<_>>()
        .join(",");
    for bad in [
        "ids=",
        "ids=x",
        &format!("ids={a},nope"),
        &format!("ids={many}"),
    ] {
        let r = app.get(&format!("/catalog/jobs?{bad}")).await;
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            (body["error"].as_str(), body["field"].as_str()),
            (Some("invalid_field"), Some("ids")),
            "{bad}: {body}"
        );
    }
}

/// The whole cross-tenant index of `s`, newest first.
async fn index_of(s: &dyn Browse) -> Vec<Position> {
    s.index_page(None, EVERYONE_CAP).await.unwrap()
}

/// More jobs than a page examines, their tenants removed, stand in front of a live tenant's
/// older jobs: the first page examines its stretch of them, finds nothing, and drops each
/// entry it examined from the index; the same page asked again is then full, and its walk
/// drops the rest. An entry whose job is there is never dropped, asked outright either.
async fn a_walk_drops_the_entries_of_gone_jobs_from_the_index_and_a_page_after_them_is_full(
    b: Backend,
) {
    let s = store(b, settings());
    let app = spawn_app_with(test_config(), s.clone()).await;
    let live_tenant = tenant();
    let mut made = Vec::new();
    for _ in 0..5 {
        let job = new_job(&live_tenant, "k1");
        create(&*s, &job).await;
        s.cancel(&job.id, "test").await.unwrap();
        made.push(job.id.to_string());
    }
    // Under each tenant's listing cap, so that only the removal makes them gone.
    let removed: Vec<TenantId> = (0..21).map(|_| tenant()).collect();
    for _ in 0..(EXAMINE_PER_PAGE + 50) / removed.len() {
        for t in &removed {
            let job = new_job(t, "k1");
            create(&*s, &job).await;
            s.cancel(&job.id, "test").await.unwrap();
        }
    }
    for t in &removed {
        assert_eq!(app.delete_tenant(t.as_str()).await.status(), 200);
    }
    let before = index_of(&*s).await;
    assert_eq!(before.len(), EXAMINE_PER_PAGE + 50 + made.len());
    // The live jobs in the index's order (jobs made in one millisecond order by id).
    let ids =
        |entries: &[Position]| -> Vec<String> { entries.iter().map(|e| e.1.to_string()).collect() };
    let live: Vec<String> = ids(&before)
        .into_iter()
        .filter(|id| made.contains(id))
        .collect();
    assert_eq!(live.len(), made.len());

    let (first, cursor) = page(&app, "limit=3").await;
    assert!(first.is_empty(), "a page's stretch of gone jobs: {first:?}");
    assert!(cursor.is_some(), "a short page goes on");
    let after_one = index_of(&*s).await;
    assert_eq!(
        after_one.len(),
        before.len() - EXAMINE_PER_PAGE,
        "the examined stretch left"
    );
    assert_eq!(after_one[..], before[EXAMINE_PER_PAGE..]);

    let (again, _) = page(&app, "limit=3").await;
    assert_eq!(again, live[..3], "the page after them is full");
    let left = ids(&index_of(&*s).await);
    assert_eq!(left, live, "only the live jobs' entries are left");

    let kept = index_of(&*s).await;
    assert_eq!(
        s.unlist(&kept).await.unwrap(),
        0,
        "a live job is never unlisted"
    );
    assert_eq!(index_of(&*s).await, kept);
}
