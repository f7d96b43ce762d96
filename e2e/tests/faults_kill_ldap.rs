//! The kill matrix of the actions that read the IAM's LDAP directory, through the operator on
//! the local control plane (see `stagehand_e2e::kill_matrix` for the kill points and what a
//! case must show):
//!
//! - `ldap_entryuuid_to_object_identifier` against a real slapd behind a counting proxy
//!   (`WireProxy`, LDAP): the destructive requests are the LDAP modify requests, one per
//!   entry; the proxy holds the next once `k` were forwarded and, after the kill, drops what
//!   the killed operator sent after them;
//! - `ox_names_to_object_identifier` against a real slapd and the OX SOAP simulator: the
//!   destructive requests are the SOAP `change` calls (renames), one per OX user or group; the
//!   simulator's fault rule holds the next once `k` were served, and its request log names the
//!   object of each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use stagehand_actions::action::{ActionContext, SecretValue, Secrets};
use stagehand_actions::clients::ldap::escape::child_dn;
use stagehand_actions::clients::ldap::ldif;
use stagehand_e2e::kill_matrix::{KubeTrip, Target, case, points, report};
use stagehand_e2e::kube_proxy::{KubeProxy, Seen};
use stagehand_e2e::manifests::{Action, Migration};
use stagehand_e2e::slapd::{BASE_DN, ROOT_PASSWORD, Slapd, SlapdOptions};
use stagehand_e2e::wire_proxy::{Wire, WireProxy};
use stagehand_e2e::{client, create_secret, install_crds};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::ox::{self, CONTEXT_ADMIN_ID, DEFAULT_GROUP_ID, OxConfig, OxSim};

const LDAP_SECRET: &str = "ums-ldap-server-admin";
const OX_SECRET: &str = "opendesk-ox-admin-password";
const OX_MASTER: &str = "admin";
const OX_PASSWORD: &str = "ox-kill-S3cret";

/// The Migration `opendesk` adopting v1.17.3 with one tagged pre action, its credentials read
/// from Secrets.
fn migration(ns: &str, action: Action, ox: bool) -> String {
    let mut m = Migration::new(ns).installed("v1.17.3").secret_file(
        "ldap-admin-password",
        LDAP_SECRET,
        "password",
    );
    if ox {
        m = m.secret_file("ox-master-password", OX_SECRET, "password");
    }
    m.pre(action.tag("v1.18.0").run_mode("apply")).to_yaml()
}

fn users_dn(uid: &str) -> String {
    child_dn("uid", uid, &format!("cn=users,{BASE_DN}"))
}

fn groups_dn(cn: &str) -> String {
    child_dn("cn", cn, &format!("cn=groups,{BASE_DN}"))
}

fn containers(names: &[&str]) -> String {
    names
        .iter()
        .map(|cn| format!("dn: cn={cn},{BASE_DN}\nobjectClass: organizationalRole\ncn: {cn}\n\n"))
        .collect()
}

/// The identifiers of the entries of `slapd` below the base: DN → values.
fn identifiers(slapd: &Slapd) -> BTreeMap<String, (String, Vec<String>)> {
    let text = slapd.search(
        "(objectClass=inetOrgPerson)",
        &["entryUUID", "univentionObjectIdentifier"],
    );
    ldif::parse_entries(&text)
        .unwrap()
        .into_iter()
        .map(|e| {
            let uuid = e.values("entryUUID").first().cloned().unwrap_or_default();
            let ids = e.values("univentionObjectIdentifier").to_vec();
            (e.dn, (uuid, ids))
        })
        .collect()
}

// ---- ldap_entryuuid_to_object_identifier ------------------------------------------------

/// Users whose identifier differs from their entryUUID.
const DIFFERING: usize = 10;

fn entry_uuid(n: usize) -> String {
    format!("0000000{n:x}-0000-4000-8000-000000000001")
}

fn stale_identifier(n: usize) -> String {
    format!("5555555{n:x}-0000-4000-8000-000000000002")
}

