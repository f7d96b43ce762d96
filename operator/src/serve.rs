//! The probe (`/healthz`, `/readyz`) and metrics (`/metrics`) HTTP servers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tracing::{error, info, warn};

use crate::metrics::{CONTENT_TYPE, Metrics};

/// Whether the operator is ready: set once the controllers have started, or (with leader
/// election) once the replica is a ready standby; and why it is not, when something blocks it
/// (stale CRDs, docs/deploy.md#crd-policy). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
    blocked: Arc<Mutex<Option<String>>>,
}

impl Readiness {
    /// Marks the operator ready (or not).
    pub fn set(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether it is ready.
    pub fn get(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Records why the operator cannot become ready (`None`: nothing blocks it any more);
    /// `/readyz` answers it.
    pub fn block(&self, reason: Option<String>) {
        *self.blocked.lock().unwrap_or_else(|e| e.into_inner()) = reason;
    }

    /// Why the operator cannot become ready, if something blocks it.
    pub fn blocked(&self) -> Option<String> {
        self.blocked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Binds `address` (port 0 picks a free port); returns the listener and the bound address.
pub async fn bind(address: &str) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}

/// The probe routes: `/healthz` answers 200 while the process runs, `/readyz` 200 once ready
/// and 503 before, with the reason when something blocks it.
pub fn probe_router(readiness: Readiness) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(|| async { (StatusCode::OK, "ok\n".to_string()) }),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = readiness.get();
                let blocked = readiness.blocked();
                async move {
                    match blocked {
                        Some(reason) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {reason}\n"),
                        ),
                        None if ready => (StatusCode::OK, "ok\n".to_string()),
                        None => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".to_string()),
                    }
                }
            }),
        )
}

/// The metrics route: `/metrics` in the OpenMetrics text format.
pub fn metrics_router(metrics: Metrics) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let body = metrics.encode();
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response() }
        }),
    )
}

/// Serves `router` on `listener` in a background task (until the process ends).
pub fn spawn(name: &'static str, listener: TcpListener, router: Router) {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            warn!(server = name, error = %e, "HTTP server stopped");
        }
    });
}

/// Binds and starts the probe and metrics servers, logging the bound addresses as
/// `probe_address` and `metrics_address`. A server whose address cannot be bound is logged
/// as an error and left out (the operator keeps working; a failing probe shows it).
pub async fn start(
    probe_address: &str,
    metrics_address: &str,
    readiness: Readiness,
    metrics: Metrics,
) -> (Option<SocketAddr>, Option<SocketAddr>) {
    if probe_address == metrics_address && !probe_address.ends_with(":0") {
        return match bind(probe_address).await {
            Ok((listener, bound)) => {
                info!(probe_address = %bound, metrics_address = %bound, "serving /healthz, /readyz and /metrics");
                spawn(
                    "probe+metrics",
                    listener,
                    probe_router(readiness).merge(metrics_router(metrics)),
                );
                (Some(bound), Some(bound))
            }
            Err(e) => {
                error!(error = %e, address = probe_address, "cannot serve /healthz, /readyz and /metrics");
                (None, None)
            }
        };
    }
    let probe = match bind(probe_address).await {
        Ok((listener, bound)) => {
            info!(probe_address = %bound, "serving /healthz and /readyz");
            spawn("probe", listener, probe_router(readiness));
            Some(bound)
        }
        Err(e) => {
            error!(error = %e, address = probe_address, "cannot serve /healthz and /readyz");
            None
        }
    };
    let served = match bind(metrics_address).await {
        Ok((listener, bound)) => {
            info!(metrics_address = %bound, "serving /metrics");
            spawn("metrics", listener, metrics_router(metrics));
            Some(bound)
        }
        Err(e) => {
            error!(error = %e, address = metrics_address, "cannot serve /metrics");
            None
        }
    };
    (probe, served)
}
