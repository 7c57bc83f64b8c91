//! `gridfold broker-config`: writes a nats-server configuration that enforces who
//! may write what ([`crate::log::broker_config`]), an nkey per principal, and an
//! environment file per principal for its `gridfold` commands.
//!
//! Into `--out DIR` it writes `nats-server.conf`, and for each principal
//! `<name>.nk` (its nkey seed, mode 0600) and `<name>.env` (`NATS_URL`,
//! `NATS_NKEY`, `NATS_CA`, `NATS_INBOX_PREFIX`). A principal whose `<name>.nk`
//! already exists keeps its key, so running it again with one more `--engine` adds
//! that engine and changes nobody else's credentials. It makes no certificates:
//! the server's certificate, its key and the CA are the operator's (their paths go
//! into the files).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::BadInput;
use crate::log::broker_config::{
    ClientSettings, Principal, Role, ServerSettings, check_principal_name, render_env_file,
    render_server_config,
};
use crate::core::ids::{EngineId, UserName};

/// The configuration file's name in the output directory.
pub const SERVER_CONFIG_FILE: &str = "nats-server.conf";

#[derive(Debug, Args)]
pub struct BrokerConfigArgs {
    /// The directory to write into (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// An engine id (repeatable): each gets the principal `engine-<id>`.
    #[arg(long = "engine", value_name = "ID", value_parser = parse_engine_id)]
    pub engines: Vec<EngineId>,
    /// A submitter (repeatable): its principal name is its user name on the log,
    /// under which it submits and acts on its own jobs only.
    #[arg(long = "submitter", value_name = "NAME", default_value = "submitter")]
    pub submitters: Vec<String>,
    /// An auditor's principal name (repeatable).
    #[arg(long = "auditor", value_name = "NAME", default_value = "auditor")]
    pub auditors: Vec<String>,
    /// The URL clients connect to; its host must be named in the server's certificate.
    #[arg(long, default_value = "tls://localhost:4222")]
    pub url: String,
    /// The address and port the server listens on.
    #[arg(long, default_value = "0.0.0.0:4222")]
    pub listen: String,
    /// JetStream's store directory on the server.
    #[arg(long, default_value = "/var/lib/nats")]
    pub store_dir: PathBuf,
    /// The server's TLS certificate (PEM) [default: <out>/server-cert.pem].
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The server certificate's private key (PEM) [default: <out>/server-key.pem].
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The CA certificate clients check the server's against (PEM) [default: <out>/ca.pem].
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Where each principal's files will be on its own machine, for the paths in
    /// its environment file [default: <out>].
    #[arg(long, value_name = "DIR")]
    pub client_dir: Option<PathBuf>,
}

fn parse_engine_id(text: &str) -> Result<EngineId, String> {
    EngineId::new(text).map_err(|err| err.to_string())
}

