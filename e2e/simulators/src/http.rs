//! The framework every simulator runs on: an in-process HTTP server on a loopback port, fault
//! injection, a request log and the `/_sim/` control API.
//!
//! A simulator implements [`Protocol`] (how to answer a request, what its normal error body
//! looks like, how to dump and seed its state) and is started with [`SimServer::start`], or
//! over TLS with [`SimServer::start_tls`] and a certificate the test makes.
//!
//! # Fault injection
//!
//! A [`FaultRule`] matches requests by method, path (exact or prefix) and protocol operation
//! (the SOAP operation for OX), and picks which of the matching requests it hits
//! ([`When`]: the Nth, every one from the Nth on, or all). Each rule counts the requests it
//! matches from the moment it is added. The first rule that fires decides what happens
//! ([`FaultKind`]): an error status with the API's own error body, a hang (no answer until the
//! server stops; the client must time out), a dropped connection (closed without a byte of
//! answer), a delay before the normal answer, or an oversized answer (any number of bytes,
//! streamed, with or without a `Content-Length`). With `after_apply` the request is carried out
//! first and the fault replaces its answer (a change made, but its answer lost).
//!
//! # Control API (not logged, never faulted, no authentication)
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /_sim/faults` | `[{"id", "rule", "matched", "fired"}]` |
//! | `POST /_sim/faults` with a [`FaultRule`] as JSON | `201 {"id": n}` (`400 {"error"}` when malformed) |
//! | `DELETE /_sim/faults` | `200 {"cleared": n}` |
//! | `DELETE /_sim/faults/{id}` | `200 {"removed": true\|false}` |
//! | `GET /_sim/requests` | `[`[`LoggedRequest`]`]` |
//! | `DELETE /_sim/requests` | `200 {"cleared": n}` |
//! | `GET /_sim/state` | the simulator's state as JSON (no passwords) |
//! | `POST /_sim/seed` with seed JSON | `200 {"seeded": true}` (`400 {"error"}`) |
//! | `GET /_sim/health` | `200 ok` |

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The largest request body a simulator reads.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// One request as a simulator sees it: the whole body is read before it is answered.
#[derive(Debug, Clone)]
pub struct SimRequest {
    /// The HTTP method.
    pub method: Method,
    /// The path, without the query string, still percent-encoded.
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The request headers.
    pub headers: HeaderMap,
    /// The request body.
    pub body: Bytes,
    /// When it reached the simulator (its body read), by the wall clock.
    pub received: SystemTime,
}

/// What a simulator implements to run on [`SimServer`].
pub trait Protocol: Send + Sync + 'static {
    /// The operation a request names, if the protocol has operations (the SOAP operation of an
    /// OX request, such as `change`). Fault rules with an `op` match against it, and the request
    /// log records it.
    fn operation(&self, _request: &SimRequest) -> Option<String> {
        None
    }

    /// The object a changing request is for, as the request log records it (the kill matrix
    /// counts changes per object): the OX user or group a `change` renames, the mailbox a
    /// secondary account `delete` removes, the UDM object a `POST` creates. `None` (the
    /// default): the path names it, or the request changes nothing.
    fn object(&self, _request: &SimRequest) -> Option<String> {
        None
    }

    /// Answers a request (everything outside `/_sim/`).
    fn handle(&self, request: &SimRequest) -> Response;

    /// The answer to an injected error status, with the body the real API sends with it.
    fn fault_response(&self, status: StatusCode, request: &SimRequest) -> Response;

    /// The state as JSON, for `GET /_sim/state` (never any password).
    fn state_json(&self) -> serde_json::Value;

    /// Adds the objects described by `seed` to the state (the format is the simulator's own,
    /// see its module documentation). Answers a message for the operator when it is malformed.
    fn seed_json(&self, seed: &serde_json::Value) -> Result<(), String>;
}

/// Which method and path a [`FaultRule`] matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathMatch {
    /// The path equals this.
    Exact(String),
    /// The path starts with this.
    Prefix(String),
}

impl PathMatch {
    fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => path == p,
            PathMatch::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

/// Which of the requests a rule matches it fires on (counted from 1, from when the rule was
/// added). JSON: `"all"`, `{"nth": 3}` or `{"from": 3}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Every matching request.
    #[default]
    All,
    /// Only the Nth matching request.
    Nth(u64),
    /// The Nth matching request and every one after it.
    From(u64),
}

