//! `ox_names_to_object_identifier` against a real slapd (`stagehand_e2e::slapd`, with
//! `e2e/ldap/ox.schema` for the OX Connector's attributes) and the OX SOAP simulator
//! (`stagehand_simulators::ox`), through the action library's `instantiate` as the operator
//! runs it. The IAM is read over the direct LDAP transport (`ldap.url`); Kubernetes is never
//! called (an offline client).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use stagehand_actions::action::{Action, ActionContext, SecretValue, Secrets};
use stagehand_actions::clients::ldap::escape::child_dn;
use stagehand_actions::clients::ldap::exec::ExecDirectory;
use stagehand_actions::clients::ldap::ldif;
use stagehand_actions::clients::ox::OxClient;
use stagehand_actions::ox_names_to_object_identifier::Config;
use stagehand_e2e::slapd::{BASE_DN, LocalLdapUtils, ROOT_PASSWORD, Slapd, SlapdOptions};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::ox::{self, CONTEXT_ADMIN_ID, DEFAULT_GROUP_ID, OxConfig, OxSim};

const ID: &str = "ox_names_to_object_identifier";
const MASTER: &str = "admin";
const MASTER_PW: &str = "master-secret";

/// The identifier of fixture object `n`.
fn uuid(n: u32) -> String {
    format!("{n:08x}-1b2c-403f-8a1e-5b1f2c3d4e5f")
}

fn users_dn(uid: &str) -> String {
    child_dn("uid", uid, &format!("cn=users,{BASE_DN}"))
}

fn groups_dn(cn: &str) -> String {
    child_dn("cn", cn, &format!("cn=groups,{BASE_DN}"))
}

/// An IAM user as the OX Connector sees it: `oxUserObject` with its context.
fn user(uid: &str, context: u32, identifier: Option<&str>) -> String {
    let mut out = format!(
        "{}\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nobjectClass: oxUserObject\n{}\n{}\n{}\noxContextIDNum: {context}\nisOxUser: OK\n",
        ldif::line("dn", &users_dn(uid)),
        ldif::line("uid", uid),
        ldif::line("cn", uid),
        ldif::line("sn", uid),
    );
    if let Some(id) = identifier {
        out.push_str(&format!("univentionObjectIdentifier: {id}\n"));
    }
    out.push('\n');
    out
}

fn group(cn: &str, gid: u32, identifier: Option<&str>) -> String {
    let mut out = format!(
        "{}\nobjectClass: posixGroup\nobjectClass: univentionObject\nobjectClass: oxGroup\n{}\ngidNumber: {gid}\nisOxGroup: OK\n",
        ldif::line("dn", &groups_dn(cn)),
        ldif::line("cn", cn),
    );
    if let Some(id) = identifier {
        out.push_str(&format!("univentionObjectIdentifier: {id}\n"));
    }
    out.push('\n');
    out
}

/// An `oxmail/oxcontext` object.
fn context(id: u32) -> String {
    format!(
        "dn: cn=context{id},cn=open-xchange,{BASE_DN}\nobjectClass: oxContext\ncn: context{id}\noxContextIDNum: {id}\n\n"
    )
}

fn containers() -> String {
    let mut l = String::new();
    for cn in ["users", "groups", "open-xchange"] {
        l.push_str(&format!(
            "dn: cn={cn},{BASE_DN}\nobjectClass: organizationalRole\ncn: {cn}\n\n"
        ));
    }
    l
}

struct World {
    slapd: Slapd,
    sim: OxSim,
    master_pw: String,
}

async fn world(ldif: &str, master_pw: &str) -> World {
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: format!("{}{ldif}", containers()),
        ..SlapdOptions::default()
    });
    let sim = ox::start(OxConfig::new(MASTER, master_pw)).await.unwrap();
    World {
        slapd,
        sim,
        master_pw: master_pw.to_string(),
    }
}

