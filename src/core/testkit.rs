//! Building logs by hand for tests of the core, the simulator and benchmarks.
//!
//! Entries built here carry a stand-in for stored bytes (the event's debug
//! form): enough for the digest to be a function of the events. Histories that
//! auditors compare go through `wire`, which supplies the real bytes. Order
//! batches are sealed with [`test_projector_key`] over those stand-in bytes, and
//! the builder registers that key (an operator's entry) before its first batch.

use std::collections::BTreeMap;

use super::event::*;
use super::ids::{EngineId, JobId, Seq, TaskRef};

pub fn job_id(text: &str) -> JobId {
    JobId::new(text).expect("test job ids are valid")
}
pub fn engine_id(text: &str) -> EngineId {
    EngineId::new(text).expect("test engine ids are valid")
}
pub fn task(job: &str, index: u32) -> TaskRef {
    TaskRef::new(job_id(job), index)
}

/// A job of `n` counted tasks with the given requirements, one slot each, 3 attempts.
pub fn job_spec(id: &str, n: u32, requirements: &str) -> JobSpec {
    JobSpec {
        id: job_id(id),
        owner: "alice".into(),
        project: "physics".into(),
        queue: "default".into(),
        priority: 0,
        requirements: requirements.into(),
        max_attempts: 3,
        wall_time_limit_ms: 0,
        slots_per_task: 1,
        template: TaskTemplate { argv: vec!["run".into(), "{index}".into()], params: BTreeMap::new() },
        tasks: TaskSet::Count(n),
        options: Default::default(),
        task_conditions: BTreeMap::new(),
    }
}

pub fn linux_props(site: &str, memory_mb: u64) -> EngineProps {
    EngineProps {
        os: "linux".into(),
        arch: "x86_64".into(),
        cores: 4,
        memory_mb,
        disk_mb: 100_000,
        mflops: 1000,
        site: site.into(),
        custom: BTreeMap::new(),
        libraries: Vec::new(),
    }
}

/// The key test logs seal their batches with: fixed, so logs are reproducible.
pub fn test_projector_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7; 32])
}

/// The seal of `stored` by the test projector key, signing all of it.
pub fn test_seal(stored: &[u8]) -> EntrySeal {
    use ed25519_dalek::Signer as _;
    let key = test_projector_key();
    EntrySeal {
        signer: key.verifying_key().to_bytes(),
        signature: key.sign(stored).to_bytes(),
        signed_len: Some(stored.len()),
        sealed_here: false,
    }
}

/// Appends entries with increasing sequence numbers at a settable log time.
#[derive(Debug, Default)]
pub struct LogBuilder {
    pub entries: Vec<Entry>,
    pub time_ms: u64,
    /// Whether the test projector key has been registered on this log.
    pub key_registered: bool,
}

impl LogBuilder {
    /// A log whose first entry (at log time 0, so that any test may start its
    /// clock where it likes) registers the test projector key.
    pub fn new() -> Self {
        let mut log = LogBuilder { entries: Vec::new(), time_ms: 0, key_registered: false };
        log.register_test_key();
        log.time_ms = 1_000_000;
        log
    }

    pub fn next_seq(&self) -> Seq {
        Seq(self.entries.len() as u64 + 1)
    }

    pub fn at(&mut self, time_ms: u64) -> &mut Self {
        self.time_ms = time_ms;
        self
    }

    /// Pushes `event` as `origin` publishes it, on the subject it has then.
    pub fn push_from(&mut self, origin: Origin, event: Event) -> Entry {
        let subject = super::subject::subject_for(&event, &origin);
        self.push_on(&subject, origin, event)
    }

