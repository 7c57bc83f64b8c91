//! `GRIDFOLD_NODEFILE`: the engines of a parallel task's attempt and their
//! slots, one per line (`engine slots`, the master first), as Grid Engine's
//! `$PE_HOSTFILE` names hosts and slots in its first two columns and an MPI
//! machinefile names hosts. The master engine writes it into the attempt's
//! work directory and runs the command with its path. A companion engine
//! holds its slots (the projector books them) and, when the job names a
//! companion command (`companion_command`, Grid Engine's slave tasks started
//! with `qrsh -inherit`), runs it with the same environment and its own node
//! file; the projector tells it to stop (a `Cancel`, reason
//! `parallel-ended`) when the master's part ends. A companion command never
//! reports to the log: its end, early or failed, is a log line here and
//! neither ends the task nor frees the booking; without one, the part is a
//! log line too.

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

/// A companion's command started (its command line was logged as it was asked for).
pub fn companion_started(engine: &EngineId, task: &crate::core::ids::TaskRef, attempt: crate::core::ids::Attempt, pgid: i32) {
    tracing::info!(
        %task,
        attempt,
        engine = %engine,
        pgid,
        "companion command started; it runs until the master's part ends"
    );
}

/// A companion's command ended: stopped as the master's part ended
/// (`stopped`), or on its own. A failure is said, and nothing else follows:
/// the task is its master's to end.
pub fn companion_ended(task: &crate::core::ids::TaskRef, attempt: crate::core::ids::Attempt, stopped: bool, outcome: &super::runner::RunOutcome) {
    let end = &outcome.end;
    match (stopped, end) {
        (true, _) => tracing::info!(%task, attempt, %end, "companion command stopped"),
        (false, super::runner::RunEnd::Exited(0)) => {
            tracing::info!(%task, attempt, "companion command exited before its master's part ended; the slots stay held")
        }
        (false, _) => tracing::warn!(
            %task,
            attempt,
            %end,
            stderr = %outcome.stderr_tail,
            "companion command failed; the task goes on (its master's part decides how it ends)"
        ),
    }
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

    #[test]
    fn a_companion_command_beyond_its_limits_does_not_decode_from_a_delivery_or_a_submission() {
        use crate::core::event::{Envelope, Event, COMPANION_ARGS_MAX, COMPANION_ARG_BYTES_MAX};
        use crate::wire::delivery::{decode_delivery, encode_delivery, Delivery, DeliveryKind};
        let e2 = EngineId::new("e2").unwrap();
        let run = |companion_argv: Vec<String>| RunTask {
            task: crate::core::ids::TaskRef::new(crate::core::ids::JobId::new("mpi").unwrap(), 0),
            attempt: 1,
            argv: vec!["solver".into()],
            params: Default::default(),
            wall_time_limit_ms: 0,
            slots: 2,
            root_library: None,
            output_bytes_max: 0,
            work_dir_retention_ms: 0,
            nodes: vec![(EngineId::new("e1").unwrap(), 2), (e2.clone(), 2)],
            companion: true,
            companion_argv,
        };
        let delivery = |argv| Delivery { id: "7-1".into(), batch_seq: crate::core::ids::Seq(7), engine: e2.clone(), epoch: 1, kind: DeliveryKind::Run(run(argv)) };
        let fine = delivery(vec!["hold".into(), "{index}".into()]);
        assert_eq!(decode_delivery(&e2, &encode_delivery(&fine)).unwrap(), fine);
        let too_many = vec!["x".to_string(); COMPANION_ARGS_MAX + 1];
        let too_long = vec!["y".repeat(COMPANION_ARG_BYTES_MAX + 1)];
        let empty_program = vec![String::new()];
        for argv in [too_many, too_long, empty_program] {
            let err = decode_delivery(&e2, &encode_delivery(&delivery(argv.clone()))).unwrap_err().to_string();
            assert!(err.contains("run.companion_argv"), "{err}");
            let mut spec = crate::core::testkit::job_spec("mpi", 1, "");
            spec.options.span = crate::core::event::Span::Site;
            spec.options.companion_argv = argv;
            let envelope = Envelope { id: [7; 16], source: "tester".into(), event: Event::JobSubmitted(spec) };
            let err = crate::wire::decode(&crate::wire::encode(&envelope)).unwrap_err().to_string();
            assert!(err.contains("companion_argv"), "{err}");
        }
    }
}
