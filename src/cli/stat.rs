//! `gridfold stat` (asks the projector) and `gridfold export` (reads the log).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use super::client::{ask, block_on, connect_log, NatsArgs};
use crate::core::event::Entry;
use crate::core::ids::Seq;
use crate::human::printable;
use crate::log::{read_to_end, EventLog, RawEntry};
use crate::projector::query::{
    JobSummary, RejectionsReply, RejectionsRequest, StatRequest, StateSummary, UsageReply, UsageRequest, REJECTIONS_SUBJECT,
    STAT_JOBS_PER_PAGE_MAX, STAT_SUBJECT, USAGE_SUBJECT,
};
use crate::wire;

#[derive(Debug, Args)]
pub struct StatArgs {
    /// Only this job (exit 1 when the projector knows no such job).
    pub job: Option<String>,
    /// Only the jobs of this owner (the user who submitted them; `--user` is the broker login).
    #[arg(long)]
    pub owner: Option<String>,
    /// Only the jobs in this state.
    #[arg(long, value_parser = ["active", "done", "failed", "cancelled"])]
    pub state: Option<String>,
    /// Engines with their properties.
    #[arg(long)]
    pub long: bool,
    /// Also the digest of the whole state, to compare with `gridfold replay --at
    /// SEQ`'s. The projector serialises its whole state for it, between two
    /// batches (about 150 ms once 400,000 tasks have run): ask for it for an audit, not
    /// in a loop.
    #[arg(long)]
    pub state_digest: bool,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// Ask again every 2 seconds until interrupted: the screen is redrawn on a
    /// terminal; into a pipe or a file each report follows the last.
    #[arg(long)]
    pub watch: bool,
    /// Ask again every 2 seconds until every job shown has ended (implies --watch).
    #[arg(long)]
    pub until_done: bool,
    #[arg(long)]
    pub json: bool,
    /// The full view of one job (CiGri's `gridstat -f`): the campaign, its
    /// figures per cluster, then each task with its state, engine and attempts.
    #[arg(short = 'f', long, requires = "job", conflicts_with_all = ["errors", "users", "watch", "until_done"])]
    pub full: bool,
    /// The failures to look at: each failed task with its engine, kind, exit code and stderr tail.
    #[arg(long, conflicts_with_all = ["users", "watch", "until_done"])]
    pub errors: bool,
    /// One line per user: campaigns, waiting, running, done, failed, throughput.
    #[arg(long, conflicts_with_all = ["watch", "until_done"])]
    pub users: bool,
    /// Most lines the job table, `-f` and `--errors` print (they say how many
    /// they left out; `--json` as `jobs_more` and `next_from`).
    #[arg(long, default_value_t = super::gridstat::LIMIT_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(super::gridstat::LIMIT_MAX)))]
    pub limit: u32,
    /// The first job of the table: its place among the jobs shown (0 is the
    /// first), as `next_from` gives it, to page through them with --limit.
    #[arg(long, default_value_t = 0, conflicts_with = "job")]
    pub from: u32,
    /// Every job, whatever --limit (the projector's pages are asked one after another).
    #[arg(long, conflicts_with = "job")]
    pub all: bool,
}

/// Most pages one `stat` asks for: 10,000 pages of 1,000 jobs.
const STAT_PAGES_MAX: u32 = 10_000;

