//! The grid libraries an engine holds: its library directory, laid out as
//! `<library dir>/<name>/<version>/`, one directory per library version.
//!
//! A version directory counts as held only once it contains the marker file
//! [`SYNCED_MARKER`], written last by whatever unpacked it: a directory without
//! it is a sync that was interrupted (or is under way) and is not reported. The
//! engine lists what it holds at each login (`EngineProps::libraries`), so the
//! projector knows which engines may run the jobs rooted on which library, and
//! a task of such a job runs with `GRIDFOLD_LIBRARY_DIR` set to the library's
//! version directory.
//!
//! A sync ([`install`]) unpacks what the engine fetched into a staging
//! directory under [`STAGING_DIR`], moves it into place, and writes the marker
//! last, so an interrupted sync never counts as held. Directories whose names
//! start with `.` are never libraries (the staging directory is one).
//!
//! Not here: talking to the object store (`crate::log::library_store`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::core::event::LibraryRef;
use crate::log::library_store::{Layout, LibraryFormat};

/// The file whose presence says a library version directory is complete.
pub const SYNCED_MARKER: &str = ".synced";
/// Where syncs download and unpack before moving into place, under the library directory.
pub const STAGING_DIR: &str = ".staging";
/// Most libraries reported at login: a bound on the login event's size.
pub const LIBRARIES_MAX: usize = 1_024;

/// Where `library` is unpacked under `library_dir`: `<library_dir>/<name>/<version>`.
/// Names and versions follow the id rules, and an id made only of dots does
/// not exist, so the path never leaves `library_dir`.
pub fn library_path(library_dir: &Path, library: &LibraryRef) -> PathBuf {
    library_dir.join(&library.name).join(&library.version)
}

/// Whether `library` is held: its directory has the synced marker.
pub fn is_held(library_dir: &Path, library: &LibraryRef) -> bool {
    library.validate().is_ok() && library_path(library_dir, library).join(SYNCED_MARKER).is_file()
}

/// The libraries held under `library_dir`, sorted by name then version, at most
/// [`LIBRARIES_MAX`]. A missing directory holds none. Entries that cannot be
/// libraries (names outside the id rules, files, unreadable directories) are
/// skipped with a warning, never an error: the engine can still run every job
/// that needs no library.
pub fn held_libraries(library_dir: &Path) -> Vec<LibraryRef> {
    let mut held = BTreeSet::new();
    for (name, name_path) in subdirectories(library_dir) {
        for (version, version_path) in subdirectories(&name_path) {
            let library = LibraryRef::new(&name, &version);
            if let Err(problem) = library.validate() {
                tracing::warn!(path = %version_path.display(), "not a library directory: {problem}");
                continue;
            }
            if version_path.join(SYNCED_MARKER).is_file() {
                held.insert(library);
            } else {
                tracing::info!(path = %version_path.display(), "library directory without {SYNCED_MARKER}: not reported");
            }
        }
    }
    if held.len() > LIBRARIES_MAX {
        tracing::warn!(held = held.len(), "reporting only the first {LIBRARIES_MAX} libraries");
    }
    held.into_iter().take(LIBRARIES_MAX).collect()
}

/// A fresh staging path under `library_dir` for one sync (`<dir>/.staging/<uuid><suffix>`),
/// its parent created.
pub fn staging_path(library_dir: &Path, suffix: &str) -> std::io::Result<PathBuf> {
    let staging = library_dir.join(STAGING_DIR);
    std::fs::create_dir_all(&staging)?;
    Ok(staging.join(format!("{}{suffix}", uuid::Uuid::new_v4())))
}

/// Unpacks the fetched file `download` (consumed: moved or removed) as `library`
/// under `library_dir`, per `layout`, then marks it synced. Blocking: run it off
/// the async threads. A library already held (another engine sharing the
/// directory got there first) is left as it is.
pub fn install(library_dir: &Path, library: &LibraryRef, download: &Path, layout: &Layout) -> Result<PathBuf, String> {
    let target = library_path(library_dir, library);
    let unpacked = staging_path(library_dir, ".dir").map_err(|e| format!("creating {}: {e}", library_dir.join(STAGING_DIR).display()))?;
    let result = unpack(download, &unpacked, layout).and_then(|()| {
        if is_held(library_dir, library) {
            tracing::info!(%library, "already synced by someone else meanwhile");
            return Ok(());
        }
        let parent = target.parent().expect("a library path has a parent");
        std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
        // An interrupted earlier sync left a directory without the marker.
        if target.exists() {
            std::fs::remove_dir_all(&target).map_err(|e| format!("removing the incomplete {}: {e}", target.display()))?;
        }
        std::fs::rename(&unpacked, &target).map_err(|e| format!("moving the library to {}: {e}", target.display()))?;
        std::fs::write(target.join(SYNCED_MARKER), b"").map_err(|e| format!("writing {}: {e}", target.join(SYNCED_MARKER).display()))
    });
    let _ = std::fs::remove_file(download);
    if unpacked.exists() {
        let _ = std::fs::remove_dir_all(&unpacked);
    }
    result.map(|()| target)
}

fn unpack(download: &Path, into: &Path, layout: &Layout) -> Result<(), String> {
    std::fs::create_dir_all(into).map_err(|e| format!("creating {}: {e}", into.display()))?;
    match layout.format {
        LibraryFormat::File => {
            let name = plain_file_name(&layout.file_name);
            let path = into.join(name);
            std::fs::rename(download, &path).map_err(|e| format!("moving the download to {}: {e}", path.display()))?;
            if layout.executable {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| format!("making {} executable: {e}", path.display()))?;
            }
            Ok(())
        }
        LibraryFormat::TarGz => {
            let file = std::fs::File::open(download).map_err(|e| format!("opening {}: {e}", download.display()))?;
            let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
            archive.set_preserve_permissions(true);
            // `unpack` refuses entries that would land outside `into` (absolute paths, `..`).
            archive.unpack(into).map_err(|e| format!("unpacking the .tar.gz: {e}"))
        }
    }
}

