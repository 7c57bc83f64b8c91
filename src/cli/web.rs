//! `gridfold web`: serves the live web view ([`crate::web`]).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use clap::Args;

use super::client::{block_on, NatsArgs};
use crate::log::connect::ConnectFailure;
use crate::web::source::Source;

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Address to serve on. Loopback by default: put a reverse proxy with TLS and
    /// authentication in front of it to serve others (see docs/operators.md, "The web view").
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// A `Host` name to answer for besides the listening address, `localhost`
    /// and `127.0.0.1` (repeatable): the name a reverse proxy passes on. A name
    /// without a port stands for it alone or with the listening port. Requests
    /// for any other host are refused (421), so a page elsewhere cannot read
    /// this one by pointing its own name at this address (DNS rebinding).
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    #[command(flatten)]
    pub nats: NatsArgs,
}

pub fn run(args: WebArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let (client, refusals) = match args.nats.access()?.connect("gridfold-web", Duration::from_secs(5)).await {
            Ok(connected) => connected,
            Err(ConnectFailure::Refused(detail)) => anyhow::bail!("{detail} (broker at {})", args.nats.url),
            Err(ConnectFailure::Unreachable(detail)) => {
                return Err(anyhow!("{detail}").context(format!("cannot reach the NATS broker at {}", args.nats.url)));
            }
        };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let address = listener.local_addr().context("the listening address")?;
        if !address.ip().is_loopback() {
            tracing::warn!(
                "serving on {address}, not a loopback address: the web view has no TLS or authentication of its own; \
                 it answers only for {address}, localhost and the --allowed-host names"
            );
        }
        let hosts = crate::web::AllowedHosts::new(address, &args.allowed_hosts);
        eprintln!("gridfold web: serving http://{address}/ (asking the projector through {})", args.nats.url);
        crate::web::serve(listener, Source::new(client, refusals), hosts).await.context("serving the web view")?;
        Ok(ExitCode::SUCCESS)
    })
}
