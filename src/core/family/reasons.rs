//! The families' own reasons, nested in the shared ones: a rejection or a
//! filter's reason that only one family gives is a `Family` variant of the
//! shared enum ([`crate::core::reject::OrderProblem::Family`],
//! [`crate::core::reject::JobProblem::Family`],
//! [`crate::core::reject::OpsProblem::Family`],
//! [`crate::core::reject::PrioritySetting::Family`],
//! [`crate::core::schedule::filters::Unfit::Family`]), holding one of the
//! enums below, each with one arm per family that has such reasons, and each
//! arm's enum defined in the family's folder (`<family>/reasons.rs`).
//!
//! Part of the seam, as `family/mod.rs` is, but data only: it imports the
//! folders' reasons and nothing else of the core, so the low layers that
//! hold reasons (`reject`, the state's rejection record) may name it without
//! reaching the families' code. Adding a family with reasons of its own is
//! one arm in each enum it has reasons for.

use std::fmt;

use super::cigri::reasons::{CigriOrderProblem, CigriUnfit};
use super::fbsng::reasons::FbsngJobProblem;
use super::techila::reasons::{TechilaOpsProblem, TechilaPrioritySetting};

/// A rule of the family in force's own filter that keeps an engine from a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FamilyUnfit {
    Cigri(CigriUnfit),
}

impl FamilyUnfit {
    /// The rule's name, as `why` prints it.
    pub fn rule_name(self) -> &'static str {
        match self {
            FamilyUnfit::Cigri(unfit) => unfit.rule_name(),
        }
    }
}

/// Why a family's own order did not apply when read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FamilyOrderProblem {
    Cigri(CigriOrderProblem),
}

impl FamilyOrderProblem {
    /// A short stable name for counting problems by kind.
    pub fn kind_name(self) -> &'static str {
        match self {
            FamilyOrderProblem::Cigri(problem) => problem.kind_name(),
        }
    }
}

/// Why the family in force refuses a submitted job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FamilyJobProblem {
    Fbsng(FbsngJobProblem),
}

impl FamilyJobProblem {
    /// The key of a job file that set what is refused, so that a front end
    /// can point at its line.
    pub fn job_file_key(&self) -> &'static str {
        match self {
            FamilyJobProblem::Fbsng(problem) => problem.job_file_key(),
        }
    }
}

impl fmt::Display for FamilyJobProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FamilyJobProblem::Fbsng(problem) => problem.fmt(f),
        }
    }
}

/// A family's own priority of a job, which a user may lower but not raise
/// ([`crate::core::reject::PrioritySetting::Family`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FamilyPrioritySetting {
    Techila(TechilaPrioritySetting),
}

impl FamilyPrioritySetting {
    /// What a user may set, in words, the default being `default`.
    pub fn allowed_words(self, default: i64) -> String {
        match self {
            FamilyPrioritySetting::Techila(setting) => setting.allowed_words(default),
        }
    }
}

/// Why a family refuses an operator's (or a user's) act on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FamilyOpsProblem {
    Techila(TechilaOpsProblem),
}

impl FamilyOpsProblem {
    /// The rejection's kind (`gridfold rejections --kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            FamilyOpsProblem::Techila(problem) => problem.as_str(),
        }
    }
}

impl fmt::Display for FamilyOpsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FamilyOpsProblem::Techila(problem) => problem.fmt(f),
        }
    }
}
