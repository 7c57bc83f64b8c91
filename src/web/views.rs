//! The pages, as pure functions from the projector's answers to HTML fragments
//! (the `<main>` of a page: the same fragment is sent again on every live
//! update). Every string from an answer goes through [`Html::text`]; nothing
//! here does IO.

use serde_json::Value;

use crate::projector::query::{EngineSummary, JobSummary, RejectionsReply, StateSummary};
use crate::projector::results::{TaskReply, TasksReply};

use super::html::{url_segment, Html};

/// Rows a table shows at most; the rest is counted.
pub const ROWS_MAX: usize = 1000;

/// A page of the web view, as its path names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View {
    /// `/`: jobs, engines, throughput.
    Overview,
    /// `/jobs/JOB`: one job and its tasks.
    Job(String),
    /// `/tasks/JOB/INDEX`: one task: why, attempts, output.
    Task { job: String, index: u32 },
    /// `/engines`
    Engines,
    /// `/rejections`
    Rejections,
    /// `/policy`
    Policy,
    /// `/why?task=JOB/INDEX`
    Why(Option<String>),
}

/// Longest path or query the web view reads (a job id is at most 128 bytes).
pub const PATH_MAX: usize = 1024;

impl View {
    /// The page a path (and query string) names, `None` for no page.
    pub fn of_path(path: &str, query: Option<&str>) -> Option<View> {
        if path.len() > PATH_MAX || query.is_some_and(|q| q.len() > PATH_MAX) {
            return None;
        }
        let segments: Vec<String> = path.trim_matches('/').split('/').map(percent_decode).collect::<Option<_>>()?;
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        Some(match segments.as_slice() {
            [""] => View::Overview,
            ["jobs", job] if !job.is_empty() => View::Job(job.to_string()),
            ["tasks", job, index] if !job.is_empty() => View::Task { job: job.to_string(), index: index.parse().ok()? },
            ["engines"] => View::Engines,
            ["rejections"] => View::Rejections,
            ["policy"] => View::Policy,
            ["why"] => View::Why(
                query
                    .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("task=")))
                    .and_then(|task| percent_decode(&task.replace('+', " ")))
                    .map(|task| task.trim().to_string())
                    .filter(|task| !task.is_empty()),
            ),
            _ => return None,
        })
    }

    /// The path (and query) that names this page.
    pub fn path(&self) -> String {
        match self {
            View::Overview => "/".into(),
            View::Job(job) => format!("/jobs/{}", url_segment(job)),
            View::Task { job, index } => format!("/tasks/{}/{index}", url_segment(job)),
            View::Engines => "/engines".into(),
            View::Rejections => "/rejections".into(),
            View::Policy => "/policy".into(),
            View::Why(None) => "/why".into(),
            View::Why(Some(task)) => format!("/why?task={}", url_segment(task)),
        }
    }

    /// The page's title.
    pub fn title(&self) -> String {
        match self {
            View::Overview => "gridfold".into(),
            View::Job(job) => format!("job {job}"),
            View::Task { job, index } => format!("task {job}/{index}"),
            View::Engines => "engines".into(),
            View::Rejections => "rejections".into(),
            View::Policy => "policy".into(),
            View::Why(Some(task)) => format!("why {task}"),
            View::Why(None) => "why".into(),
        }
    }
}

