//! Bounded answers (issue 29, item 3): every HTTP client of the actions reads at most its API's
//! limit of one answer and fails with a message naming the request, the limit and the config
//! key that raises it. Each client meets a simulator answering more than its limit (the
//! simulators' `oversized` fault: a body streamed 64 KiB at a time, declared or chunked); the
//! handover store's cap against real MinIO is in handover_store.rs. Last, the operator as a
//! process runs an action whose API answers a gibibyte: the run fails with the message and the
//! operator's peak RSS stays under the chart's memory limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use stagehand_actions::action::{ActionError, SecretValue};
use stagehand_actions::clients::ox::{OxClient, OxError};
use stagehand_actions::clients::synapse::SynapseAdmin;
use stagehand_actions::clients::udm::{UdmClient, UdmError};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{Scene, apply, condition, get, provisioning_sim, wait};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::{ox, provisioning, udm};

const GIB: u64 = 1024 * 1024 * 1024;
const MIB: u64 = 1024 * 1024;

#[tokio::test]
async fn udm_refuses_an_answer_over_its_limit() {
    let sim = udm::start(udm::UdmConfig::new("cn=admin", "pw"))
        .await
        .unwrap();
    let client = UdmClient::new(
        &sim.api_url(),
        "cn=admin",
        SecretValue::new("pw"),
        Duration::from_secs(30),
        &Default::default(),
    )
    .unwrap();
    // Within the default: the root reads.
    client.check_access().await.unwrap();
    // Chunked, no length declared: refused once 16 MiB are read.
    sim.faults().add(FaultRule::any().oversized(GIB, false));
    let e = client.check_access().await.unwrap_err();
    assert!(matches!(e, UdmError::TooLarge(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("the UDM REST API GET {}", sim.api_url()))
            && text.contains("answered more than 16777216 bytes, more than Stagehand reads")
            && text.contains("raise udm.maxResponseBytes"),
        "{text}"
    );
    assert!(matches!(
        ActionError::from(e),
        ActionError::InvalidAnswer(_)
    ));
    // The configured limit is the one applied and named.
    sim.faults().clear();
    sim.faults().add(FaultRule::any().oversized(2048, true));
    let small = client.clone().with_max_response_bytes(1024);
    let e = small.check_access().await.unwrap_err().to_string();
    assert!(
        e.contains("answered more than 1024 bytes (Content-Length: 2048)"),
        "{e}"
    );
}

#[tokio::test]
async fn ox_refuses_an_answer_over_its_limit() {
    let sim = ox::start(ox::OxConfig::new("admin", "pw")).await.unwrap();
    sim.state().add_context(1, "context1");
    let client = OxClient::new(
        &sim.soap_url(),
        "admin",
        SecretValue::new("pw"),
        Duration::from_secs(30),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(client.list_contexts().await.unwrap().len(), 1);
    // Declared: refused by its Content-Length, before a byte of the gibibyte is read.
    sim.faults()
        .add(FaultRule::op("listAll").oversized(GIB, true));
    let e = client.list_contexts().await.unwrap_err();
    assert!(matches!(e, OxError::TooLarge(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("OX App Suite OXContextService.listAll (POST ")
            && text.contains(&format!(
                "answered more than 16777216 bytes (Content-Length: {GIB})"
            ))
            && text.contains("raise oxAppSuite.maxResponseBytes"),
        "{text}"
    );
    assert!(!text.contains("pw"), "no password in {text}");
    assert!(matches!(
        ActionError::from(e),
        ActionError::InvalidAnswer(_)
    ));
}

/// Synapse cannot be made to answer too much; its client meets the same fault of a simulator
/// (the Provisioning API's, which answers it on any path).
#[tokio::test]
async fn synapse_refuses_an_answer_over_its_limit() {
    let sim = provisioning::start(provisioning::ProvisioningConfig::new("admin", "pw"))
        .await
        .unwrap();
    sim.faults().add(FaultRule::any().oversized(GIB, false));
    let base = sim.base_url();
    let api = SynapseAdmin::new(&base, Duration::from_secs(30), &Default::default()).unwrap();
    let e = api.nonce().await.unwrap_err();
    assert!(matches!(e, ActionError::InvalidAnswer(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "Synapse GET {}/_synapse/admin/v1/register answered more than 1048576 bytes",
            base.trim_end_matches('/')
        )) && text.contains("raise synapse.connection.maxResponseBytes"),
        "{text}"
    );
}

/// The chart's memory limit of the operator (`resources.limits.memory` in values.yaml), in
/// bytes.
fn chart_memory_limit() -> u64 {
    let values: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/charts/stagehand/values.yaml"
        ))
        .unwrap(),
    )
    .unwrap();
    let memory = values["resources"]["limits"]["memory"]
        .as_str()
        .expect("values.yaml sets resources.limits.memory");
    let mebibytes: u64 = memory
        .strip_suffix("Mi")
        .expect("the limit is in Mi")
        .parse()
        .unwrap();
    mebibytes * MIB
}

/// The peak resident set of process `pid` (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|v| v.trim().parse().unwrap())
        .expect("VmHWM in /proc/PID/status");
    kib * 1024
}

/// The operator as a process runs `provisioning_drop_subscriptions` against an API that
/// answers a gibibyte, streamed without a length: the run fails with the message naming the
/// request and `provisioning.maxResponseBytes`, and the operator's peak RSS stays under the
/// chart's memory limit (before the limit, reading the whole answer took a gibibyte). Two
/// worker threads: the simulator answers on this runtime while the test blocks in `kubectl
/// wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_fails_the_run_and_stays_within_its_memory_limit() {
    let ns = Scene::cluster("bounded-answers").await;
    let sim = provisioning_sim(&ns.name, &["ox-connector"]).await;
    sim.faults().add(
        FaultRule::path("/v1/subscriptions")
            .method("GET")
            .oversized(GIB, false),
    );
    let operator = ns.start_operator();
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file("provisioning-api-password", "provisioning", "password")
            .pre(
                Action::new("provisioning_drop_subscriptions")
                    .tag("v1.18.0")
                    .config(json!({
                        "provisioning": {"url": sim.api_url(), "username": "admin", "requestTimeoutSeconds": 60},
                        "subscriptions": ["ox-connector"],
                    })),
            )
            .to_yaml(),
    );
    wait(&ns.name, "migration/opendesk", "Ready");
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let run: Value = get(&ns.name, "migrationrun/pre");
    let message = condition(&run, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains(&format!(
            "the Provisioning API GET {}/subscriptions answered more than 4194304 bytes",
            sim.api_url().trim_end_matches('/')
        )) && message.contains("raise provisioning.maxResponseBytes"),
        "{run}"
    );
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.fault.as_deref() == Some("oversized")),
        "the oversized answer was sent"
    );
    let peak = peak_rss(operator.pid());
    let limit = chart_memory_limit();
    assert!(
        peak < limit,
        "the operator's peak RSS {peak} bytes is not under the chart's limit {limit}"
    );
    eprintln!(
        "operator peak RSS: {} MiB (limit {} MiB)",
        peak / MIB,
        limit / MIB
    );
}