/// The name a plain-file library is saved under: its own, unless that could
/// leave the directory or be taken for the marker.
fn plain_file_name(name: &str) -> &str {
    let plain = !name.is_empty() && !name.contains('/') && !name.starts_with('.') && name != SYNCED_MARKER;
    if plain { name } else { "library" }
}

/// The directories directly under `dir` whose names are UTF-8, with their paths.
fn subdirectories(dir: &Path) -> Vec<(String, PathBuf)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(err) => {
            tracing::warn!(dir = %dir.display(), "cannot list the library directory: {err}");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        // Dot-directories (the staging directory) are the engine's own, never libraries.
        if !path.is_dir() || entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        match entry.file_name().into_string() {
            Ok(name) => found.push((name, path)),
            Err(name) => tracing::warn!(?name, "skipping a library directory whose name is not UTF-8"),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(root: &Path, name: &str, version: &str, synced: bool) {
        let dir = root.join(name).join(version);
        std::fs::create_dir_all(&dir).unwrap();
        if synced {
            std::fs::write(dir.join(SYNCED_MARKER), b"").unwrap();
        }
    }

    #[test]
    fn only_complete_version_directories_are_held() {
        let root = tempfile::tempdir().unwrap();
        make(root.path(), "render-lib", "2.1.0", true);
        make(root.path(), "render-lib", "2.0", true);
        make(root.path(), "ffmpeg", "7", true);
        make(root.path(), "ffmpeg", "8", false);
        make(root.path(), "bad name", "1", true);
        std::fs::write(root.path().join("render-lib").join("notes.txt"), b"a file, not a version").unwrap();
        std::fs::write(root.path().join("README"), b"a file, not a library").unwrap();
        let held: Vec<String> = held_libraries(root.path()).iter().map(LibraryRef::to_string).collect();
        assert_eq!(held, ["ffmpeg@7", "render-lib@2.0", "render-lib@2.1.0"]);
        assert!(is_held(root.path(), &LibraryRef::new("ffmpeg", "7")));
        assert!(!is_held(root.path(), &LibraryRef::new("ffmpeg", "8")));
        assert!(!is_held(root.path(), &LibraryRef::new("..", "8")));
        assert_eq!(library_path(Path::new("/l"), &LibraryRef::new("a", "1")), Path::new("/l/a/1"));
    }

    #[test]
    fn a_plain_file_is_installed_under_its_name_and_marked_last() {
        let root = tempfile::tempdir().unwrap();
        let library = LibraryRef::new("tools", "1");
        let download = staging_path(root.path(), ".download").unwrap();
        std::fs::write(&download, b"#!/bin/sh\necho hi\n").unwrap();
        let layout = Layout { format: LibraryFormat::File, file_name: "run.sh".into(), executable: true };
        let dir = install(root.path(), &library, &download, &layout).unwrap();
        assert_eq!(dir, root.path().join("tools/1"));
        assert_eq!(std::fs::read(dir.join("run.sh")).unwrap(), b"#!/bin/sh\necho hi\n");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(dir.join("run.sh")).unwrap().permissions().mode() & 0o777, 0o755);
        assert!(is_held(root.path(), &library));
        assert!(!download.exists());
        assert_eq!(held_libraries(root.path()), vec![library], "the staging directory is no library");
        assert_eq!(plain_file_name("../x"), "library");
        assert_eq!(plain_file_name(SYNCED_MARKER), "library");
    }

    #[test]
    fn a_tar_gz_is_unpacked_and_a_broken_one_leaves_nothing_held() {
        let root = tempfile::tempdir().unwrap();
        let library = LibraryRef::new("render-lib", "2.1.0");
        let download = staging_path(root.path(), ".download").unwrap();
        {
            let gz = flate2::write::GzEncoder::new(std::fs::File::create(&download).unwrap(), flate2::Compression::fast());
            let mut tar = tar::Builder::new(gz);
            let data = b"shader";
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            tar.append_data(&mut header, "share/a.glsl", &data[..]).unwrap();
            tar.into_inner().unwrap().finish().unwrap();
        }
        let layout = Layout { format: LibraryFormat::TarGz, file_name: "lib.tar.gz".into(), executable: false };
        let dir = install(root.path(), &library, &download, &layout).unwrap();
        assert_eq!(std::fs::read(dir.join("share/a.glsl")).unwrap(), b"shader");
        assert!(is_held(root.path(), &library));

        let broken = LibraryRef::new("render-lib", "3");
        let download = staging_path(root.path(), ".download").unwrap();
        std::fs::write(&download, b"not gzip").unwrap();
        let error = install(root.path(), &broken, &download, &layout).unwrap_err();
        assert!(error.contains("unpacking"), "{error}");
        assert!(!is_held(root.path(), &broken));
        assert!(!library_path(root.path(), &broken).exists());
        assert_eq!(std::fs::read_dir(root.path().join(STAGING_DIR)).unwrap().count(), 0, "staging cleaned up");
    }

    #[test]
    fn a_missing_directory_holds_nothing() {
        let root = tempfile::tempdir().unwrap();
        assert!(held_libraries(&root.path().join("nowhere")).is_empty());
    }
}