    /// Pushes `event` stored on `subject` as if `origin` had published it
    /// there: for tests of events on a subject that is not theirs.
    pub fn push_on(&mut self, subject: &str, origin: Origin, event: Event) -> Entry {
        if matches!(event, Event::OrderBatch(_)) && !self.key_registered {
            self.register_test_key();
        }
        let seq = self.next_seq();
        let stored = format!("{origin:?}{event:?}").into_bytes();
        let seal = matches!(event, Event::OrderBatch(_)).then(|| test_seal(&stored));
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&seq.0.to_le_bytes());
        let entry = Entry {
            seq,
            time_ms: self.time_ms,
            subject: subject.to_string(),
            origin,
            payload: Payload::Event(Envelope { id, source: "test".into(), event }),
            stored,
            seal,
        };
        self.entries.push(entry.clone());
        entry
    }

    /// An operator registers the test projector key (done before the first batch).
    pub fn register_test_key(&mut self) -> Entry {
        self.key_registered = true;
        let key = test_projector_key().verifying_key().to_bytes();
        self.push_from(Origin::Operator, Event::ProjectorKeyRegistered { key, name: "test projector".into() })
    }

    /// Pushes with the origin the event's kind implies: an engine event from
    /// that engine, orders from the projector, and everything a client sends
    /// from an operator, who may act on any job and set any priority (tests of
    /// a user's rights push from `Origin::User`).
    pub fn push(&mut self, event: Event) -> Entry {
        let origin = match super::subject::default_publisher(&event) {
            Origin::User(_) => Origin::Operator,
            origin => origin,
        };
        self.push_from(origin, event)
    }

    pub fn push_undecodable(&mut self, bytes: &[u8]) -> Entry {
        let entry = Entry {
            seq: self.next_seq(),
            time_ms: self.time_ms,
            origin: Origin::Unknown,
            subject: "test.undecodable".into(),
            payload: Payload::Undecodable { detail: "test garbage".into() },
            stored: bytes.to_vec(),
            seal: None,
        };
        self.entries.push(entry.clone());
        entry
    }

    pub fn login(&mut self, engine: &str, slots: u32, props: EngineProps) -> Entry {
        self.push(Event::EngineLoggedIn { engine: engine_id(engine), slots, props })
    }
    pub fn submit(&mut self, spec: JobSpec) -> Entry {
        self.push(Event::JobSubmitted(spec))
    }
    pub fn started(&mut self, job: &str, index: u32, attempt: u32, engine: &str) -> Entry {
        self.push(started_event(job, index, attempt, engine))
    }
    pub fn completed(&mut self, job: &str, index: u32, attempt: u32, engine: &str) -> Entry {
        self.push(completed_event(job, index, attempt, engine))
    }
    pub fn failed(&mut self, job: &str, index: u32, attempt: u32, engine: &str) -> Entry {
        self.push(failed_event(job, index, attempt, engine))
    }
    /// An engine's batch of `reports`, from that engine's subject; each report's
    /// id is its `ids` entry (so tests can repeat one).
    pub fn reports(&mut self, engine: &str, reports: Vec<Event>, ids: &[u8]) -> Entry {
        let reports = reports
            .into_iter()
            .zip(ids)
            .map(|(event, id)| Envelope { id: [*id; 16], source: "test".into(), event })
            .collect();
        self.push(Event::EngineReports { engine: engine_id(engine), reports })
    }
    pub fn orders(&mut self, batch: OrderBatch) -> Entry {
        self.push(Event::OrderBatch(batch))
    }
}

/// Folds the log's entries from `from`, then decides and logs and folds the
/// batch (if it orders anything), as the projector does; the log's length.
pub fn fold_and_decide(log: &mut LogBuilder, state: &mut super::state::State, from: usize) -> usize {
    for entry in log.entries.iter().skip(from) {
        super::fold::fold(state, entry);
    }
    let in_flight = super::schedule::InFlight::new();
    if let Some(batch) = super::schedule::decide(state, &in_flight).filter(|batch| !batch.orders.is_empty()) {
        let entry = log.orders(batch);
        super::fold::fold(state, &entry);
    }
    log.entries.len()
}

pub fn started_event(job: &str, index: u32, attempt: u32, engine: &str) -> Event {
    Event::TaskStarted { task: task(job, index), attempt, engine: engine_id(engine), remote_job: String::new() }
}

pub fn completed_event(job: &str, index: u32, attempt: u32, engine: &str) -> Event {
    Event::TaskCompleted {
        task: task(job, index),
        attempt,
        engine: engine_id(engine),
        exit_code: 0,
        cpu_ms: 10,
        wall_ms: 10,
        result: Vec::new(),
        stored: Default::default(),
    }
}

pub fn failed_event(job: &str, index: u32, attempt: u32, engine: &str) -> Event {
    Event::TaskFailed {
        task: task(job, index),
        attempt,
        engine: engine_id(engine),
        exit_code: Some(1),
        kind: FailureKind::NonZeroExit,
        error_tail: "boom".into(),
        stored: Default::default(),
    }
}