/// `kill-0` to `kill-9` differ; `matching` carries its entryUUID in upper case (equal as a
/// UUID: a modify would write it in lower case); `plain` has no identifier.
fn identifiers_fixture() -> String {
    let mut l = containers(&["users"]);
    let person = |uid: &str, uuid: &str, id: Option<&str>| {
        let mut out = format!("dn: {}\nobjectClass: inetOrgPerson\n", users_dn(uid));
        if id.is_some() {
            out.push_str("objectClass: univentionObject\nuniventionObjectType: users/user\n");
        }
        out.push_str(&format!(
            "uid: {uid}\ncn: {uid}\nsn: {uid}\nentryUUID: {uuid}\n"
        ));
        if let Some(id) = id {
            out.push_str(&format!("univentionObjectIdentifier: {id}\n"));
        }
        out.push('\n');
        out
    };
    for n in 0..DIFFERING {
        l.push_str(&person(
            &format!("kill-{n}"),
            &entry_uuid(n),
            Some(&stale_identifier(n)),
        ));
    }
    l.push_str(&person(
        "matching",
        &entry_uuid(0xa),
        Some(&entry_uuid(0xa).to_uppercase()),
    ));
    l.push_str(&person("plain", &entry_uuid(0xb), None));
    l
}

/// `ldap_entryuuid_to_object_identifier` over the direct transport, through the counting proxy.
struct Identifiers {
    slapd: Slapd,
    proxy: WireProxy,
    total: usize,
}

impl Identifiers {
    /// The identifiers as the fixture has them (as the rootdn, past the proxy).
    fn reset(&self) {
        let ldif: String = (0..DIFFERING)
            .map(|n| {
                format!(
                    "dn: {}\nchangetype: modify\nreplace: univentionObjectIdentifier\nuniventionObjectIdentifier: {}\n-\n\n",
                    users_dn(&format!("kill-{n}")),
                    stale_identifier(n)
                )
            })
            .collect();
        self.slapd.modify(&ldif);
        self.proxy.release();
        self.proxy.clear();
    }

    fn config(&self) -> Value {
        json!({"ldap": {"url": format!("ldap://127.0.0.1:{}", self.proxy.port()), "requestTimeoutSeconds": 30}})
    }
}

