//! Typed identifiers. Strings cross module boundaries only inside these
//! newtypes; inside the state, dense indexes (`JobIdx`, `EngineIdx`,
//! `CategoryIdx`, `TaskKey`) are used. The indexes are defined here, below
//! the state that assigns them, so that data the state holds (the families'
//! figures) can name them without naming the state; `state` re-exports them.
//!
//! Ids are `Arc<str>` so that cloning one into an order costs a reference
//! count, not an allocation: `schedule` clones ids on its hot path.

use std::fmt;
use std::sync::Arc;

/// Longest id accepted for a job or an engine, in bytes.
pub const ID_LEN_MAX: usize = 64;

/// An engine's login epoch: the log sequence of the `EngineLoggedIn` entry that
/// opened it. Unique per login and rising, and the engine learns it from the
/// acknowledgement of its own login, so orders can name the login they are for.
pub type Epoch = u64;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $dot_allowed:expr) => {
        $(#[$doc])*
        #[derive(Clone, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        pub struct $name(Arc<str>);

        /// By the text, as equality is.
        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.0.hash(state)
            }
        }

        /// Two clones of one id share their text: compared by pointer first, so
        /// the fold's checks (the subject's engine against the payload's) cost
        /// nothing when the decoder gave both the same `Arc`.
        impl PartialEq for $name {
            #[inline]
            fn eq(&self, other: &Self) -> bool {
                Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
            }
        }

        impl $name {
            /// Accepts 1..=64 characters of `[A-Za-z0-9_-]`, and `.` where the id never
            /// becomes a NATS subject token, not starting with `-`; these ids appear in
            /// subjects, file names and command lines, so nothing else is safe (`-rf` or
            /// `--help` would read as an option). Every decoder and file reader builds
            /// ids here, so the fold never sees another.
            pub fn new(text: &str) -> Result<Self, IdError> {
                validate_id(text, $dot_allowed)?;
                Ok(Self(Arc::from(text)))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }
        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(text: &str) -> Result<Self, IdError> {
                Self::new(text)
            }
        }
    };
}

string_id!(
    /// A job, named by its submitter (the CLI generates one when the job file has none).
    JobId,
    true
);
string_id!(
    /// An engine (worker), named at login; it is the `<engine>` token in
    /// `gridfold.ev.engine.<engine>.>`, so it may not hold `.` (the token separator).
    EngineId,
    false
);
string_id!(
    /// A user: the owner of jobs, named by the subject it publishes on
    /// (`gridfold.ev.user.<name>.>`) and, on a secured broker, by its
    /// principal's name; so it may not hold `.` either.
    UserName,
    false
);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("an id may not be empty")]
    Empty,
    /// `.` and `..` would name directories, not jobs, in an engine's work dir.
    #[error("an id may not be made only of dots")]
    OnlyDots,
    /// `-rf`, `--help`: a command line would read it as an option.
    #[error("an id may not start with '-' (a command line would read it as an option)")]
    LeadingDash,
    #[error("an id is at most {ID_LEN_MAX} bytes, this one has {0}")]
    TooLong(usize),
    #[error("an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found {0:?} at byte {1}")]
    BadCharacter(char, usize),
}

fn validate_id(text: &str, dot_allowed: bool) -> Result<(), IdError> {
    if text.is_empty() {
        return Err(IdError::Empty);
    }
    if text.len() > ID_LEN_MAX {
        return Err(IdError::TooLong(text.len()));
    }
    if text.bytes().all(|b| b == b'.') {
        return Err(IdError::OnlyDots);
    }
    if text.starts_with('-') {
        return Err(IdError::LeadingDash);
    }
    if let Some((at, bad)) = text
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || (c == '.' && dot_allowed)))
    {
        return Err(IdError::BadCharacter(bad, at));
    }
    Ok(())
}

/// A stream sequence number: the total order of the log. The first entry is 1.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct Seq(pub u64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// One task of a job, addressed from outside the core: job id and 0-based index.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct TaskRef {
    pub job: JobId,
    pub index: u32,
}

impl TaskRef {
    pub fn new(job: JobId, index: u32) -> Self {
        Self { job, index }
    }
}

impl fmt::Display for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.job, self.index)
    }
}
impl fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.job.as_str(), self.index)
    }
}

impl std::str::FromStr for TaskRef {
    type Err = String;
    /// Parses `JOB/INDEX`, the form `gridfold why` takes.
    fn from_str(text: &str) -> Result<Self, String> {
        let (job, index) = text
            .rsplit_once('/')
            .ok_or_else(|| format!("a task is written JOB/INDEX, got {text:?}"))?;
        let job = JobId::new(job).map_err(|e| format!("job id {job:?}: {e}"))?;
        let index = index
            .parse()
            .map_err(|_| format!("task index {index:?} is not a whole number"))?;
        Ok(TaskRef { job, index })
    }
}

/// Which attempt of a task this is; the first dispatch is attempt 1.
pub type Attempt = u32;

/// Dense index of a job in the state's jobs (submission order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct JobIdx(pub u32);

/// Dense index of an engine in the state's engines (first-login order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct EngineIdx(pub u32);

/// Dense index of a requirement category in the state's categories.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct CategoryIdx(pub u32);

/// A task inside the state: job index and task index.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct TaskKey {
    pub job: JobIdx,
    pub index: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_accept_safe_names_and_refuse_the_rest() {
        assert!(JobId::new("render-2026.11_a").is_ok());
        assert_eq!(JobId::new(""), Err(IdError::Empty));
        assert_eq!(EngineId::new("a b"), Err(IdError::BadCharacter(' ', 1)));
        assert_eq!(EngineId::new(&"x".repeat(65)), Err(IdError::TooLong(65)));
        assert!(EngineId::new("a.>").is_err(), "NATS wildcards must never reach a subject");
        assert_eq!(EngineId::new("a.b"), Err(IdError::BadCharacter('.', 1)), "a dot would split the subject token");
        assert!(JobId::new("run.2026").is_ok(), "job ids never become subject tokens");
        assert_eq!(JobId::new(".."), Err(IdError::OnlyDots), "a job id names a work directory");
        for option in ["-rf", "--help", "-"] {
            assert_eq!(JobId::new(option), Err(IdError::LeadingDash), "{option}");
            assert_eq!(EngineId::new(option), Err(IdError::LeadingDash), "{option}");
            assert!(format!("{option}/0").parse::<TaskRef>().is_err(), "{option}/0");
        }
        assert!(JobId::new("a-rf").is_ok() && EngineId::new("node--1").is_ok(), "a dash inside is fine");
    }

    #[test]
    fn task_refs_parse_from_the_command_line_form() {
        let task: TaskRef = "job-1/17".parse().unwrap();
        assert_eq!(task.job.as_str(), "job-1");
        assert_eq!(task.index, 17);
        assert!("job-1".parse::<TaskRef>().is_err());
        assert!("job-1/x".parse::<TaskRef>().is_err());
    }
}

