//! `ldap_entryuuid_to_object_identifier` against a real slapd (`stagehand_e2e::slapd`): both
//! transports (the direct LDAP connection, and the `ldapsearch`/`ldapmodify` command lines of
//! the exec transport run locally over the server's ldapi socket), and the exec transport's
//! Kubernetes side on the local control plane (no kubelet there: the exec must fail clearly).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use stagehand_actions::action::{Action, ActionContext, SecretValue, Secrets};
use stagehand_actions::clients::ldap::Directory;
use stagehand_actions::clients::ldap::escape::child_dn;
use stagehand_actions::clients::ldap::exec::{CommandRunner, ExecDirectory, KubeExec};
use stagehand_actions::clients::ldap::ldif;
use stagehand_actions::ldap_entryuuid_to_object_identifier::Config;
use stagehand_e2e::exec_node::LocalExecNode;
use stagehand_e2e::slapd::{BASE_DN, LocalLdapUtils, ROOT_DN, ROOT_PASSWORD, Slapd, SlapdOptions};
use stagehand_e2e::{Scene, kubectl_stdin, ok, running_pods};

const ID: &str = "ldap_entryuuid_to_object_identifier";
const MIGRATOR_DN: &str = "cn=migrator,dc=swp-ldap,dc=internal";
const MIGRATOR_PASSWORD: &str = "migrator-secret";
const BULK: usize = 300;

fn action(config: Value) -> Box<dyn Action> {
    match stagehand_actions::instantiate(ID, &config) {
        Ok(a) => a,
        Err(e) => panic!("instantiate {ID}: {e}"),
    }
}

fn config(config: Value) -> Config {
    serde_json::from_value(config).unwrap()
}

/// A context for the direct transport: its kube client points nowhere (it is never used).
fn ctx_with(password: Option<&str>) -> ActionContext {
    let kube_config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    ActionContext {
        client: kube::Client::try_from(kube_config).unwrap(),
        namespace: "unused".into(),
        secrets: Secrets::new(
            password.map(|p| ("ldap-admin-password".to_string(), SecretValue::new(p))),
        ),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    }
}

/// A UUID of the fixture: `kind` tells entryUUIDs from the identifiers that differ.
fn uuid(kind: u32, n: usize) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

fn person(dn: &str, uid: &str, entry_uuid: &str, identifier: Option<&str>) -> String {
    let mut out = format!("{}\nobjectClass: inetOrgPerson\n", ldif::line("dn", dn));
    if identifier.is_some() {
        out.push_str("objectClass: univentionObject\nuniventionObjectType: users/user\n");
    }
    out.push_str(&format!(
        "{}\ncn: {uid}\nsn: {uid}\nentryUUID: {entry_uuid}\n",
        ldif::line("uid", uid)
    ));
    if let Some(id) = identifier {
        out.push_str(&format!("univentionObjectIdentifier: {id}\n"));
    }
    out.push('\n');
    out
}

fn group(cn: &str, gid: usize, entry_uuid: &str, identifier: Option<&str>) -> String {
    let dn = child_dn("cn", cn, &format!("cn=groups,{BASE_DN}"));
    let mut out = format!("{}\nobjectClass: posixGroup\n", ldif::line("dn", &dn));
    if identifier.is_some() {
        out.push_str("objectClass: univentionObject\nuniventionObjectType: groups/group\n");
    }
    out.push_str(&format!(
        "{}\ngidNumber: {gid}\nentryUUID: {entry_uuid}\n",
        ldif::line("cn", cn)
    ));
    if let Some(id) = identifier {
        out.push_str(&format!("univentionObjectIdentifier: {id}\n"));
    }
    out.push('\n');
    out
}

fn users_dn(uid: &str) -> String {
    child_dn("uid", uid, &format!("cn=users,{BASE_DN}"))
}

