//! FBSNG's own reasons to refuse a job (`JobProblem::Family`), so that
//! nothing outside the folder names them.

use std::fmt;

/// Why FBSNG refuses a submitted job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FbsngJobProblem {
    /// A queue the policy does not define (`known`: those it does).
    UnknownQueue { queue: String, known: Vec<String> },
    /// A process type the policy does not define.
    UnknownProcessType { process_type: String, known: Vec<String> },
}

impl FbsngJobProblem {
    /// The key of a job file that set what is refused (so `gridfold submit`
    /// can point at its line).
    pub fn job_file_key(&self) -> &'static str {
        match self {
            FbsngJobProblem::UnknownQueue { .. } => "queue",
            FbsngJobProblem::UnknownProcessType { .. } => "process_type",
        }
    }
}

impl fmt::Display for FbsngJobProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FbsngJobProblem::UnknownQueue { queue, known } => {
                write!(f, "unknown queue \"{queue}\"; known: {}", known.join(", "))
            }
            FbsngJobProblem::UnknownProcessType { process_type, known } => {
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                write!(f, "unknown process type \"{process_type}\"; known: {known}")
            }
        }
    }
}