/// `%XX` decoded; `None` when that is not UTF-8 or a `%` is malformed.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// A duration in ms as a person reads it: `45 s`, `3 min 4 s`, `2 h 5 min`, `3 d 4 h`.
pub fn duration_text(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The jobs' progress: a bar of done, failed, cancelled, running and dispatched tasks.
pub fn progress_bar(html: &mut Html, job: &JobSummary) {
    let total = f64::from(job.tasks.max(1));
    html.raw("<div class=\"bar\" title=\"")
        .text(format!(
            "{} done, {} failed, {} cancelled, {} running, {} dispatched, {} waiting",
            job.done, job.failed, job.cancelled, job.running, job.dispatched, job.waiting
        ))
        .raw("\">");
    for (class, n) in [
        ("done", job.done),
        ("failed", job.failed),
        ("cancelled", job.cancelled),
        ("running", job.running),
        ("dispatched", job.dispatched),
    ] {
        if n > 0 {
            html.raw("<span class=\"")
                .text(class)
                .raw("\" style=\"width:")
                .text(format!("{:.2}", f64::from(n) * 100.0 / total))
                .raw("%\"></span>");
        }
    }
    html.raw("</div>");
}

fn eta_text(summary: &StateSummary, job: &JobSummary) -> String {
    match (job.status.as_str(), job.estimated_end_ms) {
        ("active", Some(end_ms)) => format!("in {}", duration_text(end_ms.saturating_sub(summary.log_time_ms))),
        ("active", None) => "not yet known".into(),
        _ => job.ended_ms.map(|ended| format!("ended {} ago", duration_text(summary.log_time_ms.saturating_sub(ended)))).unwrap_or_default(),
    }
}

/// The jobs table.
pub fn jobs_table(html: &mut Html, summary: &StateSummary) {
    if summary.jobs.is_empty() {
        html.raw("<p class=\"empty\">no jobs in the state</p>");
        return;
    }
    html.raw("<table class=\"jobs\">")
        .header_row(&["job", "owner", "status", "prio", "progress", "done", "running", "waiting", "failed", "cancelled", "rate", "ETA", "age"]);
    for job in summary.jobs.iter().take(ROWS_MAX) {
        html.raw("<tr data-job=\"").text(&job.id).raw("\" data-status=\"").text(&job.status).raw("\"><td>");
        html.link(&View::Job(job.id.clone()).path(), &job.id).raw("</td>");
        html.element("td", &job.owner).element("td", &job.status).element("td", job.priority);
        html.raw("<td>");
        progress_bar(html, job);
        html.raw("</td>");
        html.element("td", format!("{}/{}", job.done, job.tasks))
            .element("td", job.running + job.dispatched)
            .element("td", job.waiting)
            .element("td", job.failed)
            .element("td", job.cancelled)
            .element("td", format!("{:.2}/s", job.throughput_per_s))
            .element("td", eta_text(summary, job))
            .element("td", duration_text(summary.log_time_ms.saturating_sub(job.submitted_ms)))
            .raw("</tr>");
    }
    html.raw("</table>");
    more_rows(html, summary.jobs.len(), summary.jobs_more);
}

/// `… and N more not shown`: past the first [`ROWS_MAX`] of `listed`, and the `unlisted` the answer left out.
fn more_rows(html: &mut Html, listed: usize, unlisted: u64) {
    let more = listed.saturating_sub(ROWS_MAX) as u64 + unlisted;
    if more > 0 {
        html.raw("<p class=\"more\">").text(format!("… and {more} more not shown")).raw("</p>");
    }
}

/// The engines table; `long` adds their properties; `unlisted` engines the answer left out are counted.
pub fn engines_table(html: &mut Html, log_time_ms: u64, engines: &[EngineSummary], unlisted: u64, long: bool) {
    if engines.is_empty() {
        html.raw("<p class=\"empty\">no engines have logged in</p>");
        return;
    }
    html.raw("<table class=\"engines\">");
    html.header_row(&["engine", "status", "slots", "used", "free", "load per core", "last seen", "completed", "failed"]);
    for engine in engines.iter().take(ROWS_MAX) {
        html.raw("<tr data-engine=\"").text(&engine.id).raw("\">");
        html.element("td", &engine.id)
            .element("td", &engine.status)
            .element("td", engine.slots)
            .element("td", engine.used)
            .element("td", engine.slots.saturating_sub(engine.used))
            .element("td", format!("{:.2}", f64::from(engine.load_per_core_milli) / 1000.0))
            .element("td", format!("{} ago", duration_text(log_time_ms.saturating_sub(engine.last_seen_ms))))
            .element("td", engine.completed)
            .element("td", engine.failed)
            .raw("</tr>");
        if long {
            html.raw("<tr class=\"props\"><td colspan=\"9\">").text(&engine.properties).raw("</td></tr>");
        }
    }
    html.raw("</table>");
    more_rows(html, engines.len(), unlisted);
}

/// `/`: the counters, the throughput plot, the jobs and the engines.
pub fn overview(summary: &StateSummary, plot: &Html) -> Html {
    let mut html = Html::new();
    html.raw("<p class=\"counters\">").text(format!(
        "log up to seq {} · jobs {} · tasks done {} · tasks failed {} · dispatches {} · requeues {} · engines lost {} · ",
        summary.last_seq,
        summary.jobs_total,
        summary.tasks_done,
        summary.tasks_failed,
        summary.dispatches,
        summary.requeues,
        summary.engines_lost
    ));
    html.link("/rejections", format!("rejected {}", summary.rejections)).raw("</p>");
    html.raw("<h2>Throughput</h2>").push(plot);
    html.raw("<h2>Jobs</h2>");
    jobs_table(&mut html, summary);
    html.raw("<h2>Engines</h2>");
    engines_table(&mut html, summary.log_time_ms, &summary.engines, summary.engines_more, false);
    html
}

/// `/engines`: every engine with its properties.
pub fn engines(summary: &StateSummary) -> Html {
    let mut html = Html::new();
    html.raw("<h2>Engines</h2>");
    engines_table(&mut html, summary.log_time_ms, &summary.engines, summary.engines_more, true);
    html
}

/// `/jobs/JOB`: the job's row and figures (its tasks are added by the caller).
pub fn job(summary: &StateSummary, id: &str) -> Html {
    let mut html = Html::new();
    let Some(job) = summary.jobs.iter().find(|job| job.id == id) else {
        html.raw("<p class=\"error\">").text(format!("no job {id}"));
        if let Some(retired) = &summary.retired {
            html.text(format!(": {retired}"));
        }
        html.raw("</p>");
        return html;
    };
    let one = StateSummary { jobs: vec![job.clone()], ..summary.clone() };
    jobs_table(&mut html, &one);
    html.raw("<dl class=\"facts\">");
    let mut fact = |name: &'static str, value: String| {
        html.element("dt", name).element("dd", value);
    };
    fact("project", job.project.clone());
    if let Some(reason) = &job.unschedulable {
        fact("unschedulable", reason.clone());
    }
    if let Some(library) = &job.waits_for_library {
        fact("waits for library", library.clone());
    }
    if !job.waits_for_jobs.is_empty() {
        fact("waits for jobs", job.waits_for_jobs.join(", "));
    }
    if job.suspended > 0 {
        fact("suspended attempts", job.suspended.to_string());
    }
    if job.blacklisted_engines > 0 {
        fact("blacklisted engines", job.blacklisted_engines.to_string());
    }
    if job.redundant_copies > 0 {
        fact("redundant copies", job.redundant_copies.to_string());
    }
    html.raw("</dl>");
    html
}

