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
//! Not here: fetching libraries from the object store and unpacking them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::core::event::LibraryRef;

/// The file whose presence says a library version directory is complete.
pub const SYNCED_MARKER: &str = ".synced";
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
        if !path.is_dir() {
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
    fn a_missing_directory_holds_nothing() {
        let root = tempfile::tempdir().unwrap();
        assert!(held_libraries(&root.path().join("nowhere")).is_empty());
    }
}
