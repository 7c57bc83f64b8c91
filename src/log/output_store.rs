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
use tokio::io::AsyncReadExt as _;

use crate::core::event::StoredOutput;
use crate::core::ids::{Attempt, Seq, TaskRef};

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
            description: Some("gridfold tasks' stdout and stderr, one object per out/<job>/<index>/<attempt>/<dispatch>/<stream>".into()),
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
    /// stream of a run: its length and blake3 as sent (for the run's end report).
    /// An empty file stores nothing.
    pub async fn put(
        &self,
        run: Run<'_>,
        stream: Stream,
        path: &Path,
        truncated: bool,
    ) -> Result<Option<StoredOutput>, OutputError> {
        let object = object_name(run, stream);
        let transfer = |detail: String| OutputError::Transfer { object: object.clone(), detail };
        let file = match tokio::fs::File::open(path).await {
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
            description: Some(format!("{} of {run}", stream.as_str())),
            metadata,
            ..Default::default()
        };
        let mut hashing = Hashing::new(file);
        let info = tokio::time::timeout(TRANSFER_TIMEOUT, store.put(meta, &mut hashing))
            .await
            .map_err(|_| transfer("timed out".into()))?
            .map_err(|err| transfer(format!("storing: {err}")))?;
        let sent = hashing.finish();
        if info.size as u64 != sent.bytes {
            return Err(transfer(format!("{} bytes sent, the store says it holds {}", sent.bytes, info.size)));
        }
        Ok(Some(sent))
    }

    /// What is stored of one stream, if anything.
    pub async fn stat(&self, run: Run<'_>, stream: Stream) -> Result<Option<StoredStream>, OutputError> {
        let object = object_name(run, stream);
        let Ok(store) = self.bucket().await else { return Ok(None) };
        match store.info(&object).await {
            Ok(info) if !info.deleted => Ok(Some(StoredStream { bytes: info.size as u64, truncated: truncated_of(&info) })),
            Ok(_) => Ok(None),
            Err(err) if err.kind() == object_store::InfoErrorKind::NotFound => Ok(None),
            Err(err) => Err(OutputError::Transfer { object, detail: err.to_string() }),
        }
    }

    /// At most `max_bytes` of one stream from `offset`, with what is stored of
    /// it; and when the read reached its end, the whole object's length and
    /// blake3 (it reads from the start: what comes before `offset` too).
    pub async fn read(
        &self,
        run: Run<'_>,
        stream: Stream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<Page, OutputError> {
        let object = object_name(run, stream);
        let transfer = |detail: String| OutputError::Transfer { object: object.clone(), detail };
        let not_found = || OutputError::NotFound { task: run.task.to_string(), attempt: run.attempt, stream: stream.as_str() };
        let store = self.bucket().await.map_err(|_| not_found())?;
        let reader = store.get(&object).await.map_err(|err| match err.kind() {
            object_store::GetErrorKind::NotFound => not_found(),
            _ => transfer(format!("fetching: {err}")),
        })?;
        let stored = StoredStream { bytes: reader.info().size as u64, truncated: truncated_of(reader.info()) };
        let mut reader = Hashing::new(reader);
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
            // At the end? Then the hash covers the whole object.
            let at_end = reader.read(&mut sink[..1]).await? == 0;
            Ok::<_, std::io::Error>((data, at_end))
        };
        let (data, at_end) = tokio::time::timeout(TRANSFER_TIMEOUT, read)
            .await
            .map_err(|_| transfer("timed out".into()))?
            .map_err(|err| transfer(format!("reading: {err}")))?;
        Ok(Page { stored, data, whole: at_end.then(|| reader.finish()) })
    }

    /// Reads one stream of a run whole, if the store holds it: what it holds
    /// (length, blake3) and whether the output was cut. Its length alone when it
    /// differs from `expected`'s (no need to read it then).
    pub async fn check(&self, run: Run<'_>, stream: Stream, expected: Option<StoredOutput>) -> Result<Option<Found>, OutputError> {
        let Some(stored) = self.stat(run, stream).await? else { return Ok(None) };
        if expected.is_none_or(|expected| expected.bytes != stored.bytes) {
            return Ok(Some(Found { stored, blake3: None }));
        }
        match self.read(run, stream, stored.bytes, 0).await {
            Ok(page) => Ok(Some(Found { stored: page.stored, blake3: page.whole.map(|whole| whole.blake3) })),
            Err(OutputError::NotFound { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }
}

/// One read of a stream (see [`OutputStore::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub stored: StoredStream,
    pub data: Vec<u8>,
    /// The whole object's length and blake3, when the read reached its end.
    pub whole: Option<StoredOutput>,
}

/// What the store holds of a stream (see [`OutputStore::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub stored: StoredStream,
    /// Its blake3, when it was read whole.
    pub blake3: Option<[u8; 32]>,
}

