//! Which Redis the service keeps its state in: a fixed `REDIS_URL`, the primary the
//! `REDIS_SENTINELS` name, or the nodes of a Redis Cluster (`REDIS_CLUSTER_NODES`); at most
//! one of the three, each checked here before anything is dialled.

use redis::IntoConnectionInfo;

use super::{Config, ConfigError};

/// The three ways to reach Redis, by the setting that names each.
const URL: &str = "REDIS_URL";
const SENTINELS: &str = "REDIS_SENTINELS";
const CLUSTER: &str = "REDIS_CLUSTER_NODES";

impl Config {
    /// One of `REDIS_URL`, `REDIS_SENTINELS` + `REDIS_MASTER_NAME` and
    /// `REDIS_CLUSTER_NODES`, never two; every address `host:port`, the URL a Redis URL.
    pub(super) fn validate_redis_target(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        let (sentinels, cluster) = (self.sentinels(), self.cluster_nodes());
        let given: Vec<&str> = [
            (URL, self.redis_url.is_some()),
            (SENTINELS, !sentinels.is_empty()),
            (CLUSTER, !cluster.is_empty()),
        ]
        .iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| *name)
        .collect();
        if given.len() > 1 {
            return Err(ConfigError::Invalid(format!(
                "{} are both set: give one (a fixed Redis, the sentinels that name the primary, \
                 or the nodes of a Redis Cluster)",
                given.join(" and ")
            )));
        }
        let lists = [
            (SENTINELS, &self.redis_sentinels, &sentinels),
            (CLUSTER, &self.redis_cluster_nodes, &cluster),
        ];
        for (name, set, addrs) in lists {
            // Set but blank (`REDIS_CLUSTER_NODES=` in a compose file): as for an empty
            // REDIS_URL, a mistake must not leave the service on the embedded store.
            if !set.is_empty() && addrs.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "{name} is set but names no address: give host:port,host:port, or unset \
                     it to run on the embedded store"
                )));
            }
        }
        if !sentinels.is_empty() && self.redis_master_name.as_deref().unwrap_or("").is_empty() {
            return bad("REDIS_SENTINELS needs REDIS_MASTER_NAME, the name the sentinels monitor the primary under");
        }
        if sentinels.is_empty() && self.redis_master_name.is_some() {
            return bad("REDIS_MASTER_NAME is set without REDIS_SENTINELS");
        }
        for (name, addrs) in [(SENTINELS, &sentinels), (CLUSTER, &cluster)] {
            if let Some(bad_addr) = addrs.iter().find(|a| !is_host_port(a)) {
                return Err(ConfigError::Invalid(format!(
                    "{name} entry `{bad_addr}` is not host:port"
                )));
            }
        }
        if let Some(url) = &self.redis_url {
            check_redis_url(url)?;
        }
        if self.redis_min_replicas_ack > 0 && given.is_empty() {
            return bad("REDIS_MIN_REPLICAS_ACK needs Redis (REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES)");
        }
        Ok(())
    }

    /// The sentinels' addresses, trimmed, empty entries dropped.
    pub fn sentinels(&self) -> Vec<String> {
        trimmed(&self.redis_sentinels)
    }

    /// The Redis Cluster's seed nodes, trimmed, empty entries dropped.
    pub fn cluster_nodes(&self) -> Vec<String> {
        trimmed(&self.redis_cluster_nodes)
    }

    /// Whether the service keeps its state in Redis (a fixed URL, through sentinels, or a
    /// cluster).
    pub fn uses_redis(&self) -> bool {
        self.redis_url.is_some() || !self.sentinels().is_empty() || !self.cluster_nodes().is_empty()
    }
}

fn trimmed(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .collect()
}

/// The schemes a Redis URL may have (redis-rs reads no other).
const REDIS_SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "valkey",
    "valkeys",
    "valkey+unix",
];

/// Refuses a `REDIS_URL` without a Redis scheme (`localhost:6379`), showing what one looks
/// like. The value is repeated only when it holds no credentials.
fn check_redis_url(url: &str) -> Result<(), ConfigError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    let secret = url.contains('@');
    let what = match (secret, scheme) {
        (_, Some(s)) if REDIS_SCHEMES.contains(&s.to_ascii_lowercase().as_str()) => {
            // The scheme is right; the rest must read as redis-rs reads it (`/abc` as a db).
            let Err(e) = url.into_connection_info() else {
                return Ok(());
            };
            let shown = if secret {
                String::new()
            } else {
                format!(" `{url}`")
            };
            format!("REDIS_URL{shown} does not parse ({e}).")
        }
        (true, _) => {
            "REDIS_URL is not a Redis URL (its value is not shown: it holds a password)".to_owned()
        }
        (false, None) => format!("REDIS_URL `{url}` has no scheme: did you mean redis://{url}?"),
        (false, Some(s)) => {
            format!("REDIS_URL `{url}` is not a Redis URL (`{s}` is not a Redis scheme)")
        }
    };
    Err(ConfigError::Invalid(format!(
        "{what} A Redis URL looks like redis://host:6379/0 (rediss:// for TLS, \
         redis://:password@host:6379/0 with a password, unix:///path/to/redis.sock for a \
         socket on this host)"
    )))
}

