//! The console's writes beside a job's life (`bulk::Audit`), kept as jobs/redis/audit.rs
//! keeps them: bulk answers kept for their `Idempotency-Key` until the job TTL passes; and
//! the mark a create of a retry leaves on the job it retries.

use super::super::bulk::{Audit, KeptAnswer};
use super::super::store::{BoxFuture, StoreError};
use super::super::{now_ms, JobId};
use super::state::{Expiring, State};
use super::MemoryStore;

impl State {
    /// An ended job records who retried it and as which job (a later retry overwrites
    /// both); a record gone since is not made again.
    pub(super) fn note_retried(&mut self, old: &JobId, by: &str, new: JobId, now: u64) {
        if let Some(entry) = self.job_mut(old, now) {
            entry.value.snapshot.retried_by = Some(by.to_owned());
            entry.value.snapshot.retried_as = Some(new);
        }
    }
}

impl MemoryStore {
    fn answer(&self, slot: &str) -> Option<KeptAnswer> {
        let now = now_ms();
        self.state()
            .answers
            .get(slot)
            .filter(|e| e.expires_ms > now)
            .map(|e| e.value.clone())
    }

    fn keep(&self, slot: &str, fingerprint: &str, answer: &str) {
        let expires_ms = self.expiry(now_ms());
        let value = (fingerprint.to_owned(), answer.to_owned());
        let kept = Expiring { value, expires_ms };
        self.state().answers.insert(slot.to_owned(), kept);
    }
}

impl Audit for MemoryStore {
    fn recall_answer<'a>(
        &'a self,
        slot: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>> {
        Box::pin(async move { Ok(self.answer(slot)) })
    }

    fn keep_answer<'a>(
        &'a self,
        slot: &'a str,
        fingerprint: &'a str,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.keep(slot, fingerprint, answer);
            Ok(())
        })
    }
}