impl Target for Identifiers {
    fn id(&self) -> &'static str {
        "ldap_entryuuid_to_object_identifier"
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        self.total
    }
    async fn prepare(&mut self, ns: &str) -> String {
        self.reset();
        create_secret(ns, LDAP_SECRET, "password", ROOT_PASSWORD);
        migration(
            ns,
            Action::new("ldap_entryuuid_to_object_identifier").config(self.config()),
            false,
        )
    }
    async fn hold_after(&mut self, _ns: &str, k: usize) -> Option<KubeTrip> {
        self.proxy.hold_after(k);
        None
    }
    async fn holding(&self) -> bool {
        self.proxy.holding()
    }
    async fn release(&mut self) {
        // The operator was killed: what it sent after the k-th modify never reaches slapd.
        self.proxy.drop_held();
    }
    async fn served(&self, _ns: &str, _log: &[Seen]) -> Vec<String> {
        self.proxy
            .forwarded()
            .into_iter()
            .filter(|d| d.op == "modify")
            .flat_map(|d| d.targets)
            .collect()
    }
    async fn check_end_state(&self, _ns: &str) -> Result<(), String> {
        let found = identifiers(&self.slapd);
        let mut wrong = Vec::new();
        for n in 0..DIFFERING {
            let dn = users_dn(&format!("kill-{n}"));
            match found.get(&dn) {
                Some((uuid, ids)) if ids == std::slice::from_ref(uuid) => {}
                other => wrong.push(format!("{dn}: {other:?}")),
            }
        }
        let matching = &found[&users_dn("matching")].1;
        if matching != &[entry_uuid(0xa).to_uppercase()] {
            wrong.push(format!("matching was rewritten: {matching:?}"));
        }
        if !found[&users_dn("plain")].1.is_empty() {
            wrong.push("plain was given an identifier".into());
        }
        wrong
            .is_empty()
            .then_some(())
            .ok_or_else(|| wrong.join("; "))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ldap_entryuuid_to_object_identifier_survives_a_kill_at_every_point() {
    let client = client().await;
    install_crds();
    let proxy = KubeProxy::start().await;
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: identifiers_fixture(),
        ..SlapdOptions::default()
    });
    let wire = WireProxy::start(Wire::Ldap, slapd.port()).await;
    let mut target = Identifiers {
        slapd,
        proxy: wire,
        total: 0,
    };

    // How many modifies an uninterrupted run sends (the direct transport pipelines and batches
    // them): the action applied once, directly, through the proxy.
    target.reset();
    let action =
        stagehand_actions::instantiate("ldap_entryuuid_to_object_identifier", &target.config())
            .unwrap();
    let ctx = ActionContext {
        client: stagehand_e2e::offline_client(),
        namespace: "unused".into(),
        secrets: Secrets::new([(
            "ldap-admin-password".to_string(),
            SecretValue::new(ROOT_PASSWORD),
        )]),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    };
    action.plan(&ctx).await.unwrap();
    action.apply(&ctx).await.unwrap();
    let modified = target.served("", &[]).await;
    target.total = modified.len();
    assert_eq!(
        target.total, DIFFERING,
        "an uninterrupted run modifies each differing entry once: {modified:?}"
    );
    target.check_end_state("").await.unwrap();

    let mut rows = Vec::new();
    for point in points(target.destructive_total()) {
        rows.push(case(&mut target, &client, &proxy, point).await);
    }
    report(env!("CARGO_TARGET_TMPDIR"), &rows);
}

// ---- ox_names_to_object_identifier ---------------------------------------------------------

/// The IAM's OX users (context 1) and groups, each with its identifier.
const USERS: [&str; 6] = ["anna", "ben", "carl", "dora", "emil", "fritz"];
const GROUPS: [&str; 2] = ["Staff", "Sales"];

fn ox_identifier(n: usize) -> String {
    format!("{n:08x}-1b2c-403f-8a1e-5b1f2c3d4e5f")
}

fn ox_names_fixture() -> String {
    let mut l = containers(&["users", "groups", "open-xchange"]);
    l.push_str(&format!(
        "dn: cn=context1,cn=open-xchange,{BASE_DN}\nobjectClass: oxContext\ncn: context1\noxContextIDNum: 1\n\n"
    ));
    for (n, uid) in USERS.iter().enumerate() {
        l.push_str(&format!(
            "dn: {}\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nobjectClass: oxUserObject\nuid: {uid}\ncn: {uid}\nsn: {uid}\noxContextIDNum: 1\nisOxUser: OK\nuniventionObjectIdentifier: {}\n\n",
            users_dn(uid),
            ox_identifier(n)
        ));
    }
    for (n, cn) in GROUPS.iter().enumerate() {
        l.push_str(&format!(
            "dn: {}\nobjectClass: posixGroup\nobjectClass: univentionObject\nobjectClass: oxGroup\ncn: {cn}\ngidNumber: {}\nisOxGroup: OK\nuniventionObjectIdentifier: {}\n\n",
            groups_dn(cn),
            5000 + n,
            ox_identifier(100 + n)
        ));
    }
    l
}

/// `ox_names_to_object_identifier`: six users and two groups renamed (eight `change` calls); the
/// context admin, the standard group and an OX-only user are left alone.
struct OxNames {
    slapd: Slapd,
    sim: OxSim,
    users: Vec<u32>,
    groups: Vec<u32>,
    zed: u32,
    /// The simulator's rename count before the case (it counts over the simulator's life).
    renames_before: u64,
}

