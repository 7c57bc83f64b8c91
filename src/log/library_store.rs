//! Grid libraries in the JetStream object store: the one adapter that both
//! `gridfold library put` (store) and the engines (fetch) use.
//!
//! - Bucket [`BUCKET`], created by the first `put`; one object per library
//!   version, named `<name>/<version>` ([`LibraryRef::key`]).
//! - Each object carries, in its metadata, how to unpack it ([`LibraryFormat`]:
//!   a plain file kept under its file name, or a `.tar.gz` unpacked), its file
//!   name, whether it is executable, and its blake3 in hex.
//! - The log is authoritative about contents: `put` publishes the size and blake3
//!   in a `LibraryPublished` event, and an engine checks what it fetched against
//!   the digest its `SyncLibrary` delivery carries (the store's own metadata only
//!   when the delivery has none). A version stored once is never overwritten with
//!   other bytes: `put` refuses, and a new version must be published.
//!
//! Not here: publishing the event (the CLI does it) and unpacking (the engine's
//! `library` module). The store is never read by `fold` or `schedule`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use async_nats::jetstream::{self as js, object_store};
use futures::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::core::event::{LibraryInfo, LibraryRef};

/// The object-store bucket of grid libraries.
pub const BUCKET: &str = "GRIDFOLD_LIBRARIES";
/// Object metadata keys.
pub const META_BLAKE3: &str = "gridfold-blake3";
pub const META_FORMAT: &str = "gridfold-format";
pub const META_FILE_NAME: &str = "gridfold-file-name";
pub const META_EXECUTABLE: &str = "gridfold-executable";
/// Bytes read per step when hashing or fetching.
const CHUNK_BYTES: usize = 128 * 1024;

/// How a stored library becomes a directory on an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LibraryFormat {
    /// One file, saved as-is under its file name.
    File,
    /// A gzip-compressed tar archive, unpacked.
    TarGz,
}

impl LibraryFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LibraryFormat::File => "file",
            LibraryFormat::TarGz => "tar.gz",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "file" => Some(LibraryFormat::File),
            "tar.gz" => Some(LibraryFormat::TarGz),
            _ => None,
        }
    }
    /// `.tar.gz` and `.tgz` files are archives; anything else is a plain file.
    pub fn of_file_name(file_name: &str) -> Self {
        if file_name.ends_with(".tar.gz") || file_name.ends_with(".tgz") {
            LibraryFormat::TarGz
        } else {
            LibraryFormat::File
        }
    }
}

/// How to unpack a stored library.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    pub format: LibraryFormat,
    /// For a plain file: the name it is saved under in the library's directory.
    pub file_name: String,
    /// For a plain file: made executable (mode 0755) when unpacked.
    pub executable: bool,
}

/// A library as the object store holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredLibrary {
    pub library: LibraryRef,
    pub size_bytes: u64,
    /// blake3 in hex, as recorded at `put` (absent for an object stored by other means).
    pub digest_hex: Option<String>,
    pub layout: Layout,
}

/// What a fetch wrote, measured while writing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub size_bytes: u64,
    pub digest_hex: String,
    pub stored: StoredLibrary,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{library} cannot be stored: {problem}")]
    BadName { library: String, problem: String },
    #[error("the object-store bucket {BUCKET}: {detail}")]
    Bucket { detail: String },
    #[error("{library} is not in the object-store bucket {BUCKET} (store it with `gridfold library put`)")]
    NotFound { library: String },
    #[error("{library} is already stored with other contents (blake3 {stored}, this file {given}); publish it as a new version")]
    OtherContents { library: String, stored: String, given: String },
    #[error("{library}: {detail}")]
    Transfer { library: String, detail: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether `library` can name an object and a directory: the id rules, and no
/// name or version that starts or ends with `.` (the store refuses such object
/// names; engines keep their own dot-directories beside the libraries).
pub fn check_storable(library: &LibraryRef) -> Result<(), StoreError> {
    let bad = |problem: String| StoreError::BadName { library: library.to_string(), problem };
    library.validate().map_err(|e| bad(e.to_string()))?;
    for part in [&library.name, &library.version] {
        if part.starts_with('.') || part.ends_with('.') {
            return Err(bad(format!("{part:?} starts or ends with '.'")));
        }
    }
    Ok(())
}

/// The library bucket of one broker. Cheap to clone.
#[derive(Clone)]
pub struct LibraryStore {
    context: js::Context,
}

impl std::fmt::Debug for LibraryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibraryStore").field("bucket", &BUCKET).finish()
    }
}

