//! Tasks' whole standard output and error in the JetStream object store: the one
//! adapter engines (store), the projector's query responder and `gridfold output`
//! (read) share.
//!
//! - Bucket [`BUCKET`], created by the first engine that stores output, with a
//!   retention ([`RETENTION_DEFAULT`], or the engine's `--output-retention-secs`
//!   when it creates the bucket) after which the broker deletes an object whatever
//!   else happens, and a limit on the bucket's whole size ([`BUCKET_BYTES_MAX`]).
//! - One object per run and stream, named
//!   `out/<job>/<index>/<attempt>/<dispatch>/<stdout|stderr>` ([`object_name`]),
//!   where `<dispatch>` is the log sequence of the batch whose order the run
//!   answered (an attempt's record says it: `AttemptRecord::dispatch_seq`), so a
//!   run of the same attempt number again after a preemption stores apart; holding at
//!   most the attempt's bound (its share of the policy's `[output]` bounds, decided
//!   by the fold at dispatch: see [`crate::core::event::OutputPolicy`] and
//!   [`crate::core::state::attempts`]), and at most the engine's own
//!   `--output-bytes-max`; its metadata says whether the output was cut at that bound.
//! - The log holds only the first 64 KiB of stdout (`TaskCompleted.result`) and
//!   the last 4 KiB of stderr (`TaskFailed.error_tail`): the store is never read by
//!   `fold` or `schedule`, and a missing object (expired, never stored because the
//!   engine had no broker, the store refused it) is an answer, not an error of the grid.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self as js, object_store};
use base64::Engine as _;
use tokio::io::AsyncReadExt as _;

use crate::core::ids::{Attempt, Seq, TaskRef};
use crate::projector::results::{OutputReply, OutputRequest, TaskReply, OUTPUT_PAGE_BYTES_MAX};
use crate::projector::service::{ProjectorGone, ProjectorHandle};

/// The object-store bucket of tasks' output.
pub const BUCKET: &str = "GRIDFOLD_OUTPUT";
/// How long the broker keeps a task's output when the bucket is created without a retention given.
pub const RETENTION_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most the bucket holds, all tasks together (10 GiB); past it, the broker refuses new objects.
pub const BUCKET_BYTES_MAX: i64 = 10 * 1024 * 1024 * 1024;
/// Object metadata: `true` when the output was cut at its bound.
pub const META_TRUNCATED: &str = "gridfold-truncated";
/// How long one store or read may take before it is given up.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(30);

/// Which stream of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
    pub fn named(name: &str) -> Option<Stream> {
        match name {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }
}

/// One run of a task: its attempt's number and the log sequence of the batch
/// whose dispatch it answered (a preempted attempt's number runs again,
/// answering a later dispatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run<'a> {
    pub task: &'a TaskRef,
    pub attempt: Attempt,
    pub dispatch: Seq,
}

impl std::fmt::Display for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} attempt {}", self.task, self.attempt)
    }
}

/// The object holding one stream of one run.
pub fn object_name(run: Run<'_>, stream: Stream) -> String {
    format!("out/{}/{}/{}/{}/{}", run.task.job, run.task.index, run.attempt, run.dispatch.0, stream.as_str())
}

/// What the store holds of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredStream {
    pub bytes: u64,
    pub truncated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("the object-store bucket {BUCKET}: {detail}")]
    Bucket { detail: String },
    #[error("no {stream} stored for {task} attempt {attempt} (the task wrote none, its output bound was 0 as its job's output budget was spent, it expired, or its engine could not store it)")]
    NotFound { task: String, attempt: Attempt, stream: &'static str },
    #[error("{object}: {detail}")]
    Transfer { object: String, detail: String },
}

/// The output bucket of one broker. Cheap to clone.
#[derive(Clone)]
pub struct OutputStore {
    context: js::Context,
}

impl std::fmt::Debug for OutputStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputStore").field("bucket", &BUCKET).finish()
    }
}

impl OutputStore {
    pub fn new(context: js::Context) -> Self {
        OutputStore { context }
    }

