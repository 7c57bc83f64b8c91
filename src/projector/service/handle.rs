//! Talking to a running projector: [`ProjectorHandle`] sends queries into its loop
//! (answered from its current state between two batches, never from a copy) and
//! watches its status; [`spawn_query_responder`] answers the queries of
//! `gridfold.q.>` (stat, why, blacklists, libraries, verdicts, usage) on core NATS through the same handle.
//!
//! No question goes unanswered for the size of its answer: `stat` and `tasks`
//! answer a page that fits the connection's payload limit (the server's
//! `max_payload`), and any answer still too large, or one the broker would not
//! take, is replaced by an error answer (`{"error": ...}`) and a warning in the
//! log: a requester hears why, never silence.

use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};

use crate::projector::query::{
    ANSWER_BYTES_MAX_DEFAULT, BLACKLISTS_SUBJECT, QueryError, BlacklistsReply, BlacklistsRequest, LIBRARIES_SUBJECT, LibrariesReply,
    LibrariesRequest, QUERY_SUBJECTS, STAT_SUBJECT, StatRequest, StateSummary, USAGE_SUBJECT,
    RejectionsReply, RejectionsRequest, REJECTIONS_SUBJECT, POLICY_SUBJECT, PolicyReply, PolicyRequest, UsageReply, UsageRequest, VERDICT_SUBJECT, Verdict, VerdictRequest, WHY_SUBJECT, WhyReply, WhyRequest,
};
use crate::projector::results::{
    OUTPUT_SUBJECT, TASKS_SUBJECT, TASK_SUBJECT, TaskReply, TaskRequest, TasksReply, TasksRequest,
};

/// Most queries waiting for the loop; a sender past this waits.
pub const QUERIES_QUEUED_MAX: usize = 256;

/// A question for the loop, with where to send the answer.
#[derive(Debug)]
pub enum Query {
    /// With the most bytes the answer's JSON may take (the broker's payload limit).
    Stat(StatRequest, usize, oneshot::Sender<StateSummary>),
    Why(WhyRequest, oneshot::Sender<WhyReply>),
    Blacklists(BlacklistsRequest, oneshot::Sender<BlacklistsReply>),
    Libraries(LibrariesRequest, oneshot::Sender<LibrariesReply>),
    Verdict(VerdictRequest, oneshot::Sender<Verdict>),
    Usage(UsageRequest, oneshot::Sender<UsageReply>),
    Rejections(RejectionsRequest, oneshot::Sender<RejectionsReply>),
    /// With the most bytes the answer's JSON may take (the broker's payload limit).
    Tasks(TasksRequest, usize, oneshot::Sender<TasksReply>),
    Task(TaskRequest, oneshot::Sender<TaskReply>),
    Policy(PolicyRequest, oneshot::Sender<PolicyReply>),
}

/// How the projector started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartPoint {
    /// Not started yet.
    Starting,
    /// From a snapshot taken after this sequence.
    Snapshot { seq: u64 },
    /// From sequence 1: there was no snapshot (`reason` is `None`) or it could not be used.
    Scratch { reason: Option<String> },
}

/// What a projector is doing, updated after every input it handles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectorStatus {
    pub started_from: StartPoint,
    /// The last sequence folded.
    pub folded_seq: u64,
    /// When the last batch was read, the log held nothing after it.
    pub caught_up: bool,
    /// This projector holds the lease (it may still be catching up before it publishes).
    pub leader: bool,
    /// How many times it became leader.
    pub leader_terms: u64,
    pub batches_published: u64,
    pub deliveries_sent: u64,
    /// Publishes refused by the fence: another writer got there first.
    pub publishes_fenced: u64,
    /// The sequence of the newest snapshot written (0: none yet).
    pub snapshot_seq: u64,
    pub snapshots_written: u64,
}

impl Default for ProjectorStatus {
    fn default() -> Self {
        ProjectorStatus {
            started_from: StartPoint::Starting,
            folded_seq: 0,
            caught_up: false,
            leader: false,
            leader_terms: 0,
            batches_published: 0,
            deliveries_sent: 0,
            publishes_fenced: 0,
            snapshot_seq: 0,
            snapshots_written: 0,
        }
    }
}