impl World {
    fn config(&self, extra: Value) -> Value {
        let mut config = json!({
            "ldap": {"url": self.slapd.url()},
            "oxAppSuite": {"soapUrl": self.sim.soap_url(), "requestTimeoutSeconds": 10},
        });
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                c.insert(k.clone(), v.clone());
            }
        }
        config
    }

    fn action(&self, extra: Value) -> Box<dyn Action> {
        match stagehand_actions::instantiate(ID, &self.config(extra)) {
            Ok(a) => a,
            Err(e) => panic!("instantiate {ID}: {e}"),
        }
    }

    fn ctx(&self) -> ActionContext {
        self.ctx_with(&self.master_pw)
    }

    fn ctx_with(&self, ox_password: &str) -> ActionContext {
        ActionContext {
            client: stagehand_e2e::offline_client(),
            namespace: "opendesk".into(),
            secrets: Secrets::new([
                (
                    "ox-master-password".to_string(),
                    SecretValue::new(ox_password),
                ),
                (
                    "ldap-admin-password".to_string(),
                    SecretValue::new(ROOT_PASSWORD),
                ),
            ]),
            object_store: None,
            run: Default::default(),
            stop: Default::default(),
            approved_findings: None,
            warnings: stagehand_actions::action::Warnings::default(),
            progress: Default::default(),
        }
    }

    async fn plan(&self) -> Result<String, String> {
        let ctx = self.ctx();
        self.action(json!({}))
            .plan(&ctx)
            .await
            .map(|o| o.summary)
            .map_err(|e| e.to_string())
    }

    async fn apply(&self) -> Result<String, String> {
        let ctx = self.ctx();
        self.action(json!({}))
            .apply(&ctx)
            .await
            .map(|o| o.summary)
            .map_err(|e| e.to_string())
    }

    fn changes(&self) -> usize {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.op.as_deref() == Some("change"))
            .count()
    }

    fn user_name(&self, ctx: u32, id: u32) -> String {
        self.sim.state().user(ctx, id).unwrap().name
    }

    fn group_name(&self, ctx: u32, id: u32) -> String {
        self.sim.state().group(ctx, id).unwrap().name
    }
}

