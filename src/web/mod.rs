//! `gridfold web`: the live web view for operators and users (axum on tokio).
//!
//! What it reads: only the projector's answers to queries on `gridfold.q.*`
//! (`stat`, `why`, `rejections`, ...), over one broker connection, the same
//! questions the command line asks, so it can run on any machine that reaches
//! the broker. What it keeps: a bounded ring of throughput samples
//! ([`plot::SAMPLES_MAX`]) for the plot, nothing else.
//!
//! What it never does: publish anything, read the log or the object store, hold
//! scheduling state, or put a byte of an answer into a page unescaped (every
//! page is built by [`html::Html`], which escapes all text; the pages are served
//! with a Content-Security-Policy that allows only the embedded script). It has
//! no authentication and no TLS of its own: it binds to loopback by default,
//! and the README shows how to put it behind a reverse proxy that has both.
//!
//! Pages are rendered on the server ([`views`]); the embedded script
//! (`assets/live.js`, hand-written, no third-party code) opens a server-sent
//! event stream on `/live?path=PAGE` and puts each fresh rendering of the page's
//! content in place, once a second ([`UPDATE_INTERVAL`]).

pub mod html;
pub mod plot;
pub mod source;
pub mod views;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::projector::query::{self, RejectionsReply, StateSummary};
use crate::projector::results;

use self::html::Html;
use self::plot::{Ring, Sample};
use self::source::{AskError, Source};
use self::views::{View, WhyAnswer};

/// How often a page's content is sent again.
pub const UPDATE_INTERVAL: Duration = Duration::from_secs(1);
/// Live streams served at once; one more is refused (503) until one closes.
pub const STREAMS_MAX: usize = 256;
/// How long one live stream lasts before the browser is asked to open another
/// (it does so by itself), so a forgotten tab does not hold a slot for ever.
pub const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// Only this page's own script and stylesheet; inline styles (the progress bars' widths) allowed.
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";
const STYLE_CSS: &str = include_str!("assets/style.css");
const LIVE_JS: &str = include_str!("assets/live.js");

struct App {
    source: Source,
    ring: Mutex<Ring>,
    streams: Arc<Semaphore>,
}

/// Serves the web view on `listener` until the process ends, sampling
/// throughput once a second.
pub async fn serve(listener: tokio::net::TcpListener, source: Source) -> std::io::Result<()> {
    let app = Arc::new(App { source, ring: Mutex::new(Ring::default()), streams: Arc::new(Semaphore::new(STREAMS_MAX)) });
    tokio::spawn(sample_throughput(app.clone()));
    let router = Router::new()
        .route("/assets/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }))
        .route("/assets/live.js", get(|| async { asset("text/javascript; charset=utf-8", LIVE_JS) }))
        .route("/live", get(live))
        .fallback(page)
        .with_state(app);
    axum::serve(listener, router).await
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

fn html_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Any page: rendered whole, its content refreshed by the script afterwards.
async fn page(State(app): State<Arc<App>>, method: Method, uri: Uri) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, "only GET").into_response();
    }
    let Some(view) = View::of_path(uri.path(), uri.query()) else {
        let mut html = Html::new();
        html.raw("<p class=\"error\">no such page: ").text(uri.path()).raw("</p>");
        return html_response(StatusCode::NOT_FOUND, views::page(&View::Overview, &html));
    };
    let fragment = render(&app, &view).await;
    html_response(StatusCode::OK, views::page(&view, &fragment))
}

#[derive(Deserialize)]
struct LiveParams {
    path: String,
}

/// `/live?path=PAGE`: the page's content, rendered afresh every [`UPDATE_INTERVAL`].
async fn live(State(app): State<Arc<App>>, Query(params): Query<LiveParams>) -> Response {
    let (path, query) = match params.path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (params.path.as_str(), None),
    };
    let Some(view) = View::of_path(path, query) else {
        return (StatusCode::NOT_FOUND, "no such page").into_response();
    };
    let Ok(permit) = app.streams.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many live views open").into_response();
    };
    let mut ticks = tokio::time::interval(UPDATE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ends = Instant::now() + STREAM_LIFETIME;
    let stream = futures::stream::unfold((app, view, ticks, permit), move |(app, view, mut ticks, permit)| async move {
        if Instant::now() >= ends {
            return None;
        }
        ticks.tick().await;
        let fragment = render(&app, &view).await;
        let event = SseEvent::default().event("update").data(fragment.into_string());
        Some((Ok::<_, Infallible>(event), (app, view, ticks, permit)))
    });
    let mut response = Sse::new(stream).keep_alive(KeepAlive::default()).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    response
}

/// A page's content, from the projector's answers; an answer missing is said in its place.
async fn render(app: &App, view: &View) -> Html {
    match render_or_fail(app, view).await {
        Ok(html) => html,
        Err(error) => views::error(&error.to_string()),
    }
}

async fn stat(app: &App, job: Option<&str>) -> Result<StateSummary, AskError> {
    app.source.ask(query::STAT_SUBJECT, &query::StatRequest { job: job.map(str::to_string), state_digest: false }).await
}

async fn why(app: &App, task: &str) -> Result<WhyAnswer, AskError> {
    app.source.ask(query::WHY_SUBJECT, &query::WhyRequest { task: task.to_string() }).await
}

async fn render_or_fail(app: &App, view: &View) -> Result<Html, AskError> {
    Ok(match view {
        View::Overview => {
            let summary = stat(app, None).await?;
            let plot = app.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner).svg();
            views::overview(&summary, &plot)
        }
        View::Engines => views::engines(&stat(app, None).await?),
        View::Job(job) => {
            let summary = stat(app, Some(job)).await?;
            let mut html = views::job(&summary, job);
            if summary.jobs.iter().any(|found| &found.id == job) {
                let request = results::TasksRequest { job: job.clone(), limit: Some(views::ROWS_MAX as u32), ..Default::default() };
                let tasks: results::TasksReply = app.source.ask(results::TASKS_SUBJECT, &request).await?;
                html.push(&views::tasks_table(&tasks));
            }
            html
        }
        View::Task { job, index } => {
            let reply = why(app, &format!("{job}/{index}")).await?;
            let mut html = Html::new();
            html.raw("<p>").link(&View::Job(job.clone()).path(), format!("job {job}")).raw("</p>");
            let task: results::TaskReply =
                app.source.ask(results::TASK_SUBJECT, &results::TaskRequest { task: format!("{job}/{index}") }).await?;
            html.push(&views::task_attempts(&task));
            html.raw("<h2>Why</h2>").push(&views::why(&reply));
            html
        }
        View::Rejections => {
            let reply: RejectionsReply = app.source.ask(query::REJECTIONS_SUBJECT, &query::RejectionsRequest::default()).await?;
            views::rejections(&reply)
        }
        View::Policy => {
            let reply: query::PolicyReply = app.source.ask(query::POLICY_SUBJECT, &query::PolicyRequest {}).await?;
            views::policy(&reply)
        }
        View::Why(task) => {
            let reply = match task {
                Some(task) => Some(why(app, task).await?),
                None => None,
            };
            views::why_page(task.as_deref(), reply.as_ref())
        }
    })
}

/// Asks for the task counters once a second, for the throughput plot.
async fn sample_throughput(app: Arc<App>) {
    let started = Instant::now();
    let mut ticks = tokio::time::interval(UPDATE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Ok(summary) = stat(&app, None).await else { continue };
        let sample = Sample {
            at_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            tasks_done: summary.tasks_done,
            tasks_failed: summary.tasks_failed,
        };
        app.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(sample);
    }
}
