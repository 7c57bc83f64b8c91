//! The predictor and the sink rule over a campaign run to its end, with
//! durations per engine: tasks start when dispatched and succeed after their
//! engine's duration (log time).

use super::*;
use crate::core::family::cigri::predictor::predict;
use crate::core::family::cigri::sink::{SinkTarget, SINK_TASKS_MIN};

/// A live attempt in the little simulation: when it ends, and where.
struct Running {
    end_ms: u64,
    job: String,
    index: u32,
    attempt: u32,
    engine: String,
}

/// What a run of [`run_to_end`] saw.
struct Run {
    /// ETA (from the campaign's prediction) when 25, 50 and 75 % of its tasks had succeeded.
    etas: Vec<u64>,
    /// Log time of the last success.
    end_ms: u64,
    /// Every order published, in order.
    orders: Vec<Order>,
    state: State,
}

/// Runs every campaign to its end: each dispatch starts at once and succeeds
/// after `duration_ms(engine)`. The ETAs are of job `watched`, of `n_tasks`.
fn run_to_end(log: &mut LogBuilder, duration_ms: impl Fn(&str) -> u64, watched: &str, n_tasks: u32) -> Run {
    let mut state = State::new();
    let mut now = 1_000_000;
    let mut running: Vec<Running> = Vec::new();
    let mut run = Run { etas: Vec::new(), end_ms: 0, orders: Vec::new(), state: State::new() };
    for _ in 0..100_000 {
        log.at(now);
        let orders = decide_and_fold(log, &mut state);
        for order in &orders {
            if let Order::Dispatch { task, attempt, engine, .. } = order {
                log.started(task.job.as_str(), task.index, *attempt, engine.as_str());
                running.push(Running {
                    end_ms: now + duration_ms(engine.as_str()),
                    job: task.job.to_string(),
                    index: task.index,
                    attempt: *attempt,
                    engine: engine.to_string(),
                });
            }
        }
        run.orders.extend(orders);
        running.sort_by_key(|r| std::cmp::Reverse((r.end_ms, r.engine.clone())));
        let Some(next) = running.pop() else { break };
        now = next.end_ms;
        log.at(now).completed(&next.job, next.index, next.attempt, &next.engine);
        fold_all(log, &mut state);
        let j = state.job_idx(&job_id(watched)).expect("the watched campaign is held");
        let done = state.job(j).counts.done;
        run.end_ms = now;
        if run.etas.len() < 3 && done * 4 >= n_tasks * (run.etas.len() as u32 + 1) {
            run.etas.push(predict(&state, j).0.eta_ms.expect("a campaign with successes has an ETA"));
        }
    }
    assert!(running.is_empty(), "the campaign ran to its end");
    run.state = state;
    run
}

fn predictor_policy(window_ms: u64, sink_min_tasks: u32) -> Policy {
    let mut policy = policy(&[], 0);
    policy.cigri.predictor_window_ms = window_ms;
    policy.cigri.sink_min_tasks = sink_min_tasks;
    policy
}

/// Two clusters: `a` of two engines running a task in 10 s, `b` of one in 20 s:
/// together 0.25 tasks a second, 900 an hour.
#[test]
fn the_predictor_gives_throughput_mean_per_cluster_and_an_eta_within_a_tenth_of_the_real_end() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(predictor_policy(3_600_000, 10)));
    for engine in ["a1", "a2"] {
        log.login(engine, 1, in_cluster("a"));
    }
    log.login("b1", 1, in_cluster("b"));
    log.submit(campaign("bulk", "alice", 100, CampaignType::Default));
    let run = run_to_end(&mut log, |engine| if engine.starts_with('a') { 10_000 } else { 20_000 }, "bulk", 100);
    let state = &run.state;
    let j = state.job_idx(&job_id("bulk")).expect("held");
    let (whole, clusters) = predict(state, j);
    assert_eq!(whole.done, 100);
    assert_eq!(whole.eta_ms, None, "an ended campaign has no ETA");
    let lived_s = (run.end_ms - 1_000_000) / 1000;
    assert_eq!(lived_s, 400, "100 tasks at 0.25 a second");
    assert_eq!(whole.per_hour_milli, 900_000, "900 tasks an hour");
    assert_eq!(clusters.iter().map(|c| (c.cluster.as_str(), c.done, c.mean_duration_ms)).collect::<Vec<_>>(), vec![
        ("a", 80, Some(10_000)),
        ("b", 20, Some(20_000))
    ]);
    assert_eq!(clusters[0].median_duration_ms, Some(8_192), "10 s lies in the bucket from 8.192 s");
    // The ETA at 25, 50 and 75 % done, against the real end.
    assert_eq!(run.etas.len(), 3);
    for eta in &run.etas {
        let error_ms = eta.abs_diff(run.end_ms);
        assert!(error_ms * 10 <= run.end_ms - 1_000_000, "ETA {eta} vs end {}", run.end_ms);
    }
    assert!(run.orders.iter().all(|order| !matches!(order, Order::FlagSink { .. })), "no sink among sound engines");
}

