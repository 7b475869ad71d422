//! `DELETE /catalog/tenants/{tenant_id}` through the real server on both stores: the
//! tenant's catalogue and ended jobs go, with counts; an active job refuses it and nothing
//! changes; another tenant's token is 403; asking again answers zeros.

use catalog_jobs::jobs::store::Purge;
use catalog_jobs::jobs::Kind;
use reqwest::Method;
use serde_json::{json, Value};

use std::sync::Arc;

use catalog_jobs::catalog::products::{CatalogStore, MemoryCatalog, RedisCatalog};
use catalog_jobs::jobs::fence::Unfenced;

use crate::both_stores;
use crate::helpers::{
    blocking, create, keys_matching, new_job, settings, shared_redis, spawn_app_with,
    spawn_catalog_app, store, tenant, test_config, Backend, Gate, RedisServer, TestApp, Tokens,
    OPERATOR,
};

both_stores!(
    a_purge_is_refused_while_a_job_is_active_and_then_removes_every_job_once,
    removing_a_tenant_takes_its_catalogue_and_ended_jobs_and_is_idempotent,
    a_tenant_with_an_active_job_is_not_removed_and_nothing_changes,
    a_big_tenant_is_removed_with_its_counts_while_another_tenants_job_is_polled,
    a_catalogue_of_its_own_clears_a_big_tenant_unlinking_and_leaves_nothing,
);

async fn a_purge_is_refused_while_a_job_is_active_and_then_removes_every_job_once(b: Backend) {
    let s = store(b, settings());
    let (t, other) = (tenant(), tenant());
    let kinds: Vec<Kind> = ["sync", "enrich"].map(|k| Kind::parse(k).unwrap()).to_vec();
    let job = new_job(&t, "sync");
    create(&*s, &job).await;
    let kept = new_job(&other, "sync");
    create(&*s, &kept).await;
    assert_eq!(
        s.purge(&t, &kinds, &[]).await.unwrap(),
        Purge::StillActive(job.id)
    );
    assert!(s.get(&job.id).await.unwrap().is_some(), "nothing changed");
    s.cancel(&job.id, "tester").await.unwrap();
    let ended = new_job(&t, "enrich");
    create(&*s, &ended).await;
    s.cancel(&ended.id, "tester").await.unwrap();
    assert_eq!(
        s.purge(&t, &kinds, &[]).await.unwrap(),
        Purge::Removed {
            jobs: 2,
            hashes: Vec::new()
        }
    );
    assert!(s.get(&job.id).await.unwrap().is_none());
    assert!(s.recent(&t, 10).await.unwrap().is_empty());
    assert_eq!(
        s.purge(&t, &kinds, &[]).await.unwrap(),
        Purge::Removed {
            jobs: 0,
            hashes: Vec::new()
        }
    );
    assert!(
        s.get(&kept.id).await.unwrap().is_some(),
        "another tenant keeps its jobs"
    );
    create(&*s, &new_job(&t, "sync")).await;
}

