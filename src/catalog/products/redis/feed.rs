//! The Redis catalogue's change feed (`products::feed`): a sorted set of product keys by
//! the position of their last write, and a hash holding the position (`seq`), the position
//! of the last pairing state saved with it (`since`) and of the last write not noted since
//! it overflowed (`overflow`). Writes note their keys in the script that writes them
//! (`fenced_write.lua`), or in the same transaction (`note.lua`); the swap of a pairing state
//! forgets what it read (`swap_table.lua`).

use std::sync::LazyLock;

use super::RedisCatalog;
use crate::catalog::products::feed::Changed;
use crate::catalog::products::record::ProductKey;
use crate::catalog::products::store::CatalogStoreError;
use crate::jobs::TenantId;

/// The feed's one operation, loaded in front of each script that notes changes.
pub(super) static FEED_LUA: &str = include_str!("feed.lua");

/// Notes keys written or removed without a script of their own: sent whole with `EVAL`
/// inside their write's transaction (a script's SHA may be unknown inside `MULTI`).
static NOTE: LazyLock<String> =
    LazyLock::new(|| format!("{FEED_LUA}\n{}", include_str!("note.lua")));

/// The feed's position, the position the last pairing state read it at, and that of its
/// last write not noted (`seq`, `since`, `overflow`), as Redis holds them.
type FeedAt = (Option<u64>, Option<u64>, Option<u64>);

impl RedisCatalog {
    /// Adds to `pipe` (an atomic one, after its write) the note of `keys` (nothing for
    /// none) in the tenant's change feed, so that the write and its note happen together.
    pub(super) fn note_in(&self, pipe: &mut redis::Pipeline, tenant: &TenantId, keys: &[&str]) {
        if keys.is_empty() {
            return;
        }
        pipe.cmd("EVAL")
            .arg(NOTE.as_str())
            .arg(2)
            .arg(self.keys.changes(tenant))
            .arg(self.keys.changes_at(tenant))
            .arg(self.feed_bound)
            .arg(keys)
            .ignore();
    }

    /// The feed and its position, read in one step.
    pub(super) fn read_changed(&self, tenant: &TenantId) -> Result<Changed, CatalogStoreError> {
        let (feed, at) = (self.keys.changes(tenant), self.keys.changes_at(tenant));
        let (at, keys): (FeedAt, Vec<String>) = self.query_pipe(
            redis::pipe()
                .atomic()
                .cmd("HMGET")
                .arg(&at)
                .arg(&["seq", "since", "overflow"])
                .cmd("ZRANGE")
                .arg(&feed)
                .arg(0)
                .arg(-1),
        )?;
        let (seq, since, overflow) = at;
        let keys = match (since, overflow) {
            (Some(_), None) => {
                let mut keys = keys
                    .iter()
                    .map(|k| ProductKey::parse(k).map_err(CatalogStoreError::Corrupt))
                    .collect::<Result<Vec<_>, _>>()?;
                keys.sort_unstable();
                Some(keys)
            }
            _ => None,
        };
        Ok(Changed {
            upto: seq.unwrap_or(0),
            keys,
        })
    }
}