pub fn run(args: BrokerConfigArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let out = std::path::absolute(&args.out)
        .with_context(|| format!("resolving {}", args.out.display()))?;
    let roles = match roles_of(&args) {
        Ok(roles) => roles,
        Err(bad) => return Ok(super::bad_input(bad)),
    };
    let in_out = |given: &Option<PathBuf>, default: &str| -> anyhow::Result<PathBuf> {
        let path = given.clone().unwrap_or_else(|| out.join(default));
        std::path::absolute(&path).with_context(|| format!("resolving {}", path.display()))
    };
    let settings = ServerSettings {
        listen: args.listen.clone(),
        store_dir: args.store_dir.clone(),
        tls_cert_file: in_out(&args.tls_cert, "server-cert.pem")?,
        tls_key_file: in_out(&args.tls_key, "server-key.pem")?,
    };
    let ca_file = in_out(&args.tls_ca, "ca.pem")?;
    let client_dir = match &args.client_dir {
        Some(dir) => {
            std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))?
        }
        None => out.clone(),
    };

    let mut principals = Vec::with_capacity(roles.len());
    let mut kept = 0;
    for (name, role) in roles {
        let (nkey_public, was_there) = key_of(&out.join(format!("{name}.nk")))?;
        kept += usize::from(was_there);
        principals.push(Principal {
            name,
            role,
            nkey_public,
        });
    }
    for principal in &principals {
        let client = ClientSettings {
            url: args.url.clone(),
            nkey_file: client_dir.join(format!("{}.nk", principal.name)),
            ca_file: ca_file.clone(),
        };
        let env = match render_env_file(principal, &client) {
            Ok(env) => env,
            Err(bad) => return Ok(super::bad_input(BadInput(bad.to_string()))),
        };
        let path = out.join(format!("{}.env", principal.name));
        std::fs::write(&path, env).with_context(|| format!("writing {}", path.display()))?;
    }
    let config_path = out.join(SERVER_CONFIG_FILE);
    std::fs::write(&config_path, render_server_config(&settings, &principals))
        .with_context(|| format!("writing {}", config_path.display()))?;

    println!(
        "wrote {} with {} principal(s) ({} new key(s), {} kept) into {}",
        SERVER_CONFIG_FILE,
        principals.len(),
        principals.len() - kept,
        kept,
        out.display()
    );
    println!("  server:  nats-server -c {}", config_path.display());
    println!(
        "  TLS:     put the server's certificate at {}, its key at {}, the CA at {}",
        settings.tls_cert_file.display(),
        settings.tls_key_file.display(),
        ca_file.display()
    );
    println!(
        "  clients: give each principal its <name>.nk, <name>.env and the CA; then e.g.\n           set -a; . {}/engine-<id>.env; set +a; gridfold engine --name <id> ...",
        client_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Every principal, in a stable order: projector, operator, submitters, auditors, engines.
fn roles_of(args: &BrokerConfigArgs) -> Result<Vec<(String, Role)>, BadInput> {
    let mut roles = vec![
        ("projector".to_string(), Role::Projector),
        ("operator".to_string(), Role::Operator),
    ];
    // A submitter's principal name is its user name on the log: it may publish
    // only under `gridfold.ev.user.<name>.>`, and its jobs are <name>'s.
    for name in &args.submitters {
        let user = UserName::new(name)
            .map_err(|error| BadInput(format!("submitter {name:?} cannot name a user on the log: {error}")))?;
        roles.push((name.clone(), Role::Submitter(user)));
    }
    roles.extend(
        args.auditors
            .iter()
            .map(|name| (name.clone(), Role::Auditor)),
    );
    roles.extend(
        args.engines
            .iter()
            .map(|engine| (Principal::engine_name(engine), Role::Engine(engine.clone()))),
    );
    let mut seen = BTreeSet::new();
    for (name, _) in &roles {
        check_principal_name(name).map_err(BadInput)?;
        if !seen.insert(name.as_str()) {
            return Err(BadInput(format!(
                "principal {name:?} is given twice (the projector and operator are always there; engines are engine-<id>)"
            )));
        }
    }
    Ok(roles)
}

/// The public key of the seed in `path`, made (mode 0600) if the file is missing;
/// whether it was there.
fn key_of(path: &Path) -> anyhow::Result<(String, bool)> {
    if path.exists() {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let pair = nkeys::KeyPair::from_seed(text.trim()).map_err(|err| {
            BadInput(format!(
                "{} does not hold an nkey seed ({err}); remove it to make a new key",
                path.display()
            ))
        })?;
        return Ok((pair.public_key(), true));
    }
    let pair = nkeys::KeyPair::new_user();
    let seed = pair
        .seed()
        .map_err(|err| anyhow::anyhow!("encoding a new nkey seed: {err}"))?;
    write_secret(path, &format!("{seed}\n"))?;
    Ok((pair.public_key(), false))
}

/// Creates `path` readable by its owner only, and writes `text` into it.
fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
