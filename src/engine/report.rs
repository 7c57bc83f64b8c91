//! What the engine publishes, and the one task that publishes it.
//!
//! Every event goes through one [`Outbox`] to one publisher task, which appends
//! them to the log in the order given, so an attempt's `TaskStarted` is stored
//! before its end. Each envelope's id is a UUID derived from what the event is
//! about, and its `Nats-Msg-Id` is that UUID: a retry of the same report is
//! stored once.
//!
//! - A task report's id hashes (engine, job, index, attempt, dispatch, kind):
//!   the same report of one run is the same message, whoever sends it and
//!   however often; the dispatch (the log sequence of the batch whose order
//!   the run answers) tells a run from another of the same attempt number on
//!   the same engine, after a preemption.
//! - A session event's id (login, heartbeat, logout) hashes (engine, session,
//!   kind, number), the session being a random id drawn at each login, because
//!   two logins are two facts.
//! - A library report's id hashes (engine, delivery id, kind): one answer per
//!   `SyncLibrary` order, however often it is delivered.
//!
//! A report that cannot be stored because the log is unavailable is retried with
//! the same id, with backoff, up to [`RetryPolicy::attempts_max`] times; then the
//! publisher gives up and the engine stops with [`EngineError::Publish`]. The
//! whole retry budget must stay well inside the broker's duplicate window (2
//! minutes by default), or a late first try and a retry could both be stored; the
//! default budget is about 80 s with a 5 s publish timeout. Heartbeats are sent
//! once, never retried: the next one is never far.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::EngineError;
use crate::core::event::{Envelope, Event, REPORTS_PER_BATCH_MAX};
use crate::core::ids::{Attempt, EngineId, Seq, TaskRef};
use crate::log::{Append, Appended, EventLog, LogError};
use crate::wire;

/// Events waiting for the publisher, at most. The engine has at most two reports per
/// running attempt in flight plus session events, so this is never reached in practice;
/// heartbeats are dropped rather than wait for room.
pub const OUTBOX_MAX: usize = 4_096;
const ID_DOMAIN: &[u8] = b"gridfold/engine-event/v1";

/// How the publisher retries an append the log could not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries per event, the first included. At least 1.
    pub attempts_max: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts_max: 10,
            backoff_initial: Duration::from_millis(250),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// The id of a task report: the same (engine, task, attempt, dispatch, kind),
/// the same id. `dispatch` is the log sequence of the batch whose order the
/// run answers: a run of the same attempt number again on the same engine
/// (after a preemption) is another run, whose reports are other messages.
pub fn task_report_id(engine: &EngineId, task: &TaskRef, attempt: Attempt, dispatch: Seq, kind: &str) -> [u8; 16] {
    hashed_uuid(&[
        engine.as_str().as_bytes(),
        task.job.as_str().as_bytes(),
        &task.index.to_be_bytes(),
        &attempt.to_be_bytes(),
        &dispatch.0.to_be_bytes(),
        kind.as_bytes(),
    ])
}

/// The id of a library report (`kind` = `LibrarySynced`, `LibrarySyncFailed`)
/// answering the `SyncLibrary` delivered as `delivery_id`: one answer per order.
pub fn library_report_id(engine: &EngineId, delivery_id: &str, kind: &str) -> [u8; 16] {
    hashed_uuid(&[
        b"library",
        engine.as_str().as_bytes(),
        delivery_id.as_bytes(),
        kind.as_bytes(),
    ])
}

/// The id of a session event: the `n`th event of `kind` in one login session.
pub fn session_event_id(engine: &EngineId, session: &[u8; 16], kind: &str, n: u64) -> [u8; 16] {
    hashed_uuid(&[
        b"session",
        engine.as_str().as_bytes(),
        session,
        kind.as_bytes(),
        &n.to_be_bytes(),
    ])
}

