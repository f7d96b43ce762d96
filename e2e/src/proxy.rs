//! A TCP proxy on loopback that the test can cut: every connection through it is dropped and
//! new ones are refused (its port is closed), as when a replica loses its network to the API
//! server. The test owns both ends; nothing here looks inside the bytes (TLS passes through,
//! and the API server's certificate names 127.0.0.1, so a kubeconfig pointed at the proxy
//! verifies as usual).

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use stagehand_simulators::http::LoggedRequest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy from a free port of 127.0.0.1 to `upstream`. Cut when dropped.
#[derive(Debug)]
pub struct CutProxy {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl CutProxy {
    /// Starts forwarding every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        let task = tokio::spawn(accept(listener, upstream, cut_rx));
        Ok(Self { addr, cut, task })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every connection and refuses new ones (the port is closed), for good.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// A copy of the kubeconfig at `kubeconfig` whose clusters point at this proxy (same CA,
    /// same token), written to a temp file; its path.
    pub fn kubeconfig(&self, kubeconfig: &str) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read {kubeconfig}: {e}"));
        let mut config: serde_norway::Value = serde_norway::from_str(&text)
            .unwrap_or_else(|e| panic!("{kubeconfig} is not YAML: {e}"));
        let server = format!("https://{}", self.addr);
        if let Some(clusters) = config["clusters"].as_sequence_mut() {
            for cluster in clusters {
                cluster["cluster"]["server"] = serde_norway::Value::String(server.clone());
            }
        }
        let path = std::env::temp_dir().join(format!(
            "stagehand-proxy-{}-{}.kubeconfig",
            std::process::id(),
            self.addr.port()
        ));
        let out = serde_norway::to_string(&config)
            .unwrap_or_else(|e| panic!("cannot write the kubeconfig: {e}"));
        std::fs::write(&path, out)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut.send_replace(true);
        self.task.abort();
    }
}

/// The extra arguments of one replica of a two-replica test: its Lease identity `id`, which
/// the User-Agent of its requests names (see [`replica_of`]), and probe and metrics ports of
/// its own.
pub fn replica_args(id: &str) -> [&str; 6] {
    [
        "--leader-election-identity",
        id,
        "--probe-address",
        "127.0.0.1:0",
        "--metrics-address",
        "127.0.0.1:0",
    ]
}

/// The replica that sent a request a simulator logged, from its User-Agent
/// (`stagehand/<version> (<identity>)`); `unknown` when it names none.
pub fn replica_of(request: &LoggedRequest) -> &str {
    request
        .user_agent
        .as_deref()
        .and_then(|ua| ua.rsplit_once(" ("))
        .and_then(|(_, id)| id.strip_suffix(')'))
        .unwrap_or("unknown")
}

/// The `host:port` of the first cluster of a kubeconfig (the API server it names).
pub fn api_server_of(kubeconfig: &str) -> SocketAddr {
    let text = std::fs::read_to_string(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read {kubeconfig}: {e}"));
    let config: serde_norway::Value =
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{kubeconfig} is not YAML: {e}"));
    let server = config["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap_or_else(|| panic!("{kubeconfig} names no server"));
    let host_port = server
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    host_port
        .parse()
        .unwrap_or_else(|e| panic!("the server {server} is not an IP:port: {e}"))
}

async fn accept(listener: TcpListener, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            // Returning drops the listener: the port refuses connections from now on.
            _ = cut.wait_for(|c| *c) => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((mut client, _)) = accepted else {
            continue;
        };
        let mut cut = cut.clone();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(upstream).await else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = cut.wait_for(|c| *c) => {}
            }
            // Both sockets are dropped here: the connection is gone on both sides.
        });
    }
}