impl Target for OxNames {
    fn id(&self) -> &'static str {
        "ox_names_to_object_identifier"
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        USERS.len() + GROUPS.len()
    }
    async fn prepare(&mut self, ns: &str) -> String {
        self.sim.faults().clear();
        self.sim.clear_requests();
        // A fresh context 1: oxadmin, the group `users`, the users by their IAM names.
        let st = self.sim.state();
        st.add_context(1, "context1");
        self.renames_before = st.rename_count();
        self.users = USERS
            .iter()
            .map(|u| st.add_user(1, u, &format!("{u}@example.org")).unwrap())
            .collect();
        self.zed = st.add_user(1, "zed", "zed@example.org").unwrap();
        self.groups = GROUPS
            .iter()
            .map(|g| st.add_group(1, g, g, &self.users[..2]).unwrap())
            .collect();
        create_secret(ns, LDAP_SECRET, "password", ROOT_PASSWORD);
        create_secret(ns, OX_SECRET, "password", OX_PASSWORD);
        migration(
            ns,
            Action::new("ox_names_to_object_identifier").config(json!({
                "ldap": {"url": self.slapd.url()},
                "oxAppSuite": {"soapUrl": self.sim.soap_url(), "username": OX_MASTER, "requestTimeoutSeconds": 30},
            })),
            true,
        )
    }
    async fn hold_after(&mut self, _ns: &str, k: usize) -> Option<KubeTrip> {
        // The (k+1)-th rename and every later one hang unanswered and are not carried out.
        self.sim
            .faults()
            .add(FaultRule::op("change").from_nth(k as u64 + 1).hang());
        None
    }
    async fn holding(&self) -> bool {
        self.sim.faults().rules().iter().any(|r| r.fired > 0)
    }
    async fn release(&mut self) {
        self.sim.faults().clear();
    }
    async fn served(&self, _ns: &str, _log: &[Seen]) -> Vec<String> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.op.as_deref() == Some("change") && r.status.is_some())
            .map(|r| r.object.unwrap_or(r.path))
            .collect()
    }
    async fn check_end_state(&self, _ns: &str) -> Result<(), String> {
        let st = self.sim.state();
        let mut wrong = Vec::new();
        for (n, id) in self.users.iter().enumerate() {
            let name = st.user(1, *id).map(|u| u.name).unwrap_or_default();
            if name != ox_identifier(n) {
                wrong.push(format!("user {id} is named {name:?}"));
            }
        }
        for (n, id) in self.groups.iter().enumerate() {
            let name = st.group(1, *id).map(|g| g.name).unwrap_or_default();
            if name != ox_identifier(100 + n) {
                wrong.push(format!("group {id} is named {name:?}"));
            }
        }
        let kept = [
            (st.user(1, CONTEXT_ADMIN_ID).map(|u| u.name), "oxadmin"),
            (st.user(1, self.zed).map(|u| u.name), "zed"),
            (st.group(1, DEFAULT_GROUP_ID).map(|g| g.name), "users"),
        ];
        for (name, want) in kept {
            if name.as_deref() != Some(want) {
                wrong.push(format!("{want} is named {name:?}"));
            }
        }
        let renames = st.rename_count() - self.renames_before;
        if renames != self.destructive_total() as u64 {
            wrong.push(format!("{renames} renames made"));
        }
        wrong
            .is_empty()
            .then_some(())
            .ok_or_else(|| wrong.join("; "))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ox_names_to_object_identifier_survives_a_kill_at_every_point() {
    let client = client().await;
    install_crds();
    let proxy = KubeProxy::start().await;
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: ox_names_fixture(),
        ..SlapdOptions::default()
    });
    let sim = ox::start(OxConfig::new(OX_MASTER, OX_PASSWORD))
        .await
        .unwrap();
    let mut target = OxNames {
        slapd,
        sim,
        users: Vec::new(),
        groups: Vec::new(),
        zed: 0,
        renames_before: 0,
    };
    let mut rows = Vec::new();
    for point in points(target.destructive_total()) {
        rows.push(case(&mut target, &client, &proxy, point).await);
    }
    report(env!("CARGO_TARGET_TMPDIR"), &rows);
}
