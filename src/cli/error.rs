//! What can go wrong for a client command, sorted by whose fault it is (that decides the exit
//! code), and worded in the command line's own terms: a refusal about `tenant_id` names
//! `--tenant`, a missing token names `--token-file` — never an HTTP header.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::Exit;

/// The service's field names and the flags that set them, for its refusals.
/// `full` and `wait` are common words in messages ("the queue is full"), so only their quoted
/// form is a field's name.
const FLAGS: [(&str, &str); 10] = [
    ("tenant_id", "--tenant"),
    ("source", "--source"),
    ("status", "--status"),
    ("kind", "--kind"),
    ("limit", "--limit"),
    ("cursor", "--cursor"),
    ("force", "--force"),
    ("q", "the search text"),
    ("`full`", "`--full`"),
    ("`wait`", "`--wait`"),
];

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the service at {url}: {cause}")]
    Unreachable { url: String, cause: String },
    #[error("the service could not answer ({status}): {message}")]
    Server {
        status: StatusCode,
        message: String,
        retry_after: Option<Duration>,
    },
    /// A refusal (4xx), its message already in the command line's words.
    #[error("{message} ({code})")]
    Rejected { code: String, message: String },
    #[error(
        "the service needs a token: pass --token-file FILE (a file holding your API token), \
         or set CATALOG_JOBS_TOKEN_FILE"
    )]
    NoToken,
    #[error("the service does not know the token in {path}: check the file given to --token-file")]
    TokenRefused { path: String },
    #[error("cannot read the token file {path} (--token-file): {cause}")]
    Token { path: String, cause: String },
    #[error("{0}")]
    BadServerUrl(String),
    /// A 2xx whose JSON is not what the route answers (a job without `job_id`/`status`).
    #[error("the service's answer makes no sense: {0}")]
    BadAnswer(String),
}

impl ClientError {
    pub fn exit(&self) -> Exit {
        match self {
            ClientError::Unreachable { .. }
            | ClientError::Server { .. }
            | ClientError::BadAnswer(_) => Exit::Unreachable,
            ClientError::Rejected { .. }
            | ClientError::NoToken
            | ClientError::TokenRefused { .. }
            | ClientError::Token { .. }
            | ClientError::BadServerUrl(_) => Exit::Usage,
        }
    }

    /// Worth retrying while following a job: the service or its store may be back soon.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable { .. } | ClientError::Server { .. }
        )
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A 4xx's error body as a refusal, `token_file` being the `--token-file` given (if any).
    pub fn refused(body: &Value, token_file: Option<&str>) -> Self {
        let code = body["error"].as_str().unwrap_or("refused");
        if code == "unauthorized" {
            return match token_file {
                None => ClientError::NoToken,
                Some(path) => ClientError::TokenRefused {
                    path: path.to_owned(),
                },
            };
        }
        let message = body["message"]
            .as_str()
            .unwrap_or("the service refused the request");
        ClientError::Rejected {
            code: code.to_owned(),
            message: in_flags(message),
        }
    }
}

/// The service's message with each field it names written as the flag that sets it.
fn in_flags(message: &str) -> String {
    let (head, fields) = match message.split_once(FIELD_LIST) {
        Some((head, list)) => (head, Some(list)),
        None => (message, None),
    };
    let mut words = head.to_owned();
    for (field, flag) in FLAGS {
        words = replace_word(&words, field, flag);
    }
    if let Some(list) = fields {
        words.push_str(FIELD_LIST);
        words.push_str(&list_in_flags(list));
    }
    words
}

/// Where a refusal lists the fields a job takes ("…; it takes tenant_id, wait and source"):
/// every word after it is a field's name, so there `wait` and `full` are flags too.
const FIELD_LIST: &str = "; it takes ";

fn list_in_flags(list: &str) -> String {
    let mut words = list.to_owned();
    for (field, flag) in FLAGS {
        let bare = field.trim_matches('`');
        let flag = flag.trim_matches('`');
        words = replace_word(&words, bare, flag);
    }
    words
}

/// Replaces `word` where it stands alone (not inside a longer name such as `tenant_ids`).
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_name) || after.is_some_and(is_name) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_services_fields_are_named_as_the_flags_that_set_them() {
        let cases = [
            (
                "a tenant token lists its own tenant's jobs: add tenant_id=acme",
                "a tenant token lists its own tenant's jobs: add --tenant=acme",
            ),
            (
                "tenant_id must be 1–128 characters",
                "--tenant must be 1–128 characters",
            ),
            ("status must be one of …", "--status must be one of …"),
            ("the tenant_ids field", "the tenant_ids field"),
            ("a kindness", "a kindness"),
            (
                "`full` is not a field of this job; it takes tenant_id, wait and source",
                "`--full` is not a field of this job; it takes --tenant, --wait and --source",
            ),
            (
                "`x` is not a field of this job; it takes only tenant_id and wait",
                "`x` is not a field of this job; it takes only --tenant and --wait",
            ),
            (
                "`full` is not a field of a pipeline or its steps; it takes tenant_id, wait and full, limit",
                "`--full` is not a field of a pipeline or its steps; it takes --tenant, --wait and --full, --limit",
            ),
            ("the ready queue is full", "the ready queue is full"),
        ];
        for (server, cli) in cases {
            assert_eq!(in_flags(server), cli, "{server}");
        }
    }

    #[test]
    fn an_unauthorized_answer_says_which_flag_gives_the_token() {
        let body = json!({"error": "unauthorized", "message": "send `Authorization: Bearer`"});
        let without = ClientError::refused(&body, None).to_string();
        assert!(without.contains("--token-file"), "{without}");
        assert!(!without.contains("Authorization"), "{without}");
        let with = ClientError::refused(&body, Some("/etc/token")).to_string();
        assert!(
            with.contains("/etc/token") && with.contains("--token-file"),
            "{with}"
        );
    }
}
