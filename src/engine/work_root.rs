//! Where the engine's work directory sits on disk, and why it asks ext4 to
//! spread what is made under it.
//!
//! Every attempt runs in a fresh directory, `<work dir>/<job>/<index>-<attempt>`:
//! one `mkdir` per task. On ext4 a new directory's inode goes in its parent's
//! block group unless the parent is the top of a hierarchy, and on an ext4
//! without a journal the allocator steps over every inode of that group
//! deleted in the last 5 to 35 s, reading each one's deletion time. A work
//! directory under `/tmp` shares its group with everything the machine makes
//! and removes there (builds, tests, other programs' scratch files). Measured
//! on the development machine (ext4 without a journal), one `mkdir` under
//! `/tmp` cost 100-480 µs of CPU depending on what had been removed there
//! lately, the same `mkdir` under a fresh directory marked as a top of
//! hierarchy 23-33 µs. Marking does not make the cost go away: four rounds of
//! making and removing 2,000 directories raised it from 33 to 212 µs marked
//! and from 102 to 291 µs unmarked, as the allocator picks the groups just
//! emptied. It starts each engine's jobs in the emptiest groups, which is the
//! better bet; `fresh_dirs` keeps the cost off the path of a start.
//!
//! So the engine marks its work directory with `FS_TOPDIR_FL` (`chattr +T`):
//! each job's directory is then placed by the Orlov allocator in a group with
//! free inodes, and the job's attempts follow it there. The flag is an
//! allocation hint, nothing else: it changes no permission, no content, and a
//! filesystem without it (tmpfs, xfs, NFS) simply refuses it, which the engine
//! notes and goes on.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;
use std::path::Path;

/// `FS_TOPDIR_FL` of `linux/fs.h`: "top of directory hierarchies" for ext2/3/4's
/// Orlov allocator (not in the `libc` crate).
const FS_TOPDIR_FL: libc::c_int = 0x0002_0000;

/// What [`mark_top_of_hierarchy`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopDir {
    /// The flag was set by this call.
    Marked,
    /// The flag was set already.
    AlreadyMarked,
    /// The filesystem keeps no such flag (the ioctl is not supported there).
    Unsupported,
}

/// Marks `dir` as the top of a directory hierarchy (see the module docs).
/// Errors other than "not supported" (say, a directory owned by someone else)
/// are returned for the caller to log: the engine runs without the hint.
pub fn mark_top_of_hierarchy(dir: &Path) -> io::Result<TopDir> {
    let file = File::open(dir)?;
    let Some(mut flags) = flags_of(&file)? else {
        return Ok(TopDir::Unsupported);
    };
    if flags & FS_TOPDIR_FL != 0 {
        return Ok(TopDir::AlreadyMarked);
    }
    flags |= FS_TOPDIR_FL;
    // SAFETY: FS_IOC_SETFLAGS reads one int from `flags`, on a descriptor we own.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) } != 0 {
        let err = io::Error::last_os_error();
        return if is_unsupported(&err) { Ok(TopDir::Unsupported) } else { Err(err) };
    }
    Ok(TopDir::Marked)
}

/// Whether `dir` carries the flag; `None` where the filesystem keeps no flags.
/// Only the tests ask: the engine marks its directory and goes on.
#[cfg(test)]
pub fn is_top_of_hierarchy(dir: &Path) -> io::Result<Option<bool>> {
    Ok(flags_of(&File::open(dir)?)?.map(|flags| flags & FS_TOPDIR_FL != 0))
}

/// The inode flags of `file`; `None` where the filesystem keeps none.
fn flags_of(file: &File) -> io::Result<Option<libc::c_int>> {
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int into `flags`, which we own, on a
    // descriptor we own.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } != 0 {
        let err = io::Error::last_os_error();
        return if is_unsupported(&err) { Ok(None) } else { Err(err) };
    }
    Ok(Some(flags))
}

fn is_unsupported(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOTTY | libc::EOPNOTSUPP | libc::EINVAL))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ext4's magic number in `statfs`'s `f_type`.
    const EXT4_SUPER_MAGIC: libc::c_long = 0xEF53;

    fn filesystem_type(dir: &Path) -> libc::c_long {
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: statfs writes only into the struct we own.
        assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut stat) }, 0, "statfs {}", dir.display());
        stat.f_type as libc::c_long
    }

    #[test]
    fn a_work_directory_on_ext4_is_marked_top_of_hierarchy_once_and_elsewhere_the_refusal_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let ext4 = filesystem_type(dir.path()) == EXT4_SUPER_MAGIC;
        let first = mark_top_of_hierarchy(dir.path()).unwrap();
        let second = mark_top_of_hierarchy(dir.path()).unwrap();
        if ext4 {
            assert_eq!((first, second), (TopDir::Marked, TopDir::AlreadyMarked));
            assert_eq!(is_top_of_hierarchy(dir.path()).unwrap(), Some(true));
        } else {
            // tmpfs and others: the flag is refused, and that is no error.
            assert!(matches!(first, TopDir::Unsupported | TopDir::Marked), "{first:?}");
        }
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let err = mark_top_of_hierarchy(&dir.path().join("missing")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