/// The fixture: users and groups whose identifier differs from their entryUUID, matches it
/// (one in upper case), or is absent; names that need DN escaping and base64 in LDIF; a bulk
/// of differing users (more than the modifications in flight); a protected container; the
/// bind DN `cn=migrator` with its password.
fn fixture() -> String {
    let mut l = String::new();
    for cn in ["users", "groups", "protected"] {
        l.push_str(&format!(
            "dn: cn={cn},{BASE_DN}\nobjectClass: organizationalRole\ncn: {cn}\n\n"
        ));
    }
    l.push_str(&format!(
        "dn: {MIGRATOR_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: migrator\nuserPassword: {MIGRATOR_PASSWORD}\n\n"
    ));
    // Differing.
    l.push_str(&person(
        &users_dn("alice"),
        "alice",
        &uuid(1, 1),
        Some(&uuid(2, 1)),
    ));
    l.push_str(&person(
        &users_dn("o,brien"),
        "o,brien",
        &uuid(1, 2),
        Some(&uuid(2, 2).to_uppercase()),
    ));
    l.push_str(&person(
        &users_dn("müller"),
        "müller",
        &uuid(1, 3),
        Some(&uuid(2, 3)),
    ));
    l.push_str(&group("Sales, EMEA", 5001, &uuid(1, 4), Some(&uuid(2, 4))));
    // Matching (one in upper case: equal as UUIDs).
    l.push_str(&person(
        &users_dn("bob"),
        "bob",
        &uuid(1, 5),
        Some(&uuid(1, 5)),
    ));
    l.push_str(&person(
        &users_dn("bobupper"),
        "bobupper",
        &uuid(1, 6),
        Some(&uuid(1, 6).to_uppercase()),
    ));
    l.push_str(&group("staff", 5002, &uuid(1, 7), Some(&uuid(1, 7))));
    // Without the attribute.
    l.push_str(&person(&users_dn("carol"), "carol", &uuid(1, 8), None));
    l.push_str(&group("nogroupid", 5003, &uuid(1, 9), None));
    // In the protected container (the ACL test refuses writes there), differing.
    l.push_str(&person(
        &child_dn("uid", "locked", &format!("cn=protected,{BASE_DN}")),
        "locked",
        &uuid(1, 10),
        Some(&uuid(2, 10)),
    ));
    for i in 0..BULK {
        let uid = format!("bulk-{i:04}");
        l.push_str(&person(
            &users_dn(&uid),
            &uid,
            &uuid(3, i),
            Some(&uuid(4, i)),
        ));
    }
    l
}

/// Differing objects of the fixture (the protected one included).
const DIFFERING: usize = 5 + BULK;
/// Objects carrying the identifier.
const CARRYING: usize = DIFFERING + 3;

fn start(database_config: &str) -> Slapd {
    Slapd::start_with(&SlapdOptions {
        initial_ldif: fixture(),
        database_config: database_config.into(),
        ..SlapdOptions::default()
    })
}

/// What an entry looks like: its identifier values, entryUUID, entryCSN and modifyTimestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    identifier: Vec<String>,
    entry_uuid: String,
    csn: String,
    modified: String,
}

fn snapshot(slapd: &Slapd) -> BTreeMap<String, Seen> {
    let text = slapd.search(
        "(objectClass=*)",
        &[
            "entryUUID",
            "univentionObjectIdentifier",
            "entryCSN",
            "modifyTimestamp",
        ],
    );
    ldif::parse_entries(&text)
        .unwrap()
        .into_iter()
        .map(|e| {
            let one = |a: &str| e.values(a).first().cloned().unwrap_or_default();
            let seen = Seen {
                identifier: e.values("univentionObjectIdentifier").to_vec(),
                entry_uuid: one("entryUUID"),
                csn: one("entryCSN"),
                modified: one("modifyTimestamp"),
            };
            (same_dn(&e.dn), seen)
        })
        .collect()
}

/// slapd writes an escaped comma as `\2C`; the fixture's DNs (RFC 4514 escaping by
/// `child_dn`) have `\,`. Both are the same DN.
fn same_dn(dn: &str) -> String {
    dn.replace("\\2C", "\\,")
}

