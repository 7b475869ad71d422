//! What the console's bulk actions keep in a store beside a job's life: an ended job marked
//! as retried (`retried_by`, `retried_as`), and a bulk call's answer kept for its
//! `Idempotency-Key` while the job TTL lasts. Both stores keep them the same way.

use super::store::{BoxFuture, StoreError};
use super::JobId;

/// A bulk answer kept under its slot: the fingerprint of the body that made it, and the
/// answer's JSON text.
pub type KeptAnswer = (String, String);

/// The console's writes a store keeps; every `JobStore` is one.
pub trait Audit {
    /// An ended job records that `by` retried it as `new` (`retried_by`, `retried_as`; a
    /// later retry overwrites both). A job whose record is gone is left gone.
    fn mark_retried<'a>(
        &'a self,
        old: &'a JobId,
        by: &'a str,
        new: &'a JobId,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

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
