//! The console's writes beside a job's life (`bulk::Audit`): a bulk answer kept for its
//! `Idempotency-Key` (one string with the job TTL: `<fingerprint> <answer>`).

use super::super::bulk::{Audit, KeptAnswer};
use super::super::store::{BoxFuture, StoreError};
use super::RedisStore;

impl RedisStore {
    async fn read_answer(&self, slot: &str) -> Result<Option<KeptAnswer>, StoreError> {
        let kept: Option<String> = self.read_key(self.keys.bulk(slot)).await?;
        kept.map(|raw| {
            raw.split_once(' ')
                .map(|(f, a)| (f.to_owned(), a.to_owned()))
                .ok_or_else(|| StoreError::Corrupt("a kept bulk answer is malformed".into()))
        })
        .transpose()
    }

    async fn write_answer(
        &self,
        slot: &str,
        fingerprint: &str,
        answer: &str,
    ) -> Result<(), StoreError> {
        let mut conn = self.connection().await?;
        let _: () = self
            .bounded(
                redis::cmd("SET")
                    .arg(self.keys.bulk(slot))
                    .arg(format!("{fingerprint} {answer}"))
                    .arg("EX")
                    .arg(self.settings.ttl_secs())
                    .query_async(&mut conn),
            )
            .await?;
        Ok(())
    }
}

impl Audit for RedisStore {
    fn recall_answer<'a>(
        &'a self,
        slot: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>> {
        Box::pin(self.read_answer(slot))
    }

    fn keep_answer<'a>(
        &'a self,
        slot: &'a str,
        fingerprint: &'a str,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.write_answer(slot, fingerprint, answer))
    }
}
