//! A recording HTTP proxy between one operator and the test control plane's API server, for
//! the fault tests: the operator talks plain HTTP to a loopback port, the proxy forwards each
//! request to the API server (TLS, the test kubeconfig's token) and streams the answer back.
//!
//! It tells the test what the operator asked the API server and lets a test stop the operator
//! at an exact point: a [`Trip`] names a request (method, path, body); when the API server has
//! answered that request successfully for the n-th time, the proxy SIGKILLs the operator's
//! process *before* handing the answer on. The write happened on the server; the operator never
//! learns of it — the worst moment for it to die. No fault code runs in the operator.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use base64::Engine;
use tokio::net::TcpListener;

/// One request the proxy forwarded.
#[derive(Debug, Clone)]
pub struct Seen {
    /// HTTP method.
    pub method: String,
    /// Path with its query.
    pub path: String,
    /// The API server's status code (0 when it could not be reached).
    pub status: u16,
    /// The request body (writes are small).
    pub body: String,
    /// How long the API server took to answer (until its answer's headers arrived; a write's
    /// whole cost).
    pub took: std::time::Duration,
    /// When the proxy sent it on to the API server.
    pub at: std::time::Instant,
}

impl Seen {
    /// The request body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// Whether this is a write (not GET, HEAD or a watch).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD")
    }
}

type Matcher = Box<dyn Fn(&Seen) -> bool + Send + Sync>;

/// Kill `pid` when the `nth` request matching `matches` has been answered with a 2xx.
pub struct Trip {
    matches: Matcher,
    nth: usize,
    seen: usize,
    pid: u32,
    fired: Option<Seen>,
}

impl std::fmt::Debug for Trip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trip")
            .field("nth", &self.nth)
            .field("seen", &self.seen)
            .field("pid", &self.pid)
            .field("fired", &self.fired)
            .finish()
    }
}

#[derive(Debug, Default)]
struct Shared {
    log: Vec<Seen>,
    trip: Option<Trip>,
    /// How late watch events reach the operator ([`KubeProxy::lag_watches`]).
    watch_lag: std::time::Duration,
}

#[derive(Debug, Clone)]
struct Upstream {
    base: String,
    token: String,
    client: reqwest::Client,
    shared: Arc<Mutex<Shared>>,
}

