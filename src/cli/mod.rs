//! Command-line front ends: parse arguments (clap), call the library, print for
//! people or, with `--json`, for scripts. Errors are `anyhow` here and nowhere else.
//!
//! Exit codes: 0 success; 1 a failed check (a replay divergence, a digest that
//! does not match) or an operational error; 2 bad input (a malformed file).

pub mod blacklist;
pub mod broker_config;
pub mod client;
pub mod control;
pub mod demo;
pub mod engine;
pub mod jobs;
pub mod key;
pub mod library;
pub mod ops;
pub mod parts;
pub mod projector;
pub mod replay;
pub mod setup;
pub mod results;
pub mod sim;
pub mod stat;
pub mod gridstat;
pub mod techila;
pub mod web;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for input the user must fix (a bad job, history or scenario file).
pub const EXIT_BAD_INPUT: u8 = 2;

#[derive(Debug, Parser)]
#[command(name = "gridfold", version, about = "An event-sourced grid scheduler: one deterministic projector folds the log into scheduling state and emits orders.")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A projector, four engines and a sample job in one process, ending with a verified replay.
    Demo(demo::DemoArgs),
    /// End-to-end benchmark: the real projector on JetStream, simulated engines, task lifecycles per second, a verified replay.
    Bench(crate::bench::BenchArgs),
    /// Submit the job in a job file; prints its id.
    Submit(jobs::SubmitArgs),
    /// Jobs with their task counts, throughput and estimated end; engines with their slots.
    Stat(stat::StatArgs),
    /// What ended jobs added up to per user and per project (jobs by outcome, tasks, attempts), retired ones included.
    Usage(stat::UsageArgs),
    /// What the projector refused: the recent rejections with sequence, kind, subject, sender and reason (exit 1 when --kind finds none).
    Rejections(stat::RejectionsArgs),
    /// Cancel a job, or one task (JOB/INDEX): waiting tasks are dropped, running ones stopped.
    Cancel(jobs::CancelArgs),
    /// Change a job's priority (higher runs first).
    Priority(jobs::PriorityArgs),
    /// Give a job override tickets, replacing its earlier ones; counted in ticket mode (Grid Engine's `qalter -ot`).
    OverrideTickets(jobs::OverrideTicketsArgs),
    /// Suspend a job's running attempts, or one task's: SIGSTOP, slots kept (Grid Engine's `qmod -sj`).
    Suspend(control::ControlArgs),
    /// Resume suspended attempts: SIGCONT (Grid Engine's `qmod -usj`).
    Resume(control::ControlArgs),
    /// Stop live attempts and queue their tasks again, at the front, without using an attempt (Grid Engine's `qmod -rj`).
    Reschedule(control::ControlArgs),
    /// Operator policy.
    Policy(jobs::PolicyArgs),
    /// Write the whole log as a history file.
    Export(stat::ExportArgs),
    /// Fold a recorded history and print its summary and digest; --verify re-derives every order batch.
    Replay(replay::ReplayArgs),
    /// Explain why a task waits, or where it went: asks the projector, or folds a history (--file) or the log (--at).
    Why(replay::WhyArgs),
    /// Grid libraries: store and publish one (`put`), list the published ones (`ls`).
    Library(library::LibraryArgs),
    /// Engine blacklists and greylists: list them per job (`ls`), clear them (`clear`).
    Blacklist(blacklist::BlacklistArgs),
    /// Projector keys: show a state directory's (`show`), register one (`register`), revoke one (`revoke`).
    Key(key::KeyArgs),
    /// Run a simulated grid from a scenario file, with faults injected from its seed.
    Sim(sim::SimArgs),
    /// Run an engine agent: log in, take this engine's orders, run tasks, report; drain on SIGTERM.
    /// `engine drain NAME` / `engine resume NAME`: an operator's drain of an engine (no new work).
    Engine(Box<engine::EngineArgs>),
    /// Run the projector, the single writer, on NATS JetStream (a second one stands by).
    Projector(projector::ProjectorArgs),
    /// Write a nats-server configuration that enforces who may publish what, with an nkey and an environment file per principal.
    BrokerConfig(broker_config::BrokerConfigArgs),
    /// Make the streams and the lease bucket with --replicas (as the projector does at its start); nothing else makes them.
    Setup(setup::SetupArgs),
    /// Serve the live web view: jobs, tasks, engines, throughput, rejections, why (reads only the projector's answers).
    Web(web::WebArgs),
    /// A job's tasks, one line each: state, attempts, engine, start, end, wall time, exit code, failure.
    Tasks(results::TasksArgs),
    /// Every attempt of one task: engine, times, exit code, failure, error tail and result.
    Task(results::TaskArgs),
    /// The whole standard output (or error) of a task's attempt, as its engine stored it.
    Output(results::OutputArgs),
    /// Wait until a job ends; exit 0 if every task completed, 1 otherwise.
    Wait(results::WaitArgs),
    /// Hold a job: no new dispatches until released; its running tasks finish (qhold, scontrol hold).
    Hold(ops::HoldArgs),
    /// Release a held job (qrls, scontrol release).
    Release(ops::HoldArgs),
    /// Change a Techila project's priority: 1 (Highest) to 7 (Lowest).
    ProjectPriority(techila::ProjectPriorityArgs),
}