impl When {
    fn fires(self, count: u64) -> bool {
        match self {
            When::All => true,
            When::Nth(n) => count == n,
            When::From(n) => count >= n,
        }
    }
}

/// What happens to a request a rule fires on. JSON: `{"kind": "status", "status": 503,
/// "retry_after": 2}`, `{"kind": "hang"}`, `{"kind": "drop"}`, `{"kind": "delay", "ms": 500}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultKind {
    /// Answer this status with the API's own error body for it (401 with the API's
    /// authentication error, 500 with its server error, ...), plus `Retry-After` when given.
    Status {
        /// The HTTP status.
        status: u16,
        /// Seconds for a `Retry-After` header.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
    },
    /// Never answer (until the server stops): the client has to time out.
    Hang,
    /// Close the connection without sending any answer.
    Drop,
    /// Wait this long, then answer normally.
    Delay {
        /// Milliseconds to wait.
        ms: u64,
    },
    /// Answer `200 OK` with a body of `bytes` bytes (spaces), streamed in 64 KiB chunks and
    /// never held whole: an answer larger than a client should read. With `declare_length`
    /// the answer says its `Content-Length`; without it, it is sent chunked.
    Oversized {
        /// The size of the body.
        bytes: u64,
        /// Whether the answer declares its length.
        #[serde(default)]
        declare_length: bool,
    },
}

/// A fault injection rule. JSON example:
/// `{"method": "DELETE", "path": {"prefix": "/v1/subscriptions/"}, "when": {"nth": 2},
/// "fault": {"kind": "status", "status": 500}}`; `op` matches a protocol operation
/// (`"op": "change"` for OX renames) and `after_apply: true` carries the request out before
/// the fault replaces its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRule {
    /// The HTTP method to match (any when absent), case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The path to match (any when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathMatch>,
    /// The protocol operation to match (any when absent), such as the SOAP operation `change`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Which matching requests the rule fires on.
    #[serde(default)]
    pub when: When,
    /// Carry the request out first, then replace its answer by the fault (ignored for delays).
    #[serde(default)]
    pub after_apply: bool,
    /// What happens.
    pub fault: FaultKind,
}

impl FaultRule {
    /// A rule matching every request; narrow it with the builder methods.
    pub fn any() -> Self {
        FaultRule {
            method: None,
            path: None,
            op: None,
            when: When::All,
            after_apply: false,
            fault: FaultKind::Status {
                status: 500,
                retry_after: None,
            },
        }
    }

    /// A rule matching requests to exactly this path.
    pub fn path(path: &str) -> Self {
        FaultRule {
            path: Some(PathMatch::Exact(path.to_string())),
            ..FaultRule::any()
        }
    }

    /// A rule matching requests whose path starts with `prefix`.
    pub fn prefix(prefix: &str) -> Self {
        FaultRule {
            path: Some(PathMatch::Prefix(prefix.to_string())),
            ..FaultRule::any()
        }
    }

    /// A rule matching requests for the protocol operation `op` (a SOAP operation).
    pub fn op(op: &str) -> Self {
        FaultRule {
            op: Some(op.to_string()),
            ..FaultRule::any()
        }
    }

    /// Only requests with this method.
    pub fn method(mut self, method: &str) -> Self {
        self.method = Some(method.to_string());
        self
    }

    /// Also require the operation `op`.
    pub fn with_op(mut self, op: &str) -> Self {
        self.op = Some(op.to_string());
        self
    }

    /// Fire on the Nth matching request only.
    pub fn nth(mut self, n: u64) -> Self {
        self.when = When::Nth(n);
        self
    }

    /// Fire on the Nth matching request and every later one.
    pub fn from_nth(mut self, n: u64) -> Self {
        self.when = When::From(n);
        self
    }

    /// Carry the request out before injecting the fault.
    pub fn after_apply(mut self) -> Self {
        self.after_apply = true;
        self
    }

    /// Answer with `status` and the API's error body.
    pub fn status(mut self, status: u16) -> Self {
        self.fault = FaultKind::Status {
            status,
            retry_after: None,
        };
        self
    }

    /// Answer with `status`, the API's error body and `Retry-After: seconds`.
    pub fn status_retry_after(mut self, status: u16, seconds: u64) -> Self {
        self.fault = FaultKind::Status {
            status,
            retry_after: Some(seconds),
        };
        self
    }

    /// Never answer.
    pub fn hang(mut self) -> Self {
        self.fault = FaultKind::Hang;
        self
    }

