//! The change feed: which products were written or removed since the tenant's last pair
//! saved its state, so that an incremental pair reads those instead of every product's
//! version. Each write that changes a product's version (an upsert that changed its content,
//! an enrichment that changed, a removal) notes its keys under a position that grows with
//! every write; a pair reads the feed and its position `upto` first, and its save forgets
//! what was noted up to `upto` in the same step as the state is put in place, so a change
//! noted after the pair read the feed stays for the next one.
//!
//! Bounded: more than the store's bound (`CHANGE_FEED_MAX` by default) of keys at once and
//! the feed *overflows*: it forgets its keys and, until a pair that read it after the
//! overflow saves, answers that it cannot say (`Changed::keys` is `None`), so the next pair
//! lists every product's version as it would without a feed. The same before the first
//! save of a pairing state: a feed counts only from a state it was saved with.

use std::collections::HashMap;

use super::record::ProductKey;

/// The most products a tenant's feed notes at once before it overflows (see the module
/// doc): 10 % of a million-product catalogue, about 5 MB in Redis. Beyond that share an
/// incremental pair is not the cheaper one anyway (the default `PAIR_FULL_AFTER_SHARE` is
/// 20 % of the catalogue).
pub const CHANGE_FEED_MAX: usize = 100_000;

/// What the feed says changed since the tenant's pairing state was saved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changed {
    /// The feed's position when it was read: a save with it forgets what was noted up to here.
    pub upto: u64,
    /// The products written or removed since, in key order, each once; `None` when the feed
    /// cannot say (it overflowed, or no pairing state was saved with it since it began).
    pub keys: Option<Vec<ProductKey>>,
}

/// The embedded store's feed of one tenant.
#[derive(Debug, Default)]
pub(super) struct Feed {
    /// The position of the last write noted.
    at: u64,
    /// Each product noted, with the position of its last write.
    keys: HashMap<ProductKey, u64>,
    /// A pairing state was saved with the feed: it holds every change since that state.
    tracking: bool,
    /// The position of the last write not noted since the feed overflowed.
    overflowed: Option<u64>,
}

impl Feed {
    /// Notes a write of `keys` (nothing for none), overflowing past `bound`.
    pub(super) fn note<'a>(
        &mut self,
        keys: impl IntoIterator<Item = &'a ProductKey>,
        bound: usize,
    ) {
        let mut keys = keys.into_iter().peekable();
        if keys.peek().is_none() {
            return;
        }
        self.at += 1;
        if self.overflowed.is_none() {
            for key in keys {
                self.keys.insert(key.clone(), self.at);
            }
            if self.keys.len() <= bound {
                return;
            }
            self.keys = HashMap::new();
        }
        self.overflowed = Some(self.at);
    }

    pub(super) fn read(&self) -> Changed {
        let usable = self.tracking && self.overflowed.is_none();
        Changed {
            upto: self.at,
            keys: usable.then(|| {
                let mut keys: Vec<ProductKey> = self.keys.keys().cloned().collect();
                keys.sort_unstable();
                keys
            }),
        }
    }

    /// A pairing state that read the feed at `upto` was saved: what was noted up to there
    /// is in it.
    pub(super) fn saved(&mut self, upto: u64) {
        self.keys.retain(|_, at| *at > upto);
        if self.overflowed.is_some_and(|at| at <= upto) {
            self.overflowed = None;
        }
        self.tracking = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_counts_only_from_a_saved_state_and_forgets_up_to_what_the_save_read() {
        let [a, b] = ["a", "b"].map(|k| ProductKey::parse(k).expect("a valid key"));
        let mut feed = Feed::default();
        feed.note([&a], 10);
        assert_eq!(feed.read().keys, None);
        let upto = feed.read().upto;
        feed.note([&b], 10);
        feed.saved(upto);
        assert_eq!(feed.read().keys, Some(vec![b.clone()]));
        feed.note([&a, &b], 10);
        assert_eq!(feed.read().keys, Some(vec![a, b]));
    }

    #[test]
    fn an_overflowed_feed_cannot_say_until_a_save_that_read_it_after_the_overflow() {
        let [a, b, c] = ["a", "b", "c"].map(|k| ProductKey::parse(k).expect("a valid key"));
        let mut feed = Feed::default();
        feed.saved(0);
        feed.note([&a, &b], 1);
        let before = feed.read();
        assert_eq!(before.keys, None);
        feed.note([&c], 1);
        feed.saved(before.upto);
        assert_eq!(
            feed.read().keys,
            None,
            "a write after the read was not noted"
        );
        feed.saved(feed.read().upto);
        assert_eq!(feed.read().keys, Some(vec![]));
    }
}
