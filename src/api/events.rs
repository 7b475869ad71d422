//! `GET /catalog/jobs/{job_id}/events` (a job's timeline, as JSON or live as Server-Sent
//! Events) and `GET /catalog/events?tenant_id=T` (every change of a tenant's jobs, live).
//!
//! A live stream watches the job's tenant BEFORE it reads the timeline, so every event after
//! the read is heard. A store tells a job's events in id order, and ids count every event, so
//! a heard progress tick whose id follows the last one sent is sent as heard; any other event
//! makes the stream read the timeline after the last id sent, up to the heard one only (the
//! timeline samples ticks: one past it could hide ticks not heard yet). So a stream sends each
//! event once, in order, every tick after its replay included. Streams end when the process
//! starts shutting down, so the server's drain never waits on them.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header::{ACCEPT, CACHE_CONTROL};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use serde::Serialize;
use serde_json::Map;
use tokio::sync::broadcast::error::RecvError;
use utoipa::ToSchema;

use super::answers::{BadField, JobNotFound, JobPath, OtherTenant, StreamRefusals};
use super::call::Call;
use super::error::{ApiError, ErrorBody};
use super::extract::{named_tenant, refuse_unknown, single_header, take_single, InPath};
use super::jobs::MaybeJobId;
use super::streams::StreamPermit;
use crate::jobs::runner::Runner;
use crate::jobs::store::JobStore;
use crate::jobs::timeline::{EventId, JobChange, TimelineEvent, LAST_TYPES};
use crate::jobs::watch::{Change, TenantWatch};
use crate::jobs::{JobId, Snapshot};

/// How often an idle stream sends a comment: well under the idle timeouts of common
/// proxies and load balancers (60 s), so they keep the connection open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How often a job stream reads the timeline again without being told to: covers a
/// message published while the tenant's subscription was being renewed (a failover).
const RECHECK: Duration = Duration::from_secs(5);
/// The header a reconnecting browser sends with the last id it received (as errors name it;
/// header names are matched whatever their case).
const LAST_EVENT_ID: &str = "Last-Event-ID";
/// Asks nginx-like proxies not to buffer the stream (they would hold events back).
const NO_PROXY_BUFFERING: (HeaderName, HeaderValue) = (
    HeaderName::from_static("x-accel-buffering"),
    HeaderValue::from_static("no"),
);

/// A job's timeline, oldest first.
#[derive(Serialize, ToSchema)]
#[schema(as = JobTimeline)]
pub struct Timeline {
    events: Vec<TimelineEvent>,
}

/// A job's timeline: `{"events": […]}`, or with `Accept: text/event-stream` the events so far
/// and then each new one live, ending after `finished`.
#[utoipa::path(get, path = "/catalog/jobs/{job_id}/events", tag = "jobs",
    params(
        JobPath,
        ("after" = Option<String>, Query, description = "Only the events after this event id (`<ms>-<seq>`); a `Last-Event-ID` header takes its place when a stream reconnects."),
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event a stream received: it resumes right after it."),
    ),
    responses(
        (status = 200, description = "The timeline, oldest first (at most the newest 100 events): as JSON, or with `Accept: text/event-stream` as Server-Sent Events (`id:` the event id, `event:` its type, `data:` the event's JSON), live until the job's `finished` (or `superseded`) event; keep-alive comments every 15 s.",
            content((Timeline = "application/json"), (String = "text/event-stream"))),
        (status = 204, description = "A stream asked for after the job ended and after its last event: nothing more will come (browsers stop reconnecting)."),
        (status = 400, description = "`duplicate_header`: an `Authorization`, `Idempotency-Key` or `Last-Event-ID` header given more than once (which event to resume after would be a guess).", body = ErrorBody),
        (status = 422, description = "`invalid_field` (a bad `tenant_id`, `after` or `Last-Event-ID`) or `unknown_field` (any other query field), with `field`.", body = ErrorBody),
        JobNotFound, StreamRefusals,
    ))]