/// Why what the store holds of one stream of a run is not what its engine
/// reported storing (its end report's length and blake3, `reported`), or
/// `None` when it is (or when the store holds nothing: a missing object is
/// said as such). `found_blake3` is `None` when the object was not read whole:
/// then its length alone is compared.
pub fn altered(run: Run<'_>, stream: Stream, reported: Option<StoredOutput>, found_bytes: u64, found_blake3: Option<[u8; 32]>) -> Option<String> {
    let what = format!("the {} of {run}", stream.as_str());
    let found = || match found_blake3 {
        Some(hash) => format!("{found_bytes} bytes (blake3 {})", hex::encode(hash)),
        None => format!("{found_bytes} bytes"),
    };
    match reported {
        None => Some(format!("{what} was altered: its engine reported storing none, the store holds {}", found())),
        Some(reported) if reported.bytes != found_bytes || found_blake3.is_some_and(|hash| hash != reported.blake3) => Some(format!(
            "{what} was altered: its engine stored {} bytes (blake3 {}), the store holds {}",
            reported.bytes,
            hex::encode(reported.blake3),
            found()
        )),
        Some(_) => None,
    }
}

/// A reader that hashes (blake3) and counts what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl<R> Hashing<R> {
    fn new(inner: R) -> Self {
        Hashing { inner, hasher: blake3::Hasher::new(), bytes: 0 }
    }

    /// The length and blake3 of what was read.
    fn finish(&self) -> StoredOutput {
        StoredOutput { bytes: self.bytes, blake3: *self.hasher.finalize().as_bytes() }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Hashing<R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            let new = &buf.filled()[before..];
            this.hasher.update(new);
            this.bytes += new.len() as u64;
        }
        polled
    }
}

fn truncated_of(info: &object_store::ObjectInfo) -> bool {
    info.metadata.get(META_TRUNCATED).is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_altered_when_its_length_or_hash_is_not_what_its_engine_reported() {
        let task: TaskRef = "j/0".parse().unwrap();
        let run = Run { task: &task, attempt: 2, dispatch: Seq(40) };
        let reported = StoredOutput { bytes: 6, blake3: *blake3::hash(b"out-0\n").as_bytes() };
        let same = Some(reported.blake3);
        assert_eq!(altered(run, Stream::Stdout, Some(reported), 6, same), None);
        assert_eq!(altered(run, Stream::Stdout, Some(reported), 6, None), None, "not read whole: its length is all there is");
        let longer = altered(run, Stream::Stdout, Some(reported), 9, None).unwrap();
        assert!(longer.starts_with("the stdout of j/0 attempt 2 was altered: its engine stored 6 bytes") && longer.ends_with("the store holds 9 bytes"), "{longer}");
        let other = *blake3::hash(b"OUT-0\n").as_bytes();
        let swapped = altered(run, Stream::Stderr, Some(reported), 6, Some(other)).unwrap();
        assert!(swapped.contains(&hex::encode(other)) && swapped.contains(&hex::encode(reported.blake3)), "{swapped}");
        let planted = altered(run, Stream::Stdout, None, 3, Some(other)).unwrap();
        assert!(planted.contains("its engine reported storing none, the store holds 3 bytes"), "{planted}");
        assert_eq!(object_name(run, Stream::Stderr), "out/j/0/2/40/stderr");
    }
}
