//! The bench's jobs and the messages of a lifecycle: what is submitted, what an
//! engine logs in with, what it reports, and the mean message size the raw
//! publish measurement uses.

use std::collections::BTreeMap;


use crate::core::event::{EngineProps, Envelope, Event, JobOptions, JobSpec, TaskSet, TaskTemplate};
use crate::core::ids::{EngineId, JobId, Seq, TaskRef};
use crate::engine::{source, task_report_id};
use crate::wire;
use crate::wire::delivery::{Delivery, DeliveryKind, RunTask, encode_delivery};

pub(super) fn bench_jobs(tasks: u32, jobs: u32) -> Vec<JobSpec> {
    (0..jobs)
        .map(|j| {
            let count = tasks / jobs + u32::from(j < tasks % jobs);
            JobSpec {
                id: JobId::new(&format!("bench-{j}")).expect("a valid job id"),
                owner: "bench".into(),
                project: "bench".into(),
                queue: "default".into(),
                priority: 0,
                requirements: r#"os == "linux""#.into(),
                max_attempts: 3,
                wall_time_limit_ms: 60_000,
                slots_per_task: 1,
                template: TaskTemplate {
                    argv: vec!["render".into(), "--frame={index}".into()],
                    params: [("scene".to_string(), "bench".to_string())].into(),
                },
                tasks: TaskSet::Count(count),
                options: JobOptions::default(),
                task_conditions: BTreeMap::new(),
            }
        })
        .collect()
}

pub(super) fn engine_props() -> EngineProps {
    EngineProps {
        os: "linux".into(),
        arch: "x86_64".into(),
        cores: 4,
        memory_mb: 16_384,
        disk_mb: 100_000,
        mflops: 1_000,
        site: "bench".into(),
        custom: BTreeMap::new(),
        ..EngineProps::default()
    }
}

/// The mean size of the three messages of a lifecycle (delivery, started, completed).
pub(super) fn sample_message_bytes(job: &JobSpec, engine: &EngineId) -> usize {
    let task = TaskRef::new(job.id.clone(), 12_345);
    let delivery = Delivery {
        id: Delivery::id_for(Seq(123_456), 1_234),
        batch_seq: Seq(123_456),
        engine: engine.clone(),
        epoch: 123,
        kind: DeliveryKind::Run(RunTask {
            task: task.clone(),
            attempt: 1,
            argv: vec!["render".into(), "--frame=12345".into()],
            params: job.template.params.clone(),
            wall_time_limit_ms: job.wall_time_limit_ms,
            slots: 1,
            root_library: job.options.root_library.clone(),
            output_bytes_max: crate::core::event::OutputPolicy::default().task_bytes_max,
            work_dir_retention_ms: crate::core::event::OutputPolicy::default().work_dir_retention_ms,
            nodes: Vec::new(),
            companion: false,
            companion_argv: Vec::new(),
        }),
    };
    let [started, completed] = reports(engine, &task, 1, delivery.batch_seq);
    (encode_delivery(&delivery).len() + wire::encode(&started).len() + wire::encode(&completed).len()).div_ceil(3)
}

/// The two reports of an attempt done at once, as its engine sends them: the
/// start, then the completion, each with the agent's id.
pub(super) fn reports(engine: &EngineId, task: &TaskRef, attempt: u32, dispatch: Seq) -> [Envelope; 2] {
    let started = Event::TaskStarted {
        task: task.clone(),
        attempt,
        engine: engine.clone(),
        remote_job: String::new(),
    };
    let completed = Event::TaskCompleted {
        task: task.clone(),
        attempt,
        engine: engine.clone(),
        exit_code: 0,
        cpu_ms: 0,
        wall_ms: 0,
        result: Vec::new(),
        stored: Default::default(),
    };
    [started, completed].map(|event| Envelope {
        id: task_report_id(engine, task, attempt, dispatch, event.kind_name()),
        source: source(engine),
        event,
    })
}
