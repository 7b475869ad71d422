//! What the console's bulk actions keep in a store beside a job's life: a bulk call's answer
//! kept for its `Idempotency-Key` while the job TTL lasts. Both stores keep it the same way.
//! (A retried job is marked `retried_by`/`retried_as` by the create of its retry, in the same
//! store step.)

use super::store::{BoxFuture, StoreError};

/// A bulk answer kept under its slot: the fingerprint of the body that made it, and the
/// answer's JSON text.
pub type KeptAnswer = (String, String);

/// The console's writes a store keeps; every `JobStore` is one.
pub trait Audit {
    /// The answer kept under `slot` (a bulk call's action, caller and `Idempotency-Key`),
    /// while the job TTL lasts.
    fn recall_answer<'a>(
        &'a self,
        slot: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>>;

    /// Keeps `answer`, made from a body of `fingerprint`, under `slot` for the job TTL.
    fn keep_answer<'a>(
        &'a self,
        slot: &'a str,
        fingerprint: &'a str,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}