pub async fn job_events(
    InPath(id): InPath<MaybeJobId>,
    headers: HeaderMap,
    call: Call,
) -> Result<Response, ApiError> {
    let mut fields = call.query()?;
    let named = named_tenant(&mut fields)?;
    let after = take_single(&mut fields, "after")?;
    refuse_unknown(&fields, "tenant_id and after")?;
    // Both are checked, whichever is used: a bad `after` is refused even when a reconnecting
    // stream's Last-Event-ID takes its place.
    let after = after.map(|v| event_id("after", v.as_str())).transpose()?;
    let after = match single_header(&headers, LAST_EVENT_ID)? {
        Some(header) => Some(event_id(LAST_EVENT_ID, header.to_str().ok())?),
        None => after,
    };
    let id = id?;
    let Call { app, caller, .. } = call;
    let job = super::jobs::visible(&app, &caller, &id, named).await?;
    if !wants_stream(&headers) {
        let events = app.store.timeline(&id, after).await?;
        return Ok(Json(Timeline { events }).into_response());
    }
    // Watch first, then read: an event written in between is heard (and read again).
    let watch = app.store.watch_tenant(&job.tenant_id).await;
    let events = app.store.timeline(&id, after).await?;
    if events.is_empty() && has_ended(&*app.store, &job).await? {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    // Only a stream that will stay open takes a place: "nothing more" is never refused.
    let permit = app.guard.streams.admit(&job.tenant_id)?;
    let follow = Follow {
        store: app.store.clone(),
        runner: app.runner.clone(),
        id,
        pending: events.into(),
        last: after,
        watch,
        done: false,
        _permit: permit,
    };
    Ok(live(stream::unfold(follow, Follow::next)))
}

/// Every change of a tenant's jobs, live: `id:` the timeline event's id, `event:` its type,
/// `data:` `{"id","type","job_id","tenant_id","kind","status","percent","step"}`.
#[utoipa::path(get, path = "/catalog/events", tag = "jobs",
    params(
        ("tenant_id" = String, Query, description = "The tenant whose jobs to follow."),
        ("Last-Event-ID" = Option<String>, Header, description = "Sent by a reconnecting `EventSource`: the stream cannot replay what it missed, so it starts with `event: resync`."),
    ),
    responses(
        (status = 200, description = "Server-Sent Events, one per timeline event of any of the tenant's jobs (on any replica), until the client goes away or the service shuts down; `event: resync` (data `{}`) when changes may have been missed (re-read the listing): first on a reconnect (a `Last-Event-ID` header), then whenever its subscription was renewed or it fell behind; keep-alive comments every 15 s.",
            body = String, content_type = "text/event-stream"),
        (status = 400, description = "`duplicate_header`: an `Authorization` or `Last-Event-ID` header given more than once.", body = ErrorBody),
        OtherTenant, BadField, StreamRefusals,
    ))]
pub async fn tenant_events(headers: HeaderMap, call: Call) -> Result<Response, ApiError> {
    let (tenant, _) = call.tenant_query(&[])?;
    // A reconnect (an `EventSource` sends the last id it saw) may have missed changes while it
    // was away, and a tenant stream keeps none to replay: it starts with a resync.
    let reconnect = single_header(&headers, LAST_EVENT_ID)?.is_some();
    let app = call.app;
    let permit = app.guard.streams.admit(&tenant)?;
    app.store.ping().await?;
    let watch = app.store.watch_tenant(&tenant).await;
    let runner = app.runner.clone();
    // The permit lives in the stream's state: the place is given back when the stream ends.
    Ok(live(stream::unfold(
        (watch, runner, permit, reconnect),
        |(mut watch, runner, permit, reconnect)| async move {
            if reconnect {
                return Some((Ok(resync()), (watch, runner, permit, false)));
            }
            let event = tokio::select! {
                () = runner.closing() => return None,
                change = watch.changes.recv() => match change {
                    Ok(Change::Job(c)) => Event::default()
                        .id(&c.id)
                        .event(&c.kind_of_event)
                        .data(serde_json::to_string(&c).expect("a change serialises")),
                    Ok(Change::Resync) | Err(RecvError::Lagged(_)) => resync(),
                    Err(RecvError::Closed) => return None,
                },
            };
            Some((Ok::<_, Infallible>(event), (watch, runner, permit, false)))
        },
    )))
}

/// The tenant stream's word that changes may have been missed: re-read the listing.
fn resync() -> Event {
    Event::default().event("resync").data("{}")
}

/// An SSE answer: keep-alives, and no buffering on the way.
fn live(events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE));
    (
        [
            NO_PROXY_BUFFERING,
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        sse,
    )
        .into_response()
}

fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// A resume id, checked whole before any store call: a store must never see client input it
/// could fail on and report as its own failure (a 503 and a store error metric).
fn event_id(field: &str, raw: Option<&str>) -> Result<EventId, ApiError> {
    raw.and_then(|r| r.trim().parse().ok()).ok_or_else(|| {
        ApiError::invalid(
            field,
            format!("{field} must be an event id as the timeline gives them (<ms>-<seq>, <ms> no later than the year 9999)"),
        )
    })
}

/// Whether nothing more will be written to the job's timeline: it ended, or its last event
/// says so (`superseded`).
async fn has_ended(store: &dyn JobStore, job: &Snapshot) -> Result<bool, ApiError> {
    if job.status.is_finished() {
        return Ok(true);
    }
    let all = store.timeline(&job.job_id, None).await?;
    Ok(all.last().is_some_and(TimelineEvent::is_last))
}