/// The projector's answer on `gridfold.q.why`, as a client reads it (the
/// explanation as JSON: its shape is the projector's).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct WhyAnswer {
    #[serde(default)]
    pub explanation: Option<Value>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

/// A task's state and attempts, from `why`'s explanation.
pub fn task_facts(answer: &WhyAnswer) -> Html {
    let mut html = Html::new();
    let Some(explanation) = &answer.explanation else { return html };
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    html.raw("<dl class=\"facts\">");
    for (name, key) in [("job", "job_status"), ("task", "task_status"), ("attempts", "attempts"), ("failures", "failures")] {
        html.element("dt", name).element("dd", text(&explanation[key]));
    }
    if explanation["kind"] == "ended" {
        html.element("dt", "last engine").element("dd", text(&explanation["last_engine"]));
        html.element("dt", "last failed on").element("dd", text(&explanation["last_failed_on"]));
    }
    html.raw("</dl>");
    if let Some(live) = explanation["attempts"].as_array().filter(|_| explanation["kind"] == "live") {
        html.raw("<h2>Live attempts</h2><table class=\"attempts\">").header_row(&["attempt", "engine", "started", "dispatched at (log ms)", "suspended"]);
        for attempt in live.iter().take(ROWS_MAX) {
            html.raw("<tr>");
            for key in ["attempt", "engine", "started", "dispatched_ms", "suspended"] {
                html.element("td", text(&attempt[key]));
            }
            html.raw("</tr>");
        }
        html.raw("</table>");
    }
    html
}

