//! Tenant watches: the in-process fan-out of one tenant's job changes to every open stream
//! that follows it (a `tokio::sync::broadcast` channel per watched tenant).
//!
//! A store feeds it: the embedded store at each timeline write, Redis from the tenant's
//! pub/sub channel, which its listener subscribes to only while a watch of that tenant is
//! held here (`wanted`), and drops when the last one goes.
//!
//! And `wait=true` requests (`Waiters`): each its own wake-up, woken when its job ends, so
//! two requests waiting for one job (a replayed `Idempotency-Key`, a join) both wake.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, Notify};

use super::timeline::JobChange;
use super::{JobId, TenantId};

/// Changes buffered per watcher; one that falls further behind gets `Resync` (it lagged).
const CHANGE_BUFFER: usize = 1024;

/// What a watcher of a tenant hears.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Job(JobChange),
    /// Changes may have been missed (the subscription was renewed): read again.
    Resync,
}

/// Each watched tenant's channel, and how many watches it has.
type Tenants = HashMap<TenantId, (broadcast::Sender<Change>, usize)>;

/// The watched tenants of one process, and their channels.
#[derive(Default)]
pub struct Watchers {
    tenants: Mutex<Tenants>,
    /// Told whenever the set of watched tenants changed (Redis: the listener subscribes or
    /// unsubscribes); none for the embedded store.
    changed: Option<mpsc::UnboundedSender<()>>,
    /// The tenants whose channel the store is subscribed to now (Redis).
    live: Mutex<HashSet<TenantId>>,
    /// Signalled whenever `live` changed.
    synced: Notify,
}

impl Watchers {
    /// Watchers whose set changes are told to `changed` (the Redis listener).
    pub fn telling(changed: mpsc::UnboundedSender<()>) -> Self {
        Self {
            changed: Some(changed),
            ..Self::default()
        }
    }

    /// Records the tenants whose channel the store is subscribed to now.
    pub fn set_live(&self, tenants: HashSet<TenantId>) {
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = tenants;
        self.synced.notify_waiters();
    }

    fn is_live(&self, tenant: &TenantId) -> bool {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(tenant)
    }