/// One job stream's state: what is left to send, and the last id sent.
struct Follow {
    store: Arc<dyn JobStore>,
    runner: Runner,
    id: JobId,
    pending: VecDeque<TimelineEvent>,
    last: Option<EventId>,
    watch: TenantWatch,
    /// The last event was sent: the stream ends.
    done: bool,
    /// This stream's place in the budget, given back when it ends.
    _permit: StreamPermit,
}

impl Follow {
    /// The next event to send, waiting for it when there is none; `None` ends the stream.
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                let id = event.event_id();
                if self.last.is_some() && id <= self.last {
                    continue; // sent already
                }
                self.last = id;
                self.done = event.is_last();
                return Some((Ok(sse_event(&event)), self));
            }
            if self.done {
                return None;
            }
            let wake = tokio::select! {
                () = self.runner.closing() => return None,
                change = self.watch.changes.recv() => match change {
                    Ok(Change::Job(c)) if c.job_id != self.id.to_string() => continue,
                    Ok(Change::Job(c)) => match self.hear(c) {
                        Some(wake) => wake,
                        None => continue,
                    },
                    Err(RecvError::Closed) => return None,
                    Ok(Change::Resync) | Err(RecvError::Lagged(_)) => Wake::Missed,
                },
                () = tokio::time::sleep(RECHECK) => Wake::Recheck,
            };
            // The job's state is read BEFORE its timeline: its last event is written in the
            // same step as its end, so a job seen ended has that event in the read that follows.
            let ended = match &wake {
                Wake::Heard { ended, .. } => *ended,
                Wake::Missed => false,
                // A job that is gone (expired, its tenant removed) has nothing more to say.
                Wake::Recheck => match self.store.get(&self.id).await {
                    Ok(None) => true,
                    Ok(Some(job)) => job.status.is_finished(),
                    Err(_) => false,
                },
            };
            // A store that does not answer now is read again at the next wake.
            let Ok(events) = self.store.timeline(&self.id, self.last).await else {
                continue;
            };
            match wake {
                // Up to the heard event only: those after it will be heard, the ticks among
                // them too, which the timeline may not keep.
                Wake::Heard { upto, tick, .. } => {
                    let heard = events
                        .into_iter()
                        .take_while(|e| e.event_id().is_some_and(|id| id <= upto));
                    self.pending.extend(heard);
                    // A tick heard is in the read only while it is the job's latest.
                    if let Some(tick) = tick {
                        if self.pending.back().and_then(TimelineEvent::event_id) != Some(upto) {
                            self.pending.push_back(*tick);
                        }
                    }
                }
                // Messages may have been lost: all the timeline has. A tick it does not keep
                // and that no message brought is lost with them.
                Wake::Missed | Wake::Recheck => self.pending.extend(events),
            }
            // Nothing after the cursor and nothing more to come: a client may resume after an
            // id beyond the job's last one, and its stream still ends with the job.
            if self.pending.is_empty() && ended {
                return None;
            }
        }
    }

    /// What a change of this job heard live asks for: nothing when it was sent already or
    /// is a tick right after the last event sent (queued as heard: no event lies between);
    /// else a read of the timeline up to it.
    fn hear(&mut self, change: JobChange) -> Option<Wake> {
        let Ok(id) = change.id.parse::<EventId>() else {
            return Some(Wake::Missed);
        };
        if self.last.is_some_and(|last| id <= last) {
            return None;
        }
        let ended = LAST_TYPES.contains(&change.kind_of_event.as_str());
        let tick = (change.kind_of_event == "progress").then(|| heard_tick(change, id));
        match tick {
            Some(tick) if self.last.is_some_and(|last| last.seq + 1 == id.seq) => {
                self.pending.push_back(tick);
                None
            }
            tick => Some(Wake::Heard {
                upto: id,
                tick: tick.map(Box::new),
                ended,
            }),
        }
    }
}

/// What woke a waiting job stream.
enum Wake {
    /// A change of this job after the last event sent: the timeline is read up to it;
    /// `tick` is the change itself when it is a progress tick; `ended` when it is the
    /// job's last event (`finished`, `superseded`).
    Heard {
        upto: EventId,
        tick: Option<Box<TimelineEvent>>,
        ended: bool,
    },
    /// Messages may have been missed (the subscription was renewed, or this stream lagged).
    Missed,
    /// Nothing was heard for [`RECHECK`].
    Recheck,
}

/// A progress tick as its timeline event reads: a tick carries nothing of its own, and an
/// event's time is its id's.
fn heard_tick(change: JobChange, id: EventId) -> TimelineEvent {
    TimelineEvent {
        id: change.id,
        kind: change.kind_of_event,
        at: id.ms,
        status: change.status,
        percent: change.percent,
        step: change.step,
        extra: Map::new(),
    }
}

fn sse_event(event: &TimelineEvent) -> Event {
    Event::default()
        .id(&event.id)
        .event(&event.kind)
        .data(serde_json::to_string(event).expect("an event serialises"))
}
