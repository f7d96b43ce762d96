//! The review as data (issue 28, docs/design.md#findings), through the operator against the
//! real slapd (`ldap_entryuuid_to_object_identifier` over the direct transport, whose
//! findings are the objects whose identifier differs from their entryUUID):
//!
//! - a dry run keeps its findings in ConfigMap `<run>-findings`, owned by the Migration, which
//!   survives the run's deletion; the run's status names it and the counts; `stagehand report`
//!   prints them as text and as JSON; nothing changed in the directory;
//! - a `Manual` run plans its findings before it waits, and the digest approved binds them: the
//!   directory changed after the approval (another object differs) ends the run
//!   `FindingsChanged`, naming the object, with the directory unchanged; a new run whose
//!   findings are approved as found completes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::slapd::{BASE_DN, ROOT_PASSWORD, Slapd, SlapdOptions};
use stagehand_e2e::{
    Scene, apply, condition, create_secret, get, kubectl, ok, reason_becomes, stagehand, stderr,
    stdout, wait,
};

const ALICE_UUID: &str = "00000001-0000-4000-8000-000000000001";
const BOB_UUID: &str = "00000001-0000-4000-8000-000000000002";
const CAROL_UUID: &str = "00000001-0000-4000-8000-000000000003";
/// The identifiers alice and bob carried before v1.18 (UUIDs, as the schema wants).
const LEGACY_ALICE: &str = "00000002-0000-4000-8000-000000000001";
const LEGACY_BOB: &str = "00000002-0000-4000-8000-000000000002";

/// A user entry of `uid` with `uuid` as entryUUID and `identifier`.
fn user(uid: &str, uuid: &str, identifier: &str) -> String {
    format!(
        "dn: uid={uid},cn=users,{BASE_DN}\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nuniventionObjectType: users/user\nuid: {uid}\ncn: {uid}\nsn: {uid}\nentryUUID: {uuid}\nuniventionObjectIdentifier: {identifier}\n\n"
    )
}

/// slapd with alice differing, bob and carol as given.
fn directory(bob: &str) -> Slapd {
    let ldif = format!(
        "dn: cn=users,{BASE_DN}\nobjectClass: organizationalRole\ncn: users\n\n{}{}{}",
        user("alice", ALICE_UUID, LEGACY_ALICE),
        user("bob", BOB_UUID, bob),
        user("carol", CAROL_UUID, CAROL_UUID),
    );
    Slapd::start_with(&SlapdOptions {
        initial_ldif: ldif,
        ..SlapdOptions::default()
    })
}

fn migration(ns: &str, slapd: &Slapd) -> String {
    create_secret(ns, "ldap", "password", ROOT_PASSWORD);
    Migration::new(ns)
        .installed("v1.17.3")
        .secret_file("ldap-admin-password", "ldap", "password")
        .pre(
            Action::new("ldap_entryuuid_to_object_identifier")
                .tag("v1.18.0")
                .run_mode("apply")
                .config(json!({"ldap": {"url": slapd.url(), "baseDn": BASE_DN}})),
        )
        .to_yaml()
}

fn identifier(slapd: &Slapd, uid: &str) -> String {
    slapd.search(&format!("(uid={uid})"), &["univentionObjectIdentifier"])
}

