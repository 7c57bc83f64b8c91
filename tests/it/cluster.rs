//! The three-node cluster as docs/operators.md tells it: three real nats-servers routed as
//! one cluster (`support::cluster3`), real `gridfold` processes given all three
//! servers as one comma-separated list. A test FAILS, never skips, when the servers
//! cannot start.
//!
//! One cluster serves every start order (its streams are deleted between them):
//! the projector and an engine before the broker; engines and an operator's
//! command before the projector; a submission before the engine before the
//! projector; `gridfold setup` first. Each ends with every stream and the lease
//! bucket on three replicas and a job done.

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gridfold::core::event::Event;
use support::procs::{Broker, Cluster, event};

/// The streams the projector (or `gridfold setup`) makes, the lease bucket's included.
const STREAMS: [&str; 3] = ["GRIDFOLD_EVENTS", "GRIDFOLD_ORDERS", "KV_GRIDFOLD_LEADER"];

fn replicas(cluster: &Cluster, stream: &str) -> Result<usize, String> {
    match &cluster.broker {
        Broker::Three(brokers) => brokers.stream_replicas(&cluster.runtime, stream),
        Broker::One(_) => unreachable!("three nodes"),
    }
}

fn brokers(cluster: &mut Cluster) -> &mut support::cluster3::BrokerCluster {
    match &mut cluster.broker {
        Broker::Three(brokers) => brokers,
        Broker::One(_) => unreachable!("three nodes"),
    }
}

fn wait_all_replicated(cluster: &mut Cluster) {
    cluster.wait_for("every stream on three replicas", Duration::from_secs(60), |cluster| {
        let seen: Vec<Result<usize, String>> = STREAMS.iter().map(|stream| replicas(cluster, stream)).collect();
        if seen.iter().all(|replicas| *replicas == Ok(3)) { Ok(()) } else { Err(format!("{STREAMS:?}: {seen:?}")) }
    });
}

fn wait_done(cluster: &mut Cluster, job: &str, timeout: Duration) {
    cluster.wait_for(&format!("job {job} to be done"), timeout, |cluster| {
        let stdout = cluster.try_command(&["stat".as_ref(), "--json".as_ref(), job.as_ref()])?;
        let stat: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| format!("{e}: {stdout}"))?;
        if stat["jobs"][0]["status"] == "done" { Ok(()) } else { Err(format!("{stat}")) }
    });
}

/// Waits until process `p` has said `needle` on its stderr.
fn wait_said(cluster: &mut Cluster, p: usize, needle: &str) {
    let name = cluster.proc(p).name.clone();
    cluster.wait_for(&format!("{name} to say {needle:?}"), Duration::from_secs(60), |cluster| {
        let said = cluster.proc(p).stderr();
        if said.contains(needle) { Ok(()) } else { Err(said) }
    });
}

/// Waits until process `p` has exited with success.
fn wait_succeeded(cluster: &mut Cluster, p: usize) {
    let name = cluster.proc(p).name.clone();
    cluster.wait_for(&format!("{name} to finish"), Duration::from_secs(60), |cluster| match cluster.proc(p).poll_exit() {
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(format!("it failed ({status}): {}", cluster.proc(p).stderr())),
        None => Err("it still runs".to_string()),
    });
}

/// `gridfold projector --replicas 3` registering its own key, state in `<dir>/<name>`.
fn projector(cluster: &mut Cluster, name: &str) -> usize {
    let (url, state) = (cluster.url(), cluster.path(name).display().to_string());
    cluster.spawn(name, &["projector", "--nats", &url, "--state", &state, "--replicas", "3", "--register-key"])
}

fn engine(cluster: &mut Cluster, name: &str) -> usize {
    let work = cluster.path(&format!("work-{name}"));
    cluster.engine(name, name, 2, &work)
}

/// A job file of `tasks` tasks running `sh -c script`.
fn job_file(cluster: &Cluster, id: &str, tasks: u32, script: &str) -> String {
    let job = format!("id = \"{id}\"\nowner = \"tester\"\ntasks = {tasks}\n\n[task]\nargv = [\"sh\", \"-c\", {script:?}]\n");
    cluster.write(&format!("{id}.toml"), &job).display().to_string()
}

/// Each long-running process said which of the three servers it connected to.
fn assert_said_server(cluster: &mut Cluster, ps: &[usize]) {
    for &p in ps {
        let said = cluster.proc(p).stderr();
        assert!(said.contains("connected to nats-server n"), "{} names its server:\n{said}", cluster.proc(p).name);
    }
}

/// Stops every process and deletes the streams: the cluster as it started.
fn reset(cluster: &mut Cluster) {
    cluster.procs.clear();
    let runtime = &cluster.runtime;
    match &cluster.broker {
        Broker::Three(brokers) => brokers.delete_streams(runtime, &STREAMS),
        Broker::One(_) => unreachable!("three nodes"),
    }
}