/// Two tenants with a token each (and the operator's), the same two products each; the
/// first has also enriched and paired them.
async fn two_catalogued_tenants(b: Backend) -> (TestApp, Tokens) {
    let tokens = Tokens::new();
    let mut config = test_config();
    config.api_tokens = Some(tokens.api_tokens());
    let app = spawn_catalog_app(b, config).await;
    let rows = json!([
        {"product_key": "p1", "name": "Steel Bottle 500 ml Black", "brand": "Acme", "taxonomy_path": ["Home", "Kitchen"]},
        {"product_key": "p2", "name": "Steel Bottle 750 ml Black", "brand": "Acme", "taxonomy_path": ["Home", "Kitchen"]},
    ]);
    for (tenant, token) in [(&tokens.a, &tokens.a_token), (&tokens.b, &tokens.b_token)] {
        let r = app
            .client
            .post(app.url(&format!("/catalog/products?tenant_id={tenant}")))
            .bearer_auth(token)
            .json(&rows)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    for kind in ["enrich", "pair"] {
        let r = app
            .client
            .post(app.url(&format!("/catalog/{kind}")))
            .bearer_auth(&tokens.a_token)
            .json(&json!({"tenant_id": tokens.a, "wait": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{kind}");
    }
    (app, tokens)
}

async fn removing_a_tenant_takes_its_catalogue_and_ended_jobs_and_is_idempotent(b: Backend) {
    let (app, tokens) = two_catalogued_tenants(b).await;
    let Tokens {
        a: t,
        b: u,
        a_token: own,
        b_token: others,
    } = tokens;
    let path = format!("/catalog/tenants/{t}");
    let forbidden = app.send_as(Method::DELETE, &path, Some(&others)).await;
    assert_eq!(forbidden.status(), 403);
    let r = app.send_as(Method::DELETE, &path, Some(&own)).await;
    assert_eq!(r.status(), 200);
    let removed: Value = r.json().await.unwrap();
    assert_eq!(removed["tenant_id"], t.as_str());
    assert_eq!(removed["jobs"], 2);
    assert_eq!(removed["products"], 2);
    assert_eq!(removed["extracted_attributes"], 2);
    assert_eq!(removed["neighbours"], 2, "{removed}");
    let jobs = app
        .get_as(&format!("/catalog/jobs?tenant_id={t}"), &own)
        .await;
    assert_eq!(jobs.json::<Value>().await.unwrap()["jobs"], json!([]));
    let p1 = format!("/catalog/products/p1?tenant_id={t}");
    assert_eq!(app.get_as(&p1, &own).await.status(), 404);
    let again = app.send_as(Method::DELETE, &path, Some(OPERATOR)).await;
    assert_eq!(
        again.json::<Value>().await.unwrap(),
        json!({"tenant_id": t.as_str(), "jobs": 0, "products": 0, "extracted_attributes": 0, "neighbours": 0}),
        "asking again (an operator may) removes nothing more"
    );
    let theirs = format!("/catalog/products/p1?tenant_id={u}");
    let kept = app.get_as(&theirs, &others).await;
    assert_eq!(kept.status(), 200, "the other tenant keeps its catalogue");
    let bad = app
        .send_as(Method::DELETE, "/catalog/tenants/a:b", Some(OPERATOR))
        .await;
    assert_eq!(bad.status(), 422);
}

async fn a_tenant_with_an_active_job_is_not_removed_and_nothing_changes(b: Backend) {
    let app = spawn_app_with(test_config(), store(b, settings())).await;
    let t = tenant();
    let row = json!([{"product_key": "p1", "name": "Cotton Shirt Blue M"}]);
    let r = app
        .import(t.as_str(), "application/json", row.to_string())
        .await;
    assert_eq!(r.status(), 200);
    let id = app.start_id("gated", &[("tenant_id", t.as_str())]).await;
    Gate::of(&t).reached().await;
    let path = app.url(&format!("/catalog/tenants/{t}"));
    let refused = app.client.delete(&path).send().await.unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "still_active");
    assert_eq!(body["job_id"], id.as_str());
    assert_eq!(
        app.get(&format!("/catalog/products/p1?tenant_id={t}"))
            .await
            .status(),
        200
    );
    assert_eq!(app.get_job(&id).await["status"], "running");
    Gate::of(&t).release();
    app.poll_until_ended(&id).await;
    let removed = app.client.delete(&path).send().await.unwrap();
    let removed: Value = removed.json().await.unwrap();
    assert_eq!(removed["jobs"], 1);
    assert_eq!(removed["products"], 1);
}

/// How many products the big tenant holds: enough that freeing its catalogue inside the
/// delete's step (DEL) showed; purge.lua now UNLINKs it (freed in Redis's background thread).
const BIG: usize = 20_000;

/// A tenant of BIG products, enriched and paired, is deleted while another tenant's job is
/// polled: the delete answers 200 with every count, each poll answers, and nothing of the
/// tenant is left but its tombstone.
async fn a_big_tenant_is_removed_with_its_counts_while_another_tenants_job_is_polled(b: Backend) {
    let app = spawn_catalog_app(b, test_config()).await;
    let (t, u) = (tenant(), tenant());
    let rows: String = (0..BIG)
        .map(|i| format!("{{\"product_key\":\"b{i}\",\"name\":\"Steel Bottle {i} ml Black\"}}\n"))
        .collect();
    let r = app.import(t.as_str(), "application/x-ndjson", rows).await;
    assert_eq!(r.status(), 200);
    for kind in ["enrich", "pair"] {
        let r = app
            .start(kind, &[("tenant_id", t.as_str()), ("wait", "true")])
            .await;
        assert_eq!(r.status(), 200, "{kind} ran to its end");
    }
    let other = app.start_id("enrich", &[("tenant_id", u.as_str())]).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let polls = {
        let (client, url, stop) = (
            app.client.clone(),
            app.url(&format!("/catalog/jobs/{other}")),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut answered = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) || answered.is_empty() {
                let r = client.get(&url).send().await.expect("the service answers");
                answered.push(r.status().as_u16());
            }
            answered
        })
    };
    let r = app.delete_tenant(t.as_str()).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(r.status(), 200);
    let removed: Value = r.json().await.unwrap();
    assert_eq!(
        removed,
        json!({"tenant_id": t.as_str(), "jobs": 2, "products": BIG, "extracted_attributes": BIG, "neighbours": BIG})
    );
    let answered = polls.await.unwrap();
    assert!(answered.iter().all(|s| *s == 200), "{answered:?}");
    let page = app
        .get_json(&format!("/catalog/products?tenant_id={t}&limit=5"))
        .await;
    assert_eq!(page["products"], json!([]), "{page}");
    if let Backend::Redis = b {
        let mut conn = shared_redis().await;
        let left = keys_matching(&mut conn, &format!("*:{t}:*")).await;
        let left: Vec<_> = left.iter().filter(|k| !k.ends_with(":gone")).collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// The catalogue store's own clear, as a delete runs it when the catalogue is on a Redis of
/// its own (the job store's purge cannot reach it): every count, nothing of the tenant left,
/// and on Redis its keys UNLINKed (freed in Redis's background thread, as purge.lua does),
/// never DELeted while every other call waits.
async fn a_catalogue_of_its_own_clears_a_big_tenant_unlinking_and_leaves_nothing(b: Backend) {
    let redis = match b {
        Backend::Redis => Some(
            tokio::task::spawn_blocking(|| RedisServer::start(false))
                .await
                .expect("the server starts"),
        ),
        Backend::Memory => None,
    };
    let catalog: Arc<dyn CatalogStore> = match &redis {
        Some(r) => Arc::new(RedisCatalog::open(&r.url(), "cat").expect("the URL parses")),
        None => Arc::new(MemoryCatalog::new()),
    };
    let t = tenant();
    let products = catalog_jobs::catalog::demo::generate(BIG, 7);
    let (c, tt) = (catalog.clone(), t.clone());
    blocking(move || {
        c.upsert(&tt, &products, &Unfenced)
            .expect("the store takes them")
    })
    .await;
    if let Some(r) = &redis {
        crate::helpers::reset_stats(&mut r.connection().await).await;
    }
    let (c, tt) = (catalog.clone(), t.clone());
    let cleared = blocking(move || c.clear(&tt).expect("the clear goes through")).await;
    assert_eq!(cleared.products, BIG as u64);
    let (c, tt) = (catalog.clone(), t.clone());
    let left = blocking(move || c.all(&tt).expect("the store answers")).await;
    assert!(left.is_empty(), "{} products left", left.len());
    if let Some(r) = &redis {
        let mut conn = r.connection().await;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        assert_eq!(keys, 0, "no key of the tenant is left");
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(stats.contains("cmdstat_unlink:"), "{stats}");
        assert!(!stats.contains("cmdstat_del:"), "no DEL: {stats}");
    }
}