/// Log time `ms` as an age before `now_ms`, `-` when absent.
fn ago(now_ms: u64, ms: Option<u64>) -> String {
    ms.map(|ms| format!("{} ago", duration_text(now_ms.saturating_sub(ms)))).unwrap_or_else(|| "-".into())
}

fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map(|value| value.to_string()).unwrap_or_else(|| "-".into())
}

/// A job's tasks, one line each (`gridfold tasks`).
pub fn tasks_table(reply: &TasksReply) -> Html {
    let mut html = Html::new();
    html.raw("<h2>Tasks</h2>");
    if let Some(error) = &reply.error {
        html.raw("<p class=\"error\">").text(error).raw("</p>");
        return html;
    }
    html.raw("<table class=\"tasks\">")
        .header_row(&["task", "state", "attempts", "engine", "started", "ended", "wall", "exit", "failure"]);
    for task in reply.tasks.iter().take(ROWS_MAX) {
        html.raw("<tr data-task=\"").text(task.index).raw("\" data-state=\"").text(&task.state).raw("\"><td>");
        html.link(&View::Task { job: reply.job.clone(), index: task.index }.path(), task.index).raw("</td>");
        html.element("td", &task.state)
            .element("td", task.attempts)
            .element("td", or_dash(task.engine.as_ref()))
            .element("td", ago(reply.log_time_ms, task.started_ms))
            .element("td", ago(reply.log_time_ms, task.ended_ms))
            .element("td", task.wall_ms.map(duration_text).unwrap_or_else(|| "-".into()))
            .element("td", or_dash(task.exit_code))
            .element("td", or_dash(task.failure_kind.as_ref()))
            .raw("</tr>");
    }
    html.raw("</table>");
    if reply.next_from.is_some() {
        html.raw("<p class=\"more\">").text(format!("the first {} of {} tasks", reply.tasks.len(), reply.n_tasks)).raw("</p>");
    }
    html
}

/// A task's command and every kept attempt with its result and error tail (`gridfold task`).
pub fn task_attempts(reply: &TaskReply) -> Html {
    let mut html = Html::new();
    if let Some(error) = &reply.error {
        html.raw("<p class=\"error\">").text(error).raw("</p>");
        return html;
    }
    html.raw("<dl class=\"facts\">");
    html.element("dt", "state").element("dd", &reply.state);
    html.element("dt", "command").element("dd", reply.argv.join(" "));
    for (name, value) in &reply.params {
        html.element("dt", name).element("dd", value);
    }
    html.raw("</dl><h2>Attempts</h2>");
    if reply.attempts_forgotten > 0 {
        html.raw("<p class=\"more\">").text(format!("{} older attempts are no longer kept", reply.attempts_forgotten)).raw("</p>");
    }
    for attempt in &reply.attempts {
        html.raw("<section class=\"attempt\" data-attempt=\"").text(attempt.attempt).raw("\"><h3>");
        html.text(format!("attempt {} on {}: {}", attempt.attempt, attempt.engine, attempt.outcome)).raw("</h3><p>");
        html.text(format!(
            "dispatched {} (seq {}, decided on seq {}), started {}, ended {}, wall {}, exit {}, failure {}",
            ago(reply.log_time_ms, Some(attempt.dispatched_ms)),
            attempt.dispatch_seq,
            attempt.based_on_seq,
            ago(reply.log_time_ms, attempt.started_ms),
            ago(reply.log_time_ms, attempt.ended_ms),
            attempt.wall_ms.map(duration_text).unwrap_or_else(|| "-".into()),
            or_dash(attempt.exit_code),
            or_dash(attempt.failure_kind.as_ref()),
        ));
        html.raw("</p>");
        if !attempt.output_altered.is_empty() {
            // Not the engine's output: none of it is shown.
            html.raw("<div class=\"altered\"><h4>altered</h4>");
            for altered in &attempt.output_altered {
                html.raw("<p>").text(altered).raw("</p>");
            }
            html.raw("</div></section>");
            continue;
        }
        if let Some(result) = &attempt.result {
            html.raw("<h4>output</h4><pre class=\"output\">").text_lines(result).raw("</pre>");
            if attempt.output_truncated || u64::from(attempt.result_bytes) < attempt.stdout_stored_bytes.unwrap_or(0) {
                html.raw("<p class=\"more\">").text("the first part only: `gridfold output` gives the whole").raw("</p>");
            }
        }
        if let Some(error_tail) = attempt.error_tail.as_ref().filter(|tail| !tail.is_empty()) {
            html.raw("<h4>error tail</h4><pre class=\"stderr\">").text_lines(error_tail).raw("</pre>");
        }
        html.raw("</section>");
    }
    html
}