/// The projector's loop has ended: nobody will answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the projector has stopped")]
pub struct ProjectorGone;

/// A handle on a running projector: queries and status. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ProjectorHandle {
    pub(super) queries: mpsc::Sender<Query>,
    pub(super) status: watch::Receiver<ProjectorStatus>,
}

impl ProjectorHandle {
    /// Sends the loop a query and waits for its answer.
    async fn ask<A>(
        &self,
        query: impl FnOnce(oneshot::Sender<A>) -> Query,
    ) -> Result<A, ProjectorGone> {
        let (reply, answer) = oneshot::channel();
        self.queries
            .send(query(reply))
            .await
            .map_err(|_| ProjectorGone)?;
        answer.await.map_err(|_| ProjectorGone)
    }

    /// `gridfold stat`, answered from the loop's current state: a page of jobs
    /// whose JSON is at most [`ANSWER_BYTES_MAX_DEFAULT`] bytes.
    pub async fn stat(&self, request: StatRequest) -> Result<StateSummary, ProjectorGone> {
        self.stat_within(request, ANSWER_BYTES_MAX_DEFAULT).await
    }

    /// [`ProjectorHandle::stat`], the answer's JSON at most `bytes_max` bytes.
    pub async fn stat_within(&self, request: StatRequest, bytes_max: usize) -> Result<StateSummary, ProjectorGone> {
        self.ask(|reply| Query::Stat(request, bytes_max, reply)).await
    }

    /// `gridfold why`, answered from the loop's current state.
    pub async fn why(&self, request: WhyRequest) -> Result<WhyReply, ProjectorGone> {
        self.ask(|reply| Query::Why(request, reply)).await
    }

    /// `gridfold blacklist ls`, answered from the loop's current state.
    pub async fn blacklists(
        &self,
        request: BlacklistsRequest,
    ) -> Result<BlacklistsReply, ProjectorGone> {
        self.ask(|reply| Query::Blacklists(request, reply)).await
    }

    /// `gridfold library ls`, answered from the loop's current state.
    pub async fn libraries(
        &self,
        request: LibrariesRequest,
    ) -> Result<LibrariesReply, ProjectorGone> {
        self.ask(|reply| Query::Libraries(request, reply)).await
    }

    /// Whether the entry at a sequence was accepted, answered from the loop's current state.
    pub async fn verdict(&self, request: VerdictRequest) -> Result<Verdict, ProjectorGone> {
        self.ask(|reply| Query::Verdict(request, reply)).await
    }

    /// `gridfold usage`, answered from the loop's current state.
    pub async fn usage(&self, request: UsageRequest) -> Result<UsageReply, ProjectorGone> {
        self.ask(|reply| Query::Usage(request, reply)).await
    }

    pub async fn rejections(&self, request: RejectionsRequest) -> Result<RejectionsReply, ProjectorGone> {
        self.ask(|reply| Query::Rejections(request, reply)).await
    }

    /// `gridfold tasks`, answered from the loop's current state: a page whose
    /// JSON is at most [`ANSWER_BYTES_MAX_DEFAULT`] bytes.
    pub async fn tasks(&self, request: TasksRequest) -> Result<TasksReply, ProjectorGone> {
        self.tasks_within(request, ANSWER_BYTES_MAX_DEFAULT).await
    }

    /// [`ProjectorHandle::tasks`], the answer's JSON at most `bytes_max` bytes.
    pub async fn tasks_within(&self, request: TasksRequest, bytes_max: usize) -> Result<TasksReply, ProjectorGone> {
        self.ask(|reply| Query::Tasks(request, bytes_max, reply)).await
    }

    /// `gridfold task`, answered from the loop's current state.
    pub async fn task(&self, request: TaskRequest) -> Result<TaskReply, ProjectorGone> {
        self.ask(|reply| Query::Task(request, reply)).await
    }

    /// `gridfold policy show`, answered from the loop's current state.
    pub async fn policy(&self, request: PolicyRequest) -> Result<PolicyReply, ProjectorGone> {
        self.ask(|reply| Query::Policy(request, reply)).await
    }

    /// The status as of the last input the loop handled.
    pub fn status(&self) -> ProjectorStatus {
        self.status.borrow().clone()
    }