fn dn_of_group(cn: &str) -> String {
    child_dn("cn", cn, &format!("cn=groups,{BASE_DN}"))
}

/// After a successful run: every differing object (except `skip`) carries its entryUUID and
/// was modified; matching and identifier-less objects are untouched.
fn assert_fixed(before: &BTreeMap<String, Seen>, after: &BTreeMap<String, Seen>, skip: &[&str]) {
    assert_eq!(before.len(), after.len());
    let mut changed = 0;
    for (dn, b) in before {
        let a = &after[dn];
        assert_eq!(
            a.entry_uuid, b.entry_uuid,
            "{dn}: entryUUID is never changed"
        );
        let differing =
            !b.identifier.is_empty() && !b.identifier[0].eq_ignore_ascii_case(&b.entry_uuid);
        if differing && !skip.contains(&dn.as_str()) {
            assert_eq!(
                a.identifier,
                std::slice::from_ref(&b.entry_uuid),
                "{dn}: identifier set"
            );
            assert_ne!(a.csn, b.csn, "{dn}: was modified");
            changed += 1;
        } else {
            assert_eq!(
                a, b,
                "{dn}: untouched (identifier, entryCSN, modifyTimestamp)"
            );
        }
    }
    assert_eq!(changed, DIFFERING - skip.len());
    // Spot checks by name.
    assert_eq!(after[&users_dn("alice")].identifier, [uuid(1, 1)]);
    assert_eq!(after[&users_dn("o,brien")].identifier, [uuid(1, 2)]);
    assert_eq!(after[&users_dn("müller")].identifier, [uuid(1, 3)]);
    assert_eq!(after[&dn_of_group("Sales, EMEA")].identifier, [uuid(1, 4)]);
    assert_eq!(
        after[&users_dn("bobupper")].identifier,
        [uuid(1, 6).to_uppercase()],
        "equal as a UUID: left as it was"
    );
    assert!(after[&users_dn("carol")].identifier.is_empty());
    assert!(after[&dn_of_group("nogroupid")].identifier.is_empty());
}

#[tokio::test]
async fn direct_transport_fixes_what_differs_and_nothing_else() {
    let slapd = start("");
    let cfg = json!({"ldap": {"url": slapd.url()}});
    let act = action(cfg);
    let ctx = ctx_with(Some(ROOT_PASSWORD));
    let before = snapshot(&slapd);
    assert_eq!(
        before.values().filter(|s| !s.identifier.is_empty()).count(),
        CARRYING
    );

    let planned = act.plan(&ctx).await.unwrap().summary;
    assert!(
        planned.contains(&format!("{CARRYING} objects below {BASE_DN} carry")),
        "{planned}"
    );
    assert!(
        planned.contains(&format!("{DIFFERING} differ")),
        "{planned}"
    );
    assert!(planned.contains(&users_dn("alice")), "{planned}");
    assert!(
        planned.contains(&format!("as cn=admin,{BASE_DN}")),
        "{planned}"
    );
    assert_eq!(snapshot(&slapd), before, "planning changes nothing");

    let applied = act.apply(&ctx).await.unwrap().summary;
    assert!(
        applied.contains(&format!("on {DIFFERING} of {CARRYING} objects")),
        "{applied}"
    );
    assert!(
        applied.contains(&format!("all {CARRYING} match")),
        "{applied}"
    );
    let after = snapshot(&slapd);
    assert_fixed(&before, &after, &[]);
    // The reporter the operator reads: the changes counted as slapd answered them.
    let shown = ctx
        .progress
        .snapshot()
        .expect("the rewrite reported its progress");
    assert_eq!(
        shown.line(),
        format!(
            "setting univentionObjectIdentifier below {BASE_DN}: {n}/{n} entries",
            n = stagehand_actions::progress::grouped(DIFFERING as u64)
        )
    );

    // A rerun finds nothing to do and changes nothing.
    let planned = act.plan(&ctx).await.unwrap().summary;
    assert!(planned.contains("nothing to do"), "{planned}");
    let again = act.apply(&ctx).await.unwrap().summary;
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(snapshot(&slapd), after, "a rerun changes nothing");
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let slapd = start("");
    let ctx = ctx_with(Some(ROOT_PASSWORD));
    let before = snapshot(&slapd);
    // The declaration's dryRun: apply only plans.
    let dry = action(json!({"dryRun": true, "ldap": {"url": slapd.url()}}));
    let out = dry.apply(&ctx).await.unwrap().summary;
    assert!(out.starts_with("dryRun is set, nothing changed"), "{out}");
    assert!(out.contains(&format!("{DIFFERING} differ")), "{out}");
    // A dry run of the run (the engine stops after plan).
    let planned = action(json!({"ldap": {"url": slapd.url()}}))
        .plan(&ctx)
        .await
        .unwrap();
    assert!(
        planned.summary.contains("would be set"),
        "{}",
        planned.summary
    );
    assert_eq!(snapshot(&slapd), before);
}