    /// Close the connection without an answer.
    pub fn drop_connection(mut self) -> Self {
        self.fault = FaultKind::Drop;
        self
    }

    /// Answer normally after `ms` milliseconds.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.fault = FaultKind::Delay { ms };
        self
    }

    /// Answer `200 OK` with `bytes` bytes of body, declaring its length or not.
    pub fn oversized(mut self, bytes: u64, declare_length: bool) -> Self {
        self.fault = FaultKind::Oversized {
            bytes,
            declare_length,
        };
        self
    }

    fn matches(&self, method: &Method, path: &str, op: Option<&str>) -> bool {
        if let Some(m) = &self.method
            && !m.eq_ignore_ascii_case(method.as_str())
        {
            return false;
        }
        if let Some(p) = &self.path
            && !p.matches(path)
        {
            return false;
        }
        if let Some(o) = &self.op
            && op != Some(o.as_str())
        {
            return false;
        }
        true
    }
}

/// A rule as installed, with its counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledRule {
    /// The id to remove it by.
    pub id: u64,
    /// The rule.
    pub rule: FaultRule,
    /// How many requests it matched.
    pub matched: u64,
    /// How many of them it fired on.
    pub fired: u64,
}

#[derive(Debug, Default)]
struct FaultTable {
    next_id: u64,
    rules: Vec<InstalledRule>,
}

/// The fault rules of one server; cheap to clone, shared with the server.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<FaultTable>>);

impl Faults {
    fn table(&self) -> MutexGuard<'_, FaultTable> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Installs a rule; answers its id.
    pub fn add(&self, rule: FaultRule) -> u64 {
        let mut table = self.table();
        table.next_id += 1;
        let id = table.next_id;
        table.rules.push(InstalledRule {
            id,
            rule,
            matched: 0,
            fired: 0,
        });
        id
    }

    /// Removes one rule; answers whether it was there.
    pub fn remove(&self, id: u64) -> bool {
        let mut table = self.table();
        let before = table.rules.len();
        table.rules.retain(|r| r.id != id);
        table.rules.len() != before
    }

    /// Removes every rule; answers how many there were.
    pub fn clear(&self) -> usize {
        let mut table = self.table();
        let n = table.rules.len();
        table.rules.clear();
        n
    }

    /// The installed rules with their counters.
    pub fn rules(&self) -> Vec<InstalledRule> {
        self.table().rules.clone()
    }

    /// Counts the request against every rule it matches and answers the first rule that fires.
    fn check(&self, method: &Method, path: &str, op: Option<&str>) -> Option<FaultRule> {
        let mut table = self.table();
        let mut chosen = None;
        for installed in table.rules.iter_mut() {
            if !installed.rule.matches(method, path, op) {
                continue;
            }
            installed.matched += 1;
            if chosen.is_none() && installed.rule.when.fires(installed.matched) {
                installed.fired += 1;
                chosen = Some(installed.rule.clone());
            }
        }
        chosen
    }
}

/// One entry of the request log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedRequest {
    /// The position in the log, from 1.
    pub seq: u64,
    /// The HTTP method.
    pub method: String,
    /// The path (no query string).
    pub path: String,
    /// The protocol operation, if any (the SOAP operation).
    pub op: Option<String>,
    /// The object the request changes where its path does not name it ([`Protocol::object`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// The status answered; `None` when no answer was sent (hang, drop).
    pub status: Option<u16>,
    /// The fault injected, if any: `status`, `hang`, `drop`, `delay` or `oversized`.
    pub fault: Option<String>,
    /// The request's `User-Agent` (Stagehand names its replica there), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// When it reached the simulator (its body read, before any delay a fault adds), in
    /// milliseconds since the Unix epoch: what a test compares with a Lease's `renewTime`.
    #[serde(default)]
    pub received_unix_ms: u64,
}

#[derive(Debug, Default)]
struct RequestLog {
    next: u64,
    entries: Vec<LoggedRequest>,
}

struct Shared<P> {
    protocol: P,
    faults: Faults,
    log: Mutex<RequestLog>,
    shutdown: watch::Receiver<bool>,
}

impl<P: Protocol> Shared<P> {
    fn log(&self) -> MutexGuard<'_, RequestLog> {
        self.log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record(
        &self,
        request: &SimRequest,
        op: Option<String>,
        status: Option<u16>,
        fault: Option<&str>,
    ) {
        let object = self.protocol.object(request);
        let mut log = self.log();
        log.next += 1;
        let seq = log.next;
        log.entries.push(LoggedRequest {
            seq,
            method: request.method.to_string(),
            path: request.path.clone(),
            op,
            object,
            status,
            fault: fault.map(str::to_string),
            user_agent: request
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            received_unix_ms: request
                .received
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        });
    }

