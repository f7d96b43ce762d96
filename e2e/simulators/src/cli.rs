//! The command line shared by the simulator binaries (`provisioning-sim`, `ox-soap-sim`).
//!
//! Both take `--listen ADDR` (default `127.0.0.1:0`, a free port), `--admin-user NAME`,
//! `--admin-password-file FILE` (or the environment variable `SIM_ADMIN_PASSWORD`) and
//! `--seed FILE` (JSON, the simulator's seed format). The first line they print on standard
//! output is `listening on http://ADDR:PORT`; they run until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::http::{Protocol, SimServer};

/// Why a simulator binary cannot start.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The admin password file cannot be read.
    #[error("cannot read the admin password file {path}: {source}")]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No admin password was given.
    #[error(
        "no admin password: pass --admin-password-file FILE or set the environment variable SIM_ADMIN_PASSWORD"
    )]
    NoPassword,
    /// The seed file cannot be read.
    #[error("cannot read the seed file {path}: {source}")]
    SeedFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The seed file is not valid for this simulator.
    #[error("the seed file {path} is not valid: {message}")]
    Seed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for a signal failed.
    #[error("cannot wait for a termination signal: {0}")]
    Signal(std::io::Error),
}

/// The options every simulator binary has.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "SIM_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The admin user the simulator accepts.
    #[arg(long, env = "SIM_ADMIN_USER", default_value = "admin")]
    pub admin_user: String,
    /// A file holding the admin password (a trailing newline is ignored). Without it the
    /// password comes from the environment variable SIM_ADMIN_PASSWORD.
    #[arg(long, env = "SIM_ADMIN_PASSWORD_FILE")]
    pub admin_password_file: Option<PathBuf>,
    /// A JSON file with objects to start with.
    #[arg(long, env = "SIM_SEED")]
    pub seed: Option<PathBuf>,
}

impl CommonArgs {
    /// The admin password, from the file or the environment.
    pub fn admin_password(&self) -> Result<String, CliError> {
        if let Some(path) = &self.admin_password_file {
            let text = std::fs::read_to_string(path).map_err(|source| CliError::PasswordFile {
                path: path.clone(),
                source,
            })?;
            return Ok(text.trim_end_matches(['\n', '\r']).to_string());
        }
        std::env::var("SIM_ADMIN_PASSWORD").map_err(|_| CliError::NoPassword)
    }
}

/// The whole life of a simulator binary named `name`: applies the seed file of `common` (if
/// any) to the simulator `build` makes, serves it on `common.listen` until it is told to stop,
/// and answers the process's exit code; a failure is printed as `name: message`.
pub async fn main<P: Protocol>(
    name: &str,
    common: &CommonArgs,
    build: impl FnOnce(String) -> P,
) -> std::process::ExitCode {
    let served = async {
        let protocol = build(common.admin_password()?);
        if let Some(seed) = &common.seed {
            apply_seed(&protocol, seed)?;
        }
        serve(protocol, common.listen).await
    };
    match served.await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Reads a seed file and applies it to a simulator.
pub fn apply_seed<P: Protocol>(protocol: &P, path: &Path) -> Result<(), CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::SeedFile {
        path: path.to_path_buf(),
        source,
    })?;
    let seed: serde_json::Value = serde_json::from_str(&text).map_err(|e| CliError::Seed {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    protocol.seed_json(&seed).map_err(|message| CliError::Seed {
        path: path.to_path_buf(),
        message,
    })
}

/// Starts `protocol` on `addr`, prints `listening on http://ADDR` as the first line of
/// standard output, and serves until SIGTERM or Ctrl-C.
pub async fn serve<P: Protocol>(protocol: P, addr: SocketAddr) -> Result<(), CliError> {
    let server = SimServer::start_on(protocol, addr)
        .await
        .map_err(|source| CliError::Listen { addr, source })?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        // The demo reads this line; a closed stdout is no reason to stop serving.
        let _ = writeln!(out, "listening on {}", server.base_url());
        let _ = out.flush();
    }
    let waited = wait_for_termination().await;
    server.stop().await;
    waited
}

#[cfg(unix)]
async fn wait_for_termination() -> Result<(), CliError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(CliError::Signal)?;
    tokio::select! {
        _ = term.recv() => Ok(()),
        r = tokio::signal::ctrl_c() => r.map_err(CliError::Signal),
    }
}

#[cfg(not(unix))]
async fn wait_for_termination() -> Result<(), CliError> {
    tokio::signal::ctrl_c().await.map_err(CliError::Signal)
}
