//! A parallel task over two real engine processes on a real nats-server
//! (issue 10, item 3): a job of `slots = 4`, `span = "site"` on two engines of
//! 2 slots each sharing `site = "lyon"` gets one `DispatchParallel` per engine
//! in one batch; the master runs the command with `GRIDFOLD_NODEFILE` naming
//! both engines with 2 slots each; the companion's slots are held meanwhile
//! (nothing else is dispatched to either engine) and freed at the end (the
//! waiting 1-slot tasks then run on both). With a `companion_command`, the
//! companion engine runs it with `GRIDFOLD_NODEFILE` while the master runs, and
//! stops it when the master's part ends.

use crate::support;

use std::time::Duration;

use gridfold::core::event::{Event, Order};
use support::procs::{event, Cluster};

const POLICY: &str = "algorithm = \"sge-plain\"\nengine_timeout_secs = 10\ndispatch_timeout_secs = 20\n";

#[test]
fn a_site_task_runs_on_two_engines_with_its_nodefile_and_holds_the_companion_until_it_ends() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    cluster.site_engines("lyon", &["e1", "e2"], 2);

    let mpi = "id = \"mpi\"\nowner = \"tester\"\ntasks = 1\nslots = 4\nspan = \"site\"\n\n[task]\n\
               argv = [\"sh\", \"-c\", \"cat \\\"$GRIDFOLD_NODEFILE\\\"; sleep 3\"]\n";
    let file = cluster.write("mpi.toml", mpi);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
    cluster.wait_for("the parallel task to start", Duration::from_secs(30), |cluster| {
        let started = cluster.entries().iter().any(|e| matches!(event(e), Some(Event::TaskStarted { task, .. }) if task.job.as_str() == "mpi"));
        if started { Ok(()) } else { Err("not started".into()) }
    });
    // Four 1-slot tasks wait while the parallel task holds every slot.
    cluster.submit_script("small", 4, "sleep 1");

    let result = cluster.wait_for("the parallel task to complete", Duration::from_secs(60), |cluster| {
        cluster
            .entries()
            .iter()
            .find_map(|e| match event(e) {
                Some(Event::TaskCompleted { task, result, .. }) if task.job.as_str() == "mpi" => {
                    Some((e.seq, String::from_utf8_lossy(result).into_owned()))
                }
                _ => None,
            })
            .ok_or_else(|| "not completed".to_string())
    });
    let (completed_seq, nodefile) = result;
    let mut lines: Vec<&str> = nodefile.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec!["e1 2", "e2 2"], "GRIDFOLD_NODEFILE names both engines with 2 slots each: {nodefile:?}");

    cluster.wait_for("the small tasks to complete", Duration::from_secs(60), |cluster| {
        let n = cluster
            .entries()
            .iter()
            .filter(|e| matches!(event(e), Some(Event::TaskCompleted { task, .. }) if task.job.as_str() == "small"))
            .count();
        if n == 4 { Ok(()) } else { Err(format!("{n} of 4 completed")) }
    });

    let entries = cluster.entries();
    let batches: Vec<(u64, &Vec<Order>)> = entries
        .iter()
        .filter_map(|e| match event(e) {
            Some(Event::OrderBatch(batch)) => Some((e.seq.0, &batch.orders)),
            _ => None,
        })
        .collect();
    // One batch holds both parts, each naming both engines, the master first.
    let parts: Vec<(u64, &Order)> = batches
        .iter()
        .flat_map(|(seq, orders)| orders.iter().map(move |order| (*seq, order)))
        .filter(|(_, order)| matches!(order, Order::DispatchParallel { .. }))
        .collect();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[0].0, parts[1].0, "both parts in one batch");
    let (Order::DispatchParallel { engine: master, parts: named, .. }, Order::DispatchParallel { engine: companion, .. }) =
        (parts[0].1, parts[1].1)
    else {
        unreachable!("filtered")
    };
    assert_eq!(named[0].engine, *master, "the first order is the master's");
    assert_ne!(master, companion);
    assert!(named.iter().all(|part| part.slots == 2) && named.len() == 2, "{named:?}");
    let dispatched_seq = parts[0].0;

    // Held: no small task was dispatched while the parallel task ran; freed: the
    // companion's engine ran small tasks afterwards.
    let small_dispatches: Vec<(u64, String)> = batches
        .iter()
        .flat_map(|(seq, orders)| orders.iter().map(move |order| (*seq, order)))
        .filter_map(|(seq, order)| match order {
            Order::Dispatch { task, engine, .. } if task.job.as_str() == "small" => Some((seq, engine.to_string())),
            _ => None,
        })
        .collect();
    assert!(
        small_dispatches.iter().all(|(seq, _)| *seq > completed_seq.0 && *seq > dispatched_seq),
        "no small task dispatched while the parallel task held the slots: {small_dispatches:?} (completed at {})",
        completed_seq.0
    );
    assert!(
        small_dispatches.iter().any(|(_, engine)| engine == companion.as_str()),
        "the companion's slots were freed at the end: {small_dispatches:?}"
    );

    // `why` names the parts of the parallel task that ran.
    let why = cluster.command(&["why".as_ref(), "mpi/0".as_ref()]);
    assert!(why.contains("mpi/0"), "{why}");
}

fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().next() != Some("Z")))
        .unwrap_or(false)
}

#[test]
fn a_companion_command_runs_with_the_nodefile_and_is_stopped_when_the_master_ends() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    cluster.site_engines("lyon", &["e1", "e2"], 2);

    // The companion copies its node file and records its pid, then would run
    // for ten minutes; the master waits for that proof and ends 1 s later.
    let proof = cluster.path("proof");
    std::fs::create_dir_all(&proof).unwrap();
    let proof = proof.display().to_string();
    let companion = format!(
        "cp \"$GRIDFOLD_NODEFILE\" {proof}/nodefile.tmp && echo \"$GRIDFOLD_ENGINE $GRIDFOLD_TASK_ID $GRIDFOLD_SLOTS\" > {proof}/env \
         && mv {proof}/nodefile.tmp {proof}/nodefile && echo $$ > {proof}/pid && exec sleep 600"
    );
    let master = format!("for i in $(seq 100); do [ -f {proof}/pid ] && break; sleep 0.1; done; sleep 1; echo master done");
    let mpi = format!(
        "id = \"mpi\"\nowner = \"tester\"\ntasks = 1\nslots = 4\nspan = \"site\"\n\
         companion_command = [\"sh\", \"-c\", {companion:?}]\n\n[task]\nargv = [\"sh\", \"-c\", {master:?}]\n"
    );
    let file = cluster.write("mpi.toml", &mpi);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);

    let completed_seq = cluster.wait_for("the parallel task to complete", Duration::from_secs(60), |cluster| {
        cluster
            .entries()
            .iter()
            .find_map(|e| match event(e) {
                Some(Event::TaskCompleted { task, .. }) if task.job.as_str() == "mpi" => Some(e.seq),
                _ => None,
            })
            .ok_or_else(|| "not completed".to_string())
    });
    let nodefile = std::fs::read_to_string(format!("{proof}/nodefile")).expect("the companion command ran");
    let mut lines: Vec<&str> = nodefile.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec!["e1 2", "e2 2"], "the companion's GRIDFOLD_NODEFILE names both engines: {nodefile:?}");
    let env = std::fs::read_to_string(format!("{proof}/env")).unwrap();
    let words: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(words[1..], ["mpi/0", "2"], "the companion's environment: {env:?}");
    let companion_engine = words[0].to_string();

    // The companion's process is stopped once the master's part has ended.
    let pid: i32 = std::fs::read_to_string(format!("{proof}/pid")).unwrap().trim().parse().unwrap();
    cluster.wait_for("the companion command to be stopped", Duration::from_secs(30), |_| {
        if is_alive(pid) { Err(format!("companion pid {pid} still runs")) } else { Ok(()) }
    });

    // The companion reported nothing to the log: only the master's engine did.
    let entries = cluster.entries();
    let reporters: Vec<String> = entries
        .iter()
        .filter_map(|e| match event(e) {
            Some(Event::TaskStarted { task, engine, .. } | Event::TaskCompleted { task, engine, .. } | Event::TaskFailed { task, engine, .. })
                if task.job.as_str() == "mpi" =>
            {
                Some(engine.to_string())
            }
            _ => None,
        })
        .collect();
    assert_eq!(reporters.len(), 2, "one start and one end: {reporters:?}");
    assert!(reporters.iter().all(|engine| *engine != companion_engine), "{reporters:?} (companion {companion_engine})");
    assert!(completed_seq.0 > 0);
}
