//! The environment's setting names: a variable that nearly spells a known setting
//! (`FEED_DIR` for `FEEDS_DIR`), or any unknown `REDIS_*` one (`REDIS_URI`, which would
//! quietly leave the service on the embedded, non-durable store), stops start-up with a
//! did-you-mean instead of being silently ignored. The known names are read from the
//! configuration's own definition, so a new setting is known the moment it exists.

use clap::CommandFactory;

use super::{Config, ConfigError};
use crate::nearest::edit_distance;

/// Names read outside the configuration struct.
const ALSO_READ: &[&str] = &["RUST_LOG"];

/// A family of names where any unknown member is a mistake, however far from a known one.
const CLAIMED_PREFIX: &str = "REDIS_";

/// Every environment variable the service reads.
pub fn known_names() -> Vec<String> {
    let config = Config::command();
    let from_config = config
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .map(|name| name.to_string_lossy().into_owned());
    let mut names: Vec<String> = from_config
        .chain(ALSO_READ.iter().map(|n| (*n).to_owned()))
        .collect();
    names.sort();
    names
}

/// Refuses the first of `names` that is a near miss of a known setting, suggesting it.
pub fn check_names<I, K>(names: I) -> Result<(), ConfigError>
where
    I: IntoIterator<Item = K>,
    K: AsRef<std::ffi::OsStr>,
{
    let known = known_names();
    for name in names {
        let name = name.as_ref().to_string_lossy();
        if let Some(nearest) = near_miss(&name, &known) {
            let family: Vec<&str> = known
                .iter()
                .map(String::as_str)
                .filter(|k| first_word(k) == first_word(nearest))
                .collect();
            return Err(ConfigError::Invalid(format!(
                "unknown environment variable {name}: did you mean {nearest}? (known: {})",
                family.join(", ")
            )));
        }
    }
    Ok(())
}

/// The known name `name` was most likely meant as, when it is not itself known: any name in
/// the claimed family, or one within an edit or two of a known name (two for long names),
/// whatever its case (`redis_url` is read by nobody: names are case-sensitive).
fn near_miss<'k>(name: &str, known: &'k [String]) -> Option<&'k str> {
    if known.iter().any(|k| k == name) {
        return None;
    }
    let upper = name.to_ascii_uppercase();
    let claimed = upper.starts_with(CLAIMED_PREFIX);
    let (nearest, distance) = known
        .iter()
        .filter(|k| !claimed || k.starts_with(CLAIMED_PREFIX))
        .map(|k| (k.as_str(), edit_distance(k, &upper)))
        .min_by_key(|(_, d)| *d)?;
    let close = distance <= if nearest.len() >= 12 { 2 } else { 1 };
    (close || claimed).then_some(nearest)
}

fn first_word(name: &str) -> &str {
    name.split('_').next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_miss_of_a_known_setting_is_refused_with_the_name_it_meant() {
        let cases = [
            ("REDIS_URI", "did you mean REDIS_URL"),
            ("REDIS_PASSWROD", "did you mean REDIS_PASSWORD"),
            ("REDIS_SOMETHING_ELSE", "did you mean REDIS_"),
            ("FEED_DIR", "did you mean FEEDS_DIR"),
            ("API_TOKEN", "did you mean API_TOKENS"),
            ("MAX_CONCURENT_JOBS", "did you mean MAX_CONCURRENT_JOBS"),
            ("STALE_AFTER_SECOND", "did you mean STALE_AFTER_SECONDS"),
            ("redis_url", "did you mean REDIS_URL"),
            ("Redis_Cluster_Nodes", "did you mean REDIS_CLUSTER_NODES"),
            ("redis_uri", "did you mean REDIS_URL"),
            ("feeds_dir", "did you mean FEEDS_DIR"),
            ("max_concurrent_jobs", "did you mean MAX_CONCURRENT_JOBS"),
        ];
        for (name, words) in cases {
            let e = check_names(["PATH", name]).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains(words), "{name}: {e}");
        }
        let e = check_names(["REDIS_URI"]).unwrap_err().to_string();
        assert!(
            e.contains("known: REDIS_CLUSTER_NODES, REDIS_MASTER_NAME, "),
            "{e}"
        );
    }

    #[test]
    fn known_settings_and_unrelated_variables_pass() {
        let unrelated = [
            "PATH",
            "HOME",
            "HOST",
            "HOSTNAME",
            "TERM",
            "LANG",
            "USER",
            "PWD",
            "SHLVL",
            "TZ",
            "RUST_BACKTRACE",
            "XREDIS_URI",
            "CARGO",
            "FEED",
            "PORTS_OPEN",
            "http_proxy",
            "no_proxy",
            "home",
            "path",
            "xredis_uri",
        ];
        let known = known_names();
        assert!(known.iter().any(|k| k == "FEEDS_DIR"), "{known:?}");
        assert!(check_names(known.iter().map(String::as_str).chain(unrelated)).is_ok());
    }
}
