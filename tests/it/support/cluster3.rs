//! Three nats-servers on loopback, routed to each other as one cluster with
//! JetStream: `support::cluster3::BrokerCluster::start(dir)`. Each node has its own
//! client port, cluster port and store under `dir/n<i>`, fixed for its life, so a
//! node killed with SIGKILL ([`BrokerCluster::kill`]) comes back
//! ([`BrokerCluster::restart`]) as the same member, with its store, and catches up.
//!
//! [`BrokerCluster::url`] names all three servers, comma-separated, as gridfold's
//! `--nats` takes them. [`BrokerCluster::wait_for_jetstream`] makes the log stream
//! with three replicas (R3), retrying while the cluster elects its meta leader, so
//! that no `gridfold` command creates it with one replica first.
//!
//! A test that cannot start the cluster FAILS, saying why (never skips).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gridfold::log::jetstream::{JetStreamLog, LogConfig};
use gridfold::log::nats_server::{NatsServer, NatsServerConfig};

/// The cluster's name in every node's configuration.
const CLUSTER_NAME: &str = "gridfold-test";
/// How long the cluster gets to elect a meta leader and take the R3 stream.
const JETSTREAM_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`BrokerCluster::lead_on`] tries to move one group's leadership.
const LEADER_MOVE_TIMEOUT: Duration = Duration::from_secs(15);

pub struct BrokerCluster {
    pub nodes: Vec<NatsServer>,
    client_ports: Vec<u16>,
}

impl BrokerCluster {
    /// Starts three nodes with stores under `dir`, or panics saying why.
    pub fn start(dir: &Path) -> BrokerCluster {
        let client_ports: Vec<u16> = (0..3).map(|_| super::nats::unused_port()).collect();
        let cluster_ports: Vec<u16> = (0..3).map(|_| super::nats::unused_port()).collect();
        let mut nodes = Vec::new();
        for (node, &client_port) in client_ports.iter().enumerate() {
            let node_dir = dir.join(format!("n{}", node + 1));
            std::fs::create_dir_all(&node_dir).expect("a node's directory");
            let config_file = node_dir.join("nats-server.conf");
            std::fs::write(&config_file, node_config(node, &node_dir, &cluster_ports))
                .expect("writing a node's configuration");
            let server = NatsServer::start_with(NatsServerConfig {
                dir: Some(node_dir.clone()),
                port: Some(client_port),
                config_file: Some(config_file),
                ready_timeout: Duration::from_secs(20),
                ..NatsServerConfig::default()
            })
            .unwrap_or_else(|err| {
                panic!(
                    "this test needs three nats-servers >= {} in a cluster and node {} could not be started:\n{err}",
                    gridfold::log::nats_server::VERSION_MIN,
                    node + 1
                )
            });
            nodes.push(server);
        }
        BrokerCluster { nodes, client_ports }
    }

    /// Every node's URL, comma-separated.
    pub fn url(&self) -> String {
        let urls: Vec<String> = self.client_ports.iter().map(|port| format!("nats://127.0.0.1:{port}")).collect();
        urls.join(",")
    }

    /// One node's URL.
    pub fn node_url(&self, node: usize) -> String {
        format!("nats://127.0.0.1:{}", self.client_ports[node])
    }

    /// SIGKILL one node, as a crash would.
    pub fn kill(&mut self, node: usize) {
        self.nodes[node].kill();
    }

    /// Starts a killed node again on its ports and store, or panics with its log.
    pub fn restart(&mut self, node: usize) {
        self.nodes[node].start_again().unwrap_or_else(|err| {
            panic!("could not restart node {} of the broker cluster: {err}", node + 1)
        });
    }

    pub fn is_running(&mut self, node: usize) -> bool {
        self.nodes[node].is_running()
    }