/// Users and groups in two contexts: renames, one already done, unknown objects, an IAM
/// context OX lacks, an OX context the IAM does not name.
#[tokio::test]
async fn plan_reports_apply_renames_and_verifies_and_a_rerun_has_nothing_to_do() {
    let ldif = [
        context(1),
        context(3),
        user("alice", 1, Some(&uuid(1))),
        user("bob", 1, Some(&uuid(2))),
        user("carol", 1, Some(&uuid(3))),
        user("dave", 1, Some(&uuid(4))),
        user("erin", 2, Some(&uuid(5))),
        // An IAM user without identifier that OX does not know: no reason to fail.
        user("frank", 1, None),
        group("Staff", 5001, Some(&uuid(11))),
        group("Sales", 5002, Some(&uuid(12))),
    ]
    .concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    st.add_context(2, "context2");
    st.add_context(9, "elsewhere");
    let alice = st.add_user(1, "alice", "alice@example.org").unwrap();
    let bob = st.add_user(1, "bob", "bob@example.org").unwrap();
    let carol = st.add_user(1, &uuid(3), "carol@example.org").unwrap();
    let dave = st.add_user(1, "Dave", "dave@example.org").unwrap();
    let zed = st.add_user(1, "zed", "zed@example.org").unwrap();
    let erin = st.add_user(2, "erin", "erin@example.org").unwrap();
    let alice9 = st.add_user(9, "alice", "alice@elsewhere.org").unwrap();
    let staff = st
        .add_group(1, "Staff", "All Staff", &[alice, bob])
        .unwrap();
    let ox_only = st.add_group(1, "ox-only", "OX only", &[zed]).unwrap();
    let sales = st.add_group(2, "Sales", "Sales", &[erin]).unwrap();

    let planned = w.plan().await.unwrap();
    assert!(
        planned.starts_with("6 objects would be renamed to their univentionObjectIdentifier."),
        "{planned}"
    );
    assert!(
        planned.contains(
            "context 1 (context1): users 3 to rename, 1 done, 1 unknown (left alone: \"zed\"), groups 1 to rename, 0 done, 1 unknown (left alone: \"ox-only\"), held out by id: context admin oxadmin (user 2), standard group users (group 1)"
        ),
        "{planned}"
    );
    assert!(
        planned.contains(
            "context 2 (context2): users 1 to rename, 0 done, 0 unknown, groups 1 to rename"
        ),
        "{planned}"
    );
    assert!(
        planned.contains("IAM contexts OX App Suite does not have (nothing to rename there): 3"),
        "{planned}"
    );
    assert!(
        planned.contains("6 OX users in 3 contexts, 2 groups"),
        "{planned}"
    );
    assert!(!planned.contains("elsewhere"), "{planned}");
    assert_eq!(w.changes(), 0, "the plan changes nothing");
    assert_eq!(st.rename_count(), 0);

    let applied = w.apply().await.unwrap();
    assert!(
        applied.starts_with(
            "renamed 4 users and 2 groups to their univentionObjectIdentifier; read back: all 6 carry it."
        ),
        "{applied}"
    );
    assert_eq!(st.rename_count(), 6);
    assert_eq!(w.changes(), 6);
    assert_eq!(w.user_name(1, alice), uuid(1));
    assert_eq!(w.user_name(1, bob), uuid(2));
    assert_eq!(w.user_name(1, carol), uuid(3));
    assert_eq!(
        w.user_name(1, dave),
        uuid(4),
        "user names match without case"
    );
    assert_eq!(w.user_name(2, erin), uuid(5));
    assert_eq!(w.group_name(1, staff), uuid(11));
    assert_eq!(w.group_name(2, sales), uuid(12));
    assert_eq!(w.user_name(1, zed), "zed", "unknown objects are left alone");
    assert_eq!(w.group_name(1, ox_only), "ox-only");
    assert_eq!(
        w.user_name(9, alice9),
        "alice",
        "contexts the IAM does not name are not touched"
    );
    assert_eq!(w.user_name(1, CONTEXT_ADMIN_ID), "oxadmin");
    assert_eq!(w.group_name(1, DEFAULT_GROUP_ID), "users");
    // The renames were read back.
    let reads = w
        .sim
        .requests()
        .iter()
        .filter(|r| r.op.as_deref() == Some("getMultipleData"))
        .count();
    assert!(reads >= 2 + 2, "{reads} getMultipleData calls");

    w.sim.clear_requests();
    let again = w.apply().await.unwrap();
    assert!(again.starts_with("nothing to rename."), "{again}");
    assert!(
        again.contains("users 0 to rename, 4 done, 1 unknown"),
        "{again}"
    );
    assert_eq!(w.changes(), 0);
    assert_eq!(st.rename_count(), 6);
}

