//! Entries and envelopes: what a position of the log holds (an [`Entry`],
//! its [`Envelope`] and [`Payload`]), the facts themselves ([`Event`]) and
//! the limits on what a report may carry.

use std::collections::BTreeMap;
use crate::core::ids::{Attempt, EngineId, JobId, Seq, TaskRef, UserName};
use super::engine::{EngineLoad, EngineProps, FailureKind};
use super::job::{JobSpec, LibraryInfo, LibraryRef, TaskConditions};
use super::order::OrderBatch;
use super::policy::Policy;

/// Largest result a `TaskCompleted` may carry inline; larger results belong in
/// the object store. The fold rejects an oversized one.
pub const RESULT_BYTES_MAX: usize = 64 * 1024;
/// Largest error tail a `TaskFailed` may carry (the engine sends the last 4 KiB of stderr).
pub const ERROR_TAIL_BYTES_MAX: usize = 4 * 1024;

/// One position of the log: what the fold consumes.
#[derive(Debug, Clone)]
pub struct Entry {
    pub seq: Seq,
    /// The time the log stored the entry (JetStream's timestamp), in ms since the Unix epoch.
    /// This is the only clock the core knows.
    pub time_ms: u64,
    /// Who could publish on the subject the entry arrived on. The subject is
    /// authoritative: an engine's event whose payload names another engine is forged.
    pub origin: Origin,
    /// The subject it was stored under, as the chain digest covers it.
    pub subject: String,
    pub payload: Payload,
    /// The payload's bytes exactly as the log stores them. The chain digest is
    /// over these, not over any re-encoding, so it is a function of the log
    /// alone and every later version of gridfold replays a log to the same chain.
    pub stored: Vec<u8>,
    /// The seal of a sealed envelope (order batches), checked by the fold.
    pub seal: Option<EntrySeal>,
}

/// An ed25519 signature found at the end of an entry's stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySeal {
    pub signer: [u8; 32],
    pub signature: [u8; 64],
    /// How many of the stored bytes it signs: all of them before the seal.
    /// `None` when the seal was not the last field, so nothing it could sign
    /// is well defined: the fold rejects such an entry.
    pub signed_len: Option<usize>,
    /// The process folding the entry published these very bytes, sealed with
    /// its own key (a projector reading its batch back): the signature is known
    /// to hold, and the fold does not check it again (an ed25519 verification
    /// is about 50 µs, once per batch). Set only by that process, after
    /// comparing every byte with what it published; decoding leaves it false,
    /// so a replay checks every seal and folds to the same state.
    pub sealed_here: bool,
}

impl Entry {
    /// The events the entry holds, in order: its event, or each report of an
    /// engine's batch (never the batch itself); none if it did not decode.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        let (single, batch): (Option<&Event>, &[Envelope]) = match self.payload_event() {
            Some(Event::EngineReports { reports, .. }) => (None, reports),
            other => (other, &[]),
        };
        single.into_iter().chain(batch.iter().map(|report| &report.event))
    }

    /// The event, if the payload decoded.
    pub fn payload_event(&self) -> Option<&Event> {
        match &self.payload {
            Payload::Event(envelope) => Some(&envelope.event),
            Payload::Undecodable { .. } => None,
        }
    }

    /// The bytes the seal signs, if it signs a well-defined prefix.
    pub fn signed_bytes(&self) -> Option<&[u8]> {
        let len = self.seal.as_ref()?.signed_len?;
        self.stored.get(..len)
    }
}

/// One stream of an attempt's output as its engine stored it in the object
/// store: its length and blake3, for readers to tell whether what the store
/// holds now is what the engine stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredOutput {
    pub bytes: u64,
    pub blake3: [u8; 32],
}

/// What an attempt's end report says its engine stored of each stream; `None`:
/// nothing (an empty stream, or one the store did not take).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredStreams {
    pub stdout: Option<StoredOutput>,
    pub stderr: Option<StoredOutput>,
}

/// Who published an entry, as its subject says (see [`super::subject`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// `gridfold.ev.engine.<id>.>`: only that engine may publish here.
    Engine(EngineId),
    /// `gridfold.ev.orders`: only the fenced projector writes here.
    Projector,
    /// `gridfold.ev.tick`: the tickers.
    Ticker,
    /// `gridfold.ev.op.>`: operators, who run the grid and may act on any job.
    Operator,
    /// `gridfold.ev.user.<name>.>`: a user (submitter), acting on its own jobs.
    User(UserName),
    /// Any other subject: no one may publish there, and the fold refuses
    /// whatever is found on it.
    Unknown,
}