    async fn until_shutdown(&self) {
        let mut rx = self.shutdown.clone();
        // An error means the sender is gone, which also means the server stops.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// A running simulator. Stops on [`SimServer::stop`] or when dropped.
pub struct SimServer<P: Protocol> {
    shared: Arc<Shared<P>>,
    addr: SocketAddr,
    /// `http`, or `https` when started with [`SimServer::start_tls`].
    scheme: &'static str,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl<P: Protocol> std::fmt::Debug for SimServer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl<P: Protocol> SimServer<P> {
    /// Starts the simulator on a free port of 127.0.0.1.
    pub async fn start(protocol: P) -> io::Result<Self> {
        Self::start_on(protocol, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts the simulator on a free port of 127.0.0.1, serving HTTPS with the certificate
    /// chain `cert_pem` (the server's certificate first) and its private key `key_pem`; a
    /// failed handshake (a client that does not trust the certificate) closes that connection.
    pub async fn start_tls(protocol: P, cert_pem: &str, key_pem: &str) -> io::Result<Self> {
        let acceptor = tls_acceptor(cert_pem, key_pem)?;
        Self::serve(
            protocol,
            SocketAddr::from(([127, 0, 0, 1], 0)),
            Some(acceptor),
        )
        .await
    }

    /// Starts the simulator on `addr` (port 0 picks a free port).
    pub async fn start_on(protocol: P, addr: SocketAddr) -> io::Result<Self> {
        Self::serve(protocol, addr, None).await
    }

    async fn serve(
        protocol: P,
        addr: SocketAddr,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            protocol,
            faults: Faults::default(),
            log: Mutex::new(RequestLog::default()),
            shutdown: shutdown_rx.clone(),
        });
        let app = Router::new()
            .fallback(dispatch::<P>)
            .with_state(Arc::clone(&shared));
        let mut stop = shutdown_rx;
        let task = tokio::spawn(async move {
            axum::serve(
                KillableListener { listener, tls },
                app.into_make_service_with_connect_info::<ConnKill>(),
            )
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
        });
        Ok(SimServer {
            shared,
            addr,
            scheme,
            shutdown,
            task: Some(task),
        })
    }

    /// The address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` over TLS; no trailing slash).
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The simulator itself: its state, to seed and to inspect.
    pub fn state(&self) -> &P {
        &self.shared.protocol
    }

    /// The fault rules.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// The requests seen so far (outside `/_sim/`), oldest first.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.shared.log().entries.clone()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        self.shared.log().entries.clear();
    }

    /// Stops the server: no new connections, hanging requests are released (their connections
    /// closed without an answer), and waits up to five seconds for open connections to finish.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl<P: Protocol> Drop for SimServer<P> {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The kill switch of one connection: set, the connection fails its next read or write, so
/// the server closes it without sending anything more.
#[derive(Debug, Clone)]
struct ConnKill(Arc<AtomicBool>);

impl ConnKill {
    fn kill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Connected<IncomingStream<'_, KillableListener>> for ConnKill {
    fn connect_info(stream: IncomingStream<'_, KillableListener>) -> Self {
        ConnKill(Arc::clone(&stream.io().killed))
    }
}

struct KillableListener {
    listener: TcpListener,
    /// Set, every connection is a TLS one.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

/// How long a client may take over its TLS handshake before its connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Listener for KillableListener {
    type Io = KillableIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((inner, addr)) => {
                    let _ = inner.set_nodelay(true);
                    let inner = match &self.tls {
                        None => Stream::Plain(inner),
                        // A client that refuses the certificate ends its handshake at once.
                        Some(acceptor) => {
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(inner))
                                .await
                            {
                                Ok(Ok(tls)) => Stream::Tls(Box::new(tls)),
                                _ => continue,
                            }
                        }
                    };
                    return (
                        KillableIo {
                            inner,
                            killed: Arc::new(AtomicBool::new(false)),
                        },
                        addr,
                    );
                }
                // Out of file descriptors and the like: wait, as axum's own listener does.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// The TLS side of a simulator: the certificate chain and key from PEM.
fn tls_acceptor(cert_pem: &str, key_pem: &str) -> io::Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let invalid = |what: &str, e: &dyn std::fmt::Display| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {e}"))
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("the certificate chain", &e))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| invalid("the private key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS versions", &e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid("the certificate", &e))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A connection, in plain text or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

struct KillableIo {
    inner: Stream,
    killed: Arc<AtomicBool>,
}

impl KillableIo {
    fn check(&self) -> io::Result<()> {
        if self.killed.load(Ordering::SeqCst) {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection dropped by fault injection",
            ))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for KillableIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A JSON answer.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec());
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A plain-text answer.
pub fn text_response(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        text.to_string(),
    )
        .into_response()
}