fn is_host_port(addr: &str) -> bool {
    matches!(addr.rsplit_once(':'), Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// A command line of `--flag=value` words (a value may hold a space), as clap reads it.
    fn parse(line: &str) -> Config {
        let words = line
            .split(" --")
            .map(|w| format!("--{}", w.trim_start_matches("--")));
        Config::parse_from(std::iter::once("x".to_owned()).chain(words))
    }

    #[test]
    fn two_ways_to_reach_redis_or_sentinels_without_a_master_name_are_refused_naming_the_clash() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "--redis-url=redis://a --redis-sentinels=a:1 --redis-master-name=m",
                Some("REDIS_URL and REDIS_SENTINELS are both set"),
            ),
            (
                "--redis-url=redis://a --redis-cluster-nodes=a:1,b:2",
                Some("REDIS_URL and REDIS_CLUSTER_NODES are both set"),
            ),
            (
                "--redis-sentinels=s:1 --redis-master-name=m --redis-cluster-nodes=a:1",
                Some("REDIS_SENTINELS and REDIS_CLUSTER_NODES are both set"),
            ),
            (
                "--redis-url=redis://a --redis-sentinels=s:1 --redis-cluster-nodes=a:1",
                Some("REDIS_URL and REDIS_SENTINELS and REDIS_CLUSTER_NODES are both set"),
            ),
            ("--redis-sentinels=a:1,b:2", Some("needs REDIS_MASTER_NAME")),
            ("--redis-master-name=m", Some("without REDIS_SENTINELS")),
            (
                "--redis-sentinels=a --redis-master-name=m",
                Some("REDIS_SENTINELS entry `a` is not host:port"),
            ),
            (
                "--redis-cluster-nodes=a:1,b",
                Some("REDIS_CLUSTER_NODES entry `b` is not host:port"),
            ),
            ("--redis-min-replicas-ack=1", Some("needs Redis")),
            (
                "--redis-cluster-nodes=",
                Some("REDIS_CLUSTER_NODES is set but names no address"),
            ),
            (
                "--redis-sentinels= , --redis-master-name=m",
                Some("REDIS_SENTINELS is set but names no address"),
            ),
            ("--redis-sentinels=a:1, b:2 --redis-master-name=m", None),
            ("--redis-url=redis://a --redis-min-replicas-ack=1", None),
            (
                "--redis-cluster-nodes=a:1, b:2,,c:3 --redis-min-replicas-ack=1",
                None,
            ),
        ];
        for (line, expected) in cases {
            let c = parse(line);
            match (c.validate(), expected) {
                (Ok(()), None) => assert!(c.uses_redis()),
                (Err(e), Some(words)) => assert!(e.to_string().contains(words), "{line}: {e}"),
                (got, _) => panic!("{line}: {got:?}"),
            }
        }
        let c = parse("--redis-cluster-nodes=a:1, b:2,,c:3");
        assert_eq!(c.cluster_nodes(), ["a:1", "b:2", "c:3"]);
    }

    #[test]
    fn a_redis_url_without_a_redis_scheme_is_refused_showing_what_one_looks_like() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "localhost:6379",
                Some("did you mean redis://localhost:6379?"),
            ),
            (
                "http://localhost:6379",
                Some("`http` is not a Redis scheme"),
            ),
            ("user:secret@localhost:6379", Some("its value is not shown")),
            ("redis://localhost:6379/0", None),
            ("REDISS://h:6380", None),
            ("unix:///run/redis.sock", None),
        ];
        for (url, expected) in cases {
            let c = Config::parse_from(["x", "--redis-url", url]);
            match (c.validate(), expected) {
                (Ok(()), None) => {}
                (Err(e), Some(words)) => {
                    let e = e.to_string();
                    assert!(
                        e.contains(words) && e.contains("redis://host:6379/0"),
                        "{e}"
                    );
                    assert!(!e.contains("secret"), "{e}");
                }
                (got, _) => panic!("{url}: {got:?}"),
            }
        }
    }
}