    /// The bucket; created (with `retention`) when `create` is given and it is missing.
    async fn bucket(&self, create: Option<Duration>) -> Result<object_store::ObjectStore, OutputError> {
        let found = self.context.get_object_store(BUCKET).await;
        let retention = match (found, create) {
            (Ok(store), _) => return Ok(store),
            (Err(err), None) => {
                return Err(OutputError::Bucket { detail: format!("not available ({err}): no engine stored output on this broker yet?") })
            }
            (Err(_), Some(retention)) => retention,
        };
        let config = object_store::Config {
            bucket: BUCKET.to_string(),
            description: Some("gridfold tasks' stdout and stderr, one object per out/<job>/<index>/<attempt>/<stream>".into()),
            max_age: retention,
            max_bytes: BUCKET_BYTES_MAX,
            ..Default::default()
        };
        match self.context.create_object_store(config).await {
            Ok(store) => Ok(store),
            Err(create_err) => self
                .context
                .get_object_store(BUCKET)
                .await
                .map_err(|_| OutputError::Bucket { detail: format!("cannot create it: {create_err}") }),
        }
    }

    /// Stores the file at `path` (already cut to its bound by the engine) as one
    /// stream of an attempt. An empty file stores nothing.
    pub async fn put(
        &self,
        run: Run<'_>,
        stream: Stream,
        path: &Path,
        truncated: bool,
        retention: Duration,
    ) -> Result<Option<StoredStream>, OutputError> {
        let object = object_name(run, stream);
        let transfer = |detail: String| OutputError::Transfer { object: object.clone(), detail };
        let mut file = match tokio::fs::File::open(path).await {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(transfer(format!("{}: {err}", path.display()))),
        };
        let size = file.metadata().await.map_err(|err| transfer(err.to_string()))?.len();
        if size == 0 {
            return Ok(None);
        }
        let store = self.bucket(Some(retention)).await?;
        let metadata: HashMap<String, String> = [(META_TRUNCATED.to_string(), truncated.to_string())].into_iter().collect();
        let meta = object_store::ObjectMetadata {
            name: object.clone(),
            description: Some(format!("{} of {run}", stream.as_str())),
            metadata,
            ..Default::default()
        };
        let info = tokio::time::timeout(TRANSFER_TIMEOUT, store.put(meta, &mut file))
            .await
            .map_err(|_| transfer("timed out".into()))?
            .map_err(|err| transfer(format!("storing: {err}")))?;
        Ok(Some(StoredStream { bytes: info.size as u64, truncated }))
    }

    /// What is stored of one stream, if anything.
    pub async fn stat(&self, run: Run<'_>, stream: Stream) -> Result<Option<StoredStream>, OutputError> {
        let object = object_name(run, stream);
        let Ok(store) = self.bucket(None).await else { return Ok(None) };
        match store.info(&object).await {
            Ok(info) if !info.deleted => Ok(Some(StoredStream { bytes: info.size as u64, truncated: truncated_of(&info) })),
            Ok(_) => Ok(None),
            Err(err) if err.kind() == object_store::InfoErrorKind::NotFound => Ok(None),
            Err(err) => Err(OutputError::Transfer { object, detail: err.to_string() }),
        }
    }