#[tokio::test]
async fn wrong_password_fails_in_plan_with_nothing_changed() {
    let slapd = start("");
    let before = snapshot(&slapd);
    let act = action(json!({"ldap": {"url": slapd.url()}}));
    let ctx = ctx_with(Some("not-the-password"));
    let err = act.plan(&ctx).await.unwrap_err().to_string();
    assert!(err.contains("invalidCredentials (49)"), "{err}");
    assert!(err.contains(&format!("cn=admin,{BASE_DN}")), "{err}");
    assert!(err.contains(&slapd.url()), "{err}");
    assert!(err.contains("ldap-admin-password"), "{err}");
    assert!(!err.contains("not-the-password"), "{err}");
    assert!(act.apply(&ctx).await.is_err());
    assert_eq!(snapshot(&slapd), before);

    // No secret at all: the error names the secret file.
    let err = act.plan(&ctx_with(None)).await.unwrap_err().to_string();
    assert!(err.contains("\"ldap-admin-password\""), "{err}");
}

#[tokio::test]
async fn a_refused_modification_fails_naming_the_dn_after_fixing_the_rest() {
    // cn=migrator may write everything except the identifiers in cn=protected.
    let slapd = start(&format!(
        r#"access to attrs=userPassword
    by anonymous auth
    by * none
access to dn.subtree="cn=protected,{BASE_DN}" attrs=univentionObjectIdentifier
    by * read
access to *
    by dn.exact="{MIGRATOR_DN}" write
    by * read
"#
    ));
    let locked = child_dn("uid", "locked", &format!("cn=protected,{BASE_DN}"));
    let act = action(json!({"ldap": {"url": slapd.url(), "bindDn": MIGRATOR_DN}}));
    let ctx = ctx_with(Some(MIGRATOR_PASSWORD));
    let before = snapshot(&slapd);
    // Planning cannot see an ACL that refuses writes: it counts the object.
    let planned = act.plan(&ctx).await.unwrap().summary;
    assert!(
        planned.contains(&format!("{DIFFERING} differ")),
        "{planned}"
    );

    let err = act.apply(&ctx).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "1 of {CARRYING} objects still carry a different univentionObjectIdentifier: {locked}"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "The server refused 1 change: {locked}: insufficientAccessRights (50)"
        )),
        "{err}"
    );
    assert_fixed(&before, &snapshot(&slapd), &[&locked]);

    // A rerun tries only what is left, and fails the same way.
    let err = act.apply(&ctx).await.unwrap_err().to_string();
    assert!(err.contains("on 1 object at"), "{err}");
    assert!(err.contains(&locked), "{err}");
}

