//! Protocol simulators of the external APIs Stagehand's actions talk to, for tests and the
//! demo: the Nubus **Provisioning API** ([`provisioning`]), the **OX App Suite SOAP**
//! provisioning API ([`ox`]) and the **UDM REST API** ([`udm`]).
//!
//! Each simulator speaks the real wire protocol (HTTP Basic, JSON bodies, SOAP 1.1 envelopes
//! and faults, the real status codes), keeps state that tests seed and inspect, and injects
//! faults (error statuses, hangs, dropped connections, slow answers) at a chosen request.
//! All of them run on one framework, [`http`]: [`http::SimServer`] starts a simulator on a
//! loopback port, [`http::Faults`] steers faults, and every server also answers a control API
//! under `/_sim/` so another process (the demo, an operator) can steer it too.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use stagehand_simulators::http::{FaultKind, FaultRule};
//! use stagehand_simulators::provisioning::{self, ProvisioningConfig};
//!
//! let sim = provisioning::start(ProvisioningConfig::new("admin", "secret")).await?;
//! sim.state().add_subscription("ox-connector", &[("udm", "users/user")], true, "pw");
//! sim.faults().add(FaultRule::path("/v1/subscriptions/ox-connector").nth(1).status(503));
//! println!("{}", sim.api_url()); // http://127.0.0.1:PORT/v1
//! # Ok(()) }
//! ```
//!
//! The exact request and response shapes are documented in this crate's `README.md`.

pub mod cli;
pub mod http;
pub mod ox;
pub mod provisioning;
pub mod udm;