    /// The last lines of every node's log, for a failing test.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut report = String::new();
        for (node, server) in self.nodes.iter().enumerate() {
            report.push_str(&format!("--- nats-server n{} ({}):\n{}\n", node + 1, self.node_url(node), server.log_tail(lines)));
        }
        report
    }

    /// Waits until the cluster answers JetStream requests (it has elected its meta
    /// leader), making no stream; panics after [`JETSTREAM_READY_TIMEOUT`].
    pub fn wait_for_meta_leader(&self, runtime: &tokio::runtime::Runtime) {
        let started = Instant::now();
        let servers: Vec<String> = self.client_ports.iter().map(|port| format!("nats://127.0.0.1:{port}")).collect();
        let client = runtime
            .block_on(async_nats::connect(servers))
            .unwrap_or_else(|err| panic!("cannot connect to the three-node cluster: {err}"));
        let jetstream = runtime.block_on(async { async_nats::jetstream::new(client) });
        while let Err(err) = runtime.block_on(jetstream.query_account()) {
            assert!(
                started.elapsed() < JETSTREAM_READY_TIMEOUT,
                "the three-node cluster's JetStream did not answer within {JETSTREAM_READY_TIMEOUT:?}: {err}\n{}",
                self.log_tails(20)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// SIGKILL of every node (each comes back with [`BrokerCluster::restart`]).
    pub fn kill_all(&mut self) {
        for node in 0..self.nodes.len() {
            self.kill(node);
        }
    }

    /// Deletes the streams `names` (those missing are skipped), retrying while the
    /// cluster elects its leaders; panics after [`JETSTREAM_READY_TIMEOUT`].
    pub fn delete_streams(&self, runtime: &tokio::runtime::Runtime, names: &[&str]) {
        let servers: Vec<String> = self.client_ports.iter().map(|port| format!("nats://127.0.0.1:{port}")).collect();
        let started = Instant::now();
        let result: Result<(), String> = runtime.block_on(async {
            let client = async_nats::connect(servers).await.map_err(|err| err.to_string())?;
            let jetstream = async_nats::jetstream::new(client);
            for name in names {
                loop {
                    match jetstream.delete_stream(name).await {
                        Ok(_) => break,
                        Err(err) if err.to_string().contains("not found") => break,
                        Err(err) if started.elapsed() >= JETSTREAM_READY_TIMEOUT => return Err(format!("{name}: {err}")),
                        Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                    }
                }
            }
            Ok(())
        });
        if let Err(err) = result {
            panic!("could not delete the streams {names:?}: {err}\n{}", self.log_tails(20));
        }
    }

    /// The replicas of stream `name`, as the cluster reports them.
    pub fn stream_replicas(&self, runtime: &tokio::runtime::Runtime, name: &str) -> Result<usize, String> {
        let servers: Vec<String> = self.client_ports.iter().map(|port| format!("nats://127.0.0.1:{port}")).collect();
        runtime.block_on(async {
            let client = async_nats::connect(servers).await.map_err(|err| err.to_string())?;
            let jetstream = async_nats::jetstream::new(client);
            let mut stream = jetstream.get_stream(name).await.map_err(|err| format!("stream {name}: {err}"))?;
            let info = stream.info().await.map_err(|err| format!("stream {name}: {err}"))?;
            Ok(info.config.num_replicas)
        })
    }

    /// Moves the leadership of each Raft group in `groups` (`STREAM` or
    /// `STREAM/CONSUMER`) to node `node`, asking its leader to step down in favour
    /// of it (`$JS.API.*.LEADER.STEPDOWN` with a preferred placement) until it leads
    /// or [`LEADER_MOVE_TIMEOUT`] passed. The groups it leads at the end.
    pub fn lead_on(&self, runtime: &tokio::runtime::Runtime, node: usize, groups: &[&str]) -> Vec<String> {
        let servers: Vec<String> = self.client_ports.iter().map(|port| format!("nats://127.0.0.1:{port}")).collect();
        let wanted = format!("n{}", node + 1);
        runtime.block_on(async {
            let Ok(client) = async_nats::connect(servers).await else { return Vec::new() };
            let mut led = Vec::new();
            for group in groups {
                let api = match group.split_once('/') {
                    Some((stream, consumer)) => format!("CONSUMER.{{}}.{stream}.{consumer}"),
                    None => format!("STREAM.{{}}.{group}"),
                };
                let started = Instant::now();
                while started.elapsed() < LEADER_MOVE_TIMEOUT {
                    let info = client.request(format!("$JS.API.{}", api.replace("{}", "INFO")), "".into()).await;
                    let leader = info.ok().and_then(|reply| serde_json::from_slice::<serde_json::Value>(&reply.payload).ok())
                        .and_then(|info| info["cluster"]["leader"].as_str().map(str::to_string));
                    if leader.as_deref() == Some(wanted.as_str()) {
                        led.push(group.to_string());
                        break;
                    }
                    let stepdown = format!("$JS.API.{}", api.replace("{}", "LEADER.STEPDOWN"));
                    let preferred = serde_json::json!({ "placement": { "preferred": wanted } }).to_string();
                    let _ = client.request(stepdown, preferred.into()).await;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            led
        })
    }

    /// Makes the log stream with three replicas, retrying until the cluster has
    /// elected its JetStream meta leader and placed the stream; panics after
    /// [`JETSTREAM_READY_TIMEOUT`] with every node's log.
    pub fn wait_for_jetstream(&self, runtime: &tokio::runtime::Runtime) {
        let started = Instant::now();
        let config = LogConfig {
            replicas: 3,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            ..LogConfig::default()
        };
        loop {
            let attempt = runtime.block_on(JetStreamLog::connect(&self.url(), config.clone()));
            match attempt {
                Ok(_) => return,
                Err(err) if started.elapsed() < JETSTREAM_READY_TIMEOUT => {
                    let _ = err;
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(err) => panic!(
                    "the three-node cluster did not take an R3 log stream within {JETSTREAM_READY_TIMEOUT:?}: {err}\n{}",
                    self.log_tails(20)
                ),
            }
        }
    }
}

/// A node's configuration: its name, its store, and routes to the other two.
fn node_config(node: usize, node_dir: &Path, cluster_ports: &[u16]) -> String {
    let store: PathBuf = node_dir.join("store");
    let routes: Vec<String> = cluster_ports
        .iter()
        .enumerate()
        .filter(|&(other, _)| other != node)
        .map(|(_, port)| format!("\"nats-route://127.0.0.1:{port}\""))
        .collect();
    format!(
        "server_name: n{name}\n\
         jetstream {{\n  store_dir: {store:?}\n  max_memory_store: 256MB\n  max_file_store: 2GB\n}}\n\
         cluster {{\n  name: {CLUSTER_NAME}\n  listen: \"127.0.0.1:{listen}\"\n  routes: [{routes}]\n}}\n",
        name = node + 1,
        store = store.display().to_string(),
        listen = cluster_ports[node],
        routes = routes.join(", "),
    )
}
