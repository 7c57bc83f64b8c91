//! A nats-server secured as gridfold ships it: `support::secure_nats::start(&["e1", "e2"])`
//! makes a CA and a server certificate for 127.0.0.1 (rcgen), runs the real
//! `gridfold broker-config` for those engines into a temporary directory, and starts
//! nats-server with that configuration and TLS on a free loopback port with a store
//! of its own. Each principal's credentials are then at hand as its environment
//! (for `gridfold` processes) or as a [`BrokerAccess`] (for clients in the test).
//!
//! A test that cannot start the server FAILS, saying why (never skips).

use std::path::{Path, PathBuf};
use std::process::Command;

use gridfold::log::connect::{AccessSpec, BrokerAccess};
use gridfold::log::nats_server::{NatsServer, NatsServerConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The environment variables every principal's `.env` file sets.
pub const ENV_VARS: [&str; 4] = ["NATS_URL", "NATS_NKEY", "NATS_CA", "NATS_INBOX_PREFIX"];
/// What a submitter's and an operator's also set: who their commands act as.
pub const ACTING_ENV_VARS: [&str; 2] = ["GRIDFOLD_USER", "GRIDFOLD_OPERATOR"];
/// Every variable a `gridfold` command reads credentials (or whom it acts
/// as) from; cleared for children.
pub const AUTH_ENV_VARS: [&str; 11] = [
    "NATS_URL",
    "NATS_USER",
    "NATS_PASSWORD",
    "NATS_NKEY",
    "NATS_CREDS",
    "NATS_CA",
    "NATS_CERT",
    "NATS_KEY",
    "NATS_INBOX_PREFIX",
    "GRIDFOLD_USER",
    "GRIDFOLD_OPERATOR",
];

/// A CA: its certificate (PEM) and what signs with it.
pub struct TestCa {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a CA key");
        let cert = params
            .self_signed(&key)
            .expect("a self-signed CA certificate");
        TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1, and its key (both PEM).
    pub fn server_cert(&self) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("server certificate parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, "gridfold test broker");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("a server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a server certificate signed by the CA");
        (cert.pem(), key.serialize_pem())
    }
}

/// A secured nats-server and the files of its principals. Killed on drop.
pub struct SecureBroker {
    pub server: NatsServer,
    /// The configuration, the CA and every principal's `.nk` and `.env`.
    pub dir: tempfile::TempDir,
}

/// Starts a secured broker with these engines (and the projector, operator, submitter
/// and auditor that `gridfold broker-config` always makes), or panics saying why.
pub fn start(engines: &[&str]) -> SecureBroker {
    start_with(engines, &["submitter"])
}

/// [`start`], with these submitters (users) instead of the one named `submitter`.
pub fn start_with(engines: &[&str], submitters: &[&str]) -> SecureBroker {
    let dir = tempfile::Builder::new()
        .prefix("gridfold-secure-")
        .tempdir()
        .expect("a temporary directory");
    let ca = TestCa::new("gridfold test CA");
    let (cert, key) = ca.server_cert();
    for (name, text) in [
        ("ca.pem", &ca.cert_pem),
        ("server-cert.pem", &cert),
        ("server-key.pem", &key),
    ] {
        std::fs::write(dir.path().join(name), text)
            .unwrap_or_else(|err| panic!("writing {name}: {err}"));
    }
    // The server's own directory (its log, and the store the configuration names).
    let server_dir = dir.path().join("server");
    let mut args = vec![
        "broker-config".to_string(),
        "--out".to_string(),
        dir.path().display().to_string(),
        "--store-dir".to_string(),
        server_dir.join("store").display().to_string(),
    ];
    for engine in engines {
        args.extend(["--engine".to_string(), engine.to_string()]);
    }
    for submitter in submitters {
        args.extend(["--submitter".to_string(), submitter.to_string()]);
    }
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .args(&args)
        .env_remove("NATS_URL")
        .output()
        .expect("run gridfold broker-config");
    assert!(
        output.status.success(),
        "gridfold broker-config failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let config = NatsServerConfig {
        config_file: Some(dir.path().join("nats-server.conf")),
        dir: Some(server_dir),
        ..NatsServerConfig::default()
    };
    let server = NatsServer::start_with(config).unwrap_or_else(|err| {
        panic!(
            "this test needs a nats-server >= {} started with gridfold's secured configuration, and none could be:\n{err}",
            gridfold::log::nats_server::VERSION_MIN
        )
    });
    SecureBroker { server, dir }
}

impl SecureBroker {
    /// `tls://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("tls://127.0.0.1:{}", self.server.port())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn ca_file(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// The nkey seed file of `principal` (`projector`, `operator`, `submitter`,
    /// `auditor`, `engine-<id>`).
    pub fn nkey_file(&self, principal: &str) -> PathBuf {
        self.path(&format!("{principal}.nk"))
    }

    /// What `principal`'s `.env` file sets, read from it, with `NATS_URL` this server's.
    pub fn env(&self, principal: &str) -> Vec<(String, String)> {
        let path = self.path(&format!("{principal}.env"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
        let mut vars: Vec<(String, String)> = text
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .map(|line| {
                let (key, value) = line
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{}: not KEY=VALUE: {line}", path.display()));
                (key.to_string(), value.trim_matches('"').to_string())
            })
            .collect();
        let keys: Vec<&str> = vars.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(keys[..ENV_VARS.len()], ENV_VARS, "{}", path.display());
        assert!(keys[ENV_VARS.len()..].iter().all(|key| ACTING_ENV_VARS.contains(key)), "{}", path.display());
        for (key, value) in &mut vars {
            if key == "NATS_URL" {
                *value = self.url();
            }
        }
        vars
    }

    /// A `gridfold` command run as `principal`: its environment file's variables and
    /// nothing else of the credentials the test process may have in its own.
    pub fn gridfold_as(&self, principal: &str) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gridfold"));
        for var in AUTH_ENV_VARS {
            command.env_remove(var);
        }
        command
            .envs(self.env(principal))
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path());
        command
    }

    /// `principal`'s access for a client in the test, as its environment file gives it.
    pub fn access(&self, principal: &str) -> BrokerAccess {
        let vars = self.env(principal);
        let var = |name: &str| {
            vars.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        let spec = AccessSpec {
            nkey_file: var("NATS_NKEY").map(PathBuf::from),
            tls_ca_file: var("NATS_CA").map(PathBuf::from),
            inbox_prefix: var("NATS_INBOX_PREFIX"),
            ..AccessSpec::default()
        };
        BrokerAccess::load(self.url(), &spec)
            .unwrap_or_else(|err| panic!("the credentials of {principal}: {err}"))
    }

    /// What the server logged about refused operations: `Publish Violation`, `Subscription Violation`, ...
    pub fn violations(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.server.log_path()).unwrap_or_default();
        log.lines()
            .filter(|line| line.contains("Violation"))
            .map(str::to_string)
            .collect()
    }
}

/// Writes a fresh user nkey seed, known to no broker, into `dir`.
pub fn stranger_nkey(dir: &Path) -> PathBuf {
    let path = dir.join("stranger.nk");
    let seed = nkeys::KeyPair::new_user()
        .seed()
        .expect("a new seed encodes");
    std::fs::write(&path, seed).expect("write a stranger's seed");
    path
}
