//! Prometheus metrics: requests and latency per route, errors per route and code.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};
use std::sync::Arc;

use super::AppState;
use crate::core::ErrorCode;

/// The daemon's metrics.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    errors: IntCounterVec,
}

impl Metrics {
    pub fn new() -> Metrics {
        let requests = IntCounterVec::new(
            Opts::new("wardfs_requests_total", "API requests by route"),
            &["route"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "wardfs_request_duration_seconds",
                "API request latency by route",
            )
            .buckets(vec![
                0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                0.25, 0.5, 1.0, 2.5, 10.0,
            ]),
            &["route"],
        )
        .expect("valid metric");
        let errors = IntCounterVec::new(
            Opts::new("wardfs_errors_total", "API errors by route and code"),
            &["route", "code"],
        )
        .expect("valid metric");
        let registry = Registry::new();
        registry
            .register(Box::new(requests.clone()))
            .expect("unique");
        registry
            .register(Box::new(latency.clone()))
            .expect("unique");
        registry.register(Box::new(errors.clone())).expect("unique");
        Metrics {
            registry,
            requests,
            latency,
            errors,
        }
    }

    /// Renders the Prometheus text format.
    pub fn render(&self) -> String {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Middleware recording every request.
pub async fn track(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let start = Instant::now();
    let resp = next.run(req).await;
    let m = &app.metrics;
    m.requests.with_label_values(&[&route]).inc();
    m.latency
        .with_label_values(&[&route])
        .observe(start.elapsed().as_secs_f64());
    if let Some(code) = resp.extensions().get::<ErrorCode>() {
        m.errors.with_label_values(&[&route, code.as_str()]).inc();
    }
    resp
}