    /// Waits until the status satisfies `condition`, or the projector stops.
    pub async fn wait_for(
        &self,
        mut condition: impl FnMut(&ProjectorStatus) -> bool,
    ) -> Result<ProjectorStatus, ProjectorGone> {
        let mut status = self.status.clone();
        let seen = status
            .wait_for(|s| condition(s))
            .await
            .map_err(|_| ProjectorGone)?;
        Ok(seen.clone())
    }
}

/// The most bytes an answer may take on `client`'s connection: the server's
/// `max_payload` (NATS's default before the server has said).
fn answer_bytes_max(client: &async_nats::Client) -> usize {
    match client.max_payload() {
        0 => ANSWER_BYTES_MAX_DEFAULT,
        bytes_max => bytes_max,
    }
}

/// `answer` if it is at most `bytes_max` bytes; else an error answer saying
/// so, and a warning in the log.
fn fitted(subject: &str, answer: Vec<u8>, bytes_max: usize) -> Vec<u8> {
    if answer.len() <= bytes_max {
        return answer;
    }
    tracing::warn!(subject, bytes = answer.len(), bytes_max, "an answer is larger than the broker takes in one message: answering with an error");
    json(&QueryError {
        error: format!(
            "the projector's answer on {subject} is {} bytes, more than the broker takes in one message ({bytes_max} bytes): ask for less",
            answer.len()
        ),
    })
}

/// Answers the requests of [`QUERY_SUBJECTS`] on core NATS (JSON in, JSON out; an empty request
/// is the default request) through `handle`, until the projector stops or the task
/// is aborted.
///
/// Every projector answers every request (no queue group) and the requester keeps the
/// first answer. A queue group would hand each request to one member chosen at random,
/// and a member that is hung but still connected (stopped, swapping, its machine
/// paused) keeps its subscription until the server's pings give up on it, minutes
/// later: meanwhile every request sent its way would go unanswered.
pub async fn spawn_query_responder(
    client: async_nats::Client,
    handle: ProjectorHandle,
) -> Result<tokio::task::JoinHandle<()>, async_nats::SubscribeError> {
    let mut subscriptions = Vec::with_capacity(QUERY_SUBJECTS.len());
    for subject in QUERY_SUBJECTS {
        subscriptions.push(client.subscribe(subject).await?);
    }
    // The subscriptions are registered with the server once the client has flushed.
    let _ = tokio::time::timeout(Duration::from_secs(5), client.flush()).await;
    let mut requests = futures::stream::select_all(subscriptions);
    let store = crate::log::output_store::OutputStore::new(async_nats::jetstream::new(client.clone()));
    Ok(tokio::spawn(async move {
        while let Some(message) = requests.next().await {
            let Some(reply_to) = message.reply.clone() else {
                continue;
            };
            let subject = message.subject.as_str();
            let bytes_max = answer_bytes_max(&client);
            let answer = match answer(&handle, &store, subject, &message.payload, bytes_max).await {
                Ok(answer) => fitted(subject, answer, bytes_max),
                Err(ProjectorGone) => break,
            };
            if let Err(err) = client.publish(reply_to.clone(), answer.into()).await {
                tracing::warn!(subject, "an answer could not be sent: {err}; answering with an error");
                let error = QueryError { error: format!("the projector's answer on {subject} could not be sent: {err}") };
                if let Err(err) = client.publish(reply_to, json(&error).into()).await {
                    tracing::warn!(subject, "the error answer could not be sent either: {err}");
                }
            }
        }
    }))
}