    /// Waits (at most `within`) until the store is subscribed to `tenant`'s channel, so a
    /// read made after it cannot miss a change published in between. Whether it is.
    pub async fn until_live(&self, tenant: &TenantId, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let synced = self.synced.notified();
            tokio::pin!(synced);
            synced.as_mut().enable();
            if self.is_live(tenant) {
                return true;
            }
            if tokio::time::timeout_at(deadline, synced).await.is_err() {
                return false;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tenants> {
        // Every critical section below is a map update that cannot panic half-way.
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A watch of `tenant`'s changes, held until it is dropped.
    pub fn watch(self: &Arc<Self>, tenant: &TenantId) -> TenantWatch {
        let (changes, first) = {
            let mut tenants = self.lock();
            let entry = tenants
                .entry(tenant.clone())
                .or_insert_with(|| (broadcast::channel(CHANGE_BUFFER).0, 0));
            entry.1 += 1;
            (entry.0.subscribe(), entry.1 == 1)
        };
        if first {
            self.tell();
        }
        TenantWatch {
            changes,
            tenant: tenant.clone(),
            watchers: self.clone(),
        }
    }

    fn tell(&self) {
        if let Some(changed) = &self.changed {
            let _ = changed.send(());
        }
    }

    /// The tenants watched now (the channels Redis must be subscribed to).
    pub fn wanted(&self) -> Vec<TenantId> {
        self.lock().keys().cloned().collect()
    }

    /// Hands a change to the watchers of its tenant, if there are any.
    pub fn send(&self, change: JobChange) {
        let Ok(tenant) = TenantId::parse(&change.tenant_id) else {
            return;
        };
        if let Some((tx, _)) = self.lock().get(&tenant) {
            let _ = tx.send(Change::Job(change));
        }
    }

    /// Tells every watcher to read again (the subscription was renewed).
    pub fn resync(&self) {
        for (tx, _) in self.lock().values() {
            let _ = tx.send(Change::Resync);
        }
    }

    fn unwatch(&self, tenant: &TenantId) {
        let last = {
            let mut tenants = self.lock();
            match tenants.get_mut(tenant) {
                Some(entry) if entry.1 > 1 => {
                    entry.1 -= 1;
                    false
                }
                Some(_) => tenants.remove(tenant).is_some(),
                None => false,
            }
        };
        if last {
            self.tell();
        }
    }
}

/// One watcher's receiver of a tenant's changes; dropping it ends the watch.
pub struct TenantWatch {
    pub changes: broadcast::Receiver<Change>,
    tenant: TenantId,
    watchers: Arc<Watchers>,
}

impl Drop for TenantWatch {
    fn drop(&mut self) {
        self.watchers.unwatch(&self.tenant);
    }
}

/// The `wait=true` requests of this process, by the job each waits for: every one has its
/// own wake-up (a `Notify` holds one permit, so an end told between a request's read and
/// its wait is not lost), and a job's entry goes with its last request.
#[derive(Default)]
pub struct Waiters {
    jobs: Mutex<HashMap<JobId, Vec<Arc<Notify>>>>,
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Vec<Arc<Notify>>>> {
        // Every critical section below is a map update that cannot panic half-way.
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request's place among the waiters of `id`, held until it is dropped.
    pub fn wait_for(&self, id: JobId) -> Waiting<'_> {
        let wake = Arc::new(Notify::new());
        self.lock().entry(id).or_default().push(wake.clone());
        Waiting {
            waiters: self,
            id,
            wake,
        }
    }

    /// Job `id` ended: every request waiting for it wakes.
    pub fn ended(&self, id: &JobId) {
        for wake in self.lock().get(id).into_iter().flatten() {
            wake.notify_one();
        }
    }

    /// Every request wakes and reads its job again (ends may have been missed).
    pub fn wake_all(&self) {
        for wake in self.lock().values().flatten() {
            wake.notify_one();
        }
    }

    /// How many requests wait, and for how many jobs.
    pub fn count(&self) -> (usize, usize) {
        let jobs = self.lock();
        (jobs.values().map(Vec::len).sum(), jobs.len())
    }
}

/// One request's wait for a job's end; dropping it leaves the waiters.
pub struct Waiting<'a> {
    waiters: &'a Waiters,
    id: JobId,
    /// Told when the job ends (or everything must be read again).
    pub wake: Arc<Notify>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut jobs = self.waiters.lock();
        if let Some(all) = jobs.get_mut(&self.id) {
            all.retain(|w| !Arc::ptr_eq(w, &self.wake));
            if all.is_empty() {
                jobs.remove(&self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{JobId, Waiters};

    #[tokio::test]
    async fn every_request_waiting_for_a_job_wakes_and_the_last_to_leave_takes_its_entry() {
        let waiters = Waiters::default();
        let (id, other) = (JobId::new(), JobId::new());
        let first = waiters.wait_for(id);
        let second = waiters.wait_for(id);
        let elsewhere = waiters.wait_for(other);
        assert_eq!(waiters.count(), (3, 2));
        waiters.ended(&id);
        let woken = Duration::from_secs(5);
        tokio::time::timeout(woken, first.wake.notified())
            .await
            .expect("the first request wakes");
        tokio::time::timeout(woken, second.wake.notified())
            .await
            .expect("the second request wakes too");
        drop(first);
        assert_eq!(waiters.count(), (2, 2), "the second still waits");
        drop(second);
        drop(elsewhere);
        assert_eq!(waiters.count(), (0, 0), "nothing is left behind");
        let many: Vec<_> = (0..100).map(|_| waiters.wait_for(id)).collect();
        assert_eq!(waiters.count(), (100, 1));
        drop(many);
        assert_eq!(waiters.count(), (0, 0), "nor after a hundred");
    }
}