async fn dispatch<P: Protocol>(
    State(shared): State<Arc<Shared<P>>>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return text_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
    };
    let request = SimRequest {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts.headers,
        body,
        received: SystemTime::now(),
    };
    if request.path == "/_sim" || request.path.starts_with("/_sim/") {
        return control(&shared, &request);
    }
    // A real server carries out a request whose client hung up; hyper drops the handler of a
    // closed connection, so the request is answered by a task of its own.
    let answer = tokio::spawn(answer(shared, conn, request));
    answer.await.unwrap_or_else(|_| {
        text_response(StatusCode::INTERNAL_SERVER_ERROR, "the simulator failed")
    })
}

/// Carries out a request outside `/_sim/`, with the fault a rule injects.
async fn answer<P: Protocol>(
    shared: Arc<Shared<P>>,
    conn: ConnKill,
    request: SimRequest,
) -> Response {
    let op = shared.protocol.operation(&request);
    let rule = shared
        .faults
        .check(&request.method, &request.path, op.as_deref());
    let Some(rule) = rule else {
        let response = shared.protocol.handle(&request);
        shared.record(&request, op, Some(response.status().as_u16()), None);
        return response;
    };
    if rule.after_apply && !matches!(rule.fault, FaultKind::Delay { .. }) {
        // The change happens; its answer is replaced by the fault.
        let _ = shared.protocol.handle(&request);
    }
    match rule.fault {
        FaultKind::Status {
            status,
            retry_after,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = shared.protocol.fault_response(status, &request);
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            shared.record(&request, op, Some(status.as_u16()), Some("status"));
            response
        }
        FaultKind::Delay { ms } => {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = shared.until_shutdown() => {}
            }
            let response = shared.protocol.handle(&request);
            shared.record(
                &request,
                op,
                Some(response.status().as_u16()),
                Some("delay"),
            );
            response
        }
        FaultKind::Oversized {
            bytes,
            declare_length,
        } => {
            shared.record(&request, op, Some(200), Some("oversized"));
            oversized_response(bytes, declare_length)
        }
        FaultKind::Hang => {
            shared.record(&request, op, None, Some("hang"));
            shared.until_shutdown().await;
            conn.kill();
            never_sent()
        }
        FaultKind::Drop => {
            shared.record(&request, op, None, Some("drop"));
            conn.kill();
            never_sent()
        }
    }
}

/// `200 OK` with `bytes` spaces, produced 64 KiB at a time as the client reads them.
fn oversized_response(bytes: u64, declare_length: bool) -> Response {
    const CHUNK: u64 = 64 * 1024;
    let filler = Bytes::from(vec![b' '; CHUNK as usize]);
    let chunks = futures::stream::unfold(bytes, move |left| {
        let filler = filler.clone();
        async move {
            (left > 0).then(|| {
                let n = left.min(CHUNK);
                (
                    Ok::<_, std::convert::Infallible>(filler.slice(..n as usize)),
                    left - n,
                )
            })
        }
    });
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json");
    if declare_length {
        builder = builder.header(header::CONTENT_LENGTH, bytes);
    }
    builder.body(Body::from_stream(chunks)).unwrap_or_default()
}

/// The answer of a killed connection: it fails to be written, so nothing reaches the client.
fn never_sent() -> Response {
    Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .body(Body::empty())
        .unwrap_or_default()
}

