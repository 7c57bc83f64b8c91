use expect_test::{Expect, expect};
use proptest::prelude::*;
use prost::Message as _;

use super::testing::{
    EVENT_VARIANTS, ORDER_VARIANTS, arb_envelope, envelope, event_variant_idx, every_event,
    order_variant_idx,
};
use super::*;
use crate::core::event::{Event, Origin};

/// What an entry must satisfy whatever bytes it came from.
fn assert_entry_invariants(entry: &Entry, bytes: &[u8]) {
    match &entry.payload {
        Payload::Event(envelope) => {
            assert_eq!(entry.stored, bytes, "the stored bytes are kept as they are");
            assert_eq!(decode(&entry.stored).as_ref(), Ok(envelope), "the stored bytes decode to the payload");
        }
        Payload::Undecodable { detail } => {
            assert_eq!(entry.stored, bytes, "undecodable bytes are kept as they are");
            assert!(!detail.is_empty());
        }
    }
}

#[test]
fn the_fixtures_hold_every_event_and_order_variant() {
    let events = every_event();
    let mut seen_events = [false; EVENT_VARIANTS];
    let mut seen_orders = [false; ORDER_VARIANTS];
    for event in &events {
        seen_events[event_variant_idx(event)] = true;
        if let Event::OrderBatch(batch) = event {
            for order in &batch.orders {
                seen_orders[order_variant_idx(order)] = true;
            }
        }
    }
    assert!(seen_events.iter().all(|seen| *seen), "{seen_events:?}");
    assert!(seen_orders.iter().all(|seen| *seen), "{seen_orders:?}");
}

#[test]
fn every_variant_round_trips_through_bytes_and_json() {
    for (idx, event) in every_event().into_iter().enumerate() {
        let original = envelope(idx as u8, event);
        let bytes = encode(&original);
        assert_eq!(decode(&bytes), Ok(original.clone()));

        let as_proto = proto::Envelope::decode(bytes.as_slice()).unwrap();
        let json = serde_json::to_string(&as_proto).unwrap();
        let from_json: proto::Envelope = serde_json::from_str(&json).unwrap();
        assert_eq!(from_json, as_proto, "{json}");
        assert_eq!(envelope_from_proto(from_json), Ok(original.clone()));

        let entry = entry_from_log(Seq(1), 0, &subject_for(&original.event), &bytes);
        assert_eq!(entry.stored, bytes, "the stored bytes are kept");
        assert_entry_invariants(&entry, &bytes);
    }
}

proptest! {
    #[test]
    fn any_envelope_round_trips(original in arb_envelope()) {
        let bytes = encode(&original);
        prop_assert_eq!(decode(&bytes), Ok(original.clone()));
        let json = serde_json::to_string(&envelope_to_proto(&original)).unwrap();
        let from_json: proto::Envelope = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(envelope_from_proto(from_json), Ok(original));
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let entry = entry_from_log(Seq(1), 0, "gridfold.ev.job.submitted", &bytes);
        assert_entry_invariants(&entry, &bytes);
    }

    #[test]
    fn damaged_envelopes_never_panic(
        original in arb_envelope(),
        position in any::<prop::sample::Index>(),
        xor in 1u8..,
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = encode(&original);
        let at = position.index(bytes.len());
        bytes[at] ^= xor;
        let entry = entry_from_log(Seq(1), 0, "gridfold.ev.tick", &bytes);
        assert_entry_invariants(&entry, &bytes);
        let truncated = &bytes[..cut.index(bytes.len())];
        let entry = entry_from_log(Seq(2), 0, "gridfold.ev.tick", truncated);
        assert_entry_invariants(&entry, truncated);
    }
}