fn dn(uid: &str) -> String {
    format!("uid={uid},cn=users,{BASE_DN}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_runs_findings_outlive_the_run_and_stagehand_report_prints_them() {
    let ns = Scene::operator("findings-dry").await;
    let slapd = directory(LEGACY_BOB);
    apply(&migration(&ns.name, &slapd));
    apply(
        &MigrationRun::new(&ns.name, "review", "pre")
            .dry_run(true)
            .to_yaml(),
    );
    wait(&ns.name, "migrationrun/review", "Ready");

    let run = get(&ns.name, "migrationrun/review");
    let action = &run["status"]["actions"][0];
    assert_eq!(action["reason"], "DryRun", "{run}");
    let findings = &action["findings"];
    assert_eq!(findings["configMaps"], json!(["review-findings"]), "{run}");
    assert_eq!(findings["counts"], json!({"carrying": 3, "differs": 2}));
    assert_eq!(findings["rows"], 2);
    assert_eq!(findings["phase"], "Execution");
    assert!(findings["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(
        identifier(&slapd, "alice").contains(LEGACY_ALICE),
        "a dry run changes nothing"
    );

    let cm = get(&ns.name, "configmap/review-findings");
    let owner = &cm["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Migration", "{cm}");
    assert_eq!(owner["name"], "opendesk");
    assert_eq!(cm["metadata"]["labels"]["stagehand.dev/run"], "review");
    assert_eq!(
        cm["metadata"]["labels"]["stagehand.dev/migration"],
        "opendesk"
    );

    let text = stagehand(&["report", "migrationrun/review", "-n", &ns.name]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let text = stdout(&text);
    eprintln!("{text}");
    assert!(
        text.contains("action 0 ldap_entryuuid_to_object_identifier: Succeeded (DryRun)")
            && text.contains("counts: carrying=3 differs=2")
            && text.contains("differs (2):")
            && text.contains(&dn("alice"))
            && text.contains(LEGACY_BOB)
            && text.contains(BOB_UUID)
            && !text.contains(&dn("carol")),
        "{text}"
    );
    let out = stagehand(&[
        "report",
        "migrationrun/review",
        "-n",
        &ns.name,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let found = &report["actions"][0]["findings"];
    assert_eq!(
        found["columns"],
        json!(["dn", "univentionObjectIdentifier", "entryUUID"])
    );
    assert_eq!(
        found["rows"][0],
        json!({"group": "differs", "values": [dn("alice"), LEGACY_ALICE, ALICE_UUID]})
    );
    assert_eq!(found["rows"].as_array().unwrap().len(), 2);
    assert_eq!(found["counts"]["carrying"], 3);
    assert_eq!(report["dryRun"], true);
    assert_eq!(report["reason"], "Succeeded");

    // The findings outlive the run.
    ok(
        "delete the run",
        &kubectl(&[
            "delete",
            "migrationrun/review",
            "-n",
            &ns.name,
            "--wait=true",
        ]),
    );
    let kept = get(&ns.name, "configmap/review-findings");
    assert_eq!(kept["data"], cm["data"], "kept as written");

    let out = stagehand(&["report", "migrationrun/review", "-n", &ns.name]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!(
            "migrationrun/review not found in namespace {}",
            ns.name
        )),
        "{}",
        stderr(&out)
    );
}

/// Waits until `run` waits for approval and returns it. A run the operator has not reached yet
/// has no conditions: that is "not yet", never a failure.
async fn awaiting(ns: &str, run: &str) -> Value {
    reason_becomes(ns, run, "AwaitingApproval").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_binds_the_findings_and_other_findings_at_execution_change_nothing() {
    let ns = Scene::operator("findings-approve").await;
    let slapd = directory(BOB_UUID);
    apply(&migration(&ns.name, &slapd));
    apply(
        &MigrationRun::new(&ns.name, "apply-1", "pre")
            .approval("Manual")
            .to_yaml(),
    );
    let run = awaiting(&ns.name, "migrationrun/apply-1").await;
    let plan = &run["status"]["frozenPlan"];
    let approval = plan["approvalDigest"].as_str().unwrap().to_string();
    assert_ne!(approval, plan["digest"].as_str().unwrap(), "{run}");
    assert!(
        condition(&run, "Ready")["message"]
            .as_str()
            .unwrap()
            .contains(&approval),
        "{run}"
    );
    let findings = &run["status"]["actions"][0]["findings"];
    assert_eq!(findings["phase"], "Plan", "{run}");
    assert_eq!(findings["rows"], 1, "alice only: {run}");
    let out = stagehand(&["report", "migrationrun/apply-1", "-n", &ns.name]);
    assert!(
        stdout(&out).contains("findings approved with the plan: 1 object(s)")
            && stdout(&out).contains(&dn("alice")),
        "{}",
        stdout(&out)
    );

    // Meanwhile bob's identifier is changed: bob differs now, which nobody reviewed. The
    // reviewer approves what was reviewed.
    slapd.modify(&format!(
        "dn: {}\nchangetype: modify\nreplace: univentionObjectIdentifier\nuniventionObjectIdentifier: {LEGACY_BOB}\n",
        dn("bob")
    ));
    let approved = stagehand(&["approve", "migrationrun/apply-1", "-n", &ns.name, "-y"]);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    assert!(
        stdout(&approved).contains(&format!("plan {approval} approved"))
            && stdout(&approved).contains("the digest also covers the findings of action 0"),
        "{}",
        stdout(&approved)
    );
    wait(&ns.name, "migrationrun/apply-1", "Stalled");
    let run = get(&ns.name, "migrationrun/apply-1");
    let ready = condition(&run, "Ready");
    assert_eq!(ready["reason"], "FindingsChanged", "{run}");
    assert_eq!(condition(&run, "Succeeded")["status"], "False");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "found now but not approved: {} (differs)",
            dn("bob")
        )) && message.contains("nothing was changed"),
        "{message}"
    );
    assert_eq!(run["status"]["actions"][0]["reason"], "FindingsChanged");
    assert!(
        identifier(&slapd, "alice").contains(LEGACY_ALICE),
        "unchanged"
    );
    assert!(identifier(&slapd, "bob").contains(LEGACY_BOB), "unchanged");
    assert_eq!(
        get(&ns.name, "migration/opendesk")["status"]["history"],
        json!([]),
        "no footprint"
    );

    // A new run reviews both; approved as found, it completes.
    apply(
        &MigrationRun::new(&ns.name, "apply-2", "pre")
            .approval("Manual")
            .to_yaml(),
    );
    let run = awaiting(&ns.name, "migrationrun/apply-2").await;
    assert_eq!(run["status"]["actions"][0]["findings"]["rows"], 2, "{run}");
    let approved = stagehand(&["approve", "migrationrun/apply-2", "-n", &ns.name, "-y"]);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    wait(&ns.name, "migrationrun/apply-2", "Ready");
    let run = get(&ns.name, "migrationrun/apply-2");
    assert_eq!(
        run["status"]["actions"][0]["decision"], "Succeeded",
        "{run}"
    );
    assert_eq!(
        run["status"]["actions"][0]["findings"]["phase"],
        "Execution"
    );
    assert!(identifier(&slapd, "alice").contains(ALICE_UUID));
    assert!(identifier(&slapd, "bob").contains(BOB_UUID));
    let out = stagehand(&[
        "report",
        "migrationrun/apply-2",
        "-n",
        &ns.name,
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        report["actions"][0]["approvedFindings"]["digest"],
        report["actions"][0]["findings"]["digest"],
        "what was changed is what was approved: {report}"
    );
}
