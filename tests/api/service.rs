//! The built `catalog-jobs` binary as a subprocess on the embedded store, its stderr kept in
//! a file, and a feed server whose feeds are held until the test releases them (a sync of
//! a held feed is a long job whose end the test decides). Used by the logs, metrics and CLI
//! tests, which must see what a real process prints.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::helpers::free_port;

/// A running `catalog-jobs serve`, killed when dropped.
pub struct Service {
    child: Option<Child>,
    pub port: u16,
    log: PathBuf,
    pub client: reqwest::Client,
}

/// The demo feeds of the repository, whatever the test's working directory.
pub fn feeds_dir() -> String {
    format!("{}/examples/feeds", env!("CARGO_MANIFEST_DIR"))
}

impl Service {
    pub async fn start(env: &[(&str, &str)]) -> Service {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "catalog-jobs-svc-{}-{port}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log).expect("the temp dir is writable");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_catalog-jobs"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .env("FEEDS_DIR", feeds_dir())
            .env("SYNC_ALLOWED_HOSTS", "127.0.0.1")
            .stdout(Stdio::null())
            .stderr(out);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("the catalog-jobs binary starts");
        let svc = Service {
            child: Some(child),
            port,
            log,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .expect("a client builds"),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while svc.client.get(svc.url("/healthz")).send().await.is_err() {
            assert!(Instant::now() < deadline, "the service came up");
            // No signal exists for "the port is bound" in another process: poll it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        svc
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    pub async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .form(form)
            .send()
            .await
            .expect("the service answers")
    }

    pub async fn get_json(&self, path: &str) -> Value {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("the service answers")
            .json()
            .await
            .expect("a JSON body")
    }

    /// Polls a job until `done` holds for it (20 s at most).
    pub async fn poll(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let job = self.get_json(&format!("/catalog/jobs/{id}")).await;
            if done(&job) {
                return job;
            }
            assert!(Instant::now() < deadline, "job {id} never got there: {job}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts a job and answers its id (it must be accepted).
    pub async fn start_id(&self, kind: &str, form: &[(&str, &str)]) -> String {
        let r = self.post_form(&format!("/catalog/{kind}"), form).await;
        assert_eq!(r.status(), 202, "the job was accepted");
        let body: Value = r.json().await.expect("a JSON snapshot");
        body["job_id"].as_str().expect("a job id").to_owned()
    }

    /// Everything the process has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the process with SIGTERM and waits for it (its log is then complete).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Feeds served over HTTP, each held until the test releases it.
pub struct HeldFeeds {
    port: u16,
    gates: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl HeldFeeds {
    pub async fn start() -> HeldFeeds {
        use axum::routing::get;
        let gates: Arc<Mutex<HashMap<String, Arc<Semaphore>>>> = Arc::default();
        let shared = gates.clone();
        let router = axum::Router::new().route(
            "/held/{name}",
            get(
                move |axum::extract::Path(name): axum::extract::Path<String>| {
                    let gate = gate_of(&shared, &name);
                    async move {
                        let _ = gate.acquire().await.expect("gates are never closed");
                        (0..20)
                            .map(|i| {
                                format!(
                                    "{{\"product_key\":\"{name}-{i}\",\"name\":\"Held {i}\"}}\n"
                                )
                            })
                            .collect::<String>()
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("bound").port();
        tokio::spawn(async move { axum::serve(listener, router).await });
        HeldFeeds { port, gates }
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/held/{name}.jsonl", self.port)
    }

    /// The `SYNC_ALLOWED_HOSTS` entry that lets a service read these feeds (host and port).
    pub fn allowed(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn release(&self, name: &str) {
        gate_of(&self.gates, &format!("{name}.jsonl")).add_permits(1000);
    }
}

fn gate_of(gates: &Mutex<HashMap<String, Arc<Semaphore>>>, name: &str) -> Arc<Semaphore> {
    gates
        .lock()
        .expect("the gate map is never poisoned")
        .entry(name.to_owned())
        .or_insert_with(|| Arc::new(Semaphore::new(0)))
        .clone()
}
