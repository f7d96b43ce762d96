//! The commands that talk to a cluster: a small runtime and a client of the current
//! kubeconfig.

use super::output::EXIT_USAGE;

/// A small multi-threaded runtime for the commands that talk to a cluster; `None` (after
/// saying why on stderr) when it cannot start.
pub fn runtime(command: &str) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("stagehand {command}: cannot start the async runtime: {e}");
            None
        }
    }
}

/// Runs `f` with a client of the current kubeconfig on a small runtime; exit 2 when there is
/// no runtime or no usable kubeconfig.
pub fn with_client<F, Fut>(command: &str, f: F) -> u8
where
    F: FnOnce(kube::Client) -> Fut,
    Fut: std::future::Future<Output = u8>,
{
    let Some(runtime) = runtime(command) else {
        return EXIT_USAGE;
    };
    runtime.block_on(async {
        match kube::Client::try_default().await {
            Ok(client) => f(client).await,
            Err(e) => {
                eprintln!("stagehand {command}: cannot connect with the current kubeconfig: {e}");
                EXIT_USAGE
            }
        }
    })
}
