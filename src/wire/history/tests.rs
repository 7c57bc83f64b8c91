use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;
use crate::wire::default_subject;
use crate::core::event::{Event, Origin, Payload, TaskSet};
use crate::wire::testing::{arb_envelope, envelope, every_event};

/// The four example lines of the module's documentation and the design notes,
/// exactly as a person may write them.
const EXAMPLES: &str = r#"
# A hand-written history: comments and blank lines are skipped.

{"seq": 1, "time_ms": 1700000000000, "envelope": {"source": "gridfold-cli", "event": {"job_submitted": {"id": "render-1", "owner": "ann", "project": "film", "queue": "batch", "priority": 0, "requirements": "os == \"linux\"", "max_attempts": 3, "wall_time_limit_ms": 600000, "slots_per_task": 1, "template": {"argv": ["render", "--frame={index}"], "params": {"scene": "intro"}}, "tasks": {"count": 100}}}}}
{"seq": 2, "time_ms": 1700000000100, "envelope": {"event": {"engine_logged_in": {"engine": "e1", "slots": 4, "props": {"os": "linux", "arch": "x86_64", "cores": 8, "memory_mb": 32768, "custom": {"type": "blade"}}}}}}
{"seq": 3, "time_ms": 1700000000200, "subject": "gridfold.ev.orders", "envelope": {"id": "0b0f2a5e-3c1d-4e8f-9a6b-2d4c6e8f0a1b", "source": "projector", "event": {"order_batch": {"based_on_seq": 2, "algorithm": "sge-plain", "algorithm_version": 1, "orders": [{"dispatch": {"task": {"job": "render-1", "index": 0}, "attempt": 1, "engine": "e1"}}]}}}}
{"seq": 5, "time_ms": 1700000042000, "subject": "gridfold.ev.engine.e1.completed", "envelope": {"id": "5f0c9e8a-1b2c-4d3e-8f4a-5b6c7d8e9f01", "source": "engine:e1", "event": {"task_completed": {"task": {"job": "render-1", "index": 0}, "attempt": 1, "engine": "e1", "exit_code": 0, "cpu_ms": 39000, "wall_ms": 41500, "result": "frame 0 done\n"}}}}
"#;

