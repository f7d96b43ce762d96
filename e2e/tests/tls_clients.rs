//! One TLS story for the HTTP clients: the UDM REST API, OX SOAP and the Provisioning API
//! simulators served over HTTPS with a CA this test makes. Per API, a client whose `caBundle`
//! is the CA's PEM file connects; one without it fails naming the untrusted issuer and the key
//! to add the CA to; one with `insecureSkipTlsVerify` connects and records exactly one warning
//! (the text the run's Event and summary carry), naming the key and the server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use stagehand_actions::action::{ActionContext, ActionError, SecretValue, Secrets};
use stagehand_actions::instantiate;
use stagehand_actions::shared_config::{OxSoap, Udm};
use stagehand_e2e::local_server::TestPki;
use stagehand_e2e::offline_client;
use stagehand_simulators::http::SimServer;
use stagehand_simulators::ox::{OxConfig, OxSoap as OxSim};
use stagehand_simulators::provisioning::{Provisioning, ProvisioningConfig};
use stagehand_simulators::udm::{Udm as UdmSim, UdmConfig};

const PASSWORD: &str = "tls-clients-S3cret";

/// A context with `file` holding [`PASSWORD`] and no warning yet.
fn ctx(file: &str) -> ActionContext {
    ActionContext {
        client: offline_client(),
        namespace: "default".into(),
        secrets: Secrets::new([(file.to_string(), SecretValue::new(PASSWORD))]),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: Default::default(),
        progress: Default::default(),
    }
}

/// `section` with `extra` keys added.
fn with(section: &Value, extra: Value) -> Value {
    let mut out = section.clone();
    if let (Some(obj), Value::Object(more)) = (out.as_object_mut(), extra) {
        obj.extend(more);
    }
    out
}

/// The error of a client that does not trust the server's CA: it names the untrusted issuer
/// and the key the CA goes into.
fn assert_untrusted(e: &ActionError, key: &str) {
    let text = e.to_string();
    assert!(matches!(e, ActionError::Unavailable(_)), "{e:?}");
    assert!(text.contains("untrusted issuer"), "{text}");
    assert!(
        text.contains(&format!("add that CA to {key}.caBundle")),
        "{text}"
    );
}

/// Exactly one warning: `key.insecureSkipTlsVerify is set`, naming `server`.
fn assert_one_warning(ctx: &ActionContext, key: &str, server: &str) {
    let warnings = ctx.warnings.list();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!("{key}.insecureSkipTlsVerify is set")),
        "{warnings:?}"
    );
    assert!(warnings[0].contains(server), "{warnings:?}");
}

#[tokio::test]
async fn udm_over_tls_trusts_the_bundle_file_and_skipping_the_check_warns() {
    let pki = TestPki::new("Stagehand UDM Test CA");
    let sim = SimServer::start_tls(
        UdmSim::new(UdmConfig::new("cn=admin", PASSWORD)),
        &pki.cert_pem(),
        &pki.key_pem(),
    )
    .await
    .unwrap();
    let url = sim.api_url();
    assert!(url.starts_with("https://"), "{url}");
    let section = json!({"url": url});
    let connect = |config: Value| async move {
        let ctx = ctx("udm-admin-password");
        let udm: Udm = serde_json::from_value(config).unwrap();
        let result = match udm.client(&ctx) {
            Ok(client) => client.check_access().await.map_err(ActionError::from),
            Err(e) => Err(e),
        };
        (result, ctx)
    };

    let bundle = pki.ca_file().to_string_lossy().into_owned();
    let (trusted, ctx) = connect(with(&section, json!({"caBundle": bundle}))).await;
    trusted.unwrap();
    assert!(ctx.warnings.list().is_empty());

    let (refused, ctx) = connect(section.clone()).await;
    assert_untrusted(&refused.unwrap_err(), "udm");
    assert!(ctx.warnings.list().is_empty());

    let (skipped, ctx) = connect(with(&section, json!({"insecureSkipTlsVerify": true}))).await;
    skipped.unwrap();
    assert_one_warning(&ctx, "udm", &format!("https://{}", sim.addr()));

    // A bundle file that is not there is named before anything is sent.
    let missing = format!("{bundle}.absent");
    let (absent, _) = connect(with(&section, json!({"caBundle": missing}))).await;
    let e = absent.unwrap_err();
    assert!(matches!(e, ActionError::NotFound(_)), "{e:?}");
    assert!(e.to_string().contains("udm.caBundle"), "{e}");
    assert!(e.to_string().contains(&missing), "{e}");
}