/// A window shorter than the campaign: the throughput is the window's, and
/// the ring forgets what is older.
#[test]
fn the_predictor_window_forgets_successes_older_than_the_window() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(predictor_policy(60_000, 10)));
    log.login("a1", 1, in_cluster("a"));
    log.submit(campaign("bulk", "alice", 30, CampaignType::Default));
    let run = run_to_end(&mut log, |_| 10_000, "bulk", 30);
    let j = run.state.job_idx(&job_id("bulk")).expect("held");
    let figures = &run.state.job(j).families.cigri.predictor;
    assert_eq!(figures.done, 30);
    assert_eq!(figures.window.count(run.end_ms), 6, "a minute's window holds the last 6 of 10 s each");
    assert_eq!(figures.window.count(run.end_ms + 120_000), 0);
}

/// Cluster `a` runs each task in 20 s on two engines; `b1` (cluster `b`)
/// "succeeds" in 0.5 s: once the rule may apply it is flagged, engine and
/// cluster, and gets no more of the campaign.
#[test]
fn a_sink_engine_is_flagged_by_an_order_and_excluded_with_the_reason_cigri_sink() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(predictor_policy(3_600_000, 4)));
    for engine in ["a1", "a2"] {
        log.login(engine, 1, in_cluster("a"));
    }
    log.login("b1", 1, in_cluster("b"));
    log.submit(campaign("bulk", "alice", 200, CampaignType::Default));
    let run = run_to_end(&mut log, |engine| if engine == "b1" { 500 } else { 20_000 }, "bulk", 200);
    let flags: Vec<String> = run.orders.iter().filter(|o| matches!(o, Order::FlagSink { .. })).map(ToString::to_string).collect();
    assert_eq!(flags, vec![
        "flag engine b1 (cluster b) a sink for bulk (median 448 ms, campaign's 16384 ms)",
        "flag cluster b a sink for bulk (median 448 ms, campaign's 16384 ms)",
    ]);
    let state = &run.state;
    let j = state.job_idx(&job_id("bulk")).expect("held");
    let b1 = state.engine_idx(&engine_id("b1")).expect("logged in");
    assert!(state.job(j).families.cigri.sinks.contains_key(&SinkTarget::Engine(b1)));
    // b1 ran tasks only until a's first results made the reference (20 s, 40 of b1's).
    let on_b1 = state.job(j).families.cigri.engines[&b1].n;
    assert!((SINK_TASKS_MIN..=42).contains(&on_b1), "{on_b1} tasks on b1");
    assert_eq!(state.job(j).counts.done, 200);
    // The filter names the rule.
    let sink = Unfit::Family(FamilyUnfit::Cigri(CigriUnfit::Sink));
    assert_eq!(filter(state, TaskKey { job: j, index: 0 }, b1), Err(sink.clone()));
    assert_eq!(sink.rule_name(), "cigri-sink");
    // `why` names the engine and the cluster, their median against the campaign's.
    let why = crate::core::explain::explain(state, &crate::core::testkit::task("bulk", 0)).expect("a task of it").to_string();
    assert!(
        why.contains("cigri-sink: engine b1 (cluster b) excluded: its tasks succeed in 0.448s (median) against the campaign's 16.384s"),
        "{why}"
    );
    assert!(why.contains("cigri-sink: cluster b excluded"), "{why}");
}

/// A forged or stale `FlagSink` (no sink, an unknown engine, twice) is
/// refused with its reason and changes nothing.
#[test]
fn a_flag_sink_order_for_a_sound_engine_an_unknown_one_or_twice_is_refused_as_not_a_sink() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(predictor_policy(3_600_000, 4)));
    log.login("a1", 1, in_cluster("a"));
    log.submit(campaign("bulk", "alice", 5, CampaignType::Default));
    let mut state = State::new();
    fold_all(&log, &mut state);
    let flag = |engine: Option<&str>| Order::FlagSink {
        job: job_id("bulk"),
        engine: engine.map(engine_id),
        cluster: "a".into(),
        median_ms: 1,
        campaign_median_ms: 1_000,
    };
    let not_a_sink = OrderProblem::Family(FamilyOrderProblem::Cigri(CigriOrderProblem::NotASink));
    for (order, problem) in [(flag(Some("a1")), not_a_sink.clone()), (flag(None), not_a_sink), (flag(Some("zz")), OrderProblem::UnknownEngine)] {
        let entry = log.orders(OrderBatch { based_on_seq: state.last_seq, algorithm: "cigri".into(), algorithm_version: 0, orders: vec![order] });
        let rejections = fold(&mut state, &entry);
        assert_eq!(rejections.len(), 1, "{rejections:?}");
        assert!(matches!(&rejections[0], Rejection::OrderNotApplicable { problem: p, .. } if *p == problem), "{rejections:?}");
    }
    let j = state.job_idx(&job_id("bulk")).expect("held");
    assert!(state.job(j).families.cigri.sinks.is_empty() && state.job(j).families.cigri.sink_suspects.is_empty());
}