/// A `why` answer: the explanation as `gridfold why` prints it, or the error.
pub fn why(reply: &WhyAnswer) -> Html {
    let mut html = Html::new();
    match (&reply.text, &reply.error) {
        (Some(text), _) => html.raw("<pre class=\"why\">").text_lines(text).raw("</pre>"),
        (None, Some(error)) => html.raw("<p class=\"error\">").text(error).raw("</p>"),
        (None, None) => html.raw("<p class=\"error\">the projector gave no explanation</p>"),
    };
    html
}

/// `/why`: a form, and the answer for the task asked about.
pub fn why_page(task: Option<&str>, reply: Option<&WhyAnswer>) -> Html {
    let mut html = Html::new();
    html.raw("<form class=\"why\" method=\"get\" action=\"/why\"><label>task <input name=\"task\" placeholder=\"JOB/INDEX\" value=\"")
        .text(task.unwrap_or_default())
        .raw("\"></label> <button>why?</button></form>");
    if let Some(reply) = reply {
        html.push(&why(reply));
    }
    html
}

/// `/rejections`: counts by kind and the recent ones, newest first.
pub fn rejections(reply: &RejectionsReply) -> Html {
    let mut html = Html::new();
    html.raw("<p>").text(format!(
        "{} rejected over the whole log; the last {} are kept in detail",
        reply.total, reply.kept_max
    ));
    html.raw("</p><ul class=\"kinds\">");
    for (kind, n) in &reply.by_kind {
        html.element("li", format!("{kind}: {n}"));
    }
    html.raw("</ul>");
    if reply.rejections.is_empty() {
        html.raw("<p class=\"empty\">no rejections kept</p>");
        return html;
    }
    html.raw("<table class=\"rejections\">").header_row(&["seq", "age", "kind", "by", "reason", "subject", "sender"]);
    for record in reply.rejections.iter().rev().take(ROWS_MAX) {
        html.raw("<tr>")
            .element("td", record.seq)
            .element("td", duration_text(reply.log_time_ms.saturating_sub(record.time_ms)))
            .element("td", &record.kind)
            .element("td", &record.by)
            .element("td", &record.reason)
            .element("td", &record.subject)
            .element("td", &record.source)
            .raw("</tr>");
    }
    html.raw("</table>");
    html
}

/// A short error in place of a page's content (the projector did not answer).
/// `/policy`: the policy in force, as `gridfold policy show` prints it.
pub fn policy(reply: &crate::projector::query::PolicyReply) -> Html {
    let mut html = Html::new();
    html.raw("<h2>Policy</h2><p class=\"provenance\">").text(reply.provenance()).raw("</p>");
    html.raw("<pre class=\"policy\">").text_lines(&reply.policy_text()).raw("</pre>");
    html
}

pub fn error(text: &str) -> Html {
    let mut html = Html::new();
    html.raw("<p class=\"error\">").text(text).raw("</p>");
    html
}