/// Submits job `id` of four tasks, then [`finish`]es. A cluster whose nodes just
/// came back may still be electing its leaders: the command asks again for up to
/// 15 s by itself; should that not do, the submission is tried again here, and a
/// second copy stored by such a retry is rejected by the fold as a duplicate.
fn submit_and_finish(cluster: &mut Cluster, id: &str, ps: &[usize]) {
    let file = job_file(cluster, id, 4, "exit 0");
    cluster.wait_for(&format!("job {id} to be stored"), Duration::from_secs(60), |cluster| {
        cluster.try_command(&["submit".as_ref(), file.as_ref(), "--wait-secs".as_ref(), "0".as_ref()])
    });
    finish(cluster, id, ps);
}

/// Every stream on three replicas, job `id` done, each of `ps` named its server;
/// then [`reset`] for the next start order.
fn finish(cluster: &mut Cluster, id: &str, ps: &[usize]) {
    wait_all_replicated(cluster);
    wait_done(cluster, id, Duration::from_secs(60));
    assert_said_server(cluster, ps);
    reset(cluster);
}

#[test]
fn in_every_start_order_the_streams_end_on_three_replicas_and_a_job_completes() {
    let mut cluster = Cluster::start_three_bare();

    // 1. The projector and an engine before the broker: they wait for it, saying so.
    brokers(&mut cluster).kill_all();
    let p = projector(&mut cluster, "p1");
    let e = engine(&mut cluster, "e1");
    wait_said(&mut cluster, p, "trying again in");
    wait_said(&mut cluster, e, "trying again in");
    for node in 0..3 {
        brokers(&mut cluster).restart(node);
    }
    submit_and_finish(&mut cluster, "j1", &[p, e]);

    // 2. Engines and an operator's command before the projector: they wait for the
    // streams, saying so, and none makes one.
    let e = engine(&mut cluster, "e2");
    let policy = cluster.write("policy.toml", "engine_timeout_secs = 10\n").display().to_string();
    let url = cluster.url();
    let apply = cluster.spawn("apply2", &["policy", "apply", &policy, "--wait-secs", "0", "--nats", &url]);
    wait_said(&mut cluster, e, "waiting up to 60 s for the projector or `gridfold setup`");
    wait_said(&mut cluster, apply, "waiting up to 60 s for the projector or `gridfold setup`");
    assert!(replicas(&cluster, "GRIDFOLD_EVENTS").is_err(), "nobody but the projector made the log");
    let p = projector(&mut cluster, "p2");
    wait_succeeded(&mut cluster, apply);
    submit_and_finish(&mut cluster, "j2", &[p, e]);

    // 3. A submission, then an engine, then the projector.
    let file = job_file(&cluster, "j3", 4, "exit 0");
    let submit = cluster.spawn("submit3", &["submit", &file, "--wait-secs", "0", "--nats", &url]);
    wait_said(&mut cluster, submit, "waiting up to 60 s");
    let e = engine(&mut cluster, "e3");
    let p = projector(&mut cluster, "p3");
    wait_succeeded(&mut cluster, submit);
    finish(&mut cluster, "j3", &[p, e]);

    // 4. `gridfold setup` first, as an operator would; it says what it made.
    let made = cluster.command(&["setup".as_ref(), "--replicas".as_ref(), "3".as_ref(), "--json".as_ref()]);
    let made: serde_json::Value = serde_json::from_str(made.trim()).unwrap_or_else(|err| panic!("{err}: {made}"));
    for (shown, stream) in made["streams"].as_array().expect("streams").iter().zip(STREAMS) {
        assert_eq!((shown["stream"].as_str(), shown["replicas"].as_u64()), (Some(stream), Some(3)), "{made}");
    }
    wait_all_replicated(&mut cluster);
    let e = engine(&mut cluster, "e4");
    let p = projector(&mut cluster, "p4");
    submit_and_finish(&mut cluster, "j4", &[p, e]);
}

/// The node a process said it connected to: 0, 1 or 2 (`connected to nats-server n2`).
fn connected_node(said: &str) -> Option<usize> {
    let at = said.rfind("connected to nats-server n")? + "connected to nats-server n".len();
    let digit = said[at..].chars().next()?.to_digit(10)?;
    usize::try_from(digit).ok()?.checked_sub(1)
}

fn ms_since_epoch(time: SystemTime) -> u64 {
    u64::try_from(time.duration_since(UNIX_EPOCH).expect("after 1970").as_millis()).expect("ms fit u64")
}