#[test]
fn publishers_that_encode_differently_digest_alike() {
    let id = "6f1d2c3b-4a59-4687-9a1b-2c3d4e5f6071";
    let props = |os: &str, key: &str| proto::EngineProperties {
        os: os.to_string(),
        custom: [(key.to_string(), "1".to_string())].into(),
        ..Default::default()
    };
    let login = |props| proto::Envelope {
        event: Some(proto::envelope::Event::EngineLoggedIn(
            proto::EngineLoggedIn {
                engine: "e1".to_string(),
                slots: 4,
                props: Some(props),
            },
        )),
        ..Default::default()
    };
    // Fields out of number order, a nested message given twice (protobuf merges
    // them, map entries out of key order), a field given twice (the last wins),
    // and a field this version does not know.
    let mut odd = Vec::new();
    odd.extend(login(props("", "zone")).encode_to_vec());
    odd.extend(login(props("linux", "arch")).encode_to_vec());
    odd.extend(
        proto::Envelope {
            source: "x".into(),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    odd.extend(
        proto::Envelope {
            id: "not this one".into(),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    odd.extend(
        proto::Envelope {
            id: id.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    prost::encoding::uint64::encode(99, &7, &mut odd);

    let decoded = decode(&odd).unwrap();
    let Event::EngineLoggedIn { props, .. } = &decoded.event else {
        panic!("{decoded:?}")
    };
    assert_eq!(props.os, "linux");
    assert_eq!(props.custom.keys().collect::<Vec<_>>(), ["arch", "zone"]);

    // The chain covers the bytes as stored, not this build's re-encoding of them:
    // the odd encoding and the canonical one are different links.
    let entry = entry_from_log(Seq(1), 0, "gridfold.ev.engine.e1.login", &odd);
    assert_eq!(entry.stored, odd);
    let canonical = entry_from_log(Seq(1), 0, "gridfold.ev.engine.e1.login", &encode(&decoded));
    assert_eq!(canonical.payload_event(), entry.payload_event());
    let start = crate::core::digest::Digest::default();
    assert_ne!(
        start.chain(1, 0, &entry.subject, &entry.stored),
        start.chain(1, 0, &canonical.subject, &canonical.stored)
    );
}

/// Decodes the envelope written as JSON (the history form) after a trip
/// through protobuf bytes, and shows the error.
fn check_error(envelope_json: &str, expect: Expect) {
    let envelope: proto::Envelope = serde_json::from_str(envelope_json).unwrap();
    let error = decode(&envelope.encode_to_vec()).unwrap_err();
    expect.assert_eq(&error.to_string());
}

const ID: &str = r#""id": "6f1d2c3b-4a59-4687-9a1b-2c3d4e5f6071""#;

#[test]
fn decoding_errors_name_the_field() {
    check_error(
        r#"{"id": "6f1d2c3b", "event": {"tick": {}}}"#,
        expect![[r#"id: not a UUID in its 36-character hyphenated form: "6f1d2c3b" has 8 bytes"#]],
    );
    check_error(
        r#"{"id": "6f1d2c3b-4a59-4687-9a1b-2c3d4e5f607z", "event": {"tick": {}}}"#,
        expect![[
            r#"id: not a UUID in its 36-character hyphenated form: "6f1d2c3b-4a59-4687-9a1b-2c3d4e5f607z": invalid character: found `z` at 35"#
        ]],
    );
    check_error(
        r#"{"id": "{6f1d2c3b-4a59-4687-9a1b-2c3d4e5f60}", "event": {"tick": {}}}"#,
        expect![[
            r#"id: not a UUID in its 36-character hyphenated form: "{6f1d2c3b-4a59-4687-9a1b-2c3d4e5f60}": invalid character: found `{` at 0"#
        ]],
    );
    check_error(
        &format!(r#"{{{ID}}}"#),
        expect!["event: missing, or a kind this version does not know; expected one of job_submitted, job_cancelled, job_priority_changed, tasks_added, engine_logged_in, engine_logged_out, engine_heartbeat, library_synced, library_sync_failed, task_started, task_completed, task_failed, policy_set, blacklists_cleared, tick, order_batch, library_published, projector_key_registered, projector_key_revoked, suspend_requested, resume_requested, reschedule_requested, job_override_tickets_set, job_hold_changed, task_cancelled, engine_drain_changed, project_priority_changed, engine_reports"],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"job_submitted": {{"id": "j1"}}}}}}"#),
        expect![[
            r#"event.job_submitted.tasks: missing, or a kind this version does not know; expected one of count, list"#
        ]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"job_submitted": {{"id": "j 1", "tasks": {{"count": 1}}}}}}}}"#
        ),
        expect!["event.job_submitted.id: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found ' ' at byte 1"],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"job_cancelled": {{}}}}}}"#),
        expect![[r#"event.job_cancelled.job: an id may not be empty"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"engine_logged_in": {{"engine": "{}"}}}}}}"#,
            "e".repeat(65)
        ),
        expect![[r#"event.engine_logged_in.engine: an id is at most 64 bytes, this one has 65"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"task_started": {{"engine": "e1"}}}}}}"#),
        expect![[r#"event.task_started.task.job: an id may not be empty"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"task_failed": {{"task": {{"job": "j"}}, "engine": "e1"}}}}}}"#
        ),
        expect![[
            r#"event.task_failed.kind: must be set: FailureKind 0 (UNSPECIFIED) is not a value"#
        ]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"task_failed": {{"task": {{"job": "j"}}, "engine": "e1", "kind": 17}}}}}}"#
        ),
        expect![[r#"event.task_failed.kind: FailureKind value 17 is unknown to this version"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"policy_set": {{"algorithm": "fair-share"}}}}}}"#),
        expect![[r#"event.policy_set.algorithm: unknown algorithm "fair-share"; known: sge-plain, sgeee, techila, fbsng, cigri"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"order_batch": {{"orders": [
                {{"dispatch": {{"task": {{"job": "j"}}, "engine": "e1"}}}},
                {{"cancel": {{"task": {{"job": "j"}}, "engine": "e1", "reason": "JOB_CANCELLED"}}}},
                {{"requeue": {{"task": {{"job": "j"}}, "reason": 0}}}}
            ]}}}}}}"#
        ),
        expect![[
            r#"event.order_batch.orders[2].requeue.reason: must be set: RequeueReason 0 (UNSPECIFIED) is not a value"#
        ]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"order_batch": {{"orders": [null]}}}}}}"#),
        expect!["event.order_batch.orders[0]: missing, or a kind this version does not know; expected one of dispatch, cancel, engine_lost, requeue, mark_unschedulable, sync_library, blacklist, reschedule, fail_dependent, suspend, resume, preempt, dispatch_parallel, end_test_campaign, flood_ratio, flag_sink"],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"order_batch": {{"orders": [{{"mark_unschedulable": {{"job": "j", "reason": 9}}}}]}}}}}}"#
        ),
        expect![[
            r#"event.order_batch.orders[0].mark_unschedulable.reason: Unschedulable value 9 is unknown to this version"#
        ]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"order_batch": {{"orders": [{{"engine_lost": {{}}}}]}}}}}}"#
        ),
        expect![[r#"event.order_batch.orders[0].engine_lost.engine: an id may not be empty"#]],
    );
}

