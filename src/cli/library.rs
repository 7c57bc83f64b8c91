//! `gridfold library put` (store a grid library and publish it) and `gridfold
//! library ls` (the published libraries, as the projector knows them).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use super::client::{ask, await_verdict, block_on, connect_log, publish, report_verdict, NatsArgs, VerdictArgs};
use super::{bad_input, BadInput};
use crate::core::event::{Event, LibraryRef, Origin};
use crate::log::library_store::{self, Layout, LibraryFormat, LibraryStore, BUCKET};
use crate::projector::query::{LibrariesReply, LibrariesRequest, LIBRARIES_SUBJECT};

#[derive(Debug, Args)]
pub struct LibraryArgs {
    #[command(subcommand)]
    pub command: LibraryCommand,
}

#[derive(Debug, Subcommand)]
pub enum LibraryCommand {
    /// Store FILE in the broker's object store as NAME/VERSION and publish it
    /// (LibraryPublished, with its size and blake3). A .tar.gz or .tgz is unpacked
    /// by the engines; any other file is kept as it is, under its name; a
    /// directory is packed as a .tar.gz first.
    Put {
        /// 1 to 64 of [A-Za-z0-9_.-], not starting or ending with '.'.
        name: String,
        version: String,
        file: PathBuf,
        #[command(flatten)]
        nats: NatsArgs,
        #[command(flatten)]
        verdict: VerdictArgs,
        #[arg(long)]
        json: bool,
    },
    /// The published libraries, with the engines that hold them (asks the projector).
    Ls {
        #[command(flatten)]
        nats: NatsArgs,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: LibraryArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        LibraryCommand::Put { name, version, file, nats, verdict, json } => {
            put(LibraryRef::new(&name, &version), &file, &nats, &verdict, json)
        }
        LibraryCommand::Ls { nats, json } => ls(&nats, json),
    }
}

/// A file to upload: the one given, or a .tar.gz packed from a directory (removed on drop).
struct Upload {
    path: PathBuf,
    layout: Layout,
    packed: bool,
}

impl Drop for Upload {
    fn drop(&mut self) {
        if self.packed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn upload_of(library: &LibraryRef, file: &Path) -> Result<Upload, BadInput> {
    let metadata = std::fs::metadata(file).map_err(|e| BadInput(format!("{}: {e}", file.display())))?;
    if metadata.is_dir() {
        let path = std::env::temp_dir().join(format!("gridfold-library-{}.tar.gz", uuid::Uuid::new_v4()));
        pack_directory(file, &path).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            BadInput(format!("packing the directory {}: {e}", file.display()))
        })?;
        let file_name = format!("{}-{}.tar.gz", library.name, library.version);
        return Ok(Upload { path, layout: Layout { format: LibraryFormat::TarGz, file_name, executable: false }, packed: true });
    }
    let file_name = file
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| BadInput(format!("{}: the file name must be UTF-8", file.display())))?
        .to_string();
    use std::os::unix::fs::PermissionsExt as _;
    let layout = Layout {
        format: LibraryFormat::of_file_name(&file_name),
        executable: metadata.permissions().mode() & 0o111 != 0,
        file_name,
    };
    Ok(Upload { path: file.to_path_buf(), layout, packed: false })
}

/// `dir`'s contents as a gzip-compressed tar at `out`, paths relative to `dir`.
fn pack_directory(dir: &Path, out: &Path) -> std::io::Result<()> {
    let gz = flate2::write::GzEncoder::new(std::fs::File::create_new(out)?, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    tar.append_dir_all(".", dir)?;
    tar.into_inner()?.finish()?.sync_all()
}

fn put(library: LibraryRef, file: &Path, nats: &NatsArgs, verdict: &VerdictArgs, json: bool) -> anyhow::Result<ExitCode> {
    if let Err(problem) = library_store::check_storable(&library) {
        return Ok(bad_input(BadInput(problem.to_string())));
    }
    let upload = match upload_of(&library, file) {
        Ok(upload) => upload,
        Err(bad) => return Ok(bad_input(bad)),
    };
    let wait = verdict.wait();
    let (info, seq, settled) = block_on(async {
        let log = connect_log(nats).await?;
        let store = LibraryStore::new(log.context().clone());
        let info = store.put(&library, &upload.path, upload.layout.clone()).await?;
        let seq = publish(&log, &Origin::Operator, "gridfold-cli", Event::LibraryPublished(info.clone()))
            .await
            .with_context(|| format!("{library} is stored; publishing it failed (run the same command again)"))?;
        anyhow::Ok((info, seq, await_verdict(nats, seq, wait).await))
    })?;
    let code = report_verdict(&format!("the publication of {library}"), seq, &settled);
    if json {
        let output = serde_json::json!({
            "library": library.to_string(),
            "name": library.name,
            "version": library.version,
            "object": library.key(),
            "bucket": BUCKET,
            "size_bytes": info.size_bytes,
            "digest_hex": info.digest_hex,
            "format": upload.layout.format,
            "file_name": upload.layout.file_name,
            "seq": seq,
            "verdict": settled.as_json().0,
            "rejections": settled.as_json().1,
        });
        println!("{output}");
    } else if code == ExitCode::SUCCESS {
        println!(
            "stored {library} ({} bytes, {}, blake3 {}) as {BUCKET}/{}; published at seq {seq}",
            info.size_bytes,
            upload.layout.format.as_str(),
            info.digest_hex,
            library.key()
        );
    }
    Ok(code)
}

fn ls(nats: &NatsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let reply: LibrariesReply = block_on(ask(nats, LIBRARIES_SUBJECT, &LibrariesRequest::default()))?;
    if json {
        println!("{}", serde_json::to_string(&reply)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<24} {:<12} {:>12} {:<16} {:<24} {:<16} JOBS", "NAME", "VERSION", "BYTES", "BLAKE3", "HELD BY", "SYNCING");
    let list = |names: &[String]| if names.is_empty() { "-".to_string() } else { names.join(",") };
    for library in &reply.libraries {
        println!(
            "{:<24} {:<12} {:>12} {:<16} {:<24} {:<16} {}",
            library.name,
            library.version,
            library.size_bytes,
            &library.digest_hex[..library.digest_hex.len().min(16)],
            list(&library.held_by),
            list(&library.syncing),
            list(&library.jobs)
        );
    }
    Ok(ExitCode::SUCCESS)
}