async fn answer(
    handle: &ProjectorHandle,
    store: &crate::log::output_store::OutputStore,
    subject: &str,
    payload: &[u8],
    bytes_max: usize,
) -> Result<Vec<u8>, ProjectorGone> {
    fn parse<T: serde::de::DeserializeOwned + Default>(payload: &[u8]) -> Result<T, String> {
        if payload.iter().all(u8::is_ascii_whitespace) {
            return Ok(T::default());
        }
        let not_valid = |detail: String| format!("the request is not valid JSON for this query: {detail}");
        let mut deserializer = serde_json::Deserializer::from_slice(payload);
        let request: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
            // The field at fault, when the request is JSON at all: `state_digest: invalid type …`.
            match e.path().to_string().as_str() {
                "." => not_valid(e.into_inner().to_string()),
                path => not_valid(format!("{path}: {}", e.into_inner())),
            }
        })?;
        deserializer.end().map_err(|e| not_valid(e.to_string()))?;
        Ok(request)
    }
    Ok(match subject {
        STAT_SUBJECT => match parse::<StatRequest>(payload) {
            Ok(request) => json(&handle.stat_within(request, bytes_max).await?),
            Err(error) => json(&QueryError { error }),
        },
        WHY_SUBJECT => match parse::<WhyRequestOrDefault>(payload) {
            Ok(WhyRequestOrDefault(Some(request))) => json(&handle.why(request).await?),
            Ok(WhyRequestOrDefault(None)) => json(&QueryError {
                error: "a why request names a task: {\"task\": \"JOB/INDEX\"}".into(),
            }),
            Err(error) => json(&QueryError { error }),
        },
        BLACKLISTS_SUBJECT => match parse::<BlacklistsRequest>(payload) {
            Ok(request) => json(&handle.blacklists(request).await?),
            Err(error) => json(&QueryError { error }),
        },
        LIBRARIES_SUBJECT => match parse::<LibrariesRequest>(payload) {
            Ok(request) => json(&handle.libraries(request).await?),
            Err(error) => json(&QueryError { error }),
        },
        VERDICT_SUBJECT => match parse::<VerdictRequest>(payload) {
            Ok(request) => json(&handle.verdict(request).await?),
            Err(error) => json(&QueryError { error }),
        },
        USAGE_SUBJECT => match parse::<UsageRequest>(payload) {
            Ok(request) => json(&handle.usage(request).await?),
            Err(error) => json(&QueryError { error }),
        },
        REJECTIONS_SUBJECT => match parse::<RejectionsRequest>(payload) {
            Ok(request) => json(&handle.rejections(request).await?),
            Err(error) => json(&QueryError { error }),
        },
        TASKS_SUBJECT => match parse::<TasksRequest>(payload) {
            Ok(request) => json(&handle.tasks_within(request, bytes_max).await?),
            Err(error) => json(&QueryError { error }),
        },
        TASK_SUBJECT => match parse::<TaskRequest>(payload) {
            Ok(request) => json(&crate::projector::service::output::with_stored_output(store, handle.task(request).await?).await),
            Err(error) => json(&QueryError { error }),
        },
        OUTPUT_SUBJECT => match parse::<crate::projector::results::OutputRequest>(payload) {
            Ok(request) => json(&crate::projector::service::output::answer_output(store, handle, request).await?),
            Err(error) => json(&QueryError { error }),
        },
        POLICY_SUBJECT => match parse::<PolicyRequest>(payload) {
            Ok(request) => json(&handle.policy(request).await?),
            Err(error) => json(&QueryError { error }),
        },
        other => json(&QueryError {
            error: format!("no query is answered on {other}"),
        }),
    })
}

/// A why request, or none (an empty payload).
#[derive(Debug, Default)]
struct WhyRequestOrDefault(Option<WhyRequest>);

impl<'de> serde::Deserialize<'de> for WhyRequestOrDefault {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        WhyRequest::deserialize(deserializer).map(|request| WhyRequestOrDefault(Some(request)))
    }
}

fn json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("answers always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_larger_than_the_broker_takes_becomes_an_error_answer_that_fits() {
        let small = json(&QueryError { error: "fine".into() });
        assert_eq!(fitted("gridfold.q.stat", small.clone(), small.len()), small, "an answer that fits is sent as it is");
        let large = vec![b' '; 2 * 1024 * 1024];
        let replaced = fitted("gridfold.q.usage", large, ANSWER_BYTES_MAX_DEFAULT);
        assert!(replaced.len() <= ANSWER_BYTES_MAX_DEFAULT);
        let error: QueryError = serde_json::from_slice(&replaced).expect("an error answer");
        assert_eq!(
            error.error,
            "the projector's answer on gridfold.q.usage is 2097152 bytes, more than the broker takes in one message (1048576 bytes): ask for less"
        );
    }
}
