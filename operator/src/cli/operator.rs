//! `stagehand operator`: logging set-up, then the controllers until SIGTERM/SIGINT.

use tracing_subscriber::EnvFilter;

use super::{EXIT_OK, EXIT_USAGE, LogFormat};

/// Runs the operator; returns the exit code.
pub fn run(namespace: Option<String>, log_format: LogFormat) -> u8 {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if let Err(e) = installed {
        eprintln!("stagehand operator: cannot set up logging: {e}");
        return EXIT_USAGE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stagehand operator: cannot start the async runtime: {e}");
            return EXIT_USAGE;
        }
    };
    runtime.block_on(async {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("stagehand operator: cannot connect: {e}");
                return EXIT_USAGE;
            }
        };
        crate::run::controller::run(client, namespace).await;
        EXIT_OK
    })
}
