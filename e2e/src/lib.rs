//! Helpers for the end-to-end tests: they run against the real control plane that
//! `e2e/cluster/up` starts (the test command `e2e/test` starts it and exports `KUBECONFIG`).
//!
//! There is no skipping: without a reachable control plane every e2e test fails, saying how
//! to start one. Each test begins with its [`Scene`] (offline, cluster, or operator).
//!
//! This file only names the modules and re-exports what the tests use by its short name.

pub mod cluster;
pub mod exec_node;
pub mod functional_accounts;
pub mod helm;
pub mod kill_matrix;
pub mod kube_proxy;
pub mod ledger;
pub mod local_server;
pub mod manifests;
pub mod metrics_docs;
pub mod minio;
pub mod private_cluster;
pub mod process;
pub mod proxy;
pub mod redis;
pub mod scene;
pub mod secrets;
pub mod sims;
pub mod slapd;
pub mod synapse;
pub mod waiting;
pub mod wire_proxy;
pub mod workloads;

pub use cluster::{
    TestNamespace, apply, client, delete_crd, get, install_crds, kubeconfig, kubectl,
    kubectl_stdin, offline_client, stored_versions, wait_established,
};
pub use ledger::{footprints, ledger};
pub use process::{
    OperatorProcess, bench_runtime, env_or, http_get, logged, ok, run_with_stdin, stagehand,
    stagehand_bin, stagehand_stdin, stderr, stdout, try_run_with_stdin,
};
pub use scene::Scene;
pub use secrets::{assert_no_secret_leak, create_secret, secret_args};
pub use sims::{provisioning_deletes, provisioning_sim};
pub use waiting::{
    condition, decisions, first_action_started, reason_becomes, status_time, wait, wait_for,
    wait_up_to,
};
pub use workloads::{hold, hold_pod, release, release_pod, replicas, running_pods, statefulset};
