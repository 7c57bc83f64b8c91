//! `gridfold web` in a real browser: a real nats-server, `gridfold projector`,
//! `gridfold engine` and `gridfold web` processes, and Debian's chromium, headless,
//! driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: the
//! browser reads commands on fd 3 and writes answers on fd 4, each message JSON
//! ended by a NUL byte; no crate, no port).
//!
//! A test that cannot start chromium FAILS (never skips), saying how to install it
//! (`.ci/install-chromium`). Screenshots are saved under `target/web-screenshots/`
//! for a person to look at. The `Host` check needs no browser: plain requests
//! naming one host or another.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use support::procs::Cluster;

const POLICY: &str = "\
engine_timeout_secs = 10
";

/// The longest a wait on the page may take.
const PAGE_WAIT: Duration = Duration::from_secs(60);

/// The chromium to use: `$GRIDFOLD_CHROMIUM`, else `chromium` on the PATH, else
/// `/usr/bin/chromium`; a clear failure when there is none.
fn chromium_path() -> PathBuf {
    if let Some(path) = std::env::var_os("GRIDFOLD_CHROMIUM") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|candidate| candidate.is_file());
    let path = on_path.unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.is_file(),
        "this test needs chromium (Debian's `chromium` package) and found none on the PATH or at /usr/bin/chromium: \
         run .ci/install-chromium (apt-get install -y chromium), or set GRIDFOLD_CHROMIUM"
    );
    path
}

/// A headless chromium, killed when dropped, spoken to over its DevTools pipe.
struct Browser {
    child: Child,
    commands: std::fs::File,
    answers: mpsc::Receiver<Value>,
    next_id: u64,
    /// The page's session, once attached.
    session: Option<String>,
    _profile: tempfile::TempDir,
}