fn control<P: Protocol>(shared: &Shared<P>, request: &SimRequest) -> Response {
    let path = request.path.trim_end_matches('/');
    let method = &request.method;
    match (method.as_str(), path) {
        ("GET", "/_sim/health") => text_response(StatusCode::OK, "ok"),
        ("GET", "/_sim/faults") => json_response(
            StatusCode::OK,
            &serde_json::to_value(shared.faults.rules()).unwrap_or_default(),
        ),
        ("POST", "/_sim/faults") => match serde_json::from_slice::<FaultRule>(&request.body) {
            Ok(rule) => {
                let id = shared.faults.add(rule);
                json_response(StatusCode::CREATED, &serde_json::json!({ "id": id }))
            }
            Err(e) => json_response(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({ "error": format!("not a fault rule: {e}") }),
            ),
        },
        ("DELETE", "/_sim/faults") => {
            let n = shared.faults.clear();
            json_response(StatusCode::OK, &serde_json::json!({ "cleared": n }))
        }
        ("GET", "/_sim/requests") => {
            let entries = shared.log().entries.clone();
            json_response(
                StatusCode::OK,
                &serde_json::to_value(entries).unwrap_or_default(),
            )
        }
        ("DELETE", "/_sim/requests") => {
            let mut log = shared.log();
            let n = log.entries.len();
            log.entries.clear();
            json_response(StatusCode::OK, &serde_json::json!({ "cleared": n }))
        }
        ("GET", "/_sim/state") => json_response(StatusCode::OK, &shared.protocol.state_json()),
        ("POST", "/_sim/seed") => {
            let seeded = serde_json::from_slice::<serde_json::Value>(&request.body)
                .map_err(|e| format!("seed is not JSON: {e}"))
                .and_then(|seed| shared.protocol.seed_json(&seed));
            match seeded {
                Ok(()) => json_response(StatusCode::OK, &serde_json::json!({ "seeded": true })),
                Err(e) => {
                    json_response(StatusCode::BAD_REQUEST, &serde_json::json!({ "error": e }))
                }
            }
        }
        ("DELETE", p) if p.starts_with("/_sim/faults/") => {
            match p["/_sim/faults/".len()..].parse::<u64>() {
                Ok(id) => json_response(
                    StatusCode::OK,
                    &serde_json::json!({ "removed": shared.faults.remove(id) }),
                ),
                Err(_) => json_response(
                    StatusCode::BAD_REQUEST,
                    &serde_json::json!({ "error": "a fault id is a number" }),
                ),
            }
        }
        _ => json_response(
            StatusCode::NOT_FOUND,
            &serde_json::json!({ "error": format!("no control endpoint {method} {path}") }),
        ),
    }
}

/// Percent-decodes a path segment (`%2F` → `/`); invalid escapes are kept as they are.
pub fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The decoded payload (`user:password`) of an `Authorization: Basic <base64>` value, the
/// scheme in any case; `None` for another scheme or bad base64. Each simulator reads the
/// bytes as its server does.
pub(crate) fn basic_payload(value: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_counts_from_one() {
        assert!(When::Nth(2).fires(2));
        assert!(!When::Nth(2).fires(3));
        assert!(!When::From(3).fires(2));
        assert!(When::From(3).fires(7));
        assert!(When::All.fires(1));
    }

    #[test]
    fn rules_round_trip_as_json() {
        let rule = FaultRule::prefix("/v1/")
            .method("DELETE")
            .nth(2)
            .status_retry_after(503, 3);
        let json = serde_json::to_value(&rule).unwrap_or_default();
        assert_eq!(json["fault"]["kind"], "status");
        assert_eq!(json["when"]["nth"], 2);
        let back: FaultRule = serde_json::from_value(json).unwrap_or_else(|_| FaultRule::any());
        assert_eq!(back, rule);
        let minimal: FaultRule = serde_json::from_str(r#"{"fault":{"kind":"hang"}}"#)
            .unwrap_or_else(|_| FaultRule::any());
        assert_eq!(minimal.when, When::All);
        assert_eq!(minimal.fault, FaultKind::Hang);
    }

    #[test]
    fn first_firing_rule_wins_and_all_matching_rules_count() {
        let faults = Faults::default();
        faults.add(FaultRule::op("change").nth(2).status(500));
        faults.add(FaultRule::any().status(503));
        let m = Method::POST;
        let first = faults.check(&m, "/x", Some("change"));
        assert_eq!(
            first.map(|r| r.fault),
            Some(FaultKind::Status {
                status: 503,
                retry_after: None
            })
        );
        let second = faults.check(&m, "/x", Some("change"));
        assert_eq!(
            second.map(|r| r.fault),
            Some(FaultKind::Status {
                status: 500,
                retry_after: None
            })
        );
        let rules = faults.rules();
        assert_eq!(rules[0].matched, 2);
        assert_eq!(rules[1].matched, 2);
        assert_eq!(rules[1].fired, 1);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(percent_decode("bad%zz%"), "bad%zz%");
    }
}
