//! The bench's findings (`--json` prints them) and their printing for people.

use serde::Serialize;

use crate::projector::service::ProjectorReport;

/// The bench's findings; `--json` prints this.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub broker: BrokerInfo,
    pub machine: MachineInfo,
    pub config: BenchConfigReport,
    pub raw_publish: Option<RawPublish>,
    pub run: RunFigures,
    pub latency_ms: Latencies,
    /// CPU time spent during the run, per lifecycle.
    pub cpu: CpuFigures,
    pub projector: ProjectorReport,
    pub engines: SimReport,
    pub verify: Verification,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrokerInfo {
    pub url: String,
    /// Started by the bench (a private nats-server on loopback with a temporary store).
    pub private: bool,
    pub nats_server_version: Option<String>,
    /// What the private server was started with; unknown for a broker given with --nats.
    pub sync: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct MachineInfo {
    pub cores: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchConfigReport {
    pub tasks: u32,
    pub jobs: u32,
    pub engines: u32,
    pub slots_per_engine: u32,
    pub window: usize,
    pub projector_read_batch_max: usize,
    pub projector_schedule_every_entries: u64,
    pub projector_snapshot_every_entries: u64,
    pub projector_tick_interval_ms: u64,
    pub dispatches_per_run_max: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct RawPublish {
    pub messages: u64,
    pub payload_bytes: usize,
    pub window: usize,
    pub seconds: f64,
    pub msgs_per_s: f64,
    /// CPU time of the (private) broker per message stored.
    pub broker_cpu_us_per_msg: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    pub tasks_completed: u64,
    /// From publishing the jobs to the projector having folded the last completion.
    pub seconds: f64,
    pub lifecycles_per_s: f64,
    /// Completions per second of log time between the 10th and the 90th percentile completion.
    pub steady_lifecycles_per_s: f64,
    /// Messages stored on the log (`GRIDFOLD_EVENTS`) during the run, and on `GRIDFOLD_ORDERS`.
    pub log_entries: u64,
    pub deliveries: u64,
    /// The messages the deliveries travelled in (one engine's deliveries of one decision join).
    pub delivery_messages: u64,
    /// The engines' report messages (a start and an end of several tasks join).
    pub report_messages: u64,
    pub order_batches: u64,
    pub publishes_per_lifecycle: f64,
    pub mean_message_bytes: f64,
    /// lifecycles/s over the raw publish rate.
    pub ratio_to_raw_publish: Option<f64>,
    /// Publishes per second the run made (log entries + deliveries) over the raw rate.
    pub publish_share_of_raw: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub samples: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latencies {
    pub slot_free_to_dispatch: Percentiles,
    pub submit_to_dispatch: Percentiles,
    pub dispatch_to_completed: Percentiles,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SimReport {
    pub runs_received: u64,
    pub other_deliveries: u64,
    pub duplicate_runs: u64,
    pub reports_published: u64,
    /// Messages the reports left in: a delivery's runs report together.
    pub report_messages: u64,
    /// Messages the deliveries came in: the projector joins one engine's deliveries.
    pub delivery_messages: u64,
    pub duplicate_acks: u64,
    pub delivery_bytes: u64,
    /// CPU time of the engines' thread (their connections included) from the first delivery awaited to the last ack.
    pub cpu_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    pub every_task_completed_once: bool,
    pub completed_events: u64,
    pub dispatches_applied: u64,
    pub rejected_entries: u64,
    pub read_entries: u64,
    /// Replay's read of the whole log, the fastest of three (alternating with the raw reads).
    pub read_seconds: f64,
    pub read_entries_per_s: f64,
    /// The same stream read by a bare pull consumer (batches of 10,000, no acks), the best of three reads.
    pub raw_read_msgs_per_s: f64,
    /// `read_entries_per_s` over `raw_read_msgs_per_s`: replay's read against the machine's.
    pub read_share_of_raw: f64,
    pub replay_seconds: f64,
    pub batches_verified: u64,
    pub divergence: Option<String>,
    pub digest: String,
    pub projector_digest_matches: bool,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct CpuFigures {
    /// Cores kept busy on average by the bench process and the broker together.
    pub cores_busy: Option<f64>,
    /// The projector (its runtime, its connection) and the bench's own waiting.
    pub projector_us_per_lifecycle: f64,
    /// The simulated engines' thread (their two connections included).
    pub engines_us_per_lifecycle: f64,
    /// The broker, when the bench started it.
    pub broker_us_per_lifecycle: Option<f64>,
}

pub(super) fn print_report(report: &BenchReport) {
    let run = &report.run;
    let lat = &report.latency_ms;
    let c = &report.config;
    println!();
    println!(
        "gridfold bench: {} tasks in {} jobs, {} engines x {} slots, on {}",
        c.tasks, c.jobs, c.engines, c.slots_per_engine, report.broker.url
    );
    println!(
        "  broker: {} (sync: {}), {} cores",
        report
            .broker
            .nats_server_version
            .as_deref()
            .map_or("nats-server (given)".to_string(), |v| format!(
                "nats-server {v}"
            )),
        report.broker.sync,
        report.machine.cores
    );
    println!(
        "  projector: read batch {}, decide every {} entries or when caught up, snapshot every {} entries, tick {} ms, at most {} dispatches per run",
        c.projector_read_batch_max,
        c.projector_schedule_every_entries,
        c.projector_snapshot_every_entries,
        c.projector_tick_interval_ms,
        c.dispatches_per_run_max
    );
    println!();
    println!(
        "  task lifecycles:        {:>10.0} /s  ({} tasks in {:.2} s; steady middle 80%: {:.0} /s)",
        run.lifecycles_per_s, run.tasks_completed, run.seconds, run.steady_lifecycles_per_s
    );
    if let Some(raw) = &report.raw_publish {
        println!(
            "  raw JetStream publish:  {:>10.0} /s  ({} msgs of {} bytes, {} acks in flight)",
            raw.msgs_per_s, raw.messages, raw.payload_bytes, raw.window
        );
        println!(
            "  ratio lifecycles/raw:   {:>10.3}     (the run published {:.2} messages per lifecycle: {:.0}% of the raw rate)",
            run.ratio_to_raw_publish.unwrap_or(0.0),
            run.publishes_per_lifecycle,
            100.0 * run.publish_share_of_raw.unwrap_or(0.0)
        );
    }
    println!(
        "  slot free -> dispatch:  p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  (a completion or login durable -> the dispatch filling that slot durable)",
        lat.slot_free_to_dispatch.p50, lat.slot_free_to_dispatch.p99, lat.slot_free_to_dispatch.max
    );
    println!(
        "  submit -> dispatch:     p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  (job durable -> dispatch durable; mostly queueing: {} tasks, {} slots)",
        lat.submit_to_dispatch.p50,
        lat.submit_to_dispatch.p99,
        lat.submit_to_dispatch.max,
        c.tasks,
        c.engines * c.slots_per_engine
    );
    println!(
        "  dispatch -> completed:  p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  (delivery, engine, both reports durable)",
        lat.dispatch_to_completed.p50, lat.dispatch_to_completed.p99, lat.dispatch_to_completed.max
    );
    let cpu = &report.cpu;
    println!(
        "  CPU per lifecycle:      projector {:.1} us, engines {:.1} us, broker {} us  (cores busy: {} of {})",
        cpu.projector_us_per_lifecycle,
        cpu.engines_us_per_lifecycle,
        cpu.broker_us_per_lifecycle
            .map_or("?".to_string(), |v| format!("{v:.1}")),
        cpu.cores_busy
            .map_or("?".to_string(), |c| format!("{c:.2}")),
        report.machine.cores
    );
    if let Some(us) = report
        .raw_publish
        .as_ref()
        .and_then(|raw| raw.broker_cpu_us_per_msg)
    {
        println!("  broker CPU per raw publish: {us:.1} us");
    }
    println!(
        "  log: {} entries ({} order batches, {} report messages), {} deliveries in {} messages, mean message {:.0} bytes",
        run.log_entries, run.order_batches, run.report_messages, run.deliveries, run.delivery_messages, run.mean_message_bytes
    );
    let p = &report.projector;
    println!(
        "  projector: {} entries folded, {} batches published, {} deliveries sent, {} snapshots",
        p.entries_folded, p.batches_published, p.deliveries_sent, p.snapshots_written
    );
    let v = &report.verify;
    println!(
        "  read back: {} entries in {:.2} s ({:.0} entries/s: {:.2} of the raw read rate, {:.0} msgs/s); replay with verify: {:.2} s, {} batches re-derived",
        v.read_entries, v.read_seconds, v.read_entries_per_s, v.read_share_of_raw, v.raw_read_msgs_per_s, v.replay_seconds, v.batches_verified
    );
    println!(
        "  every task completed exactly once: {}; rejected entries: {}; divergence: {}; projector digest matches: {}",
        yes(v.every_task_completed_once),
        v.rejected_entries,
        v.divergence.as_deref().unwrap_or("none"),
        yes(v.projector_digest_matches)
    );
    println!(
        "{}",
        if v.ok {
            format!("bench verified: digest {}", v.digest)
        } else {
            "bench NOT verified".to_string()
        }
    );
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "NO" }
}