/// A pipe: (read end, write end), both close-on-exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`, which we then own.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(made, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both were just opened by pipe2 and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    fn start(screen: (u32, u32)) -> Browser {
        let chromium = chromium_path();
        let profile = tempfile::Builder::new().prefix("gridfold-chromium-").tempdir().expect("a profile directory");
        let (their_commands, our_commands) = pipe();
        let (our_answers, their_answers) = pipe();
        let (to_fd3, to_fd4) = (their_commands.as_raw_fd(), their_answers.as_raw_fd());
        let mut command = Command::new(&chromium);
        command
            .args([
                "--headless",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
            ])
            .arg(format!("--window-size={},{}", screen.0, screen.1))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(profile.path().join("chromium.stderr")).expect("a stderr file"));
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // Out of the way first (either could be 3 or 4), then into place; dup2 clears close-on-exec.
                let high_in = libc::fcntl(to_fd3, libc::F_DUPFD_CLOEXEC, 10);
                let high_out = libc::fcntl(to_fd4, libc::F_DUPFD_CLOEXEC, 10);
                if high_in < 0 || high_out < 0 || libc::dup2(high_in, 3) < 0 || libc::dup2(high_out, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap_or_else(|err| panic!("cannot start {}: {err}", chromium.display()));
        drop((their_commands, their_answers));
        let (sender, answers) = mpsc::channel();
        let reader = std::fs::File::from(our_answers);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(reader);
            loop {
                let mut message = Vec::new();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                message.pop_if(|byte| *byte == 0);
                let Ok(value) = serde_json::from_slice::<Value>(&message) else { continue };
                if sender.send(value).is_err() {
                    return;
                }
            }
        });
        Browser { child, commands: std::fs::File::from(our_commands), answers, next_id: 1, session: None, _profile: profile }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self._profile.path().join("chromium.stderr")).unwrap_or_default()
    }

    /// Sends a command (to the page's session once attached) and waits for its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        match self.try_call(method, params) {
            Ok(result) => result,
            Err(answer) => panic!("chromium refused {method}: {answer}"),
        }
    }

    /// As [`Browser::call`], with chromium's refusal as the error.
    fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("a command serialises");
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap_or_else(|err| panic!("chromium's pipe: {err}\n{}", self.stderr()));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .answers
                .recv_timeout(left)
                .unwrap_or_else(|err| panic!("no answer from chromium to {method} ({err})\n{}", self.stderr()));
            if answer["id"] == json!(id) {
                return if answer.get("error").is_some() { Err(answer) } else { Ok(answer["result"].clone()) };
            }
        }
    }

    /// Opens `url` in a new tab and attaches to it.
    fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().expect("a target id").to_string();
        let attached = self.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}));
        self.session = Some(attached["sessionId"].as_str().expect("a session id").to_string());
        self.call("Page.enable", json!({}));
        self.call("Runtime.enable", json!({}));
        self.navigate(url);
    }

    fn navigate(&mut self, url: &str) {
        let navigated = self.call("Page.navigate", json!({"url": url}));
        assert!(navigated.get("errorText").is_none(), "navigating to {url}: {navigated}");
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true}));
        assert!(result.get("exceptionDetails").is_none(), "{expression}: {result}");
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it is true, failing after [`PAGE_WAIT`] with `describe`'s value.
    fn wait_until(&mut self, what: &str, expression: &str, describe: &str) {
        let started = Instant::now();
        loop {
            // Right after a navigation the new document may have no body yet: not yet, not an error.
            if self.eval(&format!("(() => {{ try {{ return ({expression}) === true; }} catch (e) {{ return false; }} }})()")) == json!(true) {
                return;
            }
            if started.elapsed() > PAGE_WAIT {
                let seen = self.eval(describe);
                panic!("waiting for {what}: not within {PAGE_WAIT:?}; the page shows:\n{seen}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Saves a PNG of the page under `target/web-screenshots/NAME.png`.
    fn screenshot(&mut self, name: &str) -> PathBuf {
        // Right after a live update replaces the page's content chromium may see a
        // page of no width for a moment ("Cannot take screenshot with 0 width"):
        // try again a few times, then shoot the viewport alone.
        let mut shot = None;
        for _ in 0..10 {
            match self.try_call("Page.captureScreenshot", json!({"format": "png", "captureBeyondViewport": true})) {
                Ok(taken) => {
                    shot = Some(taken);
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
        let shot = shot.unwrap_or_else(|| self.call("Page.captureScreenshot", json!({"format": "png"})));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-screenshots");
        std::fs::create_dir_all(&dir).expect("create target/web-screenshots");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write a screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 GET on loopback: (status line, body).
fn http_get(address: &str, path: &str) -> Result<(String, String), String> {
    http_get_for(address, address, path)
}

/// One HTTP/1.1 GET on loopback naming `host` as its `Host`: (status line, body).
fn http_get_for(address: &str, host: &str, path: &str) -> Result<(String, String), String> {
    let mut stream = std::net::TcpStream::connect(address).map_err(|err| err.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|err| err.to_string())?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").map_err(|err| err.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|err| err.to_string())?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("no header end")?;
    Ok((head.lines().next().unwrap_or_default().to_string(), body.to_string()))
}

/// The address `gridfold web` says it serves on, from its stderr.
fn served_address(cluster: &mut Cluster, web: usize) -> String {
    cluster.wait_for("gridfold web to listen", Duration::from_secs(30), |cluster| {
        let stderr = cluster.proc(web).stderr();
        stderr
            .split("serving http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .map(str::to_string)
            .ok_or(stderr)
    })
}

/// What the test's job prints: markup that must show as text, never run.
const EVIL_OUTPUT: &str = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>";

#[test]
fn a_job_submitted_while_the_page_is_open_appears_and_reaches_done_without_a_reload() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    cluster.engine("e1", "e1", 2, &cluster.path("work-e1"));
    cluster.wait_logged_in(&["e1"]);
    let url = cluster.url();
    let web = cluster.spawn("web", &["web", "--listen", "127.0.0.1:0", "--nats", &url]);
    let address = served_address(&mut cluster, web);

    // The page loads, and the script keeps it current through server-sent events.
    let mut browser = Browser::start((1280, 900));
    browser.open(&format!("http://{address}/"));
    browser.wait_until(
        "the overview with its engine, updated live",
        "document.querySelector('tr[data-engine=\"e1\"]') !== null && Number(document.body.dataset.updates || 0) >= 2",
        "document.body.innerText",
    );
    browser.eval("window.sameDocument = 'not reloaded'; true");
    let updates_before = browser.eval("Number(document.body.dataset.updates)").as_u64().expect("a count");

    // A job submitted now, whose output is markup (an owner cannot be: the fold
    // refuses an owner that is not a user name).
    let job = format!(
        "id = \"webjob\"\nowner = \"tester\"\ntasks = 4\n\n[task]\nargv = [\"sh\", \"-c\", {:?}]\n",
        format!("sleep 1; printf '%s\\n' 'output of {{index}}' '{EVIL_OUTPUT}'")
    );
    let file = cluster.write("webjob.toml", &job);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
    browser.wait_until(
        "webjob to appear on the open page",
        "document.querySelector('tr[data-job=\"webjob\"]') !== null",
        "document.body.innerText",
    );
    browser.screenshot("1-overview-job-running");
    browser.wait_until(
        "webjob to reach done on the open page",
        "document.querySelector('tr[data-job=\"webjob\"]')?.dataset.status === 'done'",
        "document.body.innerText",
    );
    assert_eq!(browser.eval("window.sameDocument"), json!("not reloaded"), "the page was never reloaded");
    let updates_after = browser.eval("Number(document.body.dataset.updates)").as_u64().expect("a count");
    assert!(updates_after > updates_before, "server-sent updates arrived: {updates_before} then {updates_after}");
    let row = browser.eval("document.querySelector('tr[data-job=\"webjob\"]').innerText").as_str().unwrap_or_default().to_string();
    assert!(row.contains("4/4") && row.contains("tester"), "the job's row: {row}");
    browser.screenshot("2-overview-job-done");

    assert_eq!(browser.eval("typeof window.pwned"), json!("undefined"), "no markup from a job ran");
    assert_eq!(browser.eval("document.querySelectorAll('script').length"), json!(1), "only the page's own script");
    assert_eq!(browser.eval("document.querySelectorAll('main img').length"), json!(0), "no element from a job");

    // The job's page lists its tasks; a task's page shows its attempts and output, as text.
    browser.navigate(&format!("http://{address}/jobs/webjob"));
    browser.wait_until(
        "the job page with its four tasks done",
        "document.querySelectorAll('tr[data-task][data-state=\"done\"]').length === 4",
        "document.body.innerText",
    );
    browser.screenshot("3-job");
    browser.navigate(&format!("http://{address}/tasks/webjob/2"));
    browser.wait_until(
        "the task page with its output",
        "document.querySelector('pre.output')?.innerText.includes('output of 2') \
         && document.querySelector('pre.output').innerText.includes('<script>window.pwned=1</script>')",
        "document.body.innerText",
    );
    assert_eq!(browser.eval("typeof window.pwned"), json!("undefined"), "no output ran");
    assert_eq!(browser.eval("document.querySelectorAll('main img, main script').length"), json!(0), "no element from output");
    browser.screenshot("4-task");

    // The engines, with their properties; the rejections; why for a task.
    browser.navigate(&format!("http://{address}/engines"));
    browser.wait_until("the engines page", "document.body.innerText.includes('os=linux')", "document.body.innerText");
    browser.screenshot("5-engines");
    browser.navigate(&format!("http://{address}/why?task=webjob%2F0"));
    browser.wait_until("why webjob/0", "document.querySelector('pre.why') !== null", "document.body.innerText");
    browser.screenshot("6-why");
    // The policy in force, from the projector's answer: the test's policy set engine_timeout_secs 10.
    browser.navigate(&format!("http://{address}/policy"));
    browser.wait_until(
        "the policy page",
        "document.querySelector('pre.policy') !== null && document.querySelector('pre.policy').innerText.includes('engine_timeout_secs = 10')",
        "document.body.innerText",
    );
    let policy_text = browser.eval("document.querySelector('main').innerText").as_str().unwrap_or_default().to_string();
    assert!(policy_text.contains("the policy in force, set at seq"), "{policy_text}");
    assert!(policy_text.contains("algorithm = \"sge-plain\""), "policy files' names, not Rust's: {policy_text}");
    browser.screenshot("7-policy");

    // Without the browser: an unknown page is a 404, a job id with markup comes back escaped.
    let (status, _) = http_get(&address, "/no/such/page").expect("GET");
    assert!(status.contains(" 404 "), "{status}");
    let (status, body) = http_get(&address, "/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E").expect("GET");
    assert!(status.contains(" 200 "), "{status}");
    assert!(!body.contains("<script>alert") && body.contains("no job &lt;script&gt;alert(1)&lt;/script&gt;"), "{body}");
    assert!(cluster.proc(web).poll_exit().is_none(), "gridfold web still serves");
}

/// DNS rebinding: a page on evil.example that points its name at the web view's
/// address sends `Host: evil.example`, and gets nothing; the web view's own
/// address, `localhost` with its port and the names given by `--allowed-host` are answered.
#[test]
fn a_request_for_another_host_is_refused_and_the_listening_address_and_allowed_names_are_answered() {
    let mut cluster = Cluster::start(POLICY);
    let url = cluster.url();
    let web = cluster.spawn("web", &["web", "--listen", "127.0.0.1:0", "--nats", &url, "--allowed-host", "grid.example.org"]);
    let address = served_address(&mut cluster, web);
    let port = address.rsplit_once(':').map(|(_, port)| port.to_string()).expect("an address with a port");

    for host in ["evil.example", &format!("evil.example:{port}"), "grid.example.org:1", "localhost"] {
        for path in ["/", "/live?path=/", "/assets/live.js", "/jobs/x"] {
            let (status, body) = http_get_for(&address, host, path).expect("GET");
            assert!(status.contains(" 421 "), "Host {host}, {path}: {status}\n{body}");
            assert!(body.contains("does not answer for the host") && body.contains("--allowed-host"), "{body}");
            assert!(!body.contains("<html") && !body.contains("gridfold.q"), "nothing of the page: {body}");
        }
    }
    for host in [address.clone(), "127.0.0.1".into(), format!("localhost:{port}"), "grid.example.org".into(), format!("GRID.example.org:{port}")] {
        let (status, body) = http_get_for(&address, &host, "/assets/live.js").expect("GET");
        assert!(status.contains(" 200 "), "Host {host}: {status}\n{body}");
        let (status, body) = http_get_for(&address, &host, "/").expect("GET");
        assert!(status.contains(" 200 ") && body.contains("<main id=\"live\""), "Host {host}: {status}\n{body}");
    }
    assert!(cluster.proc(web).poll_exit().is_none(), "gridfold web still serves");
}