pub fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // The services say what they are doing; the demo speaks for itself.
    init_logging(match cli.command {
        Command::Projector(_) | Command::Engine(_) => "warn,gridfold::projector::service=info,gridfold::engine=info,gridfold::log=info",
        _ => "warn",
    });
    match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => crate::bench::run(args),
        Command::Submit(args) => jobs::submit(args),
        Command::Stat(args) => stat::stat(args),
        Command::Usage(args) => stat::usage(args),
        Command::Rejections(args) => stat::rejections(args),
        Command::Cancel(args) => jobs::cancel(args),
        Command::Priority(args) => jobs::priority(args),
        Command::ProjectPriority(args) => techila::project_priority(args),
        Command::OverrideTickets(args) => jobs::override_tickets(args),
        Command::Suspend(args) => control::run(crate::core::state::Control::Suspend, args),
        Command::Resume(args) => control::run(crate::core::state::Control::Resume, args),
        Command::Reschedule(args) => control::run(crate::core::state::Control::Preempt, args),
        Command::Policy(args) => jobs::policy(args),
        Command::Export(args) => stat::export(args),
        Command::Replay(args) => replay::run(args),
        Command::Why(args) => replay::why(args),
        Command::Library(args) => library::run(args),
        Command::Blacklist(args) => blacklist::run(args),
        Command::Key(args) => key::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Engine(args) => engine::run(*args),
        Command::Projector(args) => projector::run(args),
        Command::BrokerConfig(args) => broker_config::run(args),
        Command::Setup(args) => setup::run(args),
        Command::Web(args) => web::run(args),
        Command::Tasks(args) => results::tasks(args),
        Command::Task(args) => results::task(args),
        Command::Output(args) => results::output(args),
        Command::Wait(args) => results::wait(args),
        Command::Hold(args) => ops::hold(args, true),
        Command::Release(args) => ops::hold(args, false),
    }
}

/// Logs go to stderr through `tracing`, filtered by `RUST_LOG`, else by
/// `default_filter` (the services log their start, leadership and snapshots).
pub fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// A progress bar on stderr when it is a terminal, silent otherwise (CI, pipes).
pub fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// A history file argument, with the file named in every error about it.
pub fn read_history(path: &PathBuf) -> Result<Vec<crate::core::event::Entry>, BadInput> {
    crate::wire::history::read_history_file(path).map_err(|e| BadInput(e.to_string()))
}

/// An error the user must fix in their input; exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// `text` with a clause repeated right after itself said once: library errors
/// often print their kind and then a source that says the same
/// (`no responders: no responders`, `Connection refused (os error 111):
/// Connection refused (os error 111)`).
pub fn said_once(text: &str) -> String {
    let mut clauses: Vec<&str> = Vec::new();
    for clause in text.split(": ") {
        if clauses.last() != Some(&clause) {
            clauses.push(clause);
        }
    }
    clauses.join(": ")
}

/// Prints a bad-input error the way every command does, returning exit code 2.
pub fn bad_input(error: BadInput) -> ExitCode {
    eprintln!("gridfold: {error}");
    ExitCode::from(EXIT_BAD_INPUT)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clause_repeated_right_after_itself_is_said_once() {
        assert_eq!(super::said_once("no responders: no responders"), "no responders");
        assert_eq!(
            super::said_once("cannot connect: Connection refused (os error 111): Connection refused (os error 111)"),
            "cannot connect: Connection refused (os error 111)"
        );
        assert_eq!(super::said_once("a: b: a"), "a: b: a", "only a repetition in a row is dropped");
    }
}
