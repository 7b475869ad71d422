//! Redis settings that are wrong for good, with the built binary and real redis-servers: a
//! password Redis refuses (or none where it needs one), an ACL that forbids a call start-up
//! makes, a database index it does not have,
//! an address where something else than Redis answers, cluster nodes that are a standalone
//! Redis. Start-up refuses each, naming the
//! cause; a Redis that is merely down still lets the service start (`faults`). One that
//! starts refusing later makes `/readyz` name the cause.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::{eventually, RedisServer, Service};

/// Longest start-up may take to give up on a Redis that refuses it (its first call is bounded
/// at 2 s; a loaded machine adds to it).
const REFUSED_WITHIN: Duration = Duration::from_secs(30);

/// Runs the binary with `env` until it exits; fails the test if it is still up after
/// [`REFUSED_WITHIN`] or if it exits 0. Answers its log.
pub fn refused_start_up(env: &[(&str, &str)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_catalog-jobs"))
        .env_clear()
        .env("BIND_ADDR", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let deadline = Instant::now() + REFUSED_WITHIN;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{env:?}: the service was still up after {REFUSED_WITHIN:?}");
        }
        // No signal exists for another process's exit but its status: poll it.
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut log = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut log);
    assert!(!status.success(), "{env:?}: start-up succeeded:\n{log}");
    log
}

/// A loopback port where an HTTP server answers whatever it is sent, and keeps the
/// connection open (as a web server on the wrong port would).
fn not_redis() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("bound").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while conn.read(&mut buf).is_ok_and(|n| n > 0) {
                    let _ =
                        conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
                }
            });
        }
    });
    port
}

#[test]
fn a_redis_that_refuses_the_settings_stops_start_up_naming_the_cause() {
    let redis = RedisServer::start(false);
    let port = redis.port;
    // Set once the harness saw it answer (its readiness check sends no password).
    let mut conn = redis::Client::open(redis.url())
        .and_then(|c| c.get_connection())
        .expect("the server answers");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("right-one")
        .query(&mut conn)
        .expect("CONFIG SET requirepass");
    // A user that may do anything but ask for the replication role, which start-up reads.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "no-role", "on", ">its-own", "~*", "&*", "+@all", "-role",
        ])
        .query(&mut conn)
        .expect("ACL SETUSER");
    let web = not_redis();
    let cases = [
        (
            format!("redis://:wrong-one@127.0.0.1:{port}/"),
            "Redis refused this service's password",
        ),
        (
            format!("redis://127.0.0.1:{port}/"),
            "Redis refused this service's password",
        ),
        (
            format!("redis://no-role:its-own@127.0.0.1:{port}/"),
            "Redis's ACL does not let this service's user run a command",
        ),
        (
            format!("redis://:right-one@127.0.0.1:{port}/99"),
            "Redis has no database of the index REDIS_URL names",
        ),
        (
            format!("redis://127.0.0.1:{web}/"),
            "the Redis address answered, but not as Redis does",
        ),
    ];
    for (url, cause) in cases {
        let log = refused_start_up(&[("REDIS_URL", &url)]);
        assert!(log.contains(cause), "{url}: no {cause:?} in:\n{log}");
        assert!(
            !log.contains("not reachable"),
            "{url} reads as an outage:\n{log}"
        );
    }
}

/// `REDIS_CLUSTER_NODES` naming a standalone Redis is wrong for good: start-up refuses it
/// naming the setting. The service started, `/readyz` answered 503 forever, and jobs were
/// accepted and ran in the standalone Redis (a hostile probe's finding).
#[test]
fn cluster_nodes_naming_a_standalone_redis_stop_start_up_naming_the_setting() {
    let redis = RedisServer::start(false);
    let nodes = format!("127.0.0.1:{}", redis.port);
    let log = refused_start_up(&[("REDIS_CLUSTER_NODES", &nodes)]);
    assert!(
        log.contains("REDIS_CLUSTER_NODES") && log.contains("not a Redis Cluster"),
        "{log}"
    );
    assert!(!log.contains("not reachable"), "reads as an outage:\n{log}");
}

