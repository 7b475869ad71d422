//! Server-Sent Events read as a browser would: frames off a live response body.

use std::time::Duration;

use serde_json::Value;

/// One SSE frame: its `id:`, `event:` and `data:` lines (comment-only frames are skipped).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SseFrame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseFrame {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("an event's data is JSON")
    }
}

/// Reads SSE frames off a response body as they arrive.
pub struct SseReader {
    body: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>,
    >,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.status(), 200, "a stream answers 200");
        let media = response.headers()["content-type"].to_str().unwrap();
        assert!(media.starts_with("text/event-stream"), "{media}");
        Self {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next frame, or `None` when the server closed the stream (20 s at most).
    pub async fn next(&mut self) -> Option<SseFrame> {
        use futures_util::StreamExt;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                let mut frame = SseFrame::default();
                let mut data = Vec::new();
                for line in raw.lines() {
                    let (name, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match name {
                        "id" => frame.id = Some(value.to_owned()),
                        "event" => frame.event = Some(value.to_owned()),
                        "data" => data.push(value),
                        _ => {} // a comment (keep-alive), or a field this parser ignores
                    }
                }
                frame.data = data.join("\n");
                if frame.id.is_some() || frame.event.is_some() || !frame.data.is_empty() {
                    return Some(frame);
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.body.next())
                .await
                .expect("the stream sent something within 20 s");
            match chunk {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(e)) => panic!("the stream broke: {e}"),
                None => return None,
            }
        }
    }
}
