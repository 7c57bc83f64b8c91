//! Techila's own reasons to refuse an operator's act (`OpsProblem::Family`),
//! so that nothing outside the folder names them.

use std::fmt;

/// Techila's own priority of a job, which a user may lower but not raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TechilaPrioritySetting {
    /// The project priority: 1 (Highest) to 7 (Lowest), so a smaller number
    /// is the higher priority.
    ProjectPriority,
}

impl TechilaPrioritySetting {
    /// What a user may set, in words, the default being `default`.
    pub fn allowed_words(self, default: i64) -> String {
        match self {
            TechilaPrioritySetting::ProjectPriority => format!("a project priority from the default {default} down to 7 (Lowest)"),
        }
    }
}

/// Why Techila refuses an operator's act on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TechilaOpsProblem {
    /// A project priority outside 1 (Highest) to 7 (Lowest).
    ProjectPriorityOutOfRange { priority: u32 },
}

impl TechilaOpsProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            TechilaOpsProblem::ProjectPriorityOutOfRange { .. } => "project-priority-out-of-range",
        }
    }
}

impl fmt::Display for TechilaOpsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TechilaOpsProblem::ProjectPriorityOutOfRange { priority } => {
                write!(f, "cannot take project priority {priority}: it must be 1 (Highest) to 7 (Lowest)")
            }
        }
    }
}
