//! `GRIDFOLD_NODEFILE`: the engines of a parallel task's attempt and their
//! slots, one per line (`engine slots`, the master first), as Grid Engine's
//! `$PE_HOSTFILE` names hosts and slots in its first two columns and an MPI
//! machinefile names hosts. The master engine writes it into the attempt's
//! work directory and runs the command with its path; a companion engine
//! runs nothing and only holds its slots (the projector books them), so its
//! part of the run is a log line.

use std::io;
use std::path::{Path, PathBuf};

use crate::core::event::PARALLEL_PARTS_MAX;
use crate::core::ids::EngineId;
use crate::wire::delivery::RunTask;

/// The file's name in the attempt's work directory.
pub const NODEFILE_NAME: &str = "gridfold-nodefile";

/// The file's text: `engine slots` per line, in the order given.
pub fn contents(nodes: &[(EngineId, u32)]) -> String {
    assert!(nodes.len() <= PARALLEL_PARTS_MAX, "a parallel attempt spans at most {PARALLEL_PARTS_MAX} engines");
    nodes.iter().map(|(engine, slots)| format!("{engine} {slots}\n")).collect()
}

/// Writes the node file of a parallel run into its work directory; `None`
/// for a run that is not parallel (no nodes).
pub fn write(work_dir: &Path, run: &RunTask) -> io::Result<Option<PathBuf>> {
    if run.nodes.is_empty() {
        return Ok(None);
    }
    // The runner makes the work directory too (create_dir_all), after this.
    std::fs::create_dir_all(work_dir)?;
    let path = work_dir.join(NODEFILE_NAME);
    std::fs::write(&path, contents(&run.nodes))?;
    Ok(Some(path))
}

/// A companion's part: nothing runs; the slots are held by the projector's booking.
pub fn note_companion(engine: &EngineId, run: &RunTask) {
    let master = run.nodes.first().map_or("?".to_string(), |(engine, _)| engine.to_string());
    tracing::info!(
        task = %run.task,
        attempt = run.attempt,
        slots = run.slots,
        master = %master,
        engine = %engine,
        "holding slots for a parallel task run by its master engine"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodefile_lists_each_engine_and_its_slots_master_first() {
        let nodes = vec![(EngineId::new("e2").unwrap(), 2), (EngineId::new("e1").unwrap(), 2)];
        assert_eq!(contents(&nodes), "e2 2\ne1 2\n");
    }

    #[test]
    fn a_nodefile_of_the_most_engines_has_a_line_each() {
        let nodes: Vec<(EngineId, u32)> =
            (0..PARALLEL_PARTS_MAX).map(|n| (EngineId::new(&format!("engine-{n:02}")).unwrap(), 1)).collect();
        let text = contents(&nodes);
        assert_eq!(text.lines().count(), PARALLEL_PARTS_MAX);
        assert_eq!(text.lines().next(), Some("engine-00 1"));
    }
}