#[tokio::test]
async fn direct_search_pages_past_the_servers_size_limit() {
    // cn=migrator may get 100 entries per search, any number when paging.
    let slapd = start(&format!(
        r#"limits dn.exact="{MIGRATOR_DN}" size.soft=100 size.hard=100 size.prtotal=unlimited
access to attrs=userPassword
    by anonymous auth
    by * none
access to *
    by dn.exact="{MIGRATOR_DN}" write
    by * read
"#
    ));
    let act = action(json!({"ldap": {"url": slapd.url(), "bindDn": MIGRATOR_DN}}));
    let ctx = ctx_with(Some(MIGRATOR_PASSWORD));
    let planned = act.plan(&ctx).await.unwrap().summary;
    assert!(
        planned.contains(&format!("{CARRYING} objects")),
        "{planned}"
    );
    // Unpaged, the same bind gets 100 and sizeLimitExceeded.
    let out = std::process::Command::new("ldapsearch")
        .args([
            "-x",
            "-LLL",
            "-H",
            &slapd.url(),
            "-D",
            MIGRATOR_DN,
            "-w",
            MIGRATOR_PASSWORD,
        ])
        .args(["-b", BASE_DN, "(univentionObjectIdentifier=*)", "1.1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "sizeLimitExceeded unpaged");
    let applied = act.apply(&ctx).await.unwrap().summary;
    assert!(
        applied.contains(&format!("on {DIFFERING} of {CARRYING}")),
        "{applied}"
    );
}

fn start_tls() -> Slapd {
    Slapd::start_with(&SlapdOptions {
        initial_ldif: fixture(),
        tls: true,
        ..SlapdOptions::default()
    })
}

#[tokio::test]
async fn tls_is_verified_by_default() {
    // The server's certificate comes from a CA of the test, which the system does not trust.
    let slapd = start_tls();
    let before = snapshot(&slapd);
    let act = action(json!({"ldap": {"url": slapd.ldaps_url()}}));
    let err = act
        .plan(&ctx_with(Some(ROOT_PASSWORD)))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&slapd.ldaps_url()), "{err}");
    eprintln!("untrusted server: {err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
    assert!(act.apply(&ctx_with(Some(ROOT_PASSWORD))).await.is_err());
    assert_eq!(snapshot(&slapd), before);
}

/// `ldap.caBundle` is the path of the CA's PEM file (as openDesk mounts its trust bundle):
/// over `ldaps://` a client with it connects and fixes the directory, one without it fails
/// naming the untrusted issuer and the key, one with `insecureSkipTlsVerify` connects and
/// records the warning the run shows; a bundle path that is not there is named.
#[tokio::test]
async fn ldaps_trusts_the_ca_bundle_file_and_skipping_the_check_warns() {
    let slapd = start_tls();
    let before = snapshot(&slapd);
    let url = slapd.ldaps_url();
    let ca = slapd.ca_file().to_string_lossy().into_owned();

    let ctx = ctx_with(Some(ROOT_PASSWORD));
    let err = action(json!({"ldap": {"url": url}}))
        .plan(&ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("untrusted issuer"), "{err}");
    assert!(err.contains("ldap.caBundle"), "{err}");

    let missing = format!("{ca}.absent");
    let err = action(json!({"ldap": {"url": url, "caBundle": missing}}))
        .plan(&ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ldap.caBundle") && err.contains(&missing),
        "{err}"
    );
    assert!(err.contains("no such file"), "{err}");

    let trusted = action(json!({"ldap": {"url": url, "caBundle": ca}}));
    trusted.plan(&ctx).await.unwrap();
    trusted.apply(&ctx).await.unwrap();
    assert_fixed(&before, &snapshot(&slapd), &[]);
    assert_eq!(ctx.warnings.list(), Vec::<String>::new());

    let skipping = ctx_with(Some(ROOT_PASSWORD));
    let summary = action(json!({"ldap": {"url": url, "insecureSkipTlsVerify": true}}))
        .apply(&skipping)
        .await
        .unwrap()
        .summary;
    assert!(summary.contains("nothing to do"), "{summary}");
    let warnings = skipping.warnings.list();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("ldap.insecureSkipTlsVerify is set"),
        "{warnings:?}"
    );
    assert!(warnings[0].contains(&url), "{warnings:?}");
    assert!(
        skipping
            .warnings
            .summary_with(&summary)
            .contains("\nWarning: ldap.insecureSkipTlsVerify is set"),
    );
}