/// The proxy, serving until dropped.
#[derive(Debug)]
pub struct KubeProxy {
    port: u16,
    kubeconfig: std::path::PathBuf,
    shared: Arc<Mutex<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl KubeProxy {
    /// Starts a proxy in front of the API server of the test kubeconfig ([`crate::kubeconfig`]).
    pub async fn start() -> Self {
        let config: serde_norway::Value = match std::fs::read_to_string(crate::kubeconfig())
            .map_err(|e| e.to_string())
            .and_then(|t| serde_norway::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(c) => c,
            Err(e) => panic!("cannot read the test kubeconfig: {e}"),
        };
        let cluster = &config["clusters"][0]["cluster"];
        let base = cluster["server"].as_str().unwrap_or_default().to_string();
        let token = config["users"][0]["user"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ca = cluster["certificate-authority-data"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        let mut builder = reqwest::Client::builder().http1_only();
        if let Ok(cert) = reqwest::Certificate::from_pem(&ca) {
            builder = builder.add_root_certificate(cert);
        }
        let client = match builder.build() {
            Ok(c) => c,
            Err(e) => panic!("cannot build the proxy's client: {e}"),
        };
        let shared = Arc::new(Mutex::new(Shared::default()));
        let upstream = Upstream {
            base,
            token,
            client,
            shared: shared.clone(),
        };
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("cannot bind the proxy: {e}"),
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let app = Router::new().fallback(forward).with_state(upstream);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let kubeconfig = std::env::temp_dir().join(format!(
            "stagehand-kube-proxy-{}-{port}.yaml",
            std::process::id()
        ));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\ncurrent-context: proxy\n"
        );
        if let Err(e) = std::fs::write(&kubeconfig, text) {
            panic!("cannot write {}: {e}", kubeconfig.display());
        }
        Self {
            port,
            kubeconfig,
            shared,
            task,
        }
    }

    /// A kubeconfig that reaches the API server through this proxy.
    pub fn kubeconfig(&self) -> &str {
        self.kubeconfig.to_str().unwrap_or_default()
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Arms a trip: SIGKILL `pid` once the `nth` request matching `matches` was answered with
    /// a 2xx, before the answer is handed on. Replaces an armed trip.
    pub fn arm(
        &self,
        pid: u32,
        nth: usize,
        matches: impl Fn(&Seen) -> bool + Send + Sync + 'static,
    ) {
        self.lock().trip = Some(Trip {
            matches: Box::new(matches),
            nth,
            seen: 0,
            pid,
            fired: None,
        });
    }

    /// The request that fired the armed trip, once it has.
    pub fn fired(&self) -> Option<Seen> {
        self.lock().trip.as_ref().and_then(|t| t.fired.clone())
    }

    /// Hands every chunk of a watch's answer (a request with `watch=true`) to the operator
    /// `lag` after the API server sent it, in order; other requests are not delayed. The
    /// operator's view then trails what it wrote by `lag`, as with a slow or loaded API
    /// server: a reconcile woken by an older event reads an older copy of its object.
    pub fn lag_watches(&self, lag: std::time::Duration) {
        self.lock().watch_lag = lag;
    }

    /// Disarms the trip.
    pub fn disarm(&self) {
        self.lock().trip = None;
    }

    /// Every request forwarded so far.
    pub fn log(&self) -> Vec<Seen> {
        self.lock().log.clone()
    }

    /// Forgets the log.
    pub fn clear_log(&self) {
        self.lock().log.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for KubeProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

async fn forward(State(up): State<Upstream>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let mut outgoing = up
        .client
        .request(parts.method.clone(), format!("{}{path}", up.base))
        .bearer_auth(&up.token)
        .body(body.clone());
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "host" | "content-length" | "authorization" | "connection" | "transfer-encoding"
        ) {
            outgoing = outgoing.header(name, value);
        }
    }
    let mut seen = Seen {
        method: parts.method.to_string(),
        path,
        status: 0,
        body: String::from_utf8_lossy(&body).into_owned(),
        took: std::time::Duration::ZERO,
        at: std::time::Instant::now(),
    };
    let sending = outgoing.send().await;
    seen.took = seen.at.elapsed();
    let answer = match sending {
        Ok(a) => a,
        Err(e) => {
            up.record(seen);
            return plain(502, format!("proxy: {e}"));
        }
    };
    seen.status = answer.status().as_u16();
    if up.record(seen) {
        // The operator is gone; nobody reads this.
        return plain(503, "proxy: the operator was killed here".into());
    }
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if !matches!(
            name.as_str(),
            "content-length" | "transfer-encoding" | "connection"
        ) {
            response = response.header(name, value);
        }
    }
    let chunks = futures::stream::unfold(answer, |mut a| async move {
        match a.chunk().await {
            Ok(Some(chunk)) => Some((Ok::<Bytes, reqwest::Error>(chunk), a)),
            Ok(None) => None,
            Err(e) => Some((Err(e), a)),
        }
    });
    let lag = up.lock().watch_lag;
    let watch = seen_path_is_watch(&parts.uri);
    let body = if watch && !lag.is_zero() {
        Body::from_stream(lagged(chunks, lag))
    } else {
        Body::from_stream(chunks)
    };
    response
        .body(body)
        .unwrap_or_else(|e| plain(500, format!("proxy: {e}")))
}

fn seen_path_is_watch(uri: &axum::http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// `chunks`, each handed on `lag` after it arrived (a constant delay, not one that adds up:
/// a reader task stamps the chunks as they come).
fn lagged<S>(
    chunks: S,
    lag: std::time::Duration,
) -> impl futures::Stream<Item = Result<Bytes, reqwest::Error>>
where
    S: futures::Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    use futures::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut chunks = std::pin::pin!(chunks);
        while let Some(chunk) = chunks.next().await {
            if tx.send((tokio::time::Instant::now() + lag, chunk)).is_err() {
                break;
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move {
        let (due, chunk) = rx.recv().await?;
        tokio::time::sleep_until(due).await;
        Some((chunk, rx))
    })
}

impl Upstream {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Logs a forwarded request; `true` when it fired the trip (the operator was killed).
    fn record(&self, seen: Seen) -> bool {
        let mut shared = self
            .shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut kill = None;
        if let Some(trip) = shared.trip.as_mut()
            && trip.fired.is_none()
            && (200..300).contains(&seen.status)
            && (trip.matches)(&seen)
        {
            trip.seen += 1;
            if trip.seen == trip.nth {
                trip.fired = Some(seen.clone());
                kill = Some(trip.pid);
            }
        }
        shared.log.push(seen);
        drop(shared);
        if let Some(pid) = kill {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            return true;
        }
        false
    }
}

fn plain(status: u16, text: String) -> Response {
    Response::builder()
        .status(status)
        .body(Body::from(text))
        .unwrap_or_default()
}