/// The whole page around a fragment: the navigation, the live region the script
/// refreshes from `/live?path=…`, the stylesheet and the script.
pub fn page(view: &View, fragment: &Html) -> String {
    let mut html = Html::new();
    html.raw("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>")
        .text(view.title())
        .raw("</title><link rel=\"stylesheet\" href=\"/assets/style.css\"><script src=\"/assets/live.js\" defer></script></head><body>")
        .raw("<nav><a class=\"home\" href=\"/\">gridfold</a> <a href=\"/engines\">engines</a> <a href=\"/rejections\">rejections</a> <a href=\"/policy\">policy</a> <a href=\"/why\">why</a> <span id=\"status\" class=\"status\">connecting…</span></nav>")
        .element("h1", view.title())
        .raw("<main id=\"live\" data-path=\"")
        .text(view.path())
        .raw("\">")
        .push(fragment)
        .raw("</main></body></html>");
    html.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projector::query::RejectionRecord;

    const EVIL: &str = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">";

    fn summary_with_evil_strings() -> StateSummary {
        let job = JobSummary {
            id: EVIL.into(),
            owner: EVIL.into(),
            project: EVIL.into(),
            status: "active".into(),
            priority: 0,
            tasks: 4,
            waiting: 1,
            dispatched: 0,
            running: 1,
            done: 2,
            failed: 0,
            cancelled: 0,
            unschedulable: Some(EVIL.into()),
            throughput_per_s: 0.5,
            estimated_end_ms: Some(5_000),
            submitted_ms: 1_000,
            ended_ms: None,
            redundant_copies: 0,
            redundant_results_ignored: 0,
            redundant_copies_dropped: 0,
            blacklisted_engines: 0,
            suspended: 0,
            waits_for_library: Some(EVIL.into()),
            waits_for_jobs: vec![EVIL.into()],
            held: true,
            awaits_parts_of: Some(8),
            family: Default::default(),
        };
        let engine = EngineSummary {
            id: EVIL.into(),
            status: "logged-in".into(),
            slots: 4,
            used: 1,
            completed: 2,
            failed: 0,
            last_seen_ms: 2_000,
            load_per_core_milli: 250,
            properties: EVIL.into(),
            drained: true,
            threshold_crossed: None,
            suspended_by_threshold: vec![EVIL.into()],
        };
        StateSummary {
            last_seq: 10,
            log_time_ms: 3_000,
            chain_digest: String::new(),
            state_digest: None,
            entries: 10,
            order_batches: 1,
            rejections: 0,
            rejections_by_kind: Default::default(),
            jobs: vec![job],
            jobs_total: 1,
            jobs_active: 1,
            jobs_more: 0,
            next_from: None,
            engines: vec![engine],
            engines_more: 0,
            dispatches: 3,
            tasks_done: 2,
            tasks_failed: 0,
            attempts_failed: 0,
            requeues: 0,
            engines_lost: 0,
            wait_ms_mean: 0,
            wait_ms_max: 0,
            jobs_retired: 0,
            retired: None,
            family: Default::default(),
        }
    }

    fn assert_inert(html: &str) {
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("onerror=\""), "{html}");
        assert!(html.contains("&lt;script&gt;window.pwned=1&lt;/script&gt;"), "{html}");
    }

    #[test]
    fn script_in_job_ids_owners_engines_rejections_and_why_is_shown_as_text() {
        let summary = summary_with_evil_strings();
        let plot = Html::new();
        assert_inert(overview(&summary, &plot).as_str());
        assert_inert(engines(&summary).as_str());
        assert_inert(job(&summary, EVIL).as_str());
        let rejections_reply = RejectionsReply {
            log_time_ms: 3_000,
            total: 1,
            by_kind: [(EVIL.to_string(), 1)].into(),
            kept_max: 256,
            rejections: vec![RejectionRecord {
                seq: 3,
                time_ms: 1_000,
                kind: EVIL.into(),
                reason: EVIL.into(),
                subject: EVIL.into(),
                by: EVIL.into(),
                source: EVIL.into(),
            }],
        };
        assert_inert(rejections(&rejections_reply).as_str());
        let reply = WhyAnswer { explanation: Some(serde_json::json!({"kind": "ended", "task_status": EVIL, "last_engine": EVIL})), text: Some(EVIL.into()), error: None };
        assert_inert(task_facts(&reply).as_str());
        let attempt = crate::projector::results::AttemptView {
            attempt: 1,
            engine: EVIL.into(),
            outcome: EVIL.into(),
            result: Some(EVIL.into()),
            error_tail: Some(EVIL.into()),
            failure_kind: Some(EVIL.into()),
            ..Default::default()
        };
        let task = TaskReply { argv: vec![EVIL.into()], params: [(EVIL.to_string(), EVIL.to_string())].into(), attempts: vec![attempt], ..Default::default() };
        assert_inert(task_attempts(&task).as_str());
        let line = crate::projector::results::TaskLine { state: EVIL.into(), engine: Some(EVIL.into()), failure_kind: Some(EVIL.into()), ..Default::default() };
        assert_inert(tasks_table(&TasksReply { job: EVIL.into(), tasks: vec![line], ..Default::default() }).as_str());
        assert_inert(why_page(Some(EVIL), Some(&reply)).as_str());
        let page = page(&View::Job(EVIL.into()), &job(&summary, EVIL));
        assert_eq!(page.matches("<script").count(), 1, "only the page's own script: {page}");
        assert!(page.contains("data-path=\"/jobs/%3Cscript%3Ewindow.pwned%3D1"), "{page}");
    }

    #[test]
    fn escape_codes_in_owners_reasons_and_output_are_written_out() {
        const CODES: &str = "eve\x1b[2J\nfake row";
        let mut summary = summary_with_evil_strings();
        summary.jobs[0].owner = CODES.into();
        let overview = overview(&summary, &Html::new()).into_string();
        assert!(!overview.contains('\x1b') && overview.contains(r"<td>eve\x1b[2J\nfake row</td>"), "{overview}");
        let attempt = crate::projector::results::AttemptView { error_tail: Some(format!("{CODES}\nnext")), ..Default::default() };
        let task = task_attempts(&TaskReply { attempts: vec![attempt], ..Default::default() }).into_string();
        assert!(!task.contains('\x1b') && task.contains("eve\\x1b[2J\nfake row\nnext"), "output keeps its lines: {task}");
    }

    #[test]
    fn an_attempt_whose_stored_output_was_altered_shows_the_warning_instead_of_its_output() {
        let attempt = |altered: Vec<String>| crate::projector::results::AttemptView {
            attempt: 1,
            outcome: "completed".into(),
            result: Some("the output".into()),
            error_tail: Some("the error tail".into()),
            output_altered: altered,
            ..Default::default()
        };
        let said = "the stdout of j/0 attempt 1 was altered: its engine stored 6 bytes, the store holds 9 bytes";
        let task = TaskReply { attempts: vec![attempt(vec![said.into()]), attempt(Vec::new())], ..Default::default() };
        let html = task_attempts(&task);
        let (altered, untouched) = html.as_str().split_once("</section>").unwrap();
        assert!(altered.contains("<div class=\"altered\"><h4>altered</h4>") && altered.contains(said), "{altered}");
        assert!(!altered.contains("the output") && !altered.contains("the error tail"), "{altered}");
        assert!(untouched.contains("the output") && !untouched.contains("altered"), "{untouched}");
    }

    #[test]
    fn paths_name_pages_and_back() {
        for view in [
            View::Overview,
            View::Job("j-1".into()),
            View::Job("<b>/x".into()),
            View::Task { job: "j".into(), index: 7 },
            View::Engines,
            View::Rejections,
            View::Policy,
            View::Why(None),
            View::Why(Some("j/3".into())),
        ] {
            let path = view.path();
            let (path, query) = match path.split_once('?') {
                Some((path, query)) => (path.to_string(), Some(query.to_string())),
                None => (path, None),
            };
            assert_eq!(View::of_path(&path, query.as_deref()), Some(view), "{path}");
        }
        assert_eq!(View::of_path("/why", Some("task=a%2F1+")), Some(View::Why(Some("a/1".into()))));
        assert_eq!(View::of_path("/nope", None), None);
        assert_eq!(View::of_path("/tasks/j/x", None), None);
        assert_eq!(View::of_path("/jobs/%zz", None), None);
        assert_eq!(View::of_path("/jobs/%ff", None), None, "not UTF-8");
        assert_eq!(View::of_path(&format!("/jobs/{}", "a".repeat(PATH_MAX)), None), None, "too long");
        assert_eq!(duration_text(3_725_000), "1 h 2 min");
    }
}