/// `tls: starttls` on `ldap://`: both connections (the search's and the modifications')
/// upgrade before the bind. The server refuses updates over a connection without TLS
/// (`security update_tls=1`), so the fix only lands when the modifications' connection did
/// StartTLS too.
#[tokio::test]
async fn starttls_upgrades_both_connections_and_needs_the_bundle() {
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: fixture(),
        tls: true,
        database_config: "security update_tls=1\n".into(),
        ..SlapdOptions::default()
    });
    let before = snapshot(&slapd);
    let ca = slapd.ca_file().to_string_lossy().into_owned();
    let ctx = ctx_with(Some(ROOT_PASSWORD));

    // In plain text the server refuses every update.
    let _ = action(json!({"ldap": {"url": slapd.url()}}))
        .apply(&ctx)
        .await;
    assert_eq!(snapshot(&slapd), before, "plain LDAP changed the directory");

    let err = action(json!({"ldap": {"url": slapd.url(), "tls": "starttls"}}))
        .plan(&ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("StartTLS"), "{err}");
    assert!(err.contains("untrusted issuer"), "{err}");
    assert!(err.contains("ldap.caBundle"), "{err}");

    let upgraded = action(json!({"ldap": {"url": slapd.url(), "tls": "starttls", "caBundle": ca}}));
    upgraded.plan(&ctx).await.unwrap();
    upgraded.apply(&ctx).await.unwrap();
    assert_fixed(&before, &snapshot(&slapd), &[]);
    assert_eq!(ctx.warnings.list(), Vec::<String>::new());

    // A tls contradicting the URL is refused before anything connects.
    let cfg = config(json!({"ldap": {"url": slapd.ldaps_url(), "tls": "starttls"}}));
    let issues = stagehand_actions::action::ActionConfig::semantic_issues(&cfg);
    assert_eq!(issues[0].path, "ldap.tls", "{issues:?}");
}

/// Over `ldaps://` with the test CA trusted: in a process of its own (the bench driver, which
/// runs the action from its JSON config), whose system CA store is the test CA
/// (`SSL_CERT_FILE`); both connections (search, modifications) verify the server.
#[test]
fn over_tls_with_the_servers_ca_trusted() {
    let slapd = start_tls();
    let before = snapshot(&slapd);
    let password = std::env::temp_dir().join(format!("sh-ldap-pw-{}", std::process::id()));
    std::fs::write(&password, ROOT_PASSWORD).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bench-ldap-identifiers"))
        .env("SSL_CERT_FILE", slapd.ca_file())
        .env_remove("SSL_CERT_DIR")
        .arg(slapd.ldaps_url())
        .arg(ROOT_DN)
        .arg(&password)
        .arg(BASE_DN)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&password);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("on {DIFFERING} of {CARRYING} objects")),
        "{stdout}"
    );
    assert!(stdout.contains(&slapd.ldaps_url()), "{stdout}");
    assert_fixed(&before, &snapshot(&slapd), &[]);
}

/// Plan, apply and rerun through an exec transport (`where_` is how it describes itself).
async fn exec_transport_fixes_what_differs(slapd: &Slapd, dir: &dyn Directory, where_: &str) {
    let cfg = config(json!({}));
    let before = snapshot(slapd);

    let planned = cfg.plan_on(dir).await.unwrap().summary;
    assert!(
        planned.contains(&format!("{DIFFERING} differ")),
        "{planned}"
    );
    assert!(planned.contains(&users_dn("alice")), "{planned}");
    assert!(planned.contains(where_), "{planned}");
    assert_eq!(snapshot(slapd), before);

    let applied = cfg.apply_on(dir).await.unwrap().summary;
    assert!(
        applied.contains(&format!("on {DIFFERING} of {CARRYING} objects")),
        "{applied}"
    );
    // assert_fixed checks uid=müller too: its DN came back from ldapsearch base64-encoded
    // and went into ldapmodify's LDIF base64-encoded.
    let after = snapshot(slapd);
    assert_fixed(&before, &after, &[]);

    let again = cfg.apply_on(dir).await.unwrap().summary;
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(snapshot(slapd), after);

    // A failing ldapsearch is reported with the tool's error and where it ran.
    let wrong_base = config(json!({"ldap": {"baseDn": "dc=does-not-exist"}}));
    let err = wrong_base.plan_on(dir).await.unwrap_err().to_string();
    assert!(err.contains(where_), "{err}");
    assert!(err.contains("ldapsearch failed ("), "{err}");
    assert!(err.contains("dc=does-not-exist"), "{err}");
}

