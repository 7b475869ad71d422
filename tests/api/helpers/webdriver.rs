//! A small W3C WebDriver client over reqwest (JSON over HTTP), enough for the admin page's
//! browser tests: a headless Chromium through `chromedriver`, started on a free port and
//! stopped (browser first) when the session is dropped. A machine without chromedriver fails
//! the test with what to install — no silent skip.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{free_port, JsonAnswer};

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long chromedriver may take to answer its status as ready (a loaded machine).
const DRIVER_READY: Duration = Duration::from_secs(30);
/// How long a DOM condition is polled before the test fails: generous, the machine is shared.
pub const WAIT: Duration = Duration::from_secs(30);
/// Between two polls of a DOM condition.
const POLL: Duration = Duration::from_millis(100);
/// How often an element may go stale under a command before the test gives up.
const STALE_RETRIES: usize = 20;
/// How often a screenshot is asked for before the test fails (a busy renderer times one out).
const SCREENSHOT_TRIES: usize = 3;
/// Between two screenshot tries.
const SCREENSHOT_PAUSE: Duration = Duration::from_secs(2);
/// WebDriver's error for an element the page has since replaced.
const STALE: &str = "stale element reference";
/// Where Debian's chromium is; chromedriver finds it by itself elsewhere.
const CHROMIUM: &str = "/usr/bin/chromium";
/// What the browser tests run with: headless, and none of what a container lacks.
const CHROMIUM_ARGS: [&str; 4] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
];

/// A browser session; dropping it closes the browser and stops chromedriver.
pub struct Browser {
    http: reqwest::Client,
    port: u16,
    session: String,
    driver: Child,
}