#[derive(Debug, Args)]
pub struct UsageArgs {
    #[command(flatten)]
    pub nats: NatsArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RejectionsArgs {
    /// Only this kind (as `stat` counts them: duplicate-job, unknown-job, forged-engine, ...).
    #[arg(long)]
    pub kind: Option<String>,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The history file to write (JSON Lines; replay it with `gridfold replay --file`).
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub nats: NatsArgs,
}

pub fn stat(args: StatArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let repeat = args.watch || args.until_done;
    let redraw = repeat && std::io::stdout().is_terminal();
    block_on(async {
        let mut reports = 0u64;
        loop {
            let request = StatRequest {
                job: args.job.clone(),
                state_digest: args.state_digest,
                owner: args.owner.clone(),
                status: args.state.clone(),
                from: args.from,
                limit: None,
            };
            // The views that add up every job (users, errors) read them all; a named job is listed whatever --limit.
            let every_job = args.all || args.users || args.errors || args.job.is_some();
            let mut summary = stat_pages(&args.nats, request, (!every_job).then_some(args.limit)).await?;
            if let Some(job) = args.job.as_ref().filter(|_| summary.jobs.is_empty() && summary.retired.is_none()) {
                eprintln!("no job {}", printable(job));
                return Ok(ExitCode::FAILURE);
            }
            if args.job.is_some() {
                // A named job is answered whatever the filters: they apply here.
                summary.jobs.retain(|job| {
                    args.owner.as_ref().is_none_or(|owner| &job.owner == owner)
                        && args.state.as_ref().is_none_or(|state| &job.status == state)
                });
                summary.jobs_total = summary.jobs.len() as u64;
                summary.jobs_active = summary.jobs.iter().filter(|job| job.status == "active").count() as u64;
            }
            if let (true, Some(job)) = (args.full, args.job.as_ref()) {
                return super::gridstat::full(&args.nats, &summary, job, args.limit, args.json).await;
            }
            if args.errors {
                return super::gridstat::errors(&args.nats, &summary, args.limit, args.json).await;
            }
            if args.users {
                return super::gridstat::print_users(&summary.jobs, args.json);
            }
            if args.json {
                println!("{}", serde_json::to_string(&summary)?);
            } else {
                if redraw {
                    print!("\x1b[2J\x1b[H");
                } else if reports > 0 {
                    println!("---");
                }
                write_stat(&mut std::io::stdout().lock(), &summary, args.long)?;
            }
            reports += 1;
            let all_ended = summary.jobs_active == 0 && summary.jobs.iter().all(|job| job.status != "active");
            if !repeat || (args.until_done && all_ended) {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

/// The summary with the matching jobs from the request's `from`, at most
/// `lines_max` of them (all with `None`), asked page after page: the figures
/// are the first page's, the counts of what is left (`jobs_more`,
/// `next_from`) the last one's. Jobs that come or go between two pages may be
/// missed or shown twice.
async fn stat_pages(nats: &NatsArgs, mut request: StatRequest, lines_max: Option<u32>) -> anyhow::Result<StateSummary> {
    let mut summary: Option<StateSummary> = None;
    for _ in 0..STAT_PAGES_MAX {
        let listed = summary.as_ref().map_or(0, |summary| summary.jobs.len() as u32);
        request.limit = Some(lines_max.map_or(STAT_JOBS_PER_PAGE_MAX, |max| max.saturating_sub(listed).min(STAT_JOBS_PER_PAGE_MAX)));
        let page: StateSummary = ask(nats, STAT_SUBJECT, &request).await?;
        let done = page.jobs.is_empty() || lines_max.is_some_and(|max| listed + page.jobs.len() as u32 >= max);
        let next_from = page.next_from;
        summary = Some(match summary {
            None => page,
            Some(mut summary) => {
                summary.jobs.extend(page.jobs);
                StateSummary { jobs_total: page.jobs_total, jobs_active: page.jobs_active, jobs_more: page.jobs_more, next_from, ..summary }
            }
        });
        match next_from {
            Some(from) if !done => {
                request.from = from;
                // The digest is the first page's: asked once.
                request.state_digest = false;
            }
            _ => return Ok(summary.expect("a page was asked for")),
        }
    }
    anyhow::bail!("more than {STAT_PAGES_MAX} pages of jobs: stopped")
}

/// A span of log time as a person reads it: `42 s`, `7 min`, `3 h`, `2 d`.
fn span(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// `gridfold usage`: what ended jobs added up to, per user and per project.
pub fn usage(args: UsageArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let reply: UsageReply = ask(&args.nats, USAGE_SUBJECT, &UsageRequest {}).await?;
        if args.json {
            println!("{}", serde_json::to_string(&reply)?);
        } else {
            print!("{reply}");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `gridfold rejections`: what the projector refused, with who sent it and why.
pub fn rejections(args: RejectionsArgs) -> anyhow::Result<ExitCode> {
    let request = RejectionsRequest { kind: args.kind.clone() };
    let reply: RejectionsReply = block_on(ask(&args.nats, REJECTIONS_SUBJECT, &request))?;
    if let Some(kind) = args.kind.as_ref().filter(|kind| !reply.by_kind.contains_key(*kind)) {
        let known: Vec<&str> = reply.by_kind.keys().map(String::as_str).collect();
        eprintln!(
            "no rejection of kind {kind} on this log (kinds seen: {})",
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        );
        return Ok(ExitCode::FAILURE);
    }
    if args.json {
        println!("{}", serde_json::to_string(&reply)?);
        return Ok(ExitCode::SUCCESS);
    }
    write_rejections(&mut std::io::stdout().lock(), &reply)?;
    Ok(ExitCode::SUCCESS)
}

/// `gridfold rejections` as a person reads it.
fn write_rejections(out: &mut impl Write, reply: &RejectionsReply) -> std::io::Result<()> {
    let counted: Vec<String> = reply.by_kind.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    writeln!(
        out,
        "{} rejected over the whole log{}; the last {} are kept in detail",
        reply.total,
        if counted.is_empty() { String::new() } else { format!(" ({})", counted.join(", ")) },
        reply.kept_max
    )?;
    if reply.rejections.is_empty() {
        return Ok(());
    }
    writeln!(out, "{:>8} {:>9} {:<22} {:<20} {:<36} {:<16} REASON", "SEQ", "AGO", "KIND", "BY", "SUBJECT", "SOURCE")?;
    for record in &reply.rejections {
        let ago = reply.log_time_ms.saturating_sub(record.time_ms) / 1000;
        writeln!(
            out,
            "{:>8} {:>9} {:<22} {:<20} {:<36} {:<16} {}",
            record.seq,
            format!("{ago} s"),
            record.kind,
            printable(&record.by),
            printable(&record.subject),
            if record.source.is_empty() { "-".into() } else { printable(&record.source) },
            printable(&record.reason)
        )?;
    }
    Ok(())
}

fn write_stat(out: &mut impl Write, summary: &StateSummary, long: bool) -> std::io::Result<()> {
    if let Some(retired) = &summary.retired {
        writeln!(out, "{retired}")?;
        return Ok(());
    }
    let now = summary.log_time_ms;
    super::gridstat::write_campaigns(out, summary)?;
    writeln!(
        out,
        "{:<24} {:<12} {:>9} {:>5} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>6} {:>8} {:>7}",
        "JOB", "OWNER", "STATUS", "PRIO", "TASKS", "WAITING", "RUNNING", "DONE", "FAILED", "CANCELLED", "AGE", "TASKS/S", "ETA"
    )?;
    for job in &summary.jobs {
        let eta = job.estimated_end_ms.map(|end| span(end.saturating_sub(now))).unwrap_or_else(|| "-".into());
        writeln!(
            out,
            "{:<24} {:<12} {:>9} {:>5} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>6} {:>8.1} {:>7}{}",
            job.id,
            printable(&job.owner),
            job.status,
            job.priority,
            job.tasks,
            job.waiting,
            job.running + job.dispatched,
            job.done,
            job.failed,
            job.cancelled,
            span(now.saturating_sub(job.submitted_ms)),
            job.throughput_per_s,
            eta,
            printable(&job_notes(job))
        )?;
    }
    if summary.jobs_more > 0 {
        let next = summary.next_from.map_or(String::new(), |from| format!(": gridfold stat --from {from}, or --all"));
        writeln!(out, "... {} more job(s) not shown ({} in all){next}", summary.jobs_more, summary.jobs_total)?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<24} {:>10} {:>6} {:>6} {:>6} {:>6} {:>10} {:>10} {:>8}{}",
        "ENGINE", "STATUS", "SLOTS", "USED", "FREE", "LOAD", "LAST SEEN", "COMPLETED", "FAILED", if long { "  PROPERTIES" } else { "" }
    )?;
    for engine in &summary.engines {
        writeln!(
            out,
            "{:<24} {:>10} {:>6} {:>6} {:>6} {:>6.2} {:>10} {:>10} {:>8}{}",
            engine.id,
            if engine.drained { format!("{},drained", engine.status) } else { engine.status.clone() },
            engine.slots,
            engine.used,
            engine.slots.saturating_sub(engine.used),
            f64::from(engine.load_per_core_milli) / 1000.0,
            format!("{} ago", span(now.saturating_sub(engine.last_seen_ms))),
            engine.completed,
            engine.failed,
            if long { format!("  {}", printable(&engine.properties)) } else { String::new() }
        )?;
        if let Some(cause) = &engine.threshold_crossed {
            writeln!(out, "  {}: above a suspend threshold: {}", engine.id, printable(&cause.to_string()))?;
        }
        if !engine.suspended_by_threshold.is_empty() {
            writeln!(out, "  {}: suspended by a threshold: {}", engine.id, engine.suspended_by_threshold.join(", "))?;
        }
    }
    if summary.engines_more > 0 {
        writeln!(out, "... {} more engine(s) not shown: the projector's answer holds what fits one broker message", summary.engines_more)?;
    }
    writeln!(out)?;
    if !summary.family.is_empty() {
        writeln!(out, "{}", summary.family)?;
    }
    if summary.jobs_retired > 0 {
        writeln!(out, "{} ended job(s) retired from the state (see gridfold usage)", summary.jobs_retired)?;
    }
    let rejected = if summary.rejections > 0 { " (gridfold rejections lists them)" } else { "" };
    writeln!(out, "log seq {}, {} rejected{rejected}, digest {}", summary.last_seq, summary.rejections, summary.chain_digest)?;
    if let Some(state_digest) = &summary.state_digest {
        writeln!(out, "state digest {state_digest} (compare: gridfold replay --at {})", summary.last_seq)?;
    }
    Ok(())
}

/// What else a person should know of a job, after its columns: `  unschedulable: …, waits for library …`.
fn job_notes(job: &JobSummary) -> String {
    let mut notes = Vec::new();
    if job.held {
        notes.push("held (gridfold release to run it)".to_string());
    }
    if let Some(total) = job.awaits_parts_of {
        notes.push(format!("awaits its parts: {} of {total} tasks have arrived", job.tasks));
    }
    if let Some(reason) = &job.unschedulable {
        notes.push(format!("unschedulable: {reason}"));
    }
    if let Some(library) = &job.waits_for_library {
        notes.push(format!("waits for library {library}"));
    }
    if !job.waits_for_jobs.is_empty() {
        notes.push(format!("waits for job(s) {}", job.waits_for_jobs.join(", ")));
    }
    if job.blacklisted_engines > 0 {
        notes.push(format!("{} engine(s) blacklisted", job.blacklisted_engines));
    }
    if job.suspended > 0 {
        notes.push(format!("{} attempt(s) suspended", job.suspended));
    }
    notes.extend(job.family.notes());
    if job.redundant_copies > 0 || job.redundant_results_ignored > 0 {
        notes.push(format!("{} redundant copies running, {} results ignored", job.redundant_copies, job.redundant_results_ignored));
    }
    if notes.is_empty() { String::new() } else { format!("  {}", notes.join("; ")) }
}

/// Reads the whole log as it is now, with a progress bar.
pub async fn read_whole_log<L: EventLog>(log: &L) -> anyhow::Result<Vec<RawEntry>> {
    let mut reading = read_to_end(log, 1).await.with_context(|| format!("reading {}", log.location()))?;
    let bar = super::progress_bar(reading.end_seq(), "reading");
    let mut all = Vec::with_capacity(reading.end_seq() as usize);
    while let Some(batch) = reading.next_batch(10_000).await? {
        all.extend(batch);
        bar.set_position(all.len() as u64);
    }
    bar.finish_and_clear();
    Ok(all)
}

pub fn to_entries(raw: &[RawEntry]) -> Vec<Entry> {
    raw.iter().map(|e| wire::entry_from_log(Seq(e.seq), e.time_ms, &e.subject, &e.payload)).collect()
}

pub fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let raw = block_on(async {
        let log = connect_log(&args.nats).await?;
        read_whole_log(&log).await
    })?;
    let file = std::fs::File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for entry in &raw {
        writeln!(out, "{}", wire::history::write_history_line(Seq(entry.seq), entry.time_ms, &entry.subject, &entry.payload))?;
    }
    out.flush()?;
    println!("exported {} entries to {}", raw.len(), args.out.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::State;
    use crate::core::testkit::fold_and_decide as run;
    use crate::core::testkit::*;
    use crate::projector::query::RejectionRecord;

    /// What a client may write to take over a terminal: clear the screen, then a line of its own.
    const EVIL: &str = "mallory\x1b[2J\nfake-job   active";

    fn text(write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).expect("written");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn an_owner_property_or_reason_with_escape_codes_is_shown_escaped_on_its_own_line() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.login("e1", 2, linux_props("lyon", 8192));
        log.submit(job_spec("j", 3, ""));
        run(&mut log, &mut state, 0);
        let mut summary = StateSummary::of(&state);
        summary.jobs[0].owner = EVIL.into();
        summary.engines[0].properties = EVIL.into();
        let plain = text(|out| write_stat(out, &StateSummary::of(&state), true));
        let shown = text(|out| write_stat(out, &summary, true));
        assert!(!shown.contains('\x1b'), "{shown}");
        assert!(shown.contains(r"mallory\x1b[2J\nfake-job   active"), "{shown}");
        assert_eq!(shown.lines().count(), plain.lines().count(), "no line of the client's own:\n{shown}");
        assert!(!shown.lines().any(|line| line.starts_with("fake-job")), "{shown}");

        let reply = RejectionsReply {
            log_time_ms: 2_000,
            total: 1,
            by_kind: [("invalid-job".to_string(), 1)].into(),
            kept_max: 256,
            rejections: vec![RejectionRecord {
                seq: 7,
                time_ms: 1_000,
                kind: "invalid-job".into(),
                reason: EVIL.into(),
                subject: "gridfold.q.x\x1b[H".into(),
                by: EVIL.into(),
                source: EVIL.into(),
            }],
        };
        let shown = text(|out| write_rejections(out, &reply));
        assert!(!shown.contains('\x1b'), "{shown}");
        assert_eq!(shown.lines().count(), 3, "the count, the header and one row:\n{shown}");
        assert!(shown.lines().nth(2).is_some_and(|row| row.ends_with(r"mallory\x1b[2J\nfake-job   active")), "{shown}");
    }
}
