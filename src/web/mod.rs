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
//! and docs/operators.md shows how to put it behind a reverse proxy that has both.
//! It answers only requests whose `Host` is one it was started for
//! ([`AllowedHosts`]): a page elsewhere that points a name of its own at this
//! address (DNS rebinding) sends that name, and is refused (421) before any
//! question reaches the projector.
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
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::Next;
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

/// The `Host` names the web view answers for: its own address (with or
/// without its port), `localhost` and `127.0.0.1` with its port, and the names
/// an operator adds (`--allowed-host`, say the name a reverse proxy passes on).
/// Names are compared without regard to case; an added name without a port
/// stands for it alone or with the web view's port, one with a port for
/// exactly that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    port: u16,
    /// (name, port): `None` for the name alone or with [`AllowedHosts::port`].
    names: Vec<(String, Option<u16>)>,
}

/// Longest `Host` a refusal repeats.
const REFUSED_HOST_SHOWN_MAX: usize = 100;

impl AllowedHosts {
    /// The defaults for an address the web view listens on, and `added` names.
    pub fn new(listening: SocketAddr, added: &[String]) -> AllowedHosts {
        let own = match listening {
            SocketAddr::V4(address) => address.ip().to_string(),
            SocketAddr::V6(address) => format!("[{}]", address.ip()),
        };
        let port = listening.port();
        let mut names = vec![(own, None), ("localhost".to_string(), Some(port)), ("127.0.0.1".to_string(), Some(port))];
        names.extend(added.iter().map(|name| {
            let (name, named_port) = split_port(name.trim());
            (name.to_ascii_lowercase(), named_port)
        }));
        AllowedHosts { port, names }
    }

    /// Whether a request naming `host` (its `Host` header) is answered.
    pub fn allows(&self, host: &str) -> bool {
        let (name, port) = split_port(host.trim());
        self.names.iter().any(|(allowed, allowed_port)| {
            allowed.eq_ignore_ascii_case(name)
                && match allowed_port {
                    Some(allowed_port) => port == Some(*allowed_port),
                    None => port.is_none() || port == Some(self.port),
                }
        })
    }
}

/// `name:port` as (name, port); a bracketed IPv6 address keeps its brackets.
/// Anything after the name that is not a port leaves the whole as the name.
fn split_port(host: &str) -> (&str, Option<u16>) {
    let name_end = match host.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(host.len(), |end| end + 2),
        None => host.rfind(':').unwrap_or(host.len()),
    };
    let (name, rest) = host.split_at(name_end);
    if rest.is_empty() {
        return (name, None);
    }
    match rest.strip_prefix(':').and_then(|port| port.parse().ok()) {
        Some(port) => (name, Some(port)),
        None => (host, None),
    }
}

/// Serves the web view on `listener` until the process ends, sampling
/// throughput once a second; a request whose `Host` is not in `hosts` is
/// answered 421 and goes no further.
pub async fn serve(listener: tokio::net::TcpListener, source: Source, hosts: AllowedHosts) -> std::io::Result<()> {
    let app = Arc::new(App { source, ring: Mutex::new(Ring::default()), streams: Arc::new(Semaphore::new(STREAMS_MAX)) });
    tokio::spawn(sample_throughput(app.clone()));
    let router = Router::new()
        .route("/assets/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }))
        .route("/assets/live.js", get(|| async { asset("text/javascript; charset=utf-8", LIVE_JS) }))
        .route("/live", get(live))
        .fallback(page)
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(Arc::new(hosts), only_allowed_hosts));
    axum::serve(listener, router).await
}

/// Lets a request through only when its `Host` is allowed; else 421, saying which names are.
async fn only_allowed_hosts(State(hosts): State<Arc<AllowedHosts>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    if host.as_deref().is_some_and(|host| hosts.allows(host)) {
        return next.run(request).await;
    }
    let named = match &host {
        Some(host) => {
            let shown: String = host.chars().take(REFUSED_HOST_SHOWN_MAX).collect();
            format!("the host {}", crate::human::printable(&shown))
        }
        None => "a request without a Host".to_string(),
    };
    let body = format!(
        "gridfold web does not answer for {named}: only for its own address, localhost and the names it was started with (--allowed-host)\n"
    );
    (
        StatusCode::MISDIRECTED_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
        body,
    )
        .into_response()
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

/// `stat`, listing at most `jobs_max` jobs (the first).
async fn stat(app: &App, job: Option<&str>, jobs_max: usize) -> Result<StateSummary, AskError> {
    let request = query::StatRequest {
        job: job.map(str::to_string),
        limit: Some(u32::try_from(jobs_max).unwrap_or(u32::MAX)),
        ..query::StatRequest::default()
    };
    app.source.ask(query::STAT_SUBJECT, &request).await
}

async fn why(app: &App, task: &str) -> Result<WhyAnswer, AskError> {
    app.source.ask(query::WHY_SUBJECT, &query::WhyRequest { task: task.to_string() }).await
}

async fn render_or_fail(app: &App, view: &View) -> Result<Html, AskError> {
    Ok(match view {
        View::Overview => {
            let summary = stat(app, None, views::ROWS_MAX).await?;
            let plot = app.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner).svg();
            views::overview(&summary, &plot)
        }
        View::Engines => views::engines(&stat(app, None, 0).await?),
        View::Job(job) => {
            let summary = stat(app, Some(job), 1).await?;
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
        let Ok(summary) = stat(&app, None, 0).await else { continue };
        let sample = Sample {
            at_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            tasks_done: summary.tasks_done,
            tasks_failed: summary.tasks_failed,
        };
        app.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_hosts_it_was_started_for_are_answered() {
        let hosts = AllowedHosts::new("127.0.0.1:8080".parse().unwrap(), &["Grid.Example.org".into(), "proxy.example:8443".into()]);
        for allowed in ["127.0.0.1:8080", "127.0.0.1", "localhost:8080", "LOCALHOST:8080", "grid.example.org", "grid.example.org:8080", "proxy.example:8443"] {
            assert!(hosts.allows(allowed), "{allowed}");
        }
        for refused in ["evil.example", "evil.example:8080", "localhost", "localhost:80", "127.0.0.1:9", "grid.example.org:443", "proxy.example", "", "127.0.0.1:8080:1", "127.0.0.1.evil.example:8080"] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        let v6 = AllowedHosts::new("[::1]:9000".parse().unwrap(), &[]);
        assert!(v6.allows("[::1]:9000") && v6.allows("[::1]") && v6.allows("localhost:9000"));
        assert!(!v6.allows("[::2]:9000") && !v6.allows("::1"));
        assert_eq!(split_port("[::1]:80"), ("[::1]", Some(80)));
        assert_eq!(split_port("name:http"), ("name:http", None));
    }
}
