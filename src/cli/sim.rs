//! `gridfold sim SCENARIO.toml`: a simulated grid driving the real projector machine.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use crate::core::event::Entry;
use crate::files::scenario::Scenario;
use crate::sim::{run as run_sim, RunOptions};
use crate::wire;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// The scenario (TOML; see scenarios/faults.toml for every key, and the other
    /// files of scenarios/ for GridServer's: libraries, tiers, conditions, blacklisting, redundancy;
    /// and Grid Engine's: user-sort, share-tree, functional-and-override).
    pub scenario: PathBuf,
    /// Run with this seed instead of the scenario's.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the simulated log as a history file (replayable with `gridfold replay --file`).
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// Skip the invariant check after every entry (for large scenarios; the final verified replay still runs).
    #[arg(long)]
    pub no_invariants: bool,
    /// Stop after this many log entries.
    #[arg(long, default_value_t = 1_000_000)]
    pub entries_max: u64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    let mut scenario = match Scenario::from_file(&args.scenario) {
        Ok(scenario) => scenario,
        Err(error) => return Ok(super::bad_input(super::BadInput(error.to_string()))),
    };
    if let Some(seed) = args.seed {
        scenario.seed = seed;
        scenario.policy.seed = seed;
    }
    let options = RunOptions { check_invariants: !args.no_invariants, entries_max: args.entries_max };
    let bar = super::progress_bar(u64::from(scenario.jobs.len() as u32), "jobs ended");
    let (report, log) = run_sim(&scenario, &options, &mut |progress| {
        bar.set_position(progress.jobs_ended);
    })
    .map_err(|error| anyhow::anyhow!("{error}"))?;
    bar.finish_and_clear();
    if let Some(path) = &args.export {
        export_history(path, &log).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
        if let Some(path) = &args.export {
            println!("log written to {} ({} entries)", path.display(), log.len());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes entries as a history file, each with the subject its event is published on.
pub fn export_history(path: &PathBuf, log: &[Entry]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for entry in log {
        let line = wire::history::write_history_line(entry.seq, entry.time_ms, &entry.subject, &entry.stored);
        writeln!(out, "{line}")?;
    }
    out.flush()
}
