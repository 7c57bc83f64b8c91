//! A nats-server per test: `support::nats::start()` finds the executable
//! (`$GRIDFOLD_NATS_SERVER`, `nats-server` on the PATH, `.venv/bin/nats-server`),
//! starts it on a free loopback port with JetStream and a store of its own, and
//! kills it when the returned value is dropped.
//!
//! A test that needs a broker and cannot start one FAILS (never skips), with what was
//! tried and how to install one (`.ci/install-nats-server`).

pub use gridfold::log::nats_server::NatsServer;

/// Starts a private nats-server, or panics saying why and how to get one.
pub fn start() -> NatsServer {
    NatsServer::start().unwrap_or_else(|err| {
        panic!(
            "this test needs a nats-server >= {} and none could be started:\n{err}",
            gridfold::log::nats_server::VERSION_MIN
        )
    })
}

/// Stops and starts the server again on the same port and store, or panics.
pub fn restart(server: &mut NatsServer) {
    server
        .restart()
        .unwrap_or_else(|err| panic!("could not restart nats-server on {}: {err}", server.url()));
}

/// A loopback port nobody listens on (bound, then released), for a broker that is not there.
pub fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