#[tokio::test]
async fn exec_transport_commands_fix_what_differs_over_ldapi() {
    let slapd = start("");
    let dir = ExecDirectory::new(LocalLdapUtils, slapd.ldapi_url());
    exec_transport_fixes_what_differs(&slapd, &dir, "local ldap-utils").await;
}

#[tokio::test]
async fn exec_transport_reports_a_failing_ldapsearch() {
    let slapd = start("");
    let dir = ExecDirectory::new(LocalLdapUtils, slapd.ldapi_url());
    let cfg = config(json!({"ldap": {"baseDn": "dc=does-not-exist"}}));
    let err = cfg.plan_on(&dir).await.unwrap_err().to_string();
    assert!(err.contains("local ldap-utils"), "{err}");
    assert!(err.contains("ldapsearch failed (exit code 32)"), "{err}");
    assert!(err.contains("dc=does-not-exist"), "{err}");
}

/// The shared control plane's kwok node has no exec configured (it only pretends to run
/// pods): the exec API answers, but no command runs. The action must fail naming the pod and
/// container, before any change. A missing pod is named as missing.
#[tokio::test]
async fn exec_transport_fails_clearly_where_nothing_can_run() {
    let ns = Scene::cluster_without_crds("ldap-exec").await;
    let client = ns.client().clone();
    ok(
        "kubectl apply",
        &kubectl_stdin(
            &["apply", "-n", &ns.name, "-f", "-"],
            Some(
                r#"
apiVersion: v1
kind: Pod
metadata:
  name: ums-ldap-server-primary-0
  labels: {app: ums-ldap-server-primary}
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - name: main
      image: example.invalid/openldap:1
"#,
            ),
        ),
    );
    running_pods(&ns.name, "ums-ldap-server-primary", 1).await;
    let ctx = ActionContext {
        client: client.clone(),
        namespace: ns.name.clone(),
        secrets: Secrets::default(),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    };
    let act = action(json!({}));
    let err = tokio::time::timeout(Duration::from_secs(60), act.plan(&ctx))
        .await
        .expect("the exec attempt ends")
        .unwrap_err()
        .to_string();
    eprintln!("exec against the kwok pod: {err}");
    assert!(
        err.contains(&format!(
            "pod ums-ldap-server-primary-0, container main, namespace {}",
            ns.name
        )),
        "{err}"
    );
    assert!(err.contains("ldapsearch failed ("), "{err}");
    // The stage's preflight finds the same before any change: the pod runs and may be
    // executed in, but the read-only search of the base DN does not succeed.
    let err = tokio::time::timeout(Duration::from_secs(60), act.preflight(&ctx))
        .await
        .expect("the preflight ends")
        .unwrap_err()
        .to_string();
    eprintln!("preflight against the kwok pod: {err}");
    assert!(
        err.starts_with(&format!(
            "a read-only ldapsearch of the base DN {BASE_DN} in container main of pod {}/ums-ldap-server-primary-0 failed: ",
            ns.name
        )),
        "{err}"
    );
    let wrong_container = action(json!({"ldap": {"container": "openldap"}}));
    let err = wrong_container
        .preflight(&ctx)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "pod {}/ums-ldap-server-primary-0 has no container openldap (it has: main): set ldap.container to the LDAP server's container",
            ns.name
        )
    );

    let missing = action(json!({"ldap": {"pod": "no-such-pod"}}));
    let err = missing.plan(&ctx).await.unwrap_err().to_string();
    assert!(err.contains("pod no-such-pod, container main"), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    let err = missing.preflight(&ctx).await.unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "pod {}/no-such-pod not found: set ldap.pod to the pod running the primary LDAP server",
            ns.name
        )),
        "{err}"
    );
}

