//! The event streams' share of the connections: at most `MAX_EVENT_STREAMS` open on this
//! instance, and `MAX_EVENT_STREAMS_PER_TENANT` for one tenant, so held streams never take
//! the connections that requests (and other tenants) need. A stream holds a [`StreamPermit`]
//! for its life; dropping it — the stream ended, or its client went away — gives the place
//! back. Counted per process: each replica has its own connections to protect.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::ApiError;
use crate::jobs::TenantId;

/// How many streams may be open, and how many are.
pub struct StreamBudget {
    total: usize,
    per_tenant: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_tenant: HashMap<TenantId, usize>,
}

impl StreamBudget {
    pub fn new(total: usize, per_tenant: usize) -> Arc<Self> {
        Arc::new(Self {
            total,
            per_tenant,
            open: Mutex::default(),
        })
    }

    /// A place for one more stream of `tenant`: 429 `too_many_streams` when the tenant holds
    /// its share, else 503 `overloaded` when the instance holds all it may.
    pub fn admit(self: &Arc<Self>, tenant: &TenantId) -> Result<StreamPermit, ApiError> {
        let mut open = self.lock();
        let held = open.by_tenant.get(tenant).copied().unwrap_or(0);
        if held >= self.per_tenant {
            return Err(ApiError::TenantStreamsFull(tenant.clone()));
        }
        if open.total >= self.total {
            return Err(ApiError::StreamsFull);
        }
        open.total += 1;
        open.by_tenant.insert(tenant.clone(), held + 1);
        Ok(StreamPermit {
            budget: self.clone(),
            tenant: tenant.clone(),
        })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        // The counts are updated whole under the lock; a panic elsewhere cannot leave them
        // half-written, so a poisoned lock's data is still right.
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One stream's place in the budget, given back when dropped.
pub struct StreamPermit {
    budget: Arc<StreamBudget>,
    tenant: TenantId,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.budget.lock();
        open.total -= 1;
        if let Some(held) = open.by_tenant.get_mut(&self.tenant) {
            *held -= 1;
            if *held == 0 {
                open.by_tenant.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_gets_its_share_the_instance_its_total_and_a_dropped_stream_gives_its_place_back() {
        let budget = StreamBudget::new(3, 2);
        let [a, b] = ["a", "b"].map(|t| TenantId::parse(t).expect("a valid tenant id"));
        let first = budget.admit(&a).expect("a's first");
        let _second = budget.admit(&a).expect("a's second");
        assert!(matches!(
            budget.admit(&a),
            Err(ApiError::TenantStreamsFull(_))
        ));
        let _third = budget.admit(&b).expect("b's first");
        assert!(matches!(budget.admit(&b), Err(ApiError::StreamsFull)));
        drop(first);
        assert_eq!(budget.open(), 2);
        let _again = budget.admit(&a).expect("a's place came back");
        assert_eq!(budget.open(), 3);
    }
}