#[test]
fn the_examples_parse_into_the_events_they_say() {
    let lines = parse_history(EXAMPLES).unwrap();
    let shown: Vec<String> = lines
        .iter()
        .map(|line| {
            let HistoryPayload::Envelope(envelope, _) = &line.payload else {
                panic!("{line:?}")
            };
            format!(
                "line {} seq {} at {} on {}\n  id {} from {:?}\n  {:?}",
                line.line,
                line.seq,
                line.time_ms,
                line.subject,
                uuid::Uuid::from_bytes(envelope.id),
                envelope.source,
                envelope.event
            )
        })
        .collect();
    expect![[r#"
        line 4 seq 1 at 1700000000000 on gridfold.ev.user.ann.job.submitted
          id 05f0947c-3f79-861c-92dd-b78185701283 from "gridfold-cli"
          JobSubmitted(JobSpec { id: JobId("render-1"), owner: "ann", project: "film", queue: "batch", priority: 0, requirements: "os == \"linux\"", max_attempts: 3, wall_time_limit_ms: 600000, slots_per_task: 1, template: TaskTemplate { argv: ["render", "--frame={index}"], params: {"scene": "intro"} }, tasks: Count(100), options: JobOptions { deadline_ms: None, job_share: 0, root_library: None, affinity: [], depends_on_jobs: [], fail_on_dependency_failure: false, continue_on_task_failure: false, engine_blacklisting: false, failures_before_blacklist: 0, engine_greylisting: false, redundant_rescheduling: false, task_max_time_ms: 0, cancel_redundant_on_first_result: false, tasks_total: None, project_priority: 0, expected_task_time_ms: 0, soft: "", span: Engine, reserve: false, process_type: "", companion_argv: [], campaign: Default }, task_conditions: {} })
        line 5 seq 2 at 1700000000100 on gridfold.ev.engine.e1.login
          id 12649c47-1c04-8073-9ec7-150c6a32ee7c from ""
          EngineLoggedIn { engine: EngineId("e1"), slots: 4, props: EngineProps { os: "linux", arch: "x86_64", cores: 8, memory_mb: 32768, disk_mb: 0, mflops: 0, site: "", custom: {"type": "blade"}, libraries: [] } }
        line 6 seq 3 at 1700000000200 on gridfold.ev.orders
          id 0b0f2a5e-3c1d-4e8f-9a6b-2d4c6e8f0a1b from "projector"
          OrderBatch(OrderBatch { based_on_seq: #2, algorithm: "sge-plain", algorithm_version: 1, orders: [Dispatch { task: render-1/0, attempt: 1, engine: EngineId("e1"), epoch: 0 }] })
        line 7 seq 5 at 1700000042000 on gridfold.ev.engine.e1.completed
          id 5f0c9e8a-1b2c-4d3e-8f4a-5b6c7d8e9f01 from "engine:e1"
          TaskCompleted { task: render-1/0, attempt: 1, engine: EngineId("e1"), exit_code: 0, cpu_ms: 39000, wall_ms: 41500, result: [102, 114, 97, 109, 101, 32, 48, 32, 100, 111, 110, 101, 10], stored: StoredStreams { stdout: None, stderr: None } }"#]]
    .assert_eq(&shown.join("\n"));

    let entries: Vec<Entry> = lines.iter().map(Entry::from).collect();
    let origins: Vec<String> = entries.iter().map(|e| e.origin.to_string()).collect();
    assert_eq!(origins, ["user ann", "engine e1", "the projector", "engine e1"]);
}

#[test]
fn a_history_line_and_the_log_message_it_records_make_identical_entries() {
    for line in parse_history(EXAMPLES).unwrap() {
        let HistoryPayload::Envelope(envelope, _) = &line.payload else {
            unreachable!()
        };
        let from_log = entry_from_log(line.seq, line.time_ms, &line.subject, &encode(envelope));
        let from_history = line.to_entry();
        assert_eq!(from_history.stored, from_log.stored);
        assert_eq!(from_history.origin, from_log.origin);
        assert_eq!(
            (from_history.seq, from_history.time_ms),
            (from_log.seq, from_log.time_ms)
        );
    }
}

#[test]
fn export_writes_every_variant_readably() {
    let mut written = String::new();
    for (idx, event) in every_event().into_iter().enumerate() {
        let seq = Seq(idx as u64 + 1);
        let envelope = envelope(idx as u8, event);
        let subject = default_subject(&envelope.event);
        written.push_str(&write_history_line(
            seq,
            1_700_000_000_000 + seq.0,
            &subject,
            &encode(&envelope),
        ));
        written.push('\n');
    }
    written.push_str(&write_history_line(
        Seq(99),
        1_700_000_009_999,
        "gridfold.ev.user.ann.job.submitted",
        b"\x0a\x03abc",
    ));
    written.push('\n');
    expect![[r#"
        {"seq":1,"time_ms":1700000000001,"subject":"gridfold.ev.user.ann.job.submitted","envelope":{"id":"00000000-0000-0000-0000-000000000000","source":"test","event":{"job_submitted":{"id":"render-1","owner":"ann","project":"film","queue":"batch","priority":-5,"requirements":"os == \"linux\" && cores >= 4","max_attempts":3,"wall_time_limit_ms":3600000,"slots_per_task":2,"template":{"argv":["render","--frame={index}"],"params":{"scene":"intro"}},"tasks":{"count":100}}}}}
        {"seq":2,"time_ms":1700000000002,"subject":"gridfold.ev.user.ann.job.submitted","envelope":{"id":"01010101-0101-0101-0101-010101010101","source":"test","event":{"job_submitted":{"id":"sweep.2","owner":"ann","project":"film","queue":"batch","priority":-5,"requirements":"os == \"linux\" && cores >= 4","max_attempts":3,"wall_time_limit_ms":3600000,"slots_per_task":2,"template":{"argv":["render","--frame={index}"],"params":{"scene":"intro"}},"options":{"root_library":{"name":"render-lib","version":"2.1.0"},"affinity":[{"when":"type == \"blade\"","weight":10}],"depends_on_jobs":["prep","render-1"],"fail_on_dependency_failure":true,"continue_on_task_failure":true,"engine_blacklisting":true,"failures_before_blacklist":2,"engine_greylisting":true,"redundant_rescheduling":true,"task_max_time_ms":600000,"cancel_redundant_on_first_result":true,"job_share":250,"tasks_total":4,"project_priority":2,"expected_task_time_ms":90000,"soft":"site == \"lyon\"","process_type":"cms","campaign":"TEST","span":"SITE"},"task_conditions":{"0":{"discriminator":"","affinity":[],"task_affinity":[],"queue_jump":false,"depends_on":[]},"2":{"discriminator":"mflops >= 1000","affinity":[{"when":"site == \"hel\"","weight":-3}],"task_affinity":[0,2],"queue_jump":true,"depends_on":[{"job":"render-1","index":1},{"job":"prep","index":0}]}},"tasks":{"list":[{"x":"1"},{},{"x":"3","y":"é"}]}}}}}
        {"seq":3,"time_ms":1700000000003,"subject":"gridfold.ev.op.job.cancelled","envelope":{"id":"02020202-0202-0202-0202-020202020202","source":"test","event":{"job_cancelled":{"job":"render-1","reason":"wrong scene"}}}}
        {"seq":4,"time_ms":1700000000004,"subject":"gridfold.ev.op.job.priority","envelope":{"id":"03030303-0303-0303-0303-030303030303","source":"test","event":{"job_priority_changed":{"job":"render-1","priority":10}}}}
        {"seq":5,"time_ms":1700000000005,"subject":"gridfold.ev.op.override_tickets","envelope":{"id":"04040404-0404-0404-0404-040404040404","source":"test","event":{"job_override_tickets_set":{"job":"render-1","tickets":500}}}}
        {"seq":6,"time_ms":1700000000006,"subject":"gridfold.ev.engine.e1.login","envelope":{"id":"05050505-0505-0505-0505-050505050505","source":"test","event":{"engine_logged_in":{"engine":"e1","slots":8,"props":{"os":"linux","arch":"x86_64","cores":16,"memory_mb":65536,"disk_mb":1000000,"mflops":12345,"site":"hel","custom":{"gpu":"none","type":"blade"},"libraries":[{"name":"render-lib","version":"2.1.0"},{"name":"ffmpeg","version":"7"}]}}}}}
        {"seq":7,"time_ms":1700000000007,"subject":"gridfold.ev.engine.e1.logout","envelope":{"id":"06060606-0606-0606-0606-060606060606","source":"test","event":{"engine_logged_out":{"engine":"e1"}}}}
        {"seq":8,"time_ms":1700000000008,"subject":"gridfold.ev.engine.e1.heartbeat","envelope":{"id":"07070707-0707-0707-0707-070707070707","source":"test","event":{"engine_heartbeat":{"engine":"e1","load":{"load_per_core_milli":750,"memory_free_mb":1024}}}}}
        {"seq":9,"time_ms":1700000000009,"subject":"gridfold.ev.engine.e1.started","envelope":{"id":"08080808-0808-0808-0808-080808080808","source":"test","event":{"task_started":{"task":{"job":"render-1","index":7},"attempt":1,"engine":"e1"}}}}
        {"seq":10,"time_ms":1700000000010,"subject":"gridfold.ev.engine.e1.completed","envelope":{"id":"09090909-0909-0909-0909-090909090909","source":"test","event":{"task_completed":{"task":{"job":"render-1","index":7},"attempt":1,"engine":"e1","exit_code":0,"cpu_ms":5000,"wall_ms":6000,"result":"frame 7 done\n"}}}}
        {"seq":11,"time_ms":1700000000011,"subject":"gridfold.ev.engine.e_2.completed","envelope":{"id":"0a0a0a0a-0a0a-0a0a-0a0a-0a0a0a0a0a0a","source":"test","event":{"task_completed":{"task":{"job":"render-1","index":8},"attempt":2,"engine":"e_2","exit_code":3,"cpu_ms":1,"wall_ms":2,"result":{"base64":"//4A"},"stdout_stored":{"bytes":70000,"blake3":{"base64":"s7Ozs7Ozs7Ozs7Ozs7Ozs7Ozs7Ozs7Ozs7Ozs7Ozs7M="}}}}}}
        {"seq":12,"time_ms":1700000000012,"subject":"gridfold.ev.engine.e1.failed","envelope":{"id":"0b0b0b0b-0b0b-0b0b-0b0b-0b0b0b0b0b0b","source":"test","event":{"task_failed":{"task":{"job":"render-1","index":9},"attempt":1,"engine":"e1","exit_code":139,"kind":"SIGNALLED","error_tail":"segmentation fault","stdout_stored":{"bytes":1,"blake3":"\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001\u0001"},"stderr_stored":{"bytes":18,"blake3":"\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002\u0002"}}}}}
        {"seq":13,"time_ms":1700000000013,"subject":"gridfold.ev.engine.e1.failed","envelope":{"id":"0c0c0c0c-0c0c-0c0c-0c0c-0c0c0c0c0c0c","source":"test","event":{"task_failed":{"task":{"job":"render-1","index":9},"attempt":2,"engine":"e1","kind":"LAUNCH_FAILED","error_tail":""}}}}
        {"seq":14,"time_ms":1700000000014,"subject":"gridfold.ev.op.policy","envelope":{"id":"0d0d0d0d-0d0d-0d0d-0d0d-0d0d0d0d0d0d","source":"test","event":{"policy_set":{"algorithm":"sge-plain","engine_timeout_ms":30000,"dispatch_timeout_ms":60000,"load_formula":{"slots_weight":1,"load_weight":2},"dispatches_per_run_max":4096,"seed":42,"engine_tiers":["type=blade","type=server"],"greylist_affinity":5,"redundancy":{"strategy_effective_percent":50,"poll_period_ms":5000,"percent_completed_strategy":true,"remaining_task_percent":10,"average_strategy":true,"average_limit_milli":3000,"std_dev_strategy":true,"std_dev_limit_milli":2500,"reschedule_first":true,"copies_per_task_max":2},"techila":{"max_running_tasks":500,"simultaneous_projects":true,"user_priorities":[{"name":"alice","amount":2}],"cycle_interval_ms":2000},"output":{"task_bytes_max":1048576,"job_bytes_max":67108864,"work_dir_retention_ms":600000},"suspend_thresholds":{"thresholds":[{"name":"np_load_avg","threshold_milli":1750},{"name":"mem_used","threshold_milli":8000000}],"interval_ms":60000,"nsuspend":2},"fbsng":{"queues":[{"name":"high","qp_min":5,"qp_max":100,"qpi":3,"qpd":1,"qpg":7,"spg":100},{"name":"background","qp_min":0,"qp_max":100,"qpi":1,"qpd":1,"qpg":100,"spg":100}],"process_types":[{"name":"cms","quota_slots":200,"requirements":"project == \"cms\""}],"min_run_interval_ms":2000},"cigri":{"affinity":[{"user":"alice","cluster":"lyon"},{"user":"bob","cluster":"grenoble"}],"finalize_copies_max":2,"sink_ratio_milli":100,"sink_min_tasks":5,"predictor_window_ms":600000},"flood":{"algorithm":"TWO_WAY_ADAPTIVE","interval_ms":5000,"ratio_max_milli":4000,"waiting_allowed":2,"waiting_grace_ms":1000,"remote_queue_timeout_ms":60000,"ratio_start_milli":500},"caps":{"max_jobs_per_user":50,"max_tasks":1000000}}}}}
        {"seq":15,"time_ms":1700000000015,"subject":"gridfold.ev.tick","envelope":{"id":"0e0e0e0e-0e0e-0e0e-0e0e-0e0e0e0e0e0e","source":"test","event":{"tick":{}}}}
        {"seq":16,"time_ms":1700000000016,"subject":"gridfold.ev.orders","envelope":{"id":"0f0f0f0f-0f0f-0f0f-0f0f-0f0f0f0f0f0f","source":"test","event":{"order_batch":{"based_on_seq":41,"algorithm":"sge-plain","algorithm_version":1,"orders":[{"dispatch":{"task":{"job":"render-1","index":0},"attempt":1,"engine":"e1","epoch":3}},{"cancel":{"task":{"job":"render-1","index":1},"attempt":2,"engine":"e1","reason":"JOB_CANCELLED"}},{"engine_lost":{"engine":"e9","last_seen_ms":1700000000000,"epoch":12}},{"requeue":{"task":{"job":"render-1","index":2},"attempt":1,"reason":"DISPATCH_TIMEOUT","engine":"e3"}},{"mark_unschedulable":{"job":"render-1","reason":"NO_ENGINE_HAS_ENOUGH_SLOTS"}},{"mark_unschedulable":{"job":"render-1","reason":"NO_ENGINE_MATCHES_REQUIREMENTS"}},{"mark_unschedulable":{"job":"sweep.2","reason":"LIBRARY_NOT_PUBLISHED"}},{"cancel":{"task":{"job":"render-1","index":3},"attempt":1,"engine":"e2","reason":"REDUNDANT_COPY"}},{"sync_library":{"engine":"e2","library":{"name":"render-lib","version":"2.1.0"}}},{"blacklist":{"job":"render-1","engine":"e3","failures":2}},{"reschedule":{"task":{"job":"render-1","index":4},"reason":"STD_DEV","elapsed_ms":90000,"limit_ms":75000}},{"fail_dependent":{"job":"sweep.2","task":1,"dependency":"prep/0"}},{"fail_dependent":{"job":"sweep.2","dependency":"prep"}}]}}}}
        {"seq":17,"time_ms":1700000000017,"subject":"gridfold.ev.orders","envelope":{"id":"10101010-1010-1010-1010-101010101010","source":"test","event":{"order_batch":{"based_on_seq":0,"algorithm":"","algorithm_version":0,"orders":[]}}}}
        {"seq":18,"time_ms":1700000000018,"subject":"gridfold.ev.op.job.tasks_added","envelope":{"id":"11111111-1111-1111-1111-111111111111","source":"test","event":{"tasks_added":{"job":"sweep.2","tasks":[{"x":"4"},{}],"conditions":{"1":{"discriminator":"mflops >= 1000","affinity":[{"when":"site == \"hel\"","weight":-3}],"task_affinity":[0,2],"queue_jump":true,"depends_on":[{"job":"render-1","index":1},{"job":"prep","index":0}]}}}}}}
        {"seq":19,"time_ms":1700000000019,"subject":"gridfold.ev.op.library_published","envelope":{"id":"12121212-1212-1212-1212-121212121212","source":"test","event":{"library_published":{"library":{"name":"render-lib","version":"2.1.0"},"size_bytes":12345678,"digest_hex":"af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"}}}}
        {"seq":20,"time_ms":1700000000020,"subject":"gridfold.ev.engine.e1.library_synced","envelope":{"id":"13131313-1313-1313-1313-131313131313","source":"test","event":{"library_synced":{"engine":"e1","library":{"name":"render-lib","version":"2.1.0"}}}}}
        {"seq":21,"time_ms":1700000000021,"subject":"gridfold.ev.engine.e1.library_sync_failed","envelope":{"id":"14141414-1414-1414-1414-141414141414","source":"test","event":{"library_sync_failed":{"engine":"e1","library":{"name":"ffmpeg","version":"7"},"error":"digest mismatch"}}}}
        {"seq":22,"time_ms":1700000000022,"subject":"gridfold.ev.op.blacklists_cleared","envelope":{"id":"15151515-1515-1515-1515-151515151515","source":"test","event":{"blacklists_cleared":{"engine":"e3"}}}}
        {"seq":23,"time_ms":1700000000023,"subject":"gridfold.ev.op.blacklists_cleared","envelope":{"id":"16161616-1616-1616-1616-161616161616","source":"test","event":{"blacklists_cleared":{}}}}
        {"seq":24,"time_ms":1700000000024,"subject":"gridfold.ev.op.keys","envelope":{"id":"17171717-1717-1717-1717-171717171717","source":"test","event":{"projector_key_registered":{"key":"\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003","name":"projector on node-a"}}}}
        {"seq":25,"time_ms":1700000000025,"subject":"gridfold.ev.op.keys","envelope":{"id":"18181818-1818-1818-1818-181818181818","source":"test","event":{"projector_key_revoked":{"key":"\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003\u0003"}}}}
        {"seq":26,"time_ms":1700000000026,"subject":"gridfold.ev.op.job.suspend","envelope":{"id":"19191919-1919-1919-1919-191919191919","source":"test","event":{"suspend_requested":{"job":"render-1","task":7}}}}
        {"seq":27,"time_ms":1700000000027,"subject":"gridfold.ev.op.job.resume","envelope":{"id":"1a1a1a1a-1a1a-1a1a-1a1a-1a1a1a1a1a1a","source":"test","event":{"resume_requested":{"job":"render-1"}}}}
        {"seq":28,"time_ms":1700000000028,"subject":"gridfold.ev.op.job.reschedule","envelope":{"id":"1b1b1b1b-1b1b-1b1b-1b1b-1b1b1b1b1b1b","source":"test","event":{"reschedule_requested":{"job":"render-1","task":0}}}}
        {"seq":29,"time_ms":1700000000029,"subject":"gridfold.ev.op.job.hold","envelope":{"id":"1c1c1c1c-1c1c-1c1c-1c1c-1c1c1c1c1c1c","source":"test","event":{"job_hold_changed":{"job":"render-1","held":true}}}}
        {"seq":30,"time_ms":1700000000030,"subject":"gridfold.ev.op.job.hold","envelope":{"id":"1d1d1d1d-1d1d-1d1d-1d1d-1d1d1d1d1d1d","source":"test","event":{"job_hold_changed":{"job":"render-1","held":false}}}}
        {"seq":31,"time_ms":1700000000031,"subject":"gridfold.ev.op.job.task_cancelled","envelope":{"id":"1e1e1e1e-1e1e-1e1e-1e1e-1e1e1e1e1e1e","source":"test","event":{"task_cancelled":{"job":"render-1","task":3}}}}
        {"seq":32,"time_ms":1700000000032,"subject":"gridfold.ev.op.drain","envelope":{"id":"1f1f1f1f-1f1f-1f1f-1f1f-1f1f1f1f1f1f","source":"test","event":{"engine_drain_changed":{"engine":"e1","drained":true}}}}
        {"seq":33,"time_ms":1700000000033,"subject":"gridfold.ev.op.drain","envelope":{"id":"20202020-2020-2020-2020-202020202020","source":"test","event":{"engine_drain_changed":{"engine":"e1","drained":false}}}}
        {"seq":34,"time_ms":1700000000034,"subject":"gridfold.ev.op.job.project_priority","envelope":{"id":"21212121-2121-2121-2121-212121212121","source":"test","event":{"project_priority_changed":{"job":"render-1","priority":2}}}}
        {"seq":35,"time_ms":1700000000035,"subject":"gridfold.ev.op.job.project_priority","envelope":{"id":"22222222-2222-2222-2222-222222222222","source":"test","event":{"project_priority_changed":{"job":"render-1","priority":9}}}}
        {"seq":36,"time_ms":1700000000036,"subject":"gridfold.ev.orders","envelope":{"id":"23232323-2323-2323-2323-232323232323","source":"test","event":{"order_batch":{"based_on_seq":44,"algorithm":"sge-plain","algorithm_version":4,"orders":[{"suspend":{"task":{"job":"render-1","index":7},"attempt":1,"engine":"e1"}},{"resume":{"task":{"job":"render-1","index":7},"attempt":1,"engine":"e1"}},{"preempt":{"task":{"job":"render-1","index":0},"attempt":2,"engine":"e3"}},{"dispatch_parallel":{"task":{"job":"render-1","index":1},"attempt":1,"engine":"e2","epoch":7,"parts":[{"engine":"e1","epoch":5,"slots":2},{"engine":"e2","epoch":7,"slots":3}]}},{"end_test_campaign":{"job":"render-1","clusters":3}},{"flood_ratio":{"engine":"lyon","ratio_milli":2000,"waiting":3,"reason":"DOWN"}},{"requeue":{"task":{"job":"render-1","index":3},"attempt":1,"reason":"FLOOD_WITHDRAWN","engine":"lyon"}},{"flag_sink":{"job":"render-1","engine":"e2","cluster":"lyon","median_ms":40,"campaign_median_ms":60000}},{"flag_sink":{"job":"render-1","engine":"","cluster":"nancy","median_ms":8,"campaign_median_ms":60000}},{"undeliverable":{"task":{"job":"render-1","index":5},"attempt":1,"engine":"e1","bytes":120071,"max":65536}},{"reschedule":{"task":{"job":"render-1","index":2},"reason":"FINALIZE","elapsed_ms":9000,"limit_ms":0}}]}}}}
        {"seq":37,"time_ms":1700000000037,"subject":"gridfold.ev.engine.e1.reports","envelope":{"id":"24242424-2424-2424-2424-242424242424","source":"test","event":{"engine_reports":{"engine":"e1","reports":[{"id":"15151515-1515-1515-1515-151515151515","source":"engine:e1","event":{"task_started":{"task":{"job":"render-1","index":4},"attempt":1,"engine":"e1"}}},{"id":"16161616-1616-1616-1616-161616161616","source":"engine:e1","event":{"task_completed":{"task":{"job":"render-1","index":4},"attempt":1,"engine":"e1","exit_code":0,"cpu_ms":3,"wall_ms":4,"result":"ok"}}}]}}}}
        {"seq":99,"time_ms":1700000009999,"subject":"gridfold.ev.user.ann.job.submitted","raw_base64":"CgNhYmM=","undecodable":"id: not a UUID in its 36-character hyphenated form: \"abc\" has 3 bytes"}
    "#]].assert_eq(&written);
}

proptest! {
    #[test]
    fn export_then_parse_gives_the_same_entries(
        original in arb_envelope(),
        garbage in prop::collection::vec(any::<u8>(), 0..64),
        seq in 1u64..1 << 40,
        time_ms in any::<u64>(),
    ) {
        let subject = default_subject(&original.event);
        let messages = [(Seq(seq), subject.clone(), encode(&original)), (Seq(seq + 1), subject, garbage)];
        let mut text = String::new();
        for (seq, subject, bytes) in &messages {
            text.push_str(&write_history_line(*seq, time_ms, subject, bytes));
            text.push('\n');
        }
        let lines = parse_history(&text).unwrap();
        prop_assert_eq!(lines.len(), 2);
        for (line, (seq, subject, bytes)) in lines.iter().zip(&messages) {
            let from_log = entry_from_log(*seq, time_ms, subject, bytes);
            let from_history = line.to_entry();
            prop_assert_eq!(&from_history.stored, &from_log.stored);
            prop_assert_eq!(&from_history.origin, &from_log.origin);
            prop_assert_eq!(from_history.seq, from_log.seq);
            prop_assert_eq!(from_history.time_ms, from_log.time_ms);
            match (&from_history.payload, &from_log.payload) {
                (Payload::Event(a), Payload::Event(b)) => prop_assert_eq!(a, b),
                (Payload::Undecodable { detail: a }, Payload::Undecodable { detail: b }) => {
                    prop_assert_eq!(a, b)
                }
                (a, b) => prop_assert!(false, "{a:?} vs {b:?}"),
            }
        }
    }
}

#[test]
fn omitted_ids_are_derived_from_seq() {
    let text = r#"{"seq": 7, "time_ms": 0, "envelope": {"event": {"tick": {}}}}"#;
    let [line] = parse_history(text).unwrap().try_into().unwrap();
    let HistoryPayload::Envelope(envelope, _) = &line.payload else {
        unreachable!()
    };
    assert_eq!(envelope.id, history_event_id(Seq(7)));
    assert_eq!(envelope.source, "");
    assert_eq!(line.subject, "gridfold.ev.tick");
    let id = uuid::Uuid::from_bytes(history_event_id(Seq(7)));
    assert_eq!(id.get_version_num(), 8);
    assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
    expect!["e9f98113-249f-8cec-8044-6208d042703b"].assert_eq(&id.to_string());
    assert_ne!(history_event_id(Seq(7)), history_event_id(Seq(8)));
}

#[test]
fn task_lists_and_binary_results_read_as_written() {
    let text = r#"
{"seq": 1, "time_ms": 0, "envelope": {"event": {"job_submitted": {"id": "sweep", "tasks": {"list": [{"x": "1"}, {}, {"x": "3"}]}}}}}
{"seq": 2, "time_ms": 0, "envelope": {"event": {"task_completed": {"task": {"job": "sweep"}, "engine": "e1", "result": {"base64": "/wCA"}}}}}
{"seq": 3, "time_ms": 0, "envelope": {"event": {"task_failed": {"task": {"job": "sweep", "index": 2}, "engine": "e1", "kind": "FAILURE_KIND_WALL_TIME_EXCEEDED"}}}}
"#;
    let lines = parse_history(text).unwrap();
    let events: Vec<&Event> = lines
        .iter()
        .map(|line| match &line.payload {
            HistoryPayload::Envelope(envelope, _) => &envelope.event,
            HistoryPayload::Raw(_) => unreachable!(),
        })
        .collect();
    let Event::JobSubmitted(spec) = events[0] else {
        panic!()
    };
    let TaskSet::List(list) = &spec.tasks else {
        panic!()
    };
    assert_eq!(list.len(), 3);
    assert_eq!(list[2]["x"], "3");
    let Event::TaskCompleted { result, .. } = events[1] else {
        panic!()
    };
    assert_eq!(result, &[0xff, 0x00, 0x80]);
    assert!(matches!(
        events[2],
        Event::TaskFailed {
            exit_code: None,
            ..
        }
    ));
}

#[test]
fn a_raw_line_replays_as_undecodable_with_its_bytes() {
    let text = r#"{"seq": 4, "time_ms": 9, "subject": "gridfold.ev.engine.e1.completed", "raw_base64": "/wCA"}"#;
    let [line] = parse_history(text).unwrap().try_into().unwrap();
    let entry = line.to_entry();
    assert_eq!(entry.stored, [0xff, 0x00, 0x80]);
    assert!(matches!(entry.payload, Payload::Undecodable { .. }));
    assert_eq!(
        entry.origin,
        Origin::Engine(crate::wire::testing::engine("e1"))
    );
}

fn check_error(text: &str, expect: Expect) {
    let error = parse_history(text).unwrap_err();
    expect.assert_eq(&error.to_string());
}

#[test]
fn errors_say_the_line_and_what_is_wrong() {
    let tick = r#"{"seq": 1, "time_ms": 0, "envelope": {"event": {"tick": {}}}}"#;
    check_error(
        &format!("# comment\n\n{tick}\n{{\"seq\": 2,"),
        expect!["line 4: column 10: EOF while parsing a value"],
    );
    check_error(
        "{\"seq\": 1, \"time_ms\": 0, \"envelope\": {\"event\": {\"tick\": {}}}} x",
        expect!["line 1: column 63: trailing characters"],
    );
    check_error(
        r#"{"seq": 1, "envelope": {"event": {"tick": {}}}}"#,
        expect!["line 1: column 47: missing field `time_ms`"],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "envelop": {"event": {"tick": {}}}}"#,
        expect![
            "line 1: column 34: unknown field `envelop`, expected one of `seq`, `time_ms`, `subject`, `envelope`, `raw_base64`, `undecodable`"
        ],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "envelope": {"event": {"tick": {}}, "sauce": "me"}}"#,
        expect![
            "line 1: column 68: unknown field `sauce`, expected one of `id`, `source`, `seal`, `event`"
        ],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "envelope": {"event": {"task_complete": {}}}}"#,
        expect![
            "line 1: column 63: unknown variant `task_complete`, expected one of `job_submitted`, `job_cancelled`, `job_priority_changed`, `tasks_added`, `suspend_requested`, `resume_requested`, `reschedule_requested`, `job_hold_changed`, `task_cancelled`, `project_priority_changed`, `engine_logged_in`, `engine_logged_out`, `engine_heartbeat`, `library_synced`, `library_sync_failed`, `task_started`, `task_completed`, `task_failed`, `policy_set`, `blacklists_cleared`, `projector_key_registered`, `projector_key_revoked`, `job_override_tickets_set`, `engine_drain_changed`, `tick`, `order_batch`, `library_published`, `engine_reports`"
        ],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "envelope": {"event": {"task_failed": {"kind": "OOM"}}}}"#,
        expect![[r#"line 1: column 77: unknown FailureKind "OOM", expected one of NON_ZERO_EXIT, SIGNALLED, WALL_TIME_EXCEEDED, LAUNCH_FAILED, ENGINE_SHUTDOWN, PREEMPTED, UNDELIVERABLE"#]],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "envelope": {"event": {"task_started": {"task": {"job": "j/1"}, "engine": "e1"}}}}"#,
        expect![
            "line 1: envelope.event.task_started.task.job: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found '/' at byte 1"
        ],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "envelope": {"id": "nope", "event": {"tick": {}}}}"#,
        expect![[
            r#"line 1: envelope.id: not a UUID in its 36-character hyphenated form: "nope" has 4 bytes"#
        ]],
    );
    check_error(
        &format!("{tick}\n{tick}"),
        expect!["line 2: seq 1 does not follow seq 1: seqs must strictly increase"],
    );
    check_error(
        r#"{"seq": 0, "time_ms": 0, "envelope": {"event": {"tick": {}}}}"#,
        expect!["line 1: seq 0: log sequences start at 1"],
    );
    check_error(
        r#"{"seq": -1, "time_ms": 0, "envelope": {"event": {"tick": {}}}}"#,
        expect!["line 1: column 10: invalid value: integer `-1`, expected u64"],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0}"#,
        expect!["line 1: a line needs an envelope or raw_base64"],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "envelope": {"event": {"tick": {}}}, "raw_base64": ""}"#,
        expect!["line 1: give envelope or raw_base64, not both"],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "raw_base64": "AAAA"}"#,
        expect!["line 1: subject is required with raw_base64: it cannot be derived from raw bytes"],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "subject": "gridfold.ev.tick", "raw_base64": "A==="}"#,
        expect!["line 1: raw_base64: bad base64: Invalid symbol 61, offset 1."],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "subject": "other.tick", "envelope": {"event": {"tick": {}}}}"#,
        expect![[r#"line 1: subject "other.tick" is not under gridfold.ev."#]],
    );
    check_error(
        r#"{"seq": 1, "time_ms": 0, "subject": "gridfold.ev.engine.*.login", "envelope": {"event": {"tick": {}}}}"#,
        expect![[r#"line 1: subject "gridfold.ev.engine.*.login" holds a wildcard or whitespace"#]],
    );
    // A byte-order mark, CRLF line ends and indented comments are fine; the
    // line numbers still count every line.
    check_error(
        &format!("\u{feff}{tick}\n\r\n  # indented comment\r\n{tick}"),
        expect!["line 4: seq 1 does not follow seq 1: seqs must strictly increase"],
    );
    check_error(
        "[1, 2]",
        expect![[r#"line 1: a line is a JSON object, {"seq": ..., ...}, or a # comment"#]],
    );
}

#[test]
fn reading_a_file_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foo.jsonl");
    std::fs::write(
        &path,
        format!("{EXAMPLES}{{\"seq\": 9, \"time_ms\": 0, \"envelope\": {{}}}}\n"),
    )
    .unwrap();
    let error = read_history_file(&path).unwrap_err().to_string();
    let shown = error.replace(&dir.path().display().to_string(), "DIR");
    expect!["DIR/foo.jsonl:8: envelope.event: missing, or a kind this version does not know; expected one of job_submitted, job_cancelled, job_priority_changed, tasks_added, engine_logged_in, engine_logged_out, engine_heartbeat, library_synced, library_sync_failed, task_started, task_completed, task_failed, policy_set, blacklists_cleared, tick, order_batch, library_published, projector_key_registered, projector_key_revoked, suspend_requested, resume_requested, reschedule_requested, job_override_tickets_set, job_hold_changed, task_cancelled, engine_drain_changed, project_priority_changed, engine_reports"].assert_eq(&shown);

    std::fs::write(&path, EXAMPLES).unwrap();
    assert_eq!(read_history_file(&path).unwrap().len(), 4);

    let missing = read_history_file(dir.path().join("absent.jsonl"))
        .unwrap_err()
        .to_string();
    expect!["DIR/absent.jsonl: No such file or directory (os error 2)"]
        .assert_eq(&missing.replace(&dir.path().display().to_string(), "DIR"));
}
