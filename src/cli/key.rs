//! `gridfold key`: the projector keys that make order batches the projector's.
//!
//! - `key show --state DIR` prints the public key of a projector's state
//!   directory (making the key on first use, as the projector would).
//! - `key register KEY --name NAME` publishes `ProjectorKeyRegistered`: an
//!   operator's act, on `gridfold.ev.op.keys`, which the shipped broker
//!   configuration lets only operators publish. From then on the fold accepts the
//!   batches that key seals.
//! - `key revoke KEY` publishes `ProjectorKeyRevoked`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::client::{block_on, connect_log, publish, NatsArgs};
use super::{bad_input, BadInput};
use crate::core::event::Event;
use crate::projector::key::{parse_public_key, ProjectorKey};

#[derive(Debug, Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub command: KeyCommand,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Print the public key of a projector's state directory (made on first use).
    Show {
        /// The projector's state directory.
        #[arg(long)]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Register a projector's public key (64 hex digits): its batches are accepted from now on.
    Register {
        key: String,
        /// A name for people, 1 to 64 characters ("projector on node-a").
        #[arg(long)]
        name: String,
        #[command(flatten)]
        nats: NatsArgs,
    },
    /// Revoke a projector's public key: batches it seals are refused from now on.
    Revoke {
        key: String,
        #[command(flatten)]
        nats: NatsArgs,
    },
}

pub fn run(args: KeyArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        KeyCommand::Show { state, json } => {
            let key = ProjectorKey::load_or_create(&state)?;
            if json {
                println!("{}", serde_json::json!({ "state": state, "public_key": key.public_hex() }));
            } else {
                println!("{}", key.public_hex());
            }
            Ok(ExitCode::SUCCESS)
        }
        KeyCommand::Register { key, name, nats } => {
            let key = match parse_public_key(&key) {
                Ok(key) => key,
                Err(problem) => return Ok(bad_input(BadInput(format!("key: {problem}")))),
            };
            if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
                return Ok(bad_input(BadInput("--name: 1 to 64 printable characters".into())));
            }
            let seq = block_on(async {
                let log = connect_log(&nats).await?;
                publish(&log, "gridfold-cli", Event::ProjectorKeyRegistered { key, name }).await
            })?;
            println!("projector key {} registered at seq {seq}", hex::encode(key));
            Ok(ExitCode::SUCCESS)
        }
        KeyCommand::Revoke { key, nats } => {
            let key = match parse_public_key(&key) {
                Ok(key) => key,
                Err(problem) => return Ok(bad_input(BadInput(format!("key: {problem}")))),
            };
            let seq = block_on(async {
                let log = connect_log(&nats).await?;
                publish(&log, "gridfold-cli", Event::ProjectorKeyRevoked { key }).await
            })?;
            println!("projector key {} revoked at seq {seq}", hex::encode(key));
            Ok(ExitCode::SUCCESS)
        }
    }
}