/// A version-8 (custom) UUID from the blake3 hash of length-prefixed parts.
fn hashed_uuid(parts: &[&[u8]]) -> [u8; 16] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(ID_DOMAIN);
    for part in parts {
        hasher.update(&(part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let hash = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash.as_bytes()[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .into_bytes()
}

/// The `Nats-Msg-Id` of an envelope: its UUID, hyphenated.
pub fn msg_id(envelope: &Envelope) -> String {
    uuid::Uuid::from_bytes(envelope.id).hyphenated().to_string()
}

/// What the engine puts in an envelope's `source`.
pub fn source(engine: &EngineId) -> String {
    format!("engine:{engine}")
}

struct Outgoing {
    envelope: Envelope,
    /// Sent once, never retried: a heartbeat.
    best_effort: bool,
    stored: Option<oneshot::Sender<Appended>>,
}

/// The way into the publisher. Dropping every clone ends it, once it has sent what it holds.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<Outgoing>,
    /// When the log last stored a heartbeat.
    heartbeat_stored: watch::Receiver<Option<tokio::time::Instant>>,
}

/// The publisher stopped: it failed (the error comes on the failure channel) or panicked.
#[derive(Debug)]
pub(crate) struct PublisherGone;

impl Outbox {
    /// Queues an event to publish with retries.
    pub async fn send(&self, envelope: Envelope) -> Result<(), PublisherGone> {
        self.tx
            .send(Outgoing {
                envelope,
                best_effort: false,
                stored: None,
            })
            .await
            .map_err(|_| PublisherGone)
    }

    /// Queues an event and waits until the log stored it, answering where.
    pub async fn send_and_wait(&self, envelope: Envelope) -> Result<Appended, PublisherGone> {
        let (stored, answer) = oneshot::channel();
        self.tx
            .send(Outgoing {
                envelope,
                best_effort: false,
                stored: Some(stored),
            })
            .await
            .map_err(|_| PublisherGone)?;
        answer.await.map_err(|_| PublisherGone)
    }

    /// Queues a heartbeat to send once, if there is room. False if it was dropped.
    pub fn offer_heartbeat(&self, envelope: Envelope) -> bool {
        self.tx
            .try_send(Outgoing {
                envelope,
                best_effort: true,
                stored: None,
            })
            .is_ok()
    }

    /// When the log last stored a heartbeat of [`Outbox::offer_heartbeat`] (the
    /// publisher's monotonic clock, just after the append was acknowledged).
    pub fn heartbeat_stored_at(&self) -> Option<tokio::time::Instant> {
        *self.heartbeat_stored.borrow()
    }
}

/// Starts the publisher over `log`. A fatal failure is sent on the returned receiver
/// (then the task ends); the task's result is the number of events stored.
///
/// Reports that pile up while a publish waits for its acknowledgement leave
/// together as one [`Event::EngineReports`] message (see [`ReportBatcher`]): at
/// ordinary load a task's start and end, and the ends of tasks finishing
/// together, cost one publish and one acknowledgement instead of one each. The
/// first report of a message waits `report_window` for company (see
/// [`crate::engine::EngineConfig::report_window`]); no report waits for a
/// batch to fill.
pub(crate) fn spawn_publisher<L: EventLog + 'static>(
    log: L,
    retry: RetryPolicy,
    report_window: Duration,
    engine: EngineId,
) -> (Outbox, oneshot::Receiver<EngineError>, JoinHandle<u64>) {
    let (tx, mut rx) = mpsc::channel::<Outgoing>(OUTBOX_MAX);
    let (failed_tx, failed_rx) = oneshot::channel();
    let (heartbeat_stored_tx, heartbeat_stored) = watch::channel(None);
    let task = tokio::spawn(async move {
        let mut stored_count = 0u64;
        let mut batcher = ReportBatcher::new(engine);
        loop {
            let first = match batcher.held.take() {
                Some(held) => held,
                None => match rx.recv().await {
                    Some(queued) => queued,
                    None => break,
                },
            };
            // A full batch already queued has no company to wait for.
            if !report_window.is_zero() && batchable(&first) && rx.len() + 1 < REPORTS_PER_BATCH_MAX {
                tokio::time::sleep(report_window).await;
            }
            let outgoing = batcher.gather(first, &mut rx);
            let events = outgoing.len() as u64;
            match publish(&log, &retry, &outgoing.envelope, outgoing.best_effort).await {
                Ok(Some(appended)) => {
                    stored_count += events;
                    if outgoing.best_effort {
                        heartbeat_stored_tx.send_replace(Some(tokio::time::Instant::now()));
                    }
                    for stored in outgoing.stored {
                        let _ = stored.send(appended);
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::error!("{err}");
                    let _ = failed_tx.send(err);
                    return stored_count;
                }
            }
        }
        stored_count
    });
    (Outbox { tx, heartbeat_stored }, failed_rx, task)
}

/// Most bytes of reports (results and error tails counted whole, the rest
/// estimated) one batch carries: well under the broker's default 1 MiB payload.
const BATCH_BYTES_MAX: usize = 512 * 1024;
/// What one report costs in a batch besides its result or error tail (ids, names, numbers).
const REPORT_OVERHEAD_BYTES: usize = 256;

/// One message to publish: an event alone, or several reports as one batch.
struct Publishable {
    envelope: Envelope,
    best_effort: bool,
    /// Who waits for the log to store it: one per report that asked.
    stored: Vec<oneshot::Sender<Appended>>,
    reports: usize,
}

impl Publishable {
    fn len(&self) -> usize {
        self.reports
    }
}

/// Joins the reports queued behind one into a batch, in the order they were
/// queued, up to [`REPORTS_PER_BATCH_MAX`] reports and [`BATCH_BYTES_MAX`]. A
/// queued event that may not join a batch (a login, a heartbeat) is held and
/// published next, alone, so the log keeps the engine's order of events.
struct ReportBatcher {
    engine: EngineId,
    held: Option<Outgoing>,
}

impl ReportBatcher {
    fn new(engine: EngineId) -> Self {
        ReportBatcher { engine, held: None }
    }

    fn gather(&mut self, first: Outgoing, rx: &mut mpsc::Receiver<Outgoing>) -> Publishable {
        let mut batch = vec![first];
        if batchable(&batch[0]) {
            let mut bytes = report_bytes(&batch[0].envelope.event);
            while batch.len() < REPORTS_PER_BATCH_MAX && bytes < BATCH_BYTES_MAX {
                let Ok(next) = rx.try_recv() else { break };
                if !batchable(&next) {
                    self.held = Some(next);
                    break;
                }
                bytes += report_bytes(&next.envelope.event);
                batch.push(next);
            }
        }
        if batch.len() == 1 {
            let Outgoing { envelope, best_effort, stored } = batch.pop().expect("one queued event");
            return Publishable { envelope, best_effort, stored: stored.into_iter().collect(), reports: 1 };
        }
        let reports = batch.len();
        let mut stored = Vec::new();
        let mut envelopes = Vec::with_capacity(reports);
        for outgoing in batch {
            stored.extend(outgoing.stored);
            envelopes.push(outgoing.envelope);
        }
        Publishable { envelope: report_batch(&self.engine, envelopes), best_effort: false, stored, reports }
    }
}

/// Several of one engine's reports as one [`Event::EngineReports`] message, in
/// their order. Its id hashes the reports' ids, so a retry of the same batch is
/// the same message to the broker's deduplication.
pub fn report_batch(engine: &EngineId, reports: Vec<Envelope>) -> Envelope {
    let id = batch_id(engine, &reports);
    Envelope { id, source: source(engine), event: Event::EngineReports { engine: engine.clone(), reports } }
}

/// Task and library reports, sent with retries, may share a message.
fn batchable(outgoing: &Outgoing) -> bool {
    !outgoing.best_effort && outgoing.envelope.event.is_batchable_report()
}

fn report_bytes(event: &Event) -> usize {
    REPORT_OVERHEAD_BYTES
        + match event {
            Event::TaskCompleted { result, .. } => result.len(),
            Event::TaskFailed { error_tail, .. } => error_tail.len(),
            Event::LibrarySyncFailed { error, .. } => error.len(),
            _ => 0,
        }
}

fn batch_id(engine: &EngineId, reports: &[Envelope]) -> [u8; 16] {
    let mut parts: Vec<&[u8]> = vec![b"batch", engine.as_str().as_bytes()];
    parts.extend(reports.iter().map(|report| &report.id[..]));
    hashed_uuid(&parts)
}

/// Publishes one envelope. `Ok(None)`: dropped (a best-effort send that failed, or a
/// message the log refused as it is, which a retry cannot fix).
async fn publish<L: EventLog>(
    log: &L,
    retry: &RetryPolicy,
    envelope: &Envelope,
    best_effort: bool,
) -> Result<Option<Appended>, EngineError> {
    let what = Described(&envelope.event);
    let append = Append::new(wire::default_subject(&envelope.event), wire::encode(envelope))
        .with_msg_id(msg_id(envelope));
    let started = Instant::now();
    let attempts_max = if best_effort {
        1
    } else {
        retry.attempts_max.max(1)
    };
    let mut backoff = retry.backoff_initial;
    let mut attempt = 1;
    loop {
        match log.append(append.clone()).await {
            Ok(appended) => {
                tracing::debug!(
                    seq = appended.seq,
                    duplicate = appended.duplicate,
                    "published {what}"
                );
                return Ok(Some(appended));
            }
            Err(LogError::Unavailable { url, detail }) if attempt < attempts_max => {
                tracing::warn!(
                    "publishing {what} (try {attempt} of {attempts_max}): the log at {url} is unavailable: {detail}; retrying in {}",
                    crate::human::duration(backoff)
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(retry.backoff_max);
                attempt += 1;
            }
            Err(err @ LogError::Unavailable { .. }) if best_effort => {
                tracing::warn!("dropped {what}: {err}");
                return Ok(None);
            }
            Err(err @ LogError::Rejected { .. }) => {
                tracing::error!("the log refused {what}, which is dropped: {err}");
                return Ok(None);
            }
            Err(source) => {
                return Err(EngineError::Publish {
                    what: what.to_string(),
                    attempts: attempt,
                    elapsed: started.elapsed(),
                    source,
                });
            }
        }
    }
}

/// `TaskCompleted j/3 #1`, for messages: formatted only when a message is
/// written, not at every publish.
struct Described<'a>(&'a Event);

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Event::TaskStarted { task, attempt, .. }
            | Event::TaskCompleted { task, attempt, .. }
            | Event::TaskFailed { task, attempt, .. } => write!(f, "{} {task} #{attempt}", self.0.kind_name()),
            event => f.write_str(event.kind_name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::JobId;

    #[test]
    fn ids_depend_on_what_the_event_is_about_and_nothing_else() {
        let e1 = EngineId::new("e1").unwrap();
        let task = TaskRef::new(JobId::new("j").unwrap(), 3);
        let dispatch = Seq(40);
        let id = task_report_id(&e1, &task, 1, dispatch, "TaskCompleted");
        assert_eq!(
            id,
            task_report_id(&e1, &task, 1, dispatch, "TaskCompleted"),
            "a retry has the same id"
        );
        assert_ne!(id, task_report_id(&e1, &task, 2, dispatch, "TaskCompleted"));
        assert_ne!(id, task_report_id(&e1, &task, 1, dispatch, "TaskFailed"));
        assert_ne!(
            id,
            task_report_id(&EngineId::new("e2").unwrap(), &task, 1, dispatch, "TaskCompleted")
        );
        // The same attempt number run again, answering a later dispatch: another run.
        assert_ne!(id, task_report_id(&e1, &task, 1, Seq(52), "TaskCompleted"));
        assert_ne!(
            task_report_id(&e1, &task, 1, dispatch, "TaskStarted"),
            task_report_id(&e1, &task, 1, Seq(52), "TaskStarted"),
            "a re-run's start is not taken for the first run's"
        );
        let uuid = uuid::Uuid::from_bytes(id);
        assert_eq!(uuid.get_version_num(), 8);
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        // Length prefixes keep ("j1", 0) and ("j", 10) apart even though they concatenate alike.
        let a = task_report_id(&e1, &TaskRef::new(JobId::new("j1").unwrap(), 0), 1, dispatch, "x");
        let b = task_report_id(&e1, &TaskRef::new(JobId::new("j").unwrap(), 10), 1, dispatch, "x");
        assert_ne!(a, b);
        let session = [7u8; 16];
        assert_ne!(
            session_event_id(&e1, &session, "EngineHeartbeat", 1),
            session_event_id(&e1, &session, "EngineHeartbeat", 2)
        );
        assert_ne!(
            session_event_id(&e1, &session, "EngineLoggedIn", 0),
            session_event_id(&e1, &[8u8; 16], "EngineLoggedIn", 0)
        );
    }

    fn report(engine: &EngineId, index: u32, kind: &str) -> Outgoing {
        let task = TaskRef::new(JobId::new("j").unwrap(), index);
        let event = match kind {
            "TaskStarted" => Event::TaskStarted { task: task.clone(), attempt: 1, engine: engine.clone(), remote_job: String::new() },
            _ => Event::TaskCompleted {
                task: task.clone(),
                attempt: 1,
                engine: engine.clone(),
                exit_code: 0,
                cpu_ms: 0,
                wall_ms: 0,
                result: vec![b'x'; 100_000],
                stored: Default::default(),
            },
        };
        let id = task_report_id(engine, &task, 1, Seq(1), kind);
        Outgoing { envelope: Envelope { id, source: source(engine), event }, best_effort: false, stored: None }
    }

    fn batched_ids(publishable: &Publishable) -> Vec<[u8; 16]> {
        match &publishable.envelope.event {
            Event::EngineReports { reports, .. } => reports.iter().map(|r| r.id).collect(),
            _ => vec![publishable.envelope.id],
        }
    }

    /// A lone report waits the window for company: a start and, 20 ms later,
    /// its end leave as one message with a window of 200 ms, as two without.
    #[tokio::test]
    async fn a_full_batch_already_queued_leaves_at_once_without_waiting_its_window() {
        use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
        let dir = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(dir.path(), EmbeddedConfig::default()).unwrap();
        let engine = EngineId::new("e1").unwrap();
        let window = Duration::from_secs(60);
        let (outbox, _failed, publisher) = spawn_publisher(log.clone(), RetryPolicy::default(), window, engine.clone());
        // Queued before the publisher first runs: this runtime has one thread,
        // and `try_send` never yields to it.
        let queued_at = Instant::now();
        for index in 0..REPORTS_PER_BATCH_MAX as u32 {
            outbox.tx.try_send(report(&engine, index, "TaskStarted")).unwrap_or_else(|_| panic!("room for report {index}"));
        }
        drop(outbox);
        let stored = tokio::time::timeout(Duration::from_secs(30), publisher).await;
        let stored = stored.expect("the full batch waited for its 60 s window").unwrap();
        assert_eq!(stored, REPORTS_PER_BATCH_MAX as u64, "every report stored");
        assert_eq!(log.last_seq().await.unwrap(), 1, "in one message");
        assert!(queued_at.elapsed() < window, "stored before the window's end");
    }

    #[tokio::test]
    async fn a_lone_report_waits_its_window_and_leaves_with_what_came_meanwhile() {
        use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
        for (window, messages) in [(Duration::from_millis(200), 1), (Duration::ZERO, 2)] {
            let dir = tempfile::tempdir().unwrap();
            let log = EmbeddedLog::open(dir.path(), EmbeddedConfig::default()).unwrap();
            let engine = EngineId::new("e1").unwrap();
            let (outbox, _failed, publisher) = spawn_publisher(log.clone(), RetryPolicy::default(), window, engine.clone());
            outbox.send(report(&engine, 0, "TaskStarted").envelope).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            outbox.send(report(&engine, 0, "TaskCompleted").envelope).await.unwrap();
            drop(outbox);
            assert_eq!(publisher.await.unwrap(), 2, "both reports stored");
            assert_eq!(log.last_seq().await.unwrap(), messages, "messages with a window of {} ms", window.as_millis());
        }
    }

    #[test]
    fn queued_reports_leave_as_one_batch_and_a_heartbeat_between_them_keeps_its_place() {
        let e1 = EngineId::new("e1").unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let queued = [report(&e1, 0, "TaskStarted"), report(&e1, 0, "TaskCompleted")];
        let expected: Vec<[u8; 16]> = queued.iter().map(|o| o.envelope.id).collect();
        for outgoing in queued {
            tx.try_send(outgoing).unwrap();
        }
        let heartbeat = Envelope { id: [7; 16], source: source(&e1), event: Event::EngineHeartbeat { engine: e1.clone(), load: Default::default() } };
        tx.try_send(Outgoing { envelope: heartbeat, best_effort: true, stored: None }).unwrap();
        tx.try_send(report(&e1, 1, "TaskStarted")).unwrap();
        let mut batcher = ReportBatcher::new(e1.clone());
        let first = rx.try_recv().unwrap();
        let batch = batcher.gather(first, &mut rx);
        assert_eq!(batch.len(), 2);
        assert_eq!(batched_ids(&batch), expected, "in the order queued");
        assert_eq!(crate::wire::default_subject(&batch.envelope.event), "gridfold.ev.engine.e1.reports");
        assert_eq!(batch.envelope.id, batch_id(&e1, match &batch.envelope.event {
            Event::EngineReports { reports, .. } => reports,
            _ => unreachable!(),
        }), "a retry of the batch has the same id");
        let held = batcher.held.take().expect("the heartbeat is held, not batched");
        let alone = batcher.gather(held, &mut rx);
        assert!(alone.best_effort && matches!(alone.envelope.event, Event::EngineHeartbeat { .. }));
        let last = rx.try_recv().unwrap();
        let last = batcher.gather(last, &mut rx);
        assert!(matches!(last.envelope.event, Event::TaskStarted { .. }), "one report alone is sent as it is");
    }

    #[test]
    fn a_batch_stops_at_its_byte_budget_and_leaves_the_rest_queued() {
        let e1 = EngineId::new("e1").unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        // Results of 100 kB: the sixth report would pass the 512 KiB budget.
        for index in 0..8 {
            tx.try_send(report(&e1, index, "TaskCompleted")).unwrap();
        }
        let mut batcher = ReportBatcher::new(e1);
        let first = rx.try_recv().unwrap();
        assert_eq!(batcher.gather(first, &mut rx).len(), 6);
        let next = rx.try_recv().unwrap();
        assert_eq!(batcher.gather(next, &mut rx).len(), 2);
        assert!(batcher.held.is_none());
    }

}