#[tokio::test]
async fn config_errors_are_reported_before_connecting() {
    let err = match stagehand_actions::instantiate(ID, &json!({"ldap": {"url": 5}})) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a number is not a URL"),
    };
    assert!(err.contains("ldap.url"), "{err}");
    let issues = stagehand_actions::check::issues::<Config>(&json!({"ldap": {"url": "http://x"}}));
    assert_eq!(issues[0].path, "ldap.url", "{issues:?}");
    // The default is the exec transport, in openDesk's pod.
    let c = config(json!({}));
    assert!(c.ldap.url.is_none());
    assert_eq!(c.ldap.pod, "ums-ldap-server-primary-0");
}

#[tokio::test]
async fn exec_transport_through_the_kubernetes_exec_api() {
    let slapd = start("");
    let ns = Scene::cluster_without_crds("ldap-kexec").await;
    let client = ns.client().clone();
    let node = LocalExecNode::start();
    ok(
        "create pod",
        &kubectl_stdin(
            &["create", "-n", &ns.name, "-f", "-"],
            Some(&node.pod("ums-ldap-server-primary-0", "ldap-primary")),
        ),
    );
    running_pods(&ns.name, "ldap-primary", 1).await;
    let runner = KubeExec::new(
        client.clone(),
        &ns.name,
        "ums-ldap-server-primary-0",
        "main",
    );
    let within = Duration::from_secs(60);

    // The exec plumbing: stdin to its end, stdout, stderr, the exit status.
    let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let input: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    let head = format!("head -c {} | cat", input.len());
    let out = tokio::time::timeout(
        within,
        runner.run(&argv(&["sh", "-c", &head]), Some(input.as_bytes())),
    )
    .await
    .expect("the command ends once it has its input")
    .unwrap();
    assert!(out.success, "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), input);
    let out = tokio::time::timeout(
        within,
        runner.run(&argv(&["sh", "-c", "echo out; echo err >&2; exit 3"]), None),
    )
    .await
    .expect("sh ends")
    .unwrap();
    assert!(!out.success);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    eprintln!("a failing command in the pod: {}", out.status);
    // The action's own exec transport, pointed at the test server's socket (in the pod it is
    // ldapi:///).
    let dir = ExecDirectory::new(
        KubeExec::new(
            client.clone(),
            &ns.name,
            "ums-ldap-server-primary-0",
            "main",
        ),
        slapd.ldapi_url(),
    );
    let where_ = format!(
        "pod ums-ldap-server-primary-0, container main, namespace {}",
        ns.name
    );
    // The preflight's whole proof through the exec API: pod, container, the pods/exec right
    // (a SelfSubjectAccessReview) and the read-only base search, which finds the base DN; a
    // base DN the server does not hold fails it, saying which setting to fix.
    let before = snapshot(&slapd);
    tokio::time::timeout(within, dir.preflight(BASE_DN, within))
        .await
        .expect("the preflight ends")
        .unwrap();
    let err = tokio::time::timeout(within, dir.preflight("dc=no-such-base", within))
        .await
        .expect("the preflight ends")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "a read-only ldapsearch of the base DN dc=no-such-base in container main of pod {}/ums-ldap-server-primary-0 failed: ldapsearch failed (",
            ns.name
        )) && err.contains("No such object (32)")
            && err.ends_with("set ldap.baseDn to the directory's base DN (ldap.baseDn is dc=no-such-base)"),
        "{err}"
    );
    assert_eq!(snapshot(&slapd), before, "the preflight changed nothing");
    exec_transport_fixes_what_differs(&slapd, &dir, &where_).await;
}
