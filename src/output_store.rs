//! Tasks' whole standard output and error in the JetStream object store: the one
//! adapter engines (store), the projector's query responder and `gridfold output`
//! (read) share.
//!
//! - Bucket [`BUCKET`], made by the projector at its start or by `gridfold
//!   setup` ([`OutputStore::ensure_bucket`]), never by an engine, with a
//!   retention ([`RETENTION_DEFAULT`], or their `--output-retention-secs`) after
//!   which the broker deletes an object whatever else happens, and a limit on the
//!   bucket's whole size ([`BUCKET_BYTES_MAX`]). Every user of the bucket checks
//!   its stream is of gridfold's making ([`crate::log::stream_check`]) before
//!   it stores or reads anything.
//! - One object per attempt and stream, named
//!   `out/<job>/<index>/<attempt>/<stdout|stderr>` ([`object_name`]), holding at
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

use crate::core::ids::{Attempt, TaskRef};
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

/// The object holding one stream of one attempt.
pub fn object_name(task: &TaskRef, attempt: Attempt, stream: Stream) -> String {
    format!("out/{}/{}/{attempt}/{}", task.job, task.index, stream.as_str())
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
    /// The bucket's stream is not of gridfold's making: nothing may be stored
    /// or read through it (see [`crate::log::stream_check`]).
    #[error("the object-store bucket {BUCKET}: {0}")]
    Unfit(#[from] crate::log::stream_check::UnfitStream),
}

/// The output bucket of one broker. Cheap to clone.
#[derive(Clone)]
pub struct OutputStore {
    context: js::Context,
    /// The bucket, once found and checked: its stream's configuration cannot
    /// change afterwards (no principal may update a stream).
    checked: std::sync::Arc<tokio::sync::OnceCell<object_store::ObjectStore>>,
}

impl std::fmt::Debug for OutputStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputStore").field("bucket", &BUCKET).finish()
    }
}

impl OutputStore {
    pub fn new(context: js::Context) -> Self {
        OutputStore { context, checked: Default::default() }
    }

    /// The bucket, found and checked once per store: a stream of another's
    /// making is refused, whatever it holds.
    async fn bucket(&self) -> Result<object_store::ObjectStore, OutputError> {
        use crate::log::stream_check::{BucketError, fit_object_store};
        self.checked
            .get_or_try_init(|| async {
                fit_object_store(&self.context, BUCKET).await.map_err(|err| match err {
                    BucketError::Unfit(unfit) => OutputError::Unfit(unfit),
                    BucketError::Missing(_) => OutputError::Bucket { detail: format!("{err}: the projector or `gridfold setup` makes it") },
                    err => OutputError::Bucket { detail: err.to_string() },
                })
            })
            .await
            .cloned()
    }

    /// Makes the bucket, with `retention`, when it is missing, and checks it:
    /// the projector at its start and `gridfold setup` call this, and nothing
    /// else makes it.
    pub async fn ensure_bucket(&self, retention: Duration) -> Result<(), OutputError> {
        if self.context.get_object_store(BUCKET).await.is_ok() {
            return self.bucket().await.map(drop);
        }
        let config = object_store::Config {
            bucket: BUCKET.to_string(),
            description: Some("gridfold tasks' stdout and stderr, one object per out/<job>/<index>/<attempt>/<stream>".into()),
            max_age: retention,
            max_bytes: BUCKET_BYTES_MAX,
            ..Default::default()
        };
        if let Err(create_err) = self.context.create_object_store(config).await {
            // Another process may have made it meanwhile.
            self.context
                .get_object_store(BUCKET)
                .await
                .map_err(|_| OutputError::Bucket { detail: format!("cannot create it: {create_err}") })?;
        }
        self.bucket().await.map(drop)
    }

    /// Stores the file at `path` (already cut to its bound by the engine) as one
    /// stream of an attempt. An empty file stores nothing.
    pub async fn put(
        &self,
        task: &TaskRef,
        attempt: Attempt,
        stream: Stream,
        path: &Path,
        truncated: bool,
    ) -> Result<Option<StoredStream>, OutputError> {
        let object = object_name(task, attempt, stream);
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
        let store = self.bucket().await?;
        let metadata: HashMap<String, String> = [(META_TRUNCATED.to_string(), truncated.to_string())].into_iter().collect();
        let meta = object_store::ObjectMetadata {
            name: object.clone(),
            description: Some(format!("{} of {task} attempt {attempt}", stream.as_str())),
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
    pub async fn stat(&self, task: &TaskRef, attempt: Attempt, stream: Stream) -> Result<Option<StoredStream>, OutputError> {
        let object = object_name(task, attempt, stream);
        let Ok(store) = self.bucket().await else { return Ok(None) };
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
        task: &TaskRef,
        attempt: Attempt,
        stream: Stream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<(StoredStream, Vec<u8>), OutputError> {
        let object = object_name(task, attempt, stream);
        let transfer = |detail: String| OutputError::Transfer { object: object.clone(), detail };
        let not_found = || OutputError::NotFound { task: task.to_string(), attempt, stream: stream.as_str() };
        let store = self.bucket().await.map_err(|_| not_found())?;
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
        let stdout = store.stat(&task, attempt.attempt, Stream::Stdout).await.ok().flatten();
        let stderr = store.stat(&task, attempt.attempt, Stream::Stderr).await.ok().flatten();
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
    let attempt = match request.attempt {
        Some(n) => n,
        None => match task_reply.attempts.iter().rev().find(|a| !matches!(a.outcome.as_str(), "dispatched" | "running")) {
            Some(a) => a.attempt,
            None => {
                reply.error = Some(format!("{task} has no ended attempt yet"));
                return Ok(reply);
            }
        },
    };
    reply.attempt = attempt;
    let max = u64::from(request.max_bytes.unwrap_or(OUTPUT_PAGE_BYTES_MAX).clamp(1, OUTPUT_PAGE_BYTES_MAX));
    match store.read(&task, attempt, stream, request.offset, max).await {
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
