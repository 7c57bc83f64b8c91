//! `gridfold replay` and `gridfold why`, over a history file or the broker.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::projector::query::StateSummary;
use crate::core::explain::explain;
use crate::core::ids::{Seq, TaskRef};
use crate::core::replay::{replay, NotVerified, ReplayOptions, ReplayReport};
use crate::core::state::State;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A history file (JSON Lines, one log entry per line; see docs/reference.md). Without it,
    /// the log is read from the broker (`--nats`).
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub nats: super::client::NatsArgs,
    /// Re-run `schedule` at each order batch's based_on_seq and report the first
    /// divergence. Exit 1 unless every batch the fold applied was re-derived and
    /// matched: a batch made by another algorithm version than this build's
    /// cannot be re-derived, and fails the check unless its version is accepted.
    #[arg(long)]
    pub verify: bool,
    /// With --verify: accept, without re-deriving them, the batches made by this
    /// algorithm version (repeatable). They are still counted and named.
    #[arg(long = "accept-version", value_name = "VERSION", requires = "verify")]
    pub accept_versions: Vec<u32>,
    /// Stop after this sequence and show the state as it was then.
    #[arg(long)]
    pub at: Option<u64>,
    /// Exit 1 unless the chain digest (at --at SEQ, else at the end) equals this
    /// hex: the digest an auditor kept, which catches an edited or dropped entry
    /// whose replay is otherwise self-consistent (see docs/auditors.md).
    #[arg(long)]
    pub expect_digest: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The task, as JOB/INDEX.
    pub task: TaskRef,
    /// The history to fold first. Without it, the running projector answers
    /// (`gridfold.q.why`), or, with --at, the log is read from the broker and folded.
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub nats: super::client::NatsArgs,
    /// Ask as of this sequence.
    #[arg(long)]
    pub at: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, serde::Serialize)]
struct ReplayOutput {
    /// The history file or broker URL replayed.
    source: String,
    /// Asked to verify, and every batch the fold applied was re-derived and
    /// matched, or made by an accepted version.
    verified: bool,
    batches_verified: u64,
    /// Applied batches made by another algorithm or version: not re-derived.
    batches_not_verifiable: u64,
    /// Those by algorithm and version, each with whether `--accept-version` accepted it.
    other_versions: Vec<OtherVersion>,
    /// The versions `--accept-version` named.
    accepted_versions: Vec<u32>,
    /// Applied batches of this build's algorithm that could not be re-derived.
    batches_unchecked: u64,
    /// Batches on the orders subject without a valid seal from a registered key: refused by the fold.
    batches_refused: u64,
    divergence: Option<String>,
    /// Why the replay is not verified, as the text says it (empty when it is, or was not asked to be).
    not_verified: Vec<String>,
    #[serde(flatten)]
    summary: StateSummary,
}

#[derive(Debug, serde::Serialize)]
struct OtherVersion {
    algorithm: String,
    version: u32,
    batches: u64,
    accepted: bool,
}

fn fold_file(file: &PathBuf, options: &ReplayOptions) -> Result<(State, ReplayReport), super::BadInput> {
    let entries = super::read_history(file)?;
    Ok(fold_entries(&entries, options))
}

/// `--at N` names an entry the log has, or it is an error: past the end, the
/// state shown would silently be the final one.
fn check_at(at: Option<u64>, state: &State, source: &str) -> Result<(), super::BadInput> {
    match at {
        Some(at) if at > state.last_seq.0 => Err(super::BadInput(format!(
            "--at {at} is past the end of {source}, which ends at seq {}",
            state.last_seq.0
        ))),
        Some(0) => Err(super::BadInput("--at 0 names no entry: sequences start at 1".into())),
        _ => Ok(()),
    }
}