#[tokio::test]
async fn ox_soap_over_tls_trusts_the_bundle_file_and_skipping_the_check_warns() {
    let pki = TestPki::new("Stagehand OX Test CA");
    let sim = SimServer::start_tls(
        OxSim::new(OxConfig::new("admin", PASSWORD)),
        &pki.cert_pem(),
        &pki.key_pem(),
    )
    .await
    .unwrap();
    sim.state().add_context(1, "context1");
    let soap_url = sim.soap_url();
    assert!(soap_url.starts_with("https://"), "{soap_url}");
    let connect = |config: Value| {
        let soap_url = soap_url.clone();
        async move {
            let ctx = ctx("ox-master-password");
            let ox: OxSoap = serde_json::from_value(config).unwrap();
            let result = match ox.client(&ctx, &soap_url) {
                Ok(client) => client
                    .list_contexts()
                    .await
                    .map(|contexts| contexts.len())
                    .map_err(ActionError::from),
                Err(e) => Err(e),
            };
            (result, ctx)
        }
    };
    let section = json!({"soapUrl": soap_url});

    let bundle = pki.ca_file().to_string_lossy().into_owned();
    let (trusted, ctx) = connect(with(&section, json!({"caBundle": bundle}))).await;
    assert_eq!(trusted.unwrap(), 1);
    assert!(ctx.warnings.list().is_empty());

    let (refused, ctx) = connect(section.clone()).await;
    assert_untrusted(&refused.unwrap_err(), "oxAppSuite");
    assert!(ctx.warnings.list().is_empty());

    let (skipped, ctx) = connect(with(&section, json!({"insecureSkipTlsVerify": true}))).await;
    assert_eq!(skipped.unwrap(), 1);
    assert_one_warning(&ctx, "oxAppSuite", &soap_url);
}

#[tokio::test]
async fn provisioning_over_tls_trusts_the_bundle_file_and_skipping_the_check_warns() {
    let pki = TestPki::new("Stagehand Provisioning Test CA");
    let sim = SimServer::start_tls(
        Provisioning::new(ProvisioningConfig::new("admin", PASSWORD)),
        &pki.cert_pem(),
        &pki.key_pem(),
    )
    .await
    .unwrap();
    sim.state()
        .add_subscription("ox-connector", &[("udm", "users/user")], false, "c");
    let url = sim.api_url();
    assert!(url.starts_with("https://"), "{url}");
    let section = json!({"url": url, "username": "admin"});
    // Planning lists the subscriptions as the admin: the request that proves the connection.
    let plan = |provisioning: Value| async move {
        let ctx = ctx("provisioning-api-password");
        let action = instantiate(
            "provisioning_drop_subscriptions",
            &json!({"provisioning": provisioning, "subscriptions": ["ox-connector"]}),
        )
        .unwrap();
        let result = action.plan(&ctx).await.map(|o| o.summary);
        (result, ctx)
    };

    let bundle = pki.ca_file().to_string_lossy().into_owned();
    let (trusted, ctx) = plan(with(&section, json!({"caBundle": bundle}))).await;
    let summary = trusted.unwrap();
    assert!(summary.contains("ox-connector"), "{summary}");
    assert!(ctx.warnings.list().is_empty());

    let (refused, ctx) = plan(section.clone()).await;
    assert_untrusted(&refused.unwrap_err(), "provisioning");
    assert!(ctx.warnings.list().is_empty());

    let (skipped, ctx) = plan(with(&section, json!({"insecureSkipTlsVerify": true}))).await;
    skipped.unwrap();
    assert_one_warning(&ctx, "provisioning", &url);
    assert_eq!(
        sim.requests()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count(),
        0,
        "planning deleted a subscription"
    );
}
