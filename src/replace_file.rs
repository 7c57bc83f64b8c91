//! Replacing a file whole: readers see the old contents or the new, never a mix,
//! whatever moment the process or the machine dies at.
//!
//! The bytes go to a sibling `<name>.partial`, which is then renamed over the
//! target (rename is atomic within one directory on POSIX file systems). With
//! [`Durability::Synced`] the partial file is flushed to disk before the rename and
//! the directory after it, so the new contents survive a power cut once this returns.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Whether a replacement must survive a power cut once the call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Flushed to disk (file, then directory) before returning: slower, for records
    /// a restart reads (snapshots, keys, ids).
    Synced,
    /// Left to the kernel's write-back: for records that only matter while the
    /// machine stays up (an engine's process groups, which die with it).
    Cached,
}

/// The partial file a replacement of `path` writes first.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|name| name.to_os_string()).unwrap_or_default();
    name.push(".partial");
    path.with_file_name(name)
}

/// Replaces `path` with `bytes` (creating it if missing). `open` makes the partial
/// file, so callers can choose its permissions.
pub fn replace_file_with(
    path: &Path,
    bytes: &[u8],
    durability: Durability,
    open: impl FnOnce(&Path) -> std::io::Result<std::fs::File>,
) -> std::io::Result<()> {
    let partial = partial_path(path);
    let mut file = open(&partial)?;
    file.write_all(bytes)?;
    if durability == Durability::Synced {
        file.sync_all()?;
    }
    drop(file);
    std::fs::rename(&partial, path)?;
    if durability == Durability::Synced {
        let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Replaces `path` with `bytes`, the partial file made with the default permissions.
pub fn replace_file(path: &Path, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    replace_file_with(path, bytes, durability, |partial| std::fs::File::create(partial))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_leaves_the_new_contents_and_no_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record");
        replace_file(&path, b"first", Durability::Synced).unwrap();
        replace_file(&path, b"second", Durability::Cached).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert!(!partial_path(&path).exists());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("record")]);
    }

    #[test]
    fn a_partial_file_left_by_a_crash_does_not_change_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record");
        replace_file(&path, b"whole", Durability::Synced).unwrap();
        std::fs::write(partial_path(&path), b"half").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        replace_file(&path, b"next", Durability::Synced).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"next");
    }
}