/// Redis starts asking for a password the running service was not given (its connections
/// dropped, so it must log in again): `/readyz` is not ready and names the cause, not an
/// outage.
#[tokio::test]
async fn a_password_redis_asks_for_later_reads_as_that_in_readyz_not_as_an_outage() {
    let redis = tokio::task::spawn_blocking(|| RedisServer::start(false))
        .await
        .expect("the server starts");
    let svc = Service::on(&redis).start().await;
    assert_eq!(svc.readyz().await.status(), 200);
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("new-one")
        .query_async(&mut conn)
        .await
        .expect("CONFIG SET requirepass");
    let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut conn)
        .await;
    // The dropped connection itself reads as an outage until the service dials again.
    let (status, body) = eventually(Duration::from_secs(20), async || {
        let r = svc.readyz().await;
        let status = r.status().as_u16();
        let body = r.json::<Value>().await.unwrap_or_default();
        match body["message"].as_str() {
            Some(m)
                if m.contains("Redis refused this service's password: check REDIS_PASSWORD") =>
            {
                Ok((status, body))
            }
            _ => Err(format!("/readyz answers {status} {body}")),
        }
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "store_unavailable", "{body}");
}

/// A Redis that speaks only TLS (`rediss://`): with the CA that issued its certificate in
/// `SSL_CERT_FILE`, a sync runs to done and its catalogue and job are in that Redis; without
/// it, start-up stops naming the certificate it does not trust (not an outage).
#[tokio::test]
async fn a_rediss_url_works_with_its_ca_in_ssl_cert_file_and_stops_start_up_without_it() {
    let dir = crate::helpers::temp_dir("tls-redis");
    issue_certificates(&dir);
    let tls_port = crate::helpers::free_port();
    let pem = |name: &str| dir.join(name).display().to_string();
    let extra = format!(
        "--tls-port {tls_port} --tls-cert-file {} --tls-key-file {} --tls-ca-cert-file {} \
         --tls-auth-clients no",
        pem("server.pem"),
        pem("server.key"),
        pem("ca.pem"),
    );
    let redis = tokio::task::spawn_blocking(move || RedisServer::start_with(false, &extra))
        .await
        .expect("the server starts");
    let url = format!("rediss://127.0.0.1:{tls_port}/0");
    let svc = Service::on_redis(&url)
        .env("SSL_CERT_FILE", pem("ca.pem"))
        .start()
        .await;
    let id = svc.start_sync("tls-tenant", "demo.jsonl").await;
    let job = svc.wait_for_status(&id, "done").await;
    assert!(
        job["result"]["totals"]["created"].as_u64() > Some(0),
        "{job}"
    );
    // Read over the server's plain port: what the service wrote over TLS is there.
    let mut conn = redis.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*tls-tenant*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(keys.iter().any(|k| k.starts_with("catalog:")), "{keys:?}");

    let log = tokio::task::spawn_blocking(move || refused_start_up(&[("REDIS_URL", &url)]))
        .await
        .expect("the refused start-up ran");
    assert!(
        log.contains("Redis's TLS certificate is not one this service trusts")
            && log.contains("SSL_CERT_FILE"),
        "{log}"
    );
}

/// A CA, and a certificate it issues for 127.0.0.1 and localhost, in `dir` (`ca.pem`,
/// `server.pem`, `server.key`), made with the `openssl` command.
fn issue_certificates(dir: &std::path::Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("the scratch dir is writable");
    let steps: [&[&str]; 3] = [
        &[
            &["req", "-x509"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
        &[
            &["req"],
            &ec[..],
            &["-keyout", "server.key", "-out", "server.csr"],
        ]
        .concat(),
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-extfile",
            "san.ext",
        ],
    ];
    for (step, subject) in steps.iter().zip(["/CN=test CA", "/CN=localhost", ""]) {
        let mut cmd = Command::new("openssl");
        cmd.args(*step).args(["-days", "2"]).current_dir(dir);
        if !subject.is_empty() {
            cmd.args(["-subj", subject]);
        }
        let out = cmd.output().expect("openssl runs (.ci/run installs it)");
        assert!(out.status.success(), "openssl {step:?}: {out:?}");
    }
}