impl std::fmt::Display for Origin {
    /// Who, for a person: `user alice`, `engine e1`, `an operator`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Engine(engine) => write!(f, "engine {engine}"),
            Origin::Projector => f.write_str("the projector"),
            Origin::Ticker => f.write_str("a ticker"),
            Origin::Operator => f.write_str("an operator"),
            Origin::User(user) => write!(f, "user {user}"),
            Origin::Unknown => f.write_str("an unknown publisher"),
        }
    }
}

// Nearly every payload is an event: boxing it would cost an allocation per entry
// for the sake of the rare undecodable one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Payload {
    Event(Envelope),
    /// The bytes on the log did not decode into an envelope; the fold records a rejection.
    Undecodable { detail: String },
}

/// What every publisher sends: an id that deduplicates retries, who sent it, and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The event's UUID, also its `Nats-Msg-Id`, so a publisher's retry is stored once.
    pub id: [u8; 16],
    /// Free text naming the publisher ("gridfold-cli", "engine:e1"), for humans only.
    pub source: String,
    pub event: Event,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    JobSubmitted(JobSpec),
    JobCancelled { job: JobId, reason: String },
    JobPriorityChanged { job: JobId, priority: i32 },
    /// An operator gave a job override tickets (Grid Engine's `qalter -ot`).
    JobOverrideTicketsSet { job: JobId, tickets: u32 },
    EngineLoggedIn { engine: EngineId, slots: u32, props: EngineProps },
    EngineLoggedOut { engine: EngineId },
    EngineHeartbeat { engine: EngineId, load: EngineLoad },
    /// `remote_job`: a gateway engine's job id in the resource manager it
    /// submitted the attempt to (a Slurm job id); empty for an ordinary engine.
    /// At most [`REMOTE_JOB_BYTES_MAX`] bytes (refused at decode).
    TaskStarted { task: TaskRef, attempt: Attempt, engine: EngineId, remote_job: String },
    /// `stored`: what the engine stored of the attempt's output (see [`StoredStreams`]).
    TaskCompleted {
        task: TaskRef,
        attempt: Attempt,
        engine: EngineId,
        exit_code: i32,
        cpu_ms: u64,
        wall_ms: u64,
        result: Vec<u8>,
        stored: StoredStreams,
    },
    TaskFailed {
        task: TaskRef,
        attempt: Attempt,
        engine: EngineId,
        exit_code: Option<i32>,
        kind: FailureKind,
        error_tail: String,
        stored: StoredStreams,
    },
    PolicySet(Policy),
    /// Time passes: lets timers fire when nothing else happens. Carries nothing;
    /// the log time of its entry is the news.
    Tick,
    OrderBatch(OrderBatch),
    /// More tasks for an active job (GridServer's tasks added to an open session).
    /// Their indexes follow the job's last; `conditions` is keyed by the index
    /// within this addition (0 = the first task added).
    TasksAdded { job: JobId, tasks: Vec<BTreeMap<String, String>>, conditions: BTreeMap<u32, TaskConditions> },
    /// A grid library was stored in the object store (`gridfold library put`).
    LibraryPublished(LibraryInfo),
    /// An engine finished syncing a library: it may now run the jobs rooted on it.
    LibrarySynced { engine: EngineId, library: LibraryRef },
    /// An engine could not sync a library (fetch or unpack failed); it may be asked again.
    LibrarySyncFailed { engine: EngineId, library: LibraryRef, error: String },
    /// An operator cleared blacklists and greylists: for one engine, or for all when `None`.
    BlacklistsCleared { engine: Option<EngineId> },
    /// An operator registered a projector's ed25519 public key: batches sealed
    /// with it are accepted from now on.
    ProjectorKeyRegistered { key: [u8; 32], name: String },
    /// An operator revoked a projector's key.
    ProjectorKeyRevoked { key: [u8; 32] },
    /// Someone asked to suspend the live attempts of a job or of one task
    /// (Grid Engine's `qmod -sj`); the projector answers with `Suspend` orders.
    SuspendRequested(TaskSelector),
    /// Someone asked to resume suspended attempts (`qmod -usj`): `Resume` orders.
    ResumeRequested(TaskSelector),
    /// Someone asked to stop live attempts and queue their tasks again without
    /// using an attempt (`qmod -rj`): `Preempt` orders.
    RescheduleRequested(TaskSelector),
    /// A job was held (`held`: no new dispatches, live attempts run on) or
    /// released (Grid Engine's `qhold`/`qrls`, Slurm's `scontrol hold`/`release`).
    JobHoldChanged { job: JobId, held: bool },
    /// One task of an active job was cancelled: it waits no more, and its live
    /// attempts are told to stop (`scancel JOB_TASK`, `qdel -t`).
    TaskCancelled { task: TaskRef },
    /// An operator drained an engine (`drained`: no new work; its running
    /// attempts finish) or resumed it (`qmod -d`/`-e`, `scontrol update state=drain`).
    EngineDrainChanged { engine: EngineId, drained: bool },
    /// A Techila project's (a job's) priority changed, 1 (Highest) to 7
    /// (Lowest); another value is folded as a rejection.
    ProjectPriorityChanged { job: JobId, priority: u32 },
    /// Several reports of one engine in one log message (the engine batches
    /// what it would otherwise publish one by one, to pay one publish and one
    /// acknowledgement for all). Each keeps its own envelope and id; the fold
    /// applies them in order as if each were its own entry at this sequence.
    EngineReports { engine: EngineId, reports: Vec<Envelope> },
}