/// `kill -9` of the node the projector is connected to while a job of many short
/// tasks runs: the grid goes on and every task completes. Prints the pause from the
/// kill to the next order batch and to the first completion after that batch (log
/// times), and the
/// runs beyond the first (the figures of docs/reliability.md); asserts only that
/// the grid resumes and the job ends done.
#[test]
fn killing_the_projectors_node_pauses_the_grid_and_then_every_task_completes() {
    let mut cluster = Cluster::start_three("engine_timeout_secs = 10\n");
    let p = cluster.projector();
    let engines: Vec<usize> = ["e1", "e2", "e3"].iter().map(|name| engine(&mut cluster, name)).collect();
    cluster.wait_logged_in(&["e1", "e2", "e3"]);
    let records = cluster.path("executions").display().to_string();
    let file = job_file(&cluster, "many", 400, &format!("echo \"$GRIDFOLD_TASK_ID\" >> '{records}'; sleep 0.05"));
    cluster.command(&["submit".as_ref(), file.as_ref()]);
    cluster.wait_for("a first hundred completions", Duration::from_secs(120), |cluster| {
        let done = cluster.entries().iter().filter(|entry| matches!(event(entry), Some(Event::TaskCompleted { .. }))).count();
        if done >= 100 { Ok(()) } else { Err(format!("{done} completed")) }
    });
    let said = cluster.proc(p).stderr();
    let node = connected_node(&said).unwrap_or_else(|| panic!("the projector names its server:\n{said}"));
    let engines_there: Vec<String> = engines
        .iter()
        .map(|&e| (cluster.procs[e].name.clone(), connected_node(&cluster.procs[e].stderr())))
        .filter(|(_, connected)| *connected == Some(node))
        .map(|(name, _)| name)
        .collect();
    // The worst case: the node about to die leads the log, the orders, the lease and
    // every engine's consumer, so each of them must elect a new leader.
    let groups = ["GRIDFOLD_EVENTS", "GRIDFOLD_ORDERS", "KV_GRIDFOLD_LEADER", "GRIDFOLD_ORDERS/gridfold-engine-e1", "GRIDFOLD_ORDERS/gridfold-engine-e2", "GRIDFOLD_ORDERS/gridfold-engine-e3"];
    let led = match &cluster.broker {
        Broker::Three(brokers) => brokers.lead_on(&cluster.runtime, node, &groups),
        Broker::One(_) => unreachable!("three nodes"),
    };
    brokers(&mut cluster).kill(node);
    let killed_ms = ms_since_epoch(SystemTime::now());

    // A job submitted at once, while the streams that were led from the dead node
    // elect new leaders: the command rides it out (saying so if it had to) and
    // reports the projector's verdict on the job it stored, accepted, once.
    let during = job_file(&cluster, "during", 2, "exit 0");
    let submitted = cluster.try_command_said(&["submit".as_ref(), during.as_ref(), "--json".as_ref(), "--wait-secs".as_ref(), "30".as_ref()]);
    let (stdout, stderr) = submitted.unwrap_or_else(|err| cluster.fail(&format!("a submission during the election failed: {err}")));
    let submitted: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    assert_eq!(submitted["verdict"], "accepted", "{submitted}\n{stderr}");
    let retried = stderr.contains("the broker is electing a leader; retrying");
    let submitted_ms = ms_since_epoch(SystemTime::now()) - killed_ms;

    let (batch_ms, completion_ms) = cluster.wait_for("an order batch and a completion after the kill", Duration::from_secs(60), |cluster| {
        let entries = cluster.entries();
        let first_after = |after_ms: u64, wanted: fn(&Event) -> bool| {
            entries.iter().find(|entry| entry.time_ms > after_ms && event(entry).is_some_and(wanted)).map(|entry| entry.time_ms)
        };
        let batch = first_after(killed_ms, |event| matches!(event, Event::OrderBatch(_)));
        // Completions right after the kill may be of tasks dispatched before it: the
        // grid has resumed with the first completion after the first batch.
        let completion = batch.and_then(|batch| first_after(batch, |event| matches!(event, Event::TaskCompleted { .. })));
        match (batch, completion) {
            (Some(batch), Some(completion)) => Ok((batch - killed_ms, completion - killed_ms)),
            seen => Err(format!("{seen:?}")),
        }
    });
    wait_done(&mut cluster, "many", Duration::from_secs(180));
    wait_done(&mut cluster, "during", Duration::from_secs(60));
    let runs = std::fs::read_to_string(&records).expect("the tasks' records");
    let mut per_task = std::collections::BTreeMap::<&str, u32>::new();
    for task in runs.lines() {
        *per_task.entry(task).or_default() += 1;
    }
    let again: u32 = per_task.values().map(|runs| runs - 1).sum();
    eprintln!(
        "killed node n{} (the projector's; engines there: {engines_there:?}; it led {led:?}): next order batch after {batch_ms} ms, \
         first completion after it {completion_ms} ms after the kill; runs beyond the first: {again}; \
         a submission made at the kill was accepted after {submitted_ms} ms (retried: {retried})",
        node + 1
    );
    assert_eq!(per_task.len(), 400, "every task ran");
}