fn fold_entries(entries: &[crate::core::event::Entry], options: &ReplayOptions) -> (State, ReplayReport) {
    let bar = super::progress_bar(entries.len() as u64, "replay");
    let (state, report) = replay(State::new(), entries, options, &mut |n| bar.set_position(n));
    bar.finish_and_clear();
    (state, report)
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let options = ReplayOptions { verify: args.verify, stop_at: args.at.map(Seq), check_invariants: false };
    let (source, (state, report)) = match &args.file {
        Some(file) => match fold_file(file, &options) {
            Ok(folded) => (file.display().to_string(), folded),
            Err(bad) => return Ok(super::bad_input(bad)),
        },
        None => {
            let raw = super::client::block_on(async {
                let log = super::client::connect_log(&args.nats).await?;
                super::stat::read_whole_log(&log).await
            })?;
            (args.nats.url.clone(), fold_entries(&super::stat::to_entries(&raw), &options))
        }
    };
    if let Err(bad) = check_at(args.at, &state, &source) {
        return Ok(super::bad_input(bad));
    }
    let divergence = report.first_divergence.as_ref().map(ToString::to_string);
    let not_verified = if args.verify { report.not_verified(&args.accept_versions) } else { Vec::new() };
    let summary = StateSummary::of(&state).with_state_digest(&state);
    let digest_mismatch = args
        .expect_digest
        .as_ref()
        .filter(|expected| expected.trim() != summary.chain_digest)
        .map(|expected| format!("digest {} does not match the expected {}", summary.chain_digest, expected.trim()));
    if args.json {
        let other_versions = report
            .other_algorithms
            .iter()
            .map(|((algorithm, version), n)| OtherVersion {
                algorithm: algorithm.clone(),
                version: *version,
                batches: *n,
                accepted: args.accept_versions.contains(version),
            })
            .collect();
        let output = ReplayOutput {
            source,
            verified: args.verify && not_verified.is_empty(),
            batches_verified: report.batches_verified,
            batches_not_verifiable: report.batches_not_verifiable,
            other_versions,
            accepted_versions: args.accept_versions.clone(),
            batches_unchecked: report.batches_unchecked,
            batches_refused: report.batches_refused,
            divergence: divergence.clone(),
            not_verified: not_verified.iter().map(ToString::to_string).collect(),
            summary,
        };
        println!("{}", serde_json::to_string_pretty(&output)?);
    } else {
        println!("{summary}");
        if args.verify {
            for problem in &not_verified {
                // The algorithm's name is as a batch gave it.
                let said = crate::human::printable(&problem.to_string()).into_owned();
                match problem {
                    NotVerified::Diverged(_) => println!("DIVERGENCE: {said}"),
                    _ => println!("NOT VERIFIED: {said}"),
                }
            }
            if not_verified.is_empty() {
                println!(
                    "replay verified: {} entries, {} order batches re-derived, digest {}",
                    report.entries_folded, report.batches_verified, state.chain
                );
            }
            let accepted: u64 = report
                .other_algorithms
                .iter()
                .filter(|((_, version), _)| args.accept_versions.contains(version))
                .map(|(_, n)| n)
                .sum();
            if accepted > 0 {
                println!("{accepted} batch(es) of an accepted algorithm version (--accept-version) were not re-derived");
            }
            if report.batches_refused > 0 {
                println!(
                    "{} batch(es) on the orders subject were not sealed by a registered projector key: refused, not re-derived",
                    report.batches_refused
                );
            }
        }
    }
    if let Some(mismatch) = &digest_mismatch {
        eprintln!("gridfold: {mismatch}");
    }
    Ok(if !not_verified.is_empty() || digest_mismatch.is_some() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The projector's answer on `gridfold.q.why`.
#[derive(Debug, serde::Deserialize)]
struct WhyAnswer {
    explanation: Option<serde_json::Value>,
    text: Option<String>,
    error: Option<String>,
}

pub fn why(args: WhyArgs) -> anyhow::Result<ExitCode> {
    let options = ReplayOptions { verify: false, stop_at: args.at.map(Seq), check_invariants: false };
    let (source, state) = match (&args.file, args.at) {
        (Some(file), _) => match fold_file(file, &options) {
            Ok((state, _)) => (file.display().to_string(), state),
            Err(bad) => return Ok(super::bad_input(bad)),
        },
        (None, Some(_)) => {
            let raw = super::client::block_on(async {
                let log = super::client::connect_log(&args.nats).await?;
                super::stat::read_whole_log(&log).await
            })?;
            (args.nats.url.clone(), fold_entries(&super::stat::to_entries(&raw), &options).0)
        }
        (None, None) => return why_from_projector(&args),
    };
    if let Err(bad) = check_at(args.at, &state, &source) {
        return Ok(super::bad_input(bad));
    }
    let explanation = explain(&state, &args.task)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&explanation)?);
    } else {
        print!("{}", crate::human::printable_lines(&explanation.to_string()));
    }
    Ok(ExitCode::SUCCESS)
}