/// The context admin and the standard group are held out by the id OX reports: IAM objects
/// named `oxadmin` and `users` (or like the admin's current name) do not match them.
#[tokio::test]
async fn the_context_admin_and_the_standard_group_are_held_out_by_id() {
    let ldif = [
        context(1),
        user("oxadmin", 1, Some(&uuid(1))),
        user("ctxadmin", 1, Some(&uuid(2))),
        group("users", 5001, Some(&uuid(3))),
    ]
    .concat();
    let w = world(&ldif, MASTER_PW).await;
    w.sim.state().add_context(1, "context1");
    let planned = w.plan().await.unwrap();
    assert!(
        planned.starts_with("0 objects would be renamed"),
        "{planned}"
    );
    w.apply().await.unwrap();
    assert_eq!(w.changes(), 0);
    assert_eq!(w.user_name(1, CONTEXT_ADMIN_ID), "oxadmin");
    assert_eq!(w.group_name(1, DEFAULT_GROUP_ID), "users");

    // Renamed, the admin is still held out (by id, not by its name).
    let client = OxClient::new(
        &w.sim.soap_url(),
        MASTER,
        SecretValue::new(MASTER_PW),
        std::time::Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    client
        .rename_user(1, CONTEXT_ADMIN_ID, "ctxadmin")
        .await
        .unwrap();
    w.sim.clear_requests();
    let planned = w.plan().await.unwrap();
    assert!(
        planned.contains(
            "held out by id: context admin ctxadmin (user 2), standard group users (group 1)"
        ),
        "{planned}"
    );
    w.apply().await.unwrap();
    assert_eq!(w.changes(), 0);
    assert_eq!(w.user_name(1, CONTEXT_ADMIN_ID), "ctxadmin");
}

#[tokio::test]
async fn iam_objects_without_identifier_that_ox_knows_fail_the_plan() {
    let ldif = [
        context(1),
        user("default.user", 1, None),
        user("alice", 1, Some(&uuid(1))),
        group("Staff", 5001, None),
    ]
    .concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let alice = st.add_user(1, "alice", "alice@example.org").unwrap();
    st.add_user(1, "default.user", "default.user@example.org")
        .unwrap();
    st.add_group(1, "Staff", "Staff", &[alice]).unwrap();

    let err = w.plan().await.unwrap_err();
    assert!(
        err.contains(
            "The user uid=default.user,cn=users,dc=swp-ldap,dc=internal has no univentionObjectIdentifier, so its OX App Suite user cannot be renamed to one."
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "The group cn=Staff,cn=groups,dc=swp-ldap,dc=internal has no univentionObjectIdentifier, so its OX App Suite group cannot be renamed to one."
        ),
        "{err}"
    );
    let applied = w.apply().await.unwrap_err();
    assert_eq!(applied, err, "apply fails the same way, before any rename");
    assert_eq!(w.changes(), 0);
    assert_eq!(w.user_name(1, alice), "alice");
}

#[tokio::test]
async fn a_failure_after_n_renames_is_an_error_and_a_rerun_finishes_the_rest() {
    let mut ldif = context(1);
    for n in 1..=10 {
        ldif.push_str(&user(&format!("user{n:02}"), 1, Some(&uuid(n))));
    }
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let ids: Vec<u32> = (1..=10)
        .map(|n| st.add_user(1, &format!("user{n:02}"), "").unwrap())
        .collect();
    w.sim
        .faults()
        .add(FaultRule::op("change").from_nth(4).status(500));

    let err = w.apply().await.unwrap_err();
    assert!(err.contains("3 of 10 renames were made, "), "{err}");
    assert!(
        err.contains("a rerun finds them done and continues with the rest"),
        "{err}"
    );
    assert!(
        err.contains("Simulated storage failure (injected fault)"),
        "{err}"
    );
    assert_eq!(st.rename_count(), 3);

    w.sim.faults().clear();
    w.sim.clear_requests();
    let planned = w.plan().await.unwrap();
    assert!(
        planned.starts_with("7 objects would be renamed"),
        "{planned}"
    );
    assert!(
        planned.contains("users 7 to rename, 3 done, 0 unknown"),
        "{planned}"
    );
    let applied = w.apply().await.unwrap();
    assert!(
        applied.contains("renamed 7 users and 0 groups"),
        "{applied}"
    );
    assert_eq!(w.changes(), 7, "the rerun leaves what was done alone");
    assert_eq!(st.rename_count(), 10);
    for (n, id) in (1..=10).zip(&ids) {
        assert_eq!(w.user_name(1, *id), uuid(n));
    }
}

#[tokio::test]
async fn a_server_that_refuses_renames_says_to_set_username_changeable() {
    let ldif = [context(1), user("alice", 1, Some(&uuid(1)))].concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let alice = st.add_user(1, "alice", "").unwrap();
    st.set_username_changeable(false);
    let err = w.apply().await.unwrap_err();
    assert!(err.contains("Changing username is disabled!"), "{err}");
    assert!(err.contains("set USERNAME_CHANGEABLE=true"), "{err}");
    assert!(err.contains("0 of 1 rename was made, 1 failed"), "{err}");
    assert_eq!(w.user_name(1, alice), "alice");
}

#[tokio::test]
async fn a_rename_that_does_not_stick_fails_the_read_back() {
    let ldif = [context(1), group("Staff", 5001, Some(&uuid(7)))].concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let staff = st.add_group(1, "Staff", "Staff", &[]).unwrap();
    st.set_renames_lost(true);
    let err = w.apply().await.unwrap_err();
    assert!(
        err.contains(&format!(
            "group id {staff} in context 1 (cn=Staff,cn=groups,dc=swp-ldap,dc=internal) is named \"Staff\", not {}",
            uuid(7)
        )),
        "{err}"
    );
    assert!(
        err.contains("do not carry their univentionObjectIdentifier"),
        "{err}"
    );
}

#[tokio::test]
async fn a_wrong_ox_password_fails_the_plan_and_renames_nothing() {
    let ldif = [context(1), user("alice", 1, Some(&uuid(1)))].concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let alice = st.add_user(1, "alice", "").unwrap();
    let ctx = w.ctx_with("not-the-password");
    let action = w.action(json!({}));
    let err = action.plan(&ctx).await.unwrap_err().to_string();
    assert!(
        err.contains("refused the credentials of \"admin\" (Authentication failed)"),
        "{err}"
    );
    assert!(err.contains("ox-master-password"), "{err}");
    assert!(!err.contains("not-the-password"), "{err}");
    assert!(action.apply(&ctx).await.is_err());
    assert_eq!(w.changes(), 0);
    assert_eq!(w.user_name(1, alice), "alice");

    // Without MASTER_ACCOUNT_OVERRIDE the master admin lists contexts but not their users.
    st.set_master_account_override(false);
    let err = w.plan().await.unwrap_err();
    assert!(err.contains("MASTER_ACCOUNT_OVERRIDE=true"), "{err}");
    assert!(err.contains("context 1"), "{err}");
}

/// Names and the password with `&<>"'` go through the LDAP side, the envelope and the answers.
#[tokio::test]
async fn names_and_passwords_with_xml_specials_round_trip() {
    let odd_user = "o'brien&<x>\"";
    let odd_group = "R&D <\"Team's\">";
    let ldif = [
        context(1),
        user(odd_user, 1, Some(&uuid(1))),
        group(odd_group, 5001, Some(&uuid(2))),
    ]
    .concat();
    let password = "p&<>\"'w";
    let w = world(&ldif, password).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let u = st.add_user(1, odd_user, "").unwrap();
    let g = st.add_group(1, odd_group, odd_group, &[u]).unwrap();
    st.add_group(1, "a<b>&\"c'", "odd", &[]).unwrap();

    let planned = w.plan().await.unwrap();
    assert!(
        planned.starts_with("2 objects would be renamed"),
        "{planned}"
    );
    assert!(
        planned.contains(r#"(left alone: "a<b>&\"c'")"#),
        "{planned}"
    );
    w.apply().await.unwrap();
    assert_eq!(w.user_name(1, u), uuid(1));
    assert_eq!(w.group_name(1, g), uuid(2));
}

#[tokio::test]
async fn dry_run_only_plans_and_empty_change_answers_are_accepted() {
    let ldif = [context(1), user("alice", 1, Some(&uuid(1)))].concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let alice = st.add_user(1, "alice", "").unwrap();
    let ctx = w.ctx();
    let dry = w
        .action(json!({"dryRun": true}))
        .apply(&ctx)
        .await
        .unwrap()
        .summary;
    assert!(
        dry.starts_with("dryRun is set, nothing changed: 1 object would be renamed"),
        "{dry}"
    );
    assert_eq!(w.changes(), 0);
    assert_eq!(w.user_name(1, alice), "alice");

    st.set_empty_change_response(true);
    w.apply().await.unwrap();
    assert_eq!(w.user_name(1, alice), uuid(1));
}

/// The exec transport (openDesk's default: `ldapsearch` in the LDAP pod), here over the
/// server's ldapi socket: names that `ldapsearch` prints base64-encoded come back intact.
#[tokio::test]
async fn the_exec_transport_reads_the_iam_too() {
    let odd_user = "o'brien&<x>\"";
    let ldif = [
        context(1),
        user(odd_user, 1, Some(&uuid(1))),
        user("Ünal", 1, Some(&uuid(2))),
        group("Staff", 5001, Some(&uuid(3))),
    ]
    .concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let u = st.add_user(1, odd_user, "").unwrap();
    let unal = st.add_user(1, "ünal", "").unwrap();
    let staff = st.add_group(1, "Staff", "Staff", &[u]).unwrap();
    let dir = ExecDirectory::new(LocalLdapUtils, w.slapd.ldapi_url());
    let config: Config = serde_json::from_value(w.config(json!({}))).unwrap();
    let ox = OxClient::new(
        &w.sim.soap_url(),
        MASTER,
        SecretValue::new(MASTER_PW),
        std::time::Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    let planned = config.plan_on(&dir, &ox).await.unwrap().summary;
    assert!(
        planned.starts_with("3 objects would be renamed"),
        "{planned}"
    );
    assert!(planned.contains("IAM (local ldap-utils)"), "{planned}");
    let applied = config.apply_on(&dir, &ox).await.unwrap().summary;
    assert!(
        applied.starts_with("renamed 2 users and 1 group"),
        "{applied}"
    );
    assert_eq!(w.user_name(1, u), uuid(1));
    assert_eq!(w.user_name(1, unal), uuid(2));
    assert_eq!(w.group_name(1, staff), uuid(3));
}

/// The SOAP client's other calls (used by the functional-accounts export too), against the
/// simulator: reads, secondary accounts, faults, HTTP errors and transport failures.
#[tokio::test]
async fn the_client_reads_deletes_secondary_accounts_and_reports_failures() {
    use stagehand_actions::clients::ox::{AccountOwners, OxError};
    let sim = ox::start(OxConfig::new(MASTER, MASTER_PW)).await.unwrap();
    let st = sim.state();
    st.add_context(1, "context1");
    let alice = st.add_user(1, "alice", "alice@example.org").unwrap();
    let bob = st.add_user(1, "bob", "bob@example.org").unwrap();
    let staff = st
        .add_group(1, "Staff", "All Staff", &[alice, bob])
        .unwrap();
    st.add_secondary_account(1, "team@example.org", "Team", &[alice, bob])
        .unwrap();
    st.add_secondary_account(1, "sales@example.org", "Sales", &[bob])
        .unwrap();
    let c = OxClient::new(
        &sim.soap_url(),
        MASTER,
        SecretValue::new(MASTER_PW),
        std::time::Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();

    let contexts = c.list_contexts().await.unwrap();
    assert_eq!(contexts.len(), 1);
    assert_eq!(contexts[0].name.as_deref(), Some("context1"));
    assert_eq!(c.context_admin_id(1).await.unwrap(), CONTEXT_ADMIN_ID);
    assert_eq!(
        c.context_admin(1).await.unwrap().name.as_deref(),
        Some("oxadmin")
    );
    let ids = c.list_user_ids(1).await.unwrap();
    assert_eq!(ids, [CONTEXT_ADMIN_ID, alice, bob]);
    let users = c.users(1, &[bob, alice]).await.unwrap();
    assert_eq!(users[0].name.as_deref(), Some("bob"));
    assert_eq!(users[1].primary_email.as_deref(), Some("alice@example.org"));
    assert_eq!(
        c.user(1, alice).await.unwrap().name.as_deref(),
        Some("alice")
    );
    let g = c.group(1, staff).await.unwrap();
    assert_eq!(g.members, [alice, bob]);
    assert_eq!(g.display_name.as_deref(), Some("All Staff"));
    assert_eq!(c.groups(1, &[staff]).await.unwrap()[0].id, staff);
    assert_eq!(c.default_group(1).await.unwrap().id, DEFAULT_GROUP_ID);

    let rows = c.list_secondary_accounts(1).await.unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().any(
        |r| r.primary_address.as_deref() == Some("sales@example.org") && r.user_id == Some(bob)
    ));
    assert!(
        c.delete_secondary_account(1, "team@example.org", AccountOwners::Users(&[alice]))
            .await
            .unwrap()
    );
    assert!(
        c.delete_secondary_account(1, "team@example.org", AccountOwners::Everyone)
            .await
            .unwrap()
    );
    assert!(
        !c.delete_secondary_account(1, "team@example.org", AccountOwners::Groups(&[staff]))
            .await
            .unwrap(),
        "nothing left to delete"
    );
    assert_eq!(st.secondary_accounts(1).len(), 1);

    let missing = c.user(1, 99).await.unwrap_err();
    let fault = missing.fault().expect("a SOAP fault");
    assert!(fault.is_not_found(), "{missing}");
    assert_eq!(fault.exception.as_deref(), Some("NoSuchUserException"));
    assert!(
        missing
            .to_string()
            .starts_with("OX App Suite OXUserService.getData at http://"),
        "{missing}"
    );

    let wrong_prefix = OxClient::new(
        &format!("{}/prefix", sim.soap_url()),
        MASTER,
        SecretValue::new(MASTER_PW),
        std::time::Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    let http = wrong_prefix.list_contexts().await.unwrap_err();
    assert!(matches!(http, OxError::Http { status: 404, .. }), "{http}");

    sim.faults()
        .add(FaultRule::op("listAll").nth(1).drop_connection());
    let dropped = c.list_contexts().await.unwrap_err();
    assert!(matches!(dropped, OxError::Transport { .. }), "{dropped}");
    sim.faults()
        .add(FaultRule::op("listAll").nth(1).status(503));
    let proxy = c.list_contexts().await.unwrap_err();
    assert!(
        matches!(proxy, OxError::Http { status: 503, .. }),
        "{proxy}"
    );

    let impatient = OxClient::new(
        &sim.soap_url(),
        MASTER,
        SecretValue::new(MASTER_PW),
        std::time::Duration::from_secs(1),
        &Default::default(),
    )
    .unwrap();
    sim.faults().add(FaultRule::op("listAll").nth(1).hang());
    let started = std::time::Instant::now();
    let hung = impatient.list_contexts().await.unwrap_err();
    assert!(hung.to_string().contains("timed out"), "{hung}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// Preflight proves OX's credential and the LDAP bind, and reads nothing of the IAM: an IAM
/// whose identifiers an earlier action has yet to set (which planning refuses) passes.
#[tokio::test]
async fn preflight_proves_ox_and_the_ldap_bind_without_reading_identifiers() {
    let ldif = [context(1), user("alice", 1, None)].concat();
    let w = world(&ldif, MASTER_PW).await;
    let st = w.sim.state();
    st.add_context(1, "context1");
    let alice = st.add_user(1, "alice", "").unwrap();
    let action = w.action(json!({}));
    let err = action.plan(&w.ctx()).await.unwrap_err().to_string();
    assert!(err.contains("has no univentionObjectIdentifier"), "{err}");
    w.sim.clear_requests();

    action.preflight(&w.ctx()).await.unwrap();
    let ops: Vec<Option<String>> = w.sim.requests().into_iter().map(|r| r.op).collect();
    assert_eq!(ops, [Some("listAll".to_string())], "one read-only call");

    let err = action
        .preflight(&w.ctx_with("not-the-password"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("ox-master-password"), "{err}");
    assert!(
        err.contains(w.sim.soap_url().trim_end_matches('/')),
        "{err}"
    );
    assert!(!err.contains("not-the-password"), "{err}");

    let wrong_bind = ActionContext {
        secrets: Secrets::new([
            (
                "ox-master-password".to_string(),
                SecretValue::new(MASTER_PW),
            ),
            (
                "ldap-admin-password".to_string(),
                SecretValue::new("not-the-ldap-password"),
            ),
        ]),
        ..w.ctx()
    };
    let err = action.preflight(&wrong_bind).await.unwrap_err().to_string();
    assert!(err.contains("ldap-admin-password"), "{err}");
    assert!(err.contains(&w.slapd.url()), "{err}");
    assert!(!err.contains("not-the-ldap-password"), "{err}");

    assert_eq!(w.changes(), 0);
    assert_eq!(w.user_name(1, alice), "alice");
    assert!(
        !w.slapd
            .search("(uid=alice)", &["univentionObjectIdentifier"])
            .contains("univentionObjectIdentifier:"),
        "the IAM was changed"
    );
}