#[test]
fn decoding_errors_in_job_options_libraries_and_tiers_name_the_field() {
    // A job's labels are bounded: a megabyte queue name is refused at decode.
    let long = "q".repeat(super::convert::JOB_LABEL_BYTES_MAX + 1);
    for field in ["owner", "project", "queue"] {
        let envelope = format!(r#"{{{ID}, "event": {{"job_submitted": {{"id": "j", "tasks": {{"count": 1}}, "{field}": "{long}"}}}}}}"#);
        let envelope: proto::Envelope = serde_json::from_str(&envelope).unwrap();
        let error = decode(&envelope.encode_to_vec()).unwrap_err().to_string();
        assert_eq!(error, format!("event.job_submitted.{field}: 257 bytes, more than 256"));
    }
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"job_submitted": {{"id": "j", "tasks": {{"count": 1}}, "options": {{"root_library": {{"name": "lib"}}}}}}}}}}"#
        ),
        expect![[r#"event.job_submitted.options.root_library.version: an id may not be empty"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"job_submitted": {{"id": "j", "tasks": {{"count": 1}}, "options": {{"depends_on_jobs": ["a", "b c"]}}}}}}}}"#
        ),
        expect![[r#"event.job_submitted.options.depends_on_jobs[1]: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found ' ' at byte 1"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"job_submitted": {{"id": "j", "tasks": {{"count": 9}}, "task_conditions": {{"3": {{"depends_on": [{{"job": "a"}}, {{}}]}}}}}}}}}}"#
        ),
        expect![[r#"event.job_submitted.task_conditions[3].depends_on[1].job: an id may not be empty"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"tasks_added": {{"job": "j", "tasks": [{{}}], "conditions": {{"0": {{"depends_on": [{{"job": ".."}}]}}}}}}}}}}"#
        ),
        expect![[r#"event.tasks_added.conditions[0].depends_on[0].job: an id may not be made only of dots"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"engine_logged_in": {{"engine": "e1", "props": {{"libraries": [{{"name": "a", "version": "1"}}, {{"name": "a/b", "version": "1"}}]}}}}}}}}"#
        ),
        expect![[r#"event.engine_logged_in.props.libraries[1].name: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found '/' at byte 1"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"library_synced": {{"engine": "e1"}}}}}}"#),
        expect![[r#"event.library_synced.library.name: an id may not be empty"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"library_published": {{"library": {{"name": "lib", "version": "{}"}}}}}}}}"#, "9".repeat(65)),
        expect![[r#"event.library_published.library.version: an id is at most 64 bytes, this one has 65"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"blacklists_cleared": {{"engine": "e.1"}}}}}}"#),
        expect![[r#"event.blacklists_cleared.engine: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found '.' at byte 1"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"policy_set": {{"algorithm": "sge-plain", "engine_tiers": ["type=blade", "blade"]}}}}}}"#
        ),
        expect![[r#"event.policy_set.engine_tiers[1]: engine tier "blade" is not written property=value"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"order_batch": {{"orders": [
                {{"sync_library": {{"engine": "e1", "library": {{"name": "lib", "version": "1"}}}}}},
                {{"blacklist": {{"job": "j", "engine": "e1", "failures": 1}}}},
                {{"reschedule": {{"task": {{"job": "j"}}}}}}
            ]}}}}}}"#
        ),
        expect![[r#"event.order_batch.orders[2].reschedule.reason: must be set: RescheduleReason 0 (UNSPECIFIED) is not a value"#]],
    );
    check_error(
        &format!(
            r#"{{{ID}, "event": {{"order_batch": {{"orders": [{{"fail_dependent": {{"task": 3, "dependency": "k"}}}}]}}}}}}"#
        ),
        expect![[r#"event.order_batch.orders[0].fail_dependent.job: an id may not be empty"#]],
    );
}

#[test]
fn engine_tiers_are_property_equals_value() {
    let check = |tier: &str| match check_engine_tier(tier) {
        Ok(()) => "ok".to_string(),
        Err(problem) => problem.to_string(),
    };
    let shown: Vec<String> = ["type=blade", "site=", "x.y-z_1=a=b", "=blade", "blade", "1type=a", "ty pe=a"]
        .iter()
        .map(|tier| format!("{tier:<12} {}", check(tier)))
        .collect();
    expect![[r#"
        type=blade   ok
        site=        ok
        x.y-z_1=a=b  ok
        =blade       engine tier "=blade" has an empty property name
        blade        engine tier "blade" is not written property=value
        1type=a      engine tier "1type=a": a property name is a letter or '_' and then letters, digits, '_', '.' or '-'; found '1' at byte 0
        ty pe=a      engine tier "ty pe=a": a property name is a letter or '_' and then letters, digits, '_', '.' or '-'; found ' ' at byte 2"#]].assert_eq(&shown.join("\n"));
}

/// Events that do not use what was added later encode exactly as they did
/// before it existed, so old logs keep their digests; an old PolicySet reads as
/// no tiers, no greylist affinity and a redundancy policy of zeros.
#[test]
fn what_was_added_later_is_absent_when_unused() {
    let job = envelope(1, every_event().remove(0));
    let Event::JobSubmitted(spec) = &job.event else { panic!() };
    assert!(spec.options == Default::default() && spec.task_conditions.is_empty());
    let proto::envelope::Event::JobSubmitted(submitted) = envelope_to_proto(&job).event.unwrap() else { panic!() };
    assert_eq!((submitted.options, submitted.task_conditions.len()), (None, 0));

    let old_policy: proto::Envelope = serde_json::from_str(&format!(
        r#"{{{ID}, "event": {{"policy_set": {{"algorithm": "sge-plain", "engine_timeout_ms": 30000, "load_formula": {{"slots_weight": 1}}}}}}}}"#
    ))
    .unwrap();
    let bytes = old_policy.encode_to_vec();
    let decoded = decode(&bytes).unwrap();
    let Event::PolicySet(policy) = &decoded.event else { panic!() };
    assert!(policy.engine_tiers.is_empty());
    assert_eq!(policy.greylist_affinity, 0);
    assert_eq!(policy.redundancy, super::testing::zero_redundancy());
    assert_eq!(encode(&decoded), bytes, "re-encoded exactly as written");
}

#[test]
fn bytes_that_are_not_an_envelope_say_so() {
    let check = |bytes: &[u8], expect: Expect| {
        let entry = entry_from_log(Seq(3), 0, "gridfold.ev.job.submitted", bytes);
        let Payload::Undecodable { detail } = &entry.payload else {
            panic!("{entry:?}")
        };
        expect.assert_eq(detail);
    };
    check(
        b"\xff",
        expect![[
            r#"not a gridfold.v1.Envelope: failed to decode Protobuf message: invalid varint"#
        ]],
    );
    check(
        b"{\"json\": 1}",
        expect!["not a gridfold.v1.Envelope: failed to decode Protobuf message: Envelope.event: invalid wire type: StartGroup (expected LengthDelimited)"],
    );
    check(
        b"",
        expect![[r#"id: not a UUID in its 36-character hyphenated form: "" has 0 bytes"#]],
    );
    // A string field holding bytes that are not UTF-8.
    check(
        b"\x12\x01\xff",
        expect![[
            r#"not a gridfold.v1.Envelope: failed to decode Protobuf message: Envelope.source: invalid string value: data is not UTF-8 encoded"#
        ]],
    );
}

#[test]
fn long_bad_input_is_echoed_briefly() {
    let long = format!(
        r#"{{"id": "{}", "event": {{"tick": {{}}}}}}"#,
        "x".repeat(10_000)
    );
    check_error(
        &long,
        expect![[
            r#"id: not a UUID in its 36-character hyphenated form: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"… has 10000 bytes"#
        ]],
    );
}

#[test]
fn every_event_has_its_subject_and_engine_events_their_engine() {
    let mut shown = String::new();
    for event in every_event() {
        let subject = subject_for(&event);
        let origin = origin_of(&subject);
        match event.reporting_engine() {
            Some(engine) => assert_eq!(origin, Origin::Engine(engine.clone()), "{subject}"),
            None => assert!(!matches!(origin, Origin::Engine(_)), "{subject}"),
        }
        shown.push_str(&format!(
            "{:<20} {subject:<36} {origin:?}\n",
            event.kind_name()
        ));
    }
    expect![[r#"
        JobSubmitted         gridfold.ev.job.submitted            Client
        JobSubmitted         gridfold.ev.job.submitted            Client
        JobCancelled         gridfold.ev.job.cancelled            Client
        JobPriorityChanged   gridfold.ev.job.priority             Client
        JobOverrideTicketsSet gridfold.ev.override.job             Client
        EngineLoggedIn       gridfold.ev.engine.e1.login          Engine(EngineId("e1"))
        EngineLoggedOut      gridfold.ev.engine.e1.logout         Engine(EngineId("e1"))
        EngineHeartbeat      gridfold.ev.engine.e1.heartbeat      Engine(EngineId("e1"))
        TaskStarted          gridfold.ev.engine.e1.started        Engine(EngineId("e1"))
        TaskCompleted        gridfold.ev.engine.e1.completed      Engine(EngineId("e1"))
        TaskCompleted        gridfold.ev.engine.e_2.completed     Engine(EngineId("e_2"))
        TaskFailed           gridfold.ev.engine.e1.failed         Engine(EngineId("e1"))
        TaskFailed           gridfold.ev.engine.e1.failed         Engine(EngineId("e1"))
        PolicySet            gridfold.ev.policy                   Client
        Tick                 gridfold.ev.tick                     Ticker
        OrderBatch           gridfold.ev.orders                   Projector
        OrderBatch           gridfold.ev.orders                   Projector
        TasksAdded           gridfold.ev.job.tasks_added          Client
        LibraryPublished     gridfold.ev.library.published        Client
        LibrarySynced        gridfold.ev.engine.e1.library_synced Engine(EngineId("e1"))
        LibrarySyncFailed    gridfold.ev.engine.e1.library_sync_failed Engine(EngineId("e1"))
        BlacklistsCleared    gridfold.ev.blacklists.cleared       Client
        BlacklistsCleared    gridfold.ev.blacklists.cleared       Client
        ProjectorKeyRegistered gridfold.ev.op.keys                  Operator
        ProjectorKeyRevoked  gridfold.ev.op.keys                  Operator
        SuspendRequested     gridfold.ev.job.suspend              Client
        ResumeRequested      gridfold.ev.job.resume               Client
        RescheduleRequested  gridfold.ev.job.reschedule           Client
        JobHoldChanged       gridfold.ev.job.hold                 Client
        JobHoldChanged       gridfold.ev.job.hold                 Client
        TaskCancelled        gridfold.ev.job.task_cancelled       Client
        EngineDrainChanged   gridfold.ev.drain.changed            Client
        EngineDrainChanged   gridfold.ev.drain.changed            Client
        ProjectPriorityChanged gridfold.ev.job.project_priority     Client
        ProjectPriorityChanged gridfold.ev.job.project_priority     Client
        OrderBatch           gridfold.ev.orders                   Projector
        EngineReports        gridfold.ev.engine.e1.reports        Engine(EngineId("e1"))
    "#]]
    .assert_eq(&shown);
}

#[test]
fn a_grid_engine_policy_over_its_limits_does_not_decode_and_says_where() {
    let policy = |sge: &str| format!(r#"{{{ID}, "event": {{"policy_set": {{"algorithm": "sgeee", "sge": {sge}}}}}}}"#);
    check_error(
        &policy(r#"{"share_tree": [{"name": "a", "shares": 1}, {"name": "b", "parent": 1, "shares": 1}]}"#),
        expect![[r#"event.policy_set.sge.share_tree[1].parent: parent 1 is not an earlier node"#]],
    );
    check_error(
        &policy(r#"{"share_tree": [{"name": "a", "shares": 1, "leaf": {"user": "ann"}}, {"name": "b", "parent": 0, "shares": 1}]}"#),
        expect![[r#"event.policy_set.sge.share_tree[1].parent: parent 0 is a leaf"#]],
    );
    check_error(
        &policy(r#"{"share_tree": [{"name": "a", "shares": 1000001}]}"#),
        expect![[r#"event.policy_set.sge.share_tree[0].shares: 1000001 shares, more than 1000000"#]],
    );
    check_error(
        &policy(r#"{"share_tree": [{"name": "a", "shares": 1, "leaf": {"user": "ann"}}, {"name": "b", "shares": 1, "leaf": {"user": "ann"}}]}"#),
        expect![[r#"event.policy_set.sge.share_tree[1].leaf: names a user or project another leaf names"#]],
    );
    check_error(
        &policy(r#"{"functional_users": [{"name": "ann", "amount": 1}, {"name": "ann", "amount": 2}]}"#),
        expect![[r#"event.policy_set.sge.functional_users[1].name: a name listed twice"#]],
    );
    check_error(
        &policy(&format!(r#"{{"override_users": [{{"name": "{}", "amount": 1}}]}}"#, "x".repeat(257))),
        expect![[r#"event.policy_set.sge.override_users[0].name: a name of 1 to 256 bytes, not 257"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"job_submitted": {{"id": "j", "tasks": {{"count": 1}}, "options": {{"job_share": 4294967295}}}}}}}}"#),
        expect![[r#"event.job_submitted.options.job_share: 4294967295 shares, more than 1000000"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"job_submitted": {{"id": "j", "tasks": {{"count": 1}}, "options": {{"project_priority": 8}}}}}}}}"#),
        expect!["event.job_submitted.options.project_priority: 8, not within 1..=7"],
    );
    let techila = |techila: &str| format!(r#"{{{ID}, "event": {{"policy_set": {{"algorithm": "techila", "techila": {techila}}}}}}}"#);
    check_error(&techila(r#"{"user_priorities": [{"name": "ann", "amount": 9}]}"#), expect!["event.policy_set.techila.user_priorities: user ann: priority 9, not within 1..=7"]);
    check_error(
        &techila(r#"{"user_priorities": [{"name": "ann", "amount": 1}, {"name": "ann", "amount": 2}]}"#),
        expect!["event.policy_set.techila.user_priorities[1].name: a name listed twice"],
    );
    let too_many: Vec<String> = (0..10_001).map(|n| format!(r#"{{"name": "n{n}", "shares": 1}}"#)).collect();
    check_error(
        &policy(&format!(r#"{{"share_tree": [{}]}}"#, too_many.join(", "))),
        expect![[r#"event.policy_set.sge.share_tree: 10001 entries, more than 10000"#]],
    );
}

/// Grid Engine's resource side: a heartbeat's named load values, a policy's
/// load formula and queue sort method, and an engine's `seq_no` are held to
/// their limits at the wire: too many, too long, out of range, malformed.
#[test]
fn load_values_formulas_and_seq_no_beyond_their_limits_do_not_decode() {
    let heartbeat = |values: &str| {
        format!(r#"{{{ID}, "event": {{"engine_heartbeat": {{"engine": "e1", "load": {{"values_milli": {values}}}}}}}}}"#)
    };
    let too_many: Vec<String> = (0..65).map(|i| format!(r#""v{i}": 1"#)).collect();
    check_error(&heartbeat(&format!("{{{}}}", too_many.join(","))), expect!["event.engine_heartbeat.load.values_milli: more than 64 load values"]);
    check_error(
        &heartbeat(&format!(r#"{{"{}": 1}}"#, "n".repeat(65))),
        expect!["event.engine_heartbeat.load.values_milli: a load value name is empty, longer than 64 bytes or not [A-Za-z_][A-Za-z0-9_]*"],
    );
    check_error(
        &heartbeat(r#"{"mem used": 1}"#),
        expect!["event.engine_heartbeat.load.values_milli: a load value name is empty, longer than 64 bytes or not [A-Za-z_][A-Za-z0-9_]*"],
    );
    check_error(
        &heartbeat(r#"{"mem_used": -9223372036854775808}"#),
        expect!["event.engine_heartbeat.load.values_milli: load value mem_used is -9223372036854775808 milli, beyond 1000000000000000000 in magnitude"],
    );
    let policy = |extra: &str| {
        format!(r#"{{{ID}, "event": {{"policy_set": {{"algorithm": "sge-plain", "engine_timeout_ms": 30000, {extra}}}}}}}"#)
    };
    check_error(
        &policy(r#""load_formula": {"expression": "np_load_avg +"}"#),
        expect!["event.policy_set.load_formula.expression: the load formula is not Grid Engine's `w | name [* w]` terms joined by + or - at byte 13: expected a weight or a load value name"],
    );
    check_error(
        &policy(&format!(r#""load_formula": {{"expression": "{}"}}"#, "a+".repeat(600))),
        expect!["event.policy_set.load_formula.expression: the load formula is 1200 bytes long; at most 1024"],
    );
    check_error(
        &policy(r#""queue_sort_method": "fastest""#),
        expect![[r#"event.policy_set.queue_sort_method: unknown queue_sort_method "fastest"; known: load, seqno"#]],
    );
    check_error(
        &format!(r#"{{{ID}, "event": {{"engine_logged_in": {{"engine": "e1", "slots": 1, "props": {{"custom": {{"seq_no": "-1"}}}}}}}}}}"#),
        expect!["event.engine_logged_in.props.custom.seq_no: seq_no must be an integer from 0 to 9999999"],
    );
    // Within the limits, all of them decode, and the formula is kept canonical.
    let decoded = decode(
        &serde_json::from_str::<proto::Envelope>(&policy(r#""load_formula": {"expression": "np_load_avg+0.5*mem_used"}, "queue_sort_method": "seqno""#))
            .unwrap()
            .encode_to_vec(),
    )
    .unwrap();
    let Event::PolicySet(decoded) = decoded.event else { panic!("a policy") };
    assert_eq!(
        (decoded.load_formula.expression.to_string(), decoded.queue_sort_method),
        ("np_load_avg + mem_used*0.5".to_string(), crate::core::event::QueueSort::Seqno)
    );
}

#[test]
fn an_engine_batch_beyond_its_limits_or_nested_does_not_decode_and_says_where() {
    let report = |n: u32| proto::Envelope {
        id: uuid::Uuid::from_bytes([n as u8; 16]).hyphenated().to_string(),
        source: String::new(),
        event: Some(proto::envelope::Event::TaskStarted(proto::TaskStarted {
            task: Some(proto::TaskRef { job: "j".into(), index: n }),
            attempt: 1,
            engine: "e1".into(),
            remote_job: String::new(),
        })),
        seal: None,
    };
    let batch = |reports: Vec<proto::Envelope>| proto::Envelope {
        id: uuid::Uuid::from_bytes([9; 16]).hyphenated().to_string(),
        source: "engine:e1".into(),
        event: Some(proto::envelope::Event::EngineReports(proto::EngineReports { engine: "e1".into(), reports })),
        seal: None,
    };
    let limit = crate::core::event::REPORTS_PER_BATCH_MAX as u32;
    let full = batch((0..limit).map(report).collect());
    let Ok(Envelope { event: Event::EngineReports { reports, .. }, .. }) = decode(&full.encode_to_vec()) else {
        panic!("a batch of {limit} reports decodes")
    };
    assert_eq!(reports.len(), limit as usize);
    let over = batch((0..=limit).map(report).collect());
    assert_eq!(
        decode(&over.encode_to_vec()).unwrap_err().to_string(),
        "event.engine_reports.reports: 257 reports, more than 256"
    );
    // A batch inside a batch, however deep, fails at the first level.
    let mut nested = batch(vec![report(1)]);
    for _ in 0..20 {
        nested = batch(vec![report(2), nested]);
    }
    assert_eq!(
        decode(&nested.encode_to_vec()).unwrap_err().to_string(),
        "event.engine_reports.reports[1].event: a batch inside a batch"
    );
    // A report that is wrong is named by its place.
    let mut bad = report(3);
    bad.id = "nope".into();
    assert_eq!(
        decode(&batch(vec![report(1), bad]).encode_to_vec()).unwrap_err().to_string(),
        r#"event.engine_reports.reports[1].id: not a UUID in its 36-character hyphenated form: "nope" has 4 bytes"#
    );
}