/// `gridfold why TASK` against the running projector.
fn why_from_projector(args: &WhyArgs) -> anyhow::Result<ExitCode> {
    use crate::projector::query::{WhyRequest, WHY_SUBJECT};
    if let Some(code) = why_ended_task(args)? {
        return Ok(code);
    }
    let request = WhyRequest { task: args.task.to_string() };
    let answer: WhyAnswer = super::client::block_on(super::client::ask(&args.nats, WHY_SUBJECT, &request))?;
    match answer {
        WhyAnswer { error: Some(error), .. } => anyhow::bail!("{}", crate::human::printable(&error)),
        WhyAnswer { explanation: Some(explanation), .. } if args.json => {
            println!("{}", serde_json::to_string_pretty(&explanation)?);
        }
        WhyAnswer { text: Some(text), .. } => print!("{}", crate::human::printable_lines(&text)),
        _ => anyhow::bail!("the projector's answer on {WHY_SUBJECT} holds neither an explanation nor an error"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `gridfold why` of an ended task (done, failed, cancelled after it ran): the
/// engines are ranked from the state its newest attempt's dispatch was based on
/// (the log folded to that batch's `based_on_seq`), not from today's, which says
/// nothing of that decision. `None` when the task has not ended or never ran, or
/// the projector keeps no attempt of it: the projector answers as for any task.
fn why_ended_task(args: &WhyArgs) -> anyhow::Result<Option<ExitCode>> {
    use crate::projector::results::{TaskReply, TaskRequest, TASK_SUBJECT};
    let request = TaskRequest { task: args.task.to_string() };
    let reply: TaskReply = super::client::block_on(super::client::ask(&args.nats, TASK_SUBJECT, &request))?;
    if reply.error.is_some() || !matches!(reply.state.as_str(), "done" | "failed" | "cancelled") {
        return Ok(None);
    }
    let Some(attempt) = reply.attempts.last() else { return Ok(None) };
    let raw = super::client::block_on(async {
        let log = super::client::connect_log(&args.nats).await?;
        super::stat::read_whole_log(&log).await
    })?;
    let options = ReplayOptions { verify: false, stop_at: Some(Seq(attempt.based_on_seq)), check_invariants: false };
    let state = fold_entries(&super::stat::to_entries(&raw), &options).0;
    let explanation = explain(&state, &args.task)?;
    if args.json {
        let answer = serde_json::json!({
            "task": reply.task,
            "state": reply.state,
            "attempt": attempt.attempt,
            "engine": attempt.engine,
            "dispatch_seq": attempt.dispatch_seq,
            "based_on_seq": attempt.based_on_seq,
            "explanation_at_based_on_seq": explanation,
        });
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        println!(
            "{} {}: its attempt {} went to {} by the order batch at seq {}, decided on the state at seq {}; as of then:",
            reply.task, reply.state, attempt.attempt, attempt.engine, attempt.dispatch_seq, attempt.based_on_seq
        );
        print!("{}", crate::human::printable_lines(&explanation.to_string()));
    }
    Ok(Some(ExitCode::SUCCESS))
}