/// An element of the page (a WebDriver reference).
#[derive(Clone, Debug)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width`×`height`.
    pub async fn start(width: u32, height: u32) -> Browser {
        let port = free_port();
        let driver = match Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => panic!(
                "chromedriver could not be started ({e}): the browser tests need Chromium and its \
                 driver — install them with `apt-get install chromium chromium-driver` \
                 (scripts/test.sh does so when they are missing)"
            ),
        };
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + DRIVER_READY;
        loop {
            let ready = match http.get(format!("{base}/status")).send().await {
                Ok(r) => r.json::<Value>().await.ok(),
                Err(_) => None,
            };
            if ready.is_some_and(|s| s["value"]["ready"] == true) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(POLL).await;
        }
        let mut options = json!({ "args": CHROMIUM_ARGS });
        if Path::new(CHROMIUM).exists() {
            options["binary"] = json!(CHROMIUM);
        }
        options["args"]
            .as_array_mut()
            .expect("args is an array")
            .push(json!(format!("--window-size={width},{height}")));
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": options,
                "goog:loggingPrefs": {"browser": "ALL"},
            }}}))
            .json_answer()
            .await;
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {created}"))
            .to_owned();
        Browser {
            http,
            port,
            session,
            driver,
        }
    }

    /// One WebDriver command on the session; answers its `value`, or panics with the error.
    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        match self.try_command(method, path, body).await {
            Ok(value) => value,
            Err((error, message)) => panic!("WebDriver {path}: {error}: {message}"),
        }
    }

    /// One WebDriver command; answers its `value`, or the error's name and message.
    async fn try_command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, (String, Value)> {
        let url = format!(
            "http://127.0.0.1:{}/session/{}{path}",
            self.port, self.session
        );
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.json_answer().await;
        let value = answer["value"].clone();
        match value.get("error").and_then(Value::as_str) {
            Some(error) => Err((error.to_owned(), value["message"].clone())),
            None => Ok(value),
        }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.command(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    pub async fn set_size(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({ "width": width, "height": height }))
            .await;
    }

    /// The first element matching `css` (panics when there is none).
    pub async fn find(&self, css: &str) -> Element {
        let v = self
            .post("/element", json!({ "using": "css selector", "value": css }))
            .await;
        Element(
            v[ELEMENT]
                .as_str()
                .expect("an element reference")
                .to_owned(),
        )
    }

    /// Sends `commands` (method, path after the element, body) to the element `css`. The page
    /// redraws live (streams, polls): an element found just before a redraw is stale by the
    /// command, so it is found again and the commands start over, boundedly. Answers the last
    /// command's value.
    async fn on_element(
        &self,
        css: &str,
        commands: &[(reqwest::Method, &str, Option<Value>)],
    ) -> Value {
        'found: for _ in 0..STALE_RETRIES {
            let e = self.find(css).await;
            let mut last = Value::Null;
            for (method, suffix, body) in commands {
                let path = format!("/element/{}{suffix}", e.0);
                match self.try_command(method.clone(), &path, body.clone()).await {
                    Ok(value) => last = value,
                    Err((error, _)) if error == STALE => {
                        tokio::time::sleep(POLL).await;
                        continue 'found;
                    }
                    Err((error, message)) => panic!("WebDriver {path}: {error}: {message}"),
                }
            }
            return last;
        }
        panic!("{css} went stale {STALE_RETRIES} times in a row");
    }

    pub async fn click(&self, css: &str) {
        let click = (reqwest::Method::POST, "/click", Some(json!({})));
        self.on_element(css, &[click]).await;
    }

    /// A mouse-style click on the element `css`: the pointer moves onto it, presses, holds
    /// for `hold` and releases — as a person clicks, so a page that replaces the element while
    /// the button is down loses the click (a WebDriver click is too quick to notice). Answers
    /// false when the element was replaced before the pointer reached it.
    pub async fn press_and_release(&self, css: &str, hold: Duration) -> bool {
        let target = self.find(css).await;
        let mut origin = serde_json::Map::new();
        origin.insert(ELEMENT.to_owned(), Value::String(target.0));
        let hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
        let click = json!({"actions": [{"type": "pointer", "id": "mouse",
        "parameters": {"pointerType": "mouse"},
        "actions": [
            {"type": "pointerMove", "duration": 0, "origin": origin, "x": 0, "y": 0},
            {"type": "pointerDown", "button": 0},
            {"type": "pause", "duration": hold_ms},
            {"type": "pointerUp", "button": 0},
        ]}]});
        let pressed = self
            .try_command(reqwest::Method::POST, "/actions", Some(click))
            .await;
        let _ = self
            .try_command(reqwest::Method::DELETE, "/actions", None)
            .await;
        match pressed {
            Ok(_) => true,
            Err((error, _)) if error == STALE => false,
            Err((error, message)) => panic!("WebDriver /actions: {error}: {message}"),
        }
    }

    /// Presses the key `key` (a WebDriver key code such as `\u{E004}` for Tab) on the page.
    pub async fn press_key(&self, key: &str) {
        self.post(
            "/actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]}),
        )
        .await;
    }

    /// Replaces the text of the field `css` with `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let clear = (reqwest::Method::POST, "/clear", Some(json!({})));
        let value = (
            reqwest::Method::POST,
            "/value",
            Some(json!({ "text": text })),
        );
        self.on_element(css, &[clear, value]).await;
    }

    /// The rendered text of the element `css`.
    pub async fn text(&self, css: &str) -> String {
        let read = (reqwest::Method::GET, "/text", None);
        let v = self.on_element(css, &[read]).await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// The page's console messages of level SEVERE since the last call (errors: exceptions,
    /// CSP refusals, failed loads), as chromedriver's log gives them.
    pub async fn console_errors(&self) -> Vec<String> {
        let entries = self.post("/se/log", json!({ "type": "browser" })).await;
        entries
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn exec(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args }))
            .await
    }

    /// Polls `script` until it answers something truthy (bounded by [`WAIT`]); answers it.
    pub async fn wait_for(&self, what: &str, script: &str, args: Value) -> Value {
        self.wait_until(what, script, args, WAIT).await
    }

    /// Polls `script` until it answers something truthy, for at most `limit`; answers it.
    pub async fn wait_until(
        &self,
        what: &str,
        script: &str,
        args: Value,
        limit: Duration,
    ) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.exec(script, args.clone()).await;
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!("") && v != json!(0);
            if truthy {
                return v;
            }
            if Instant::now() >= deadline {
                let seen = self
                    .exec(
                        "const e = document.querySelector('[data-testid=error]');
                         return [e && !e.hidden ? e.textContent : null,
                                 [...document.querySelectorAll('[data-job-id]')].map((n) => ({ ...n.dataset }))];",
                        json!([]),
                    )
                    .await;
                panic!(
                    "the page never showed {what} within {limit:?} (its error box: {}; its jobs: {})",
                    seen[0], seen[1]
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Makes the page see the system's colour scheme as `scheme` (`dark` or `light`), through
    /// chromedriver's DevTools bridge.
    pub async fn prefer_color_scheme(&self, scheme: &str) {
        self.post(
            "/goog/cdp/execute",
            json!({"cmd": "Emulation.setEmulatedMedia",
                   "params": {"features": [{"name": "prefers-color-scheme", "value": scheme}]}}),
        )
        .await;
    }

    /// Saves a PNG of the viewport to `path`.
    /// Saves a PNG of the window. A renderer busy on a loaded machine may time the capture out
    /// (`timeout: Timed out receiving message from renderer`): the capture is asked again, up to
    /// `SCREENSHOT_TRIES` times, before the test fails with the last error.
    pub async fn screenshot(&self, path: &Path) {
        let mut tries = 0;
        let v = loop {
            tries += 1;
            match self
                .try_command(reqwest::Method::GET, "/screenshot", None)
                .await
            {
                Ok(v) => break v,
                Err((error, message)) if tries < SCREENSHOT_TRIES => {
                    eprintln!("screenshot try {tries}: {error}: {message}; asking again");
                    tokio::time::sleep(SCREENSHOT_PAUSE).await;
                }
                Err((error, message)) => panic!("WebDriver /screenshot: {error}: {message}"),
            }
        };
        let png = decode_base64(v.as_str().expect("a base64 screenshot"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshot folder");
        }
        std::fs::write(path, png).expect("the screenshot is written");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closing the session quits Chromium; chromedriver would leave it running otherwise.
        // A plain request on a socket: Drop cannot wait on the async client.
        if let Ok(mut socket) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = socket.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                socket,
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = socket.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (the screenshot's encoding), without a dependency for one call.
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for sextet in text.bytes().filter_map(value) {
        acc = ((acc << 6) | u32::from(sextet)) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

#[test]
fn base64_decodes_what_it_should() {
    assert_eq!(decode_base64("aGVsbG8="), b"hello");
    assert_eq!(decode_base64("aGk="), b"hi");
    assert_eq!(decode_base64("YWJj"), b"abc");
}