/// Most reports one `EngineReports` message carries: a batch is what piled up
/// while the engine's previous publish was acknowledged, and 256 reports of
/// the largest kind (64 KiB results) stay under the broker's payload limit
/// only because results that large are rare; the engine also caps its bytes.
pub const REPORTS_PER_BATCH_MAX: usize = 256;

/// A job, or one task of it, that an operator's request names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskSelector {
    pub job: JobId,
    /// A task index; `None` names every task of the job.
    pub task: Option<u32>,
}

impl std::fmt::Display for TaskSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.task {
            Some(index) => write!(f, "{}/{index}", self.job),
            None => write!(f, "{}", self.job),
        }
    }
}

/// What an operator asked of a live attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Control {
    Suspend,
    Resume,
    /// Grid Engine's reschedule (`qmod -rj`): a `Preempt` order.
    Preempt,
}

impl Control {
    pub fn as_str(self) -> &'static str {
        match self {
            Control::Suspend => "suspend",
            Control::Resume => "resume",
            Control::Preempt => "reschedule",
        }
    }
}

impl Event {
    /// The engine an engine-published event speaks for, if it is one.
    pub fn reporting_engine(&self) -> Option<&EngineId> {
        match self {
            Event::EngineLoggedIn { engine, .. }
            | Event::EngineLoggedOut { engine }
            | Event::EngineHeartbeat { engine, .. }
            | Event::TaskStarted { engine, .. }
            | Event::TaskCompleted { engine, .. }
            | Event::TaskFailed { engine, .. }
            | Event::LibrarySynced { engine, .. }
            | Event::LibrarySyncFailed { engine, .. }
            | Event::EngineReports { engine, .. } => Some(engine),
            _ => None,
        }
    }

    /// A task or library report: what an engine may send in a batch
    /// (`EngineReports`); logins, logouts and heartbeats go alone.
    pub fn is_batchable_report(&self) -> bool {
        matches!(
            self,
            Event::TaskStarted { .. }
                | Event::TaskCompleted { .. }
                | Event::TaskFailed { .. }
                | Event::LibrarySynced { .. }
                | Event::LibrarySyncFailed { .. }
        )
    }

    /// A short stable name, used in histories, logs and statistics.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Event::JobSubmitted(_) => "JobSubmitted",
            Event::JobCancelled { .. } => "JobCancelled",
            Event::JobPriorityChanged { .. } => "JobPriorityChanged",
            Event::JobOverrideTicketsSet { .. } => "JobOverrideTicketsSet",
            Event::EngineLoggedIn { .. } => "EngineLoggedIn",
            Event::EngineLoggedOut { .. } => "EngineLoggedOut",
            Event::EngineHeartbeat { .. } => "EngineHeartbeat",
            Event::TaskStarted { .. } => "TaskStarted",
            Event::TaskCompleted { .. } => "TaskCompleted",
            Event::TaskFailed { .. } => "TaskFailed",
            Event::PolicySet(_) => "PolicySet",
            Event::Tick => "Tick",
            Event::OrderBatch(_) => "OrderBatch",
            Event::TasksAdded { .. } => "TasksAdded",
            Event::LibraryPublished(_) => "LibraryPublished",
            Event::LibrarySynced { .. } => "LibrarySynced",
            Event::LibrarySyncFailed { .. } => "LibrarySyncFailed",
            Event::BlacklistsCleared { .. } => "BlacklistsCleared",
            Event::ProjectorKeyRegistered { .. } => "ProjectorKeyRegistered",
            Event::ProjectorKeyRevoked { .. } => "ProjectorKeyRevoked",
            Event::SuspendRequested(_) => "SuspendRequested",
            Event::ResumeRequested(_) => "ResumeRequested",
            Event::RescheduleRequested(_) => "RescheduleRequested",
            Event::JobHoldChanged { .. } => "JobHoldChanged",
            Event::TaskCancelled { .. } => "TaskCancelled",
            Event::EngineDrainChanged { .. } => "EngineDrainChanged",
            Event::ProjectPriorityChanged { .. } => "ProjectPriorityChanged",
            Event::EngineReports { .. } => "EngineReports",
        }
    }
}