impl LibraryStore {
    pub fn new(context: js::Context) -> Self {
        LibraryStore { context }
    }

    /// The bucket, created when `create` and missing (only operators may);
    /// refused when its stream is not of gridfold's making
    /// ([`crate::log::stream_check`]).
    async fn bucket(&self, create: bool) -> Result<object_store::ObjectStore, StoreError> {
        use crate::log::stream_check::{BucketError, fit_object_store};
        match fit_object_store(&self.context, BUCKET).await {
            Ok(store) => return Ok(store),
            Err(err @ BucketError::Missing(_)) if !create => {
                return Err(StoreError::Bucket { detail: format!("{err}: no library was ever stored on this broker?") })
            }
            Err(BucketError::Missing(_)) => {}
            Err(err) => return Err(StoreError::Bucket { detail: err.to_string() }),
        }
        let config = object_store::Config {
            bucket: BUCKET.to_string(),
            description: Some("gridfold grid libraries, one object per <name>/<version>".to_string()),
            ..Default::default()
        };
        if let Err(create_err) = self.context.create_object_store(config).await {
            // Another client may have created it meanwhile.
            self.context
                .get_object_store(BUCKET)
                .await
                .map_err(|_| StoreError::Bucket { detail: format!("cannot create it: {create_err}") })?;
        }
        fit_object_store(&self.context, BUCKET).await.map_err(|err| StoreError::Bucket { detail: err.to_string() })
    }

    /// Makes the bucket when it is missing, and checks it (`gridfold setup`).
    pub async fn ensure_bucket(&self) -> Result<(), StoreError> {
        self.bucket(true).await.map(drop)
    }

    /// What the store holds for `library`, if anything.
    pub async fn stat(&self, library: &LibraryRef) -> Result<Option<StoredLibrary>, StoreError> {
        let store = match self.bucket(false).await {
            Ok(store) => store,
            Err(_) => return Ok(None),
        };
        match store.info(library.key()).await {
            Ok(info) => Ok(Some(stored_of(library.clone(), &info))),
            Err(err) if err.kind() == object_store::InfoErrorKind::NotFound => Ok(None),
            Err(err) => Err(StoreError::Transfer { library: library.to_string(), detail: err.to_string() }),
        }
    }