    /// At most `max_bytes` of one stream from `offset`, with what is stored of it.
    pub async fn read(
        &self,
        run: Run<'_>,
        stream: Stream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<(StoredStream, Vec<u8>), OutputError> {
        let object = object_name(run, stream);
        let transfer = |detail: String| OutputError::Transfer { object: object.clone(), detail };
        let not_found = || OutputError::NotFound { task: run.task.to_string(), attempt: run.attempt, stream: stream.as_str() };
        let store = self.bucket(None).await.map_err(|_| not_found())?;
        let mut reader = store.get(&object).await.map_err(|err| match err.kind() {
            object_store::GetErrorKind::NotFound => not_found(),
            _ => transfer(format!("fetching: {err}")),
        })?;
        let stored = StoredStream { bytes: reader.info().size as u64, truncated: truncated_of(reader.info()) };
        let read = async {
            // Skip to `offset`: the object is bounded, so this is bounded too.
            let mut skipped = 0u64;
            let mut sink = vec![0u8; 64 * 1024];
            while skipped < offset {
                let want = (offset - skipped).min(sink.len() as u64) as usize;
                let n = reader.read(&mut sink[..want]).await?;
                if n == 0 {
                    break;
                }
                skipped += n as u64;
            }
            let mut data = Vec::new();
            (&mut reader).take(max_bytes).read_to_end(&mut data).await?;
            Ok::<_, std::io::Error>(data)
        };
        let data = tokio::time::timeout(TRANSFER_TIMEOUT, read)
            .await
            .map_err(|_| transfer("timed out".into()))?
            .map_err(|err| transfer(format!("reading: {err}")))?;
        Ok((stored, data))
    }
}

fn truncated_of(info: &object_store::ObjectInfo) -> bool {
    info.metadata.get(META_TRUNCATED).is_some_and(|v| v == "true")
}

/// A task reply with what the store holds of each attempt's output (at most
/// `ATTEMPTS_KEPT_PER_TASK` attempts, two lookups each).
pub async fn with_stored_output(store: &OutputStore, mut reply: TaskReply) -> TaskReply {
    let Ok(task) = reply.task.parse::<TaskRef>() else { return reply };
    if reply.error.is_some() {
        return reply;
    }
    for attempt in &mut reply.attempts {
        if matches!(attempt.outcome.as_str(), "dispatched" | "running") {
            continue;
        }
        let run = Run { task: &task, attempt: attempt.attempt, dispatch: Seq(attempt.dispatch_seq) };
        let stdout = store.stat(run, Stream::Stdout).await.ok().flatten();
        let stderr = store.stat(run, Stream::Stderr).await.ok().flatten();
        attempt.stdout_stored_bytes = stdout.map(|s| s.bytes);
        attempt.stderr_stored_bytes = stderr.map(|s| s.bytes);
        attempt.output_truncated = stdout.is_some_and(|s| s.truncated) || stderr.is_some_and(|s| s.truncated);
    }
    reply
}

/// Answers `gridfold.q.output`: the attempt asked for (by default the task's
/// newest kept attempt that ended), one page of its stream.
pub async fn answer_output(
    store: &OutputStore,
    handle: &ProjectorHandle,
    request: OutputRequest,
) -> Result<OutputReply, ProjectorGone> {
    let stream_name = request.stream.clone().unwrap_or_else(|| "stdout".into());
    let mut reply = OutputReply { task: request.task.clone(), stream: stream_name.clone(), offset: request.offset, ..Default::default() };
    let Some(stream) = Stream::named(&stream_name) else {
        reply.error = Some(format!("no stream {stream_name}: stdout or stderr"));
        return Ok(reply);
    };
    let task_reply = handle.task(crate::projector::results::TaskRequest { task: request.task.clone() }).await?;
    if let Some(error) = task_reply.error {
        reply.error = Some(error);
        return Ok(reply);
    }
    let task: TaskRef = request.task.parse().expect("the projector parsed it");
    // The newest run of the attempt asked for (a preempted one may have run
    // before it under the same number), or the newest ended run.
    let chosen = match request.attempt {
        Some(n) => task_reply.attempts.iter().rev().find(|a| a.attempt == n),
        None => task_reply.attempts.iter().rev().find(|a| !matches!(a.outcome.as_str(), "dispatched" | "running")),
    };
    let Some(chosen) = chosen else {
        reply.error = Some(match request.attempt {
            Some(n) => format!("{task} has no attempt {n} kept"),
            None => format!("{task} has no ended attempt yet"),
        });
        return Ok(reply);
    };
    let run = Run { task: &task, attempt: chosen.attempt, dispatch: Seq(chosen.dispatch_seq) };
    reply.attempt = run.attempt;
    let max = u64::from(request.max_bytes.unwrap_or(OUTPUT_PAGE_BYTES_MAX).clamp(1, OUTPUT_PAGE_BYTES_MAX));
    match store.read(run, stream, request.offset, max).await {
        Ok((stored, data)) => {
            reply.total_bytes = stored.bytes;
            reply.truncated = stored.truncated;
            reply.eof = request.offset + data.len() as u64 >= stored.bytes;
            reply.data_base64 = base64::engine::general_purpose::STANDARD.encode(&data);
        }
        Err(error) => reply.error = Some(error.to_string()),
    }
    Ok(reply)
}
