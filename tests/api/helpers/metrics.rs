//! Reading `/metrics`: a strict reader of the Prometheus text format, and the sum of a
//! scrape's samples by name and labels.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{eventually, Api, Service};

/// One sample of a scrape: its name, labels and value.
#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub labels: HashMap<String, String>,
    pub value: f64,
}

/// A strict reader of the Prometheus text exposition format (0.0.4): every line is a
/// `# HELP`, a `# TYPE` or a sample whose family was typed before it; label values are
/// quoted with `\\`, `\"` and `\n` escapes. (The `prometheus-parse` crate was tried and
/// dropped: its sample pattern rejects a `}` inside a label value, as in `/catalog/{kind}`.)
/// Answers the samples and the help texts, or the first line that breaks the grammar.
pub fn parse_exposition(text: &str) -> Result<(Vec<Sample>, HashMap<String, String>), String> {
    let mut samples = Vec::new();
    let mut help = HashMap::new();
    let mut types: HashMap<String, String> = HashMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, doc) = rest.split_once(' ').ok_or(line)?;
            metric_name(name).ok_or(line)?;
            help.insert(name.to_owned(), doc.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(line)?;
            metric_name(name).ok_or(line)?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(line.to_owned());
            }
            types.insert(name.to_owned(), kind.to_owned());
        } else {
            let sample = sample(line).ok_or(line)?;
            let typed = types.contains_key(&sample.name)
                || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                    sample.name.strip_suffix(suffix).is_some_and(|f| {
                        matches!(
                            types.get(f).map(String::as_str),
                            Some("histogram" | "summary")
                        )
                    })
                });
            if !typed {
                return Err(format!("no # TYPE before: {line}"));
            }
            samples.push(sample);
        }
    }
    Ok((samples, help))
}

fn metric_name(name: &str) -> Option<()> {
    let mut chars = name.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() || first == '_' || first == ':').then_some(())?;
    chars
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        .then_some(())
}

/// The characters that frame a sample's labels and quote and escape their values.
const LABELS_OPEN: char = '{';
const LABELS_CLOSE: char = '}';
const QUOTE: char = '"';
const ESCAPE: char = '\\';

fn sample(line: &str) -> Option<Sample> {
    let name_end = line.find([LABELS_OPEN, ' '])?;
    let name = &line[..name_end];
    metric_name(name)?;
    let rest = &line[name_end..];
    let (labels, rest) = match rest.strip_prefix(LABELS_OPEN) {
        Some(inner) => labels(inner)?,
        None => (HashMap::new(), rest),
    };
    let value = sample_value(rest.strip_prefix(' ')?)?;
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Reads `key="value",…` up to the closing brace, answering the labels and what follows.
fn labels(mut inner: &str) -> Option<(HashMap<String, String>, &str)> {
    let mut labels = HashMap::new();
    loop {
        if let Some(after) = inner.strip_prefix(LABELS_CLOSE) {
            return Some((labels, after));
        }
        let (key, quoted) = inner.split_once('=')?;
        metric_name(key)?;
        let (value, after) = quoted_value(quoted.strip_prefix(QUOTE)?)?;
        labels.insert(key.to_owned(), value);
        inner = after.strip_prefix(',').unwrap_or(after);
    }
}

/// Reads an escaped label value up to its closing quote, answering it and what follows.
fn quoted_value(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    loop {
        let (i, c) = chars.next()?;
        match c {
            QUOTE => return Some((value, &text[i + QUOTE.len_utf8()..])),
            ESCAPE => value.push(match chars.next()?.1 {
                'n' => '\n',
                c @ (ESCAPE | QUOTE) => c,
                _ => return None,
            }),
            c => value.push(c),
        }
    }
}

/// A sample's value, then an optional timestamp, and nothing after them.
fn sample_value(text: &str) -> Option<f64> {
    let mut fields = text.split(' ');
    let value = match fields.next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<i64>().ok()?;
    }
    fields.next().is_none().then_some(value)
}

pub fn scrape(text: &str) -> Vec<Sample> {
    parse_exposition(text)
        .unwrap_or_else(|line| panic!("not Prometheus text format: {line}"))
        .0
}

/// The sum of the samples named `name` whose labels include these (0 when none).
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

pub async fn metrics_text(svc: &Api) -> String {
    let r = svc.get("/metrics").await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    r.text().await.unwrap()
}

/// How long an end may take to be counted after the answer that reported it.
const COUNTED_WITHIN: Duration = Duration::from_secs(10);

/// A count a test expects to move: what it stands for, its labels, and by how much.
pub type Moved<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

/// Waits until each count of `wanted` in `counter` has moved by its amount since `before`
/// (for at most [`COUNTED_WITHIN`]), then checks that `stays` later none has moved further:
/// each end counted once.
pub async fn counted_once(
    api: &Api,
    counter: &str,
    before: &[Sample],
    wanted: &[Moved<'_>],
    stays: Duration,
) {
    let moved = |after: &[Sample]| -> Vec<f64> {
        let by = |labels: &[(&str, &str)]| {
            value(after, counter, labels) - value(before, counter, labels)
        };
        wanted.iter().map(|(_, labels, _)| by(labels)).collect()
    };
    let expected: Vec<f64> = wanted.iter().map(|(_, _, by)| *by).collect();
    let counted = async || match moved(&scrape(&metrics_text(api).await)) {
        seen if seen == expected => Ok(()),
        seen => Err(format!("{wanted:?} moved by {seen:?}")),
    };
    eventually(COUNTED_WITHIN, counted).await;
    tokio::time::sleep(stays).await;
    let seen = moved(&scrape(&metrics_text(api).await));
    assert_eq!(seen, expected, "counted once: {wanted:?}");
}

/// Scrapes until `ready` holds of the samples, or for at most [`COUNTED_WITHIN`]; answers
/// the last scrape. A run counts its end just after the store step that wakes a waiting
/// request, so a scrape right after that answer may come first.
pub async fn scrape_until(svc: &Service, ready: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + COUNTED_WITHIN;
    loop {
        let samples = scrape(&metrics_text(svc).await);
        if ready(&samples) || Instant::now() > deadline {
            return samples;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