    /// Stores the file at `path` as `library`: returns what the log should say of it.
    /// The same bytes stored again are a no-op; other bytes under a stored name are refused.
    pub async fn put(&self, library: &LibraryRef, path: &Path, layout: Layout) -> Result<LibraryInfo, StoreError> {
        check_storable(library)?;
        let (size_bytes, digest_hex) = hash_file(path).await?;
        if let Some(stored) = self.stat(library).await? {
            return match &stored.digest_hex {
                Some(stored_digest) if *stored_digest == digest_hex && stored.size_bytes == size_bytes => {
                    Ok(LibraryInfo { library: library.clone(), size_bytes, digest_hex })
                }
                other => Err(StoreError::OtherContents {
                    library: library.to_string(),
                    stored: other.clone().unwrap_or_else(|| "unknown".to_string()),
                    given: digest_hex,
                }),
            };
        }
        let store = self.bucket(true).await?;
        let metadata: HashMap<String, String> = [
            (META_BLAKE3, digest_hex.clone()),
            (META_FORMAT, layout.format.as_str().to_string()),
            (META_FILE_NAME, layout.file_name.clone()),
            (META_EXECUTABLE, layout.executable.to_string()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect();
        let meta = object_store::ObjectMetadata {
            name: library.key(),
            description: Some(format!("grid library {library}")),
            metadata,
            ..Default::default()
        };
        let io = |source| StoreError::Io { path: path.to_path_buf(), source };
        let mut file = tokio::fs::File::open(path).await.map_err(io)?;
        let info = store
            .put(meta, &mut file)
            .await
            .map_err(|err| StoreError::Transfer { library: library.to_string(), detail: format!("storing: {err}") })?;
        if info.size as u64 != size_bytes {
            return Err(StoreError::Transfer {
                library: library.to_string(),
                detail: format!("{} changed while it was stored ({size_bytes} bytes hashed, {} stored)", path.display(), info.size),
            });
        }
        Ok(LibraryInfo { library: library.clone(), size_bytes, digest_hex })
    }

    /// Writes `library`'s bytes to the new file `dest`, hashing them on the way.
    pub async fn fetch(&self, library: &LibraryRef, dest: &Path) -> Result<Fetched, StoreError> {
        let transfer = |detail: String| StoreError::Transfer { library: library.to_string(), detail };
        let store = self.bucket(false).await?;
        let mut object = store.get(library.key()).await.map_err(|err| match err.kind() {
            object_store::GetErrorKind::NotFound => StoreError::NotFound { library: library.to_string() },
            _ => transfer(format!("fetching: {err}")),
        })?;
        let stored = stored_of(library.clone(), object.info());
        let io = |source| StoreError::Io { path: dest.to_path_buf(), source };
        let mut file = tokio::fs::File::create_new(dest).await.map_err(io)?;
        let (size_bytes, digest_hex) = hash_copy(&mut object, Some(&mut file)).await.map_err(|err| match err {
            Copy::Read(err) => transfer(format!("reading from the store: {err}")),
            Copy::Write(err) => io(err),
        })?;
        file.sync_all().await.map_err(io)?;
        Ok(Fetched { size_bytes, digest_hex, stored })
    }

    /// Every library in the store, by name then version.
    pub async fn list(&self) -> Result<Vec<StoredLibrary>, StoreError> {
        let store = match self.bucket(false).await {
            Ok(store) => store,
            Err(_) => return Ok(Vec::new()),
        };
        let mut listing = store.list().await.map_err(|err| StoreError::Bucket { detail: format!("listing: {err}") })?;
        let mut all = Vec::new();
        while let Some(info) = listing.next().await {
            let info = info.map_err(|err| StoreError::Bucket { detail: format!("listing: {err}") })?;
            let Some((name, version)) = info.name.split_once('/') else { continue };
            all.push(stored_of(LibraryRef::new(name, version), &info));
        }
        all.sort_by(|a, b| a.library.cmp(&b.library));
        Ok(all)
    }
}

fn stored_of(library: LibraryRef, info: &object_store::ObjectInfo) -> StoredLibrary {
    let meta = |key: &str| info.metadata.get(key).cloned();
    let format = meta(META_FORMAT).and_then(|name| LibraryFormat::from_name(&name)).unwrap_or(LibraryFormat::File);
    StoredLibrary {
        size_bytes: info.size as u64,
        digest_hex: meta(META_BLAKE3),
        layout: Layout {
            format,
            file_name: meta(META_FILE_NAME).unwrap_or_else(|| library.name.clone()),
            executable: meta(META_EXECUTABLE).is_some_and(|value| value == "true"),
        },
        library,
    }
}

/// Size and blake3 (hex) of a file.
pub async fn hash_file(path: &Path) -> Result<(u64, String), StoreError> {
    let io = |source| StoreError::Io { path: path.to_path_buf(), source };
    let mut file = tokio::fs::File::open(path).await.map_err(io)?;
    hash_copy(&mut file, None).await.map_err(|(Copy::Read(err) | Copy::Write(err))| io(err))
}

/// Which side of a copy failed.
enum Copy {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// Reads `reader` to its end, writing what it reads to `writer` if any: its size and blake3 (hex).
async fn hash_copy(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    mut writer: Option<&mut tokio::fs::File>,
) -> Result<(u64, String), Copy> {
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut size_bytes = 0u64;
    loop {
        let n = reader.read(&mut buffer).await.map_err(Copy::Read)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        if let Some(writer) = writer.as_mut() {
            writer.write_all(&buffer[..n]).await.map_err(Copy::Write)?;
        }
        size_bytes += n as u64;
    }
    Ok((size_bytes, hasher.finalize().to_hex().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_are_told_by_their_file_name() {
        assert_eq!(LibraryFormat::of_file_name("lib-2.1.tar.gz"), LibraryFormat::TarGz);
        assert_eq!(LibraryFormat::of_file_name("lib.tgz"), LibraryFormat::TarGz);
        assert_eq!(LibraryFormat::of_file_name("run.sh"), LibraryFormat::File);
        for format in [LibraryFormat::File, LibraryFormat::TarGz] {
            assert_eq!(LibraryFormat::from_name(format.as_str()), Some(format));
        }
    }

    #[test]
    fn names_that_cannot_be_objects_are_refused() {
        assert!(check_storable(&LibraryRef::new("render-lib", "2.1.0")).is_ok());
        for (name, version) in [(".hidden", "1"), ("lib", "1."), ("lib", "1/2"), ("", "1")] {
            assert!(check_storable(&LibraryRef::new(name, version)).is_err(), "{name}/{version}");
        }
    }
}
