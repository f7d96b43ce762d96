//! `synapse_deactivate_orphaned_users` against a real Synapse on a real PostgreSQL and a real
//! slapd: what the dry run lists, what an apply deactivates, erases and converts, the refusals
//! (over the limit, no shared secret, a secret Synapse does not run with), the re-read of the
//! IAM before the deactivations, approved findings (and an apply resumed after a stop), no
//! secret in any outcome, error or log line, and one whole run through the Kubernetes exec API.
//! What happened is read from Synapse's database and admin API, never from the action's words.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value, json};
use stagehand_actions::action::{
    ActionContext, ActionError, Findings, Outcome, SecretValue, Secrets, StopSignal,
};
use stagehand_actions::clients::ldap::exec::ExecDirectory;
use stagehand_actions::clients::ldap::{Directory, Entry, LdapError, Refused, Replace};
use stagehand_actions::synapse_deactivate_orphaned_users::{
    Config, DB_PASSWORD_FILE, Sources, USER_FILTER,
};
use stagehand_e2e::exec_node::LocalExecNode;
use stagehand_e2e::secrets::CapturedLogs;
use stagehand_e2e::slapd::{BASE_DN, LocalLdapUtils, Slapd, SlapdOptions};
use stagehand_e2e::synapse::{FixtureUser, Postgres, SharedSecret, Synapse, SynapseOptions};
use stagehand_e2e::{Scene, create_secret, kubectl_stdin, ok, running_pods};

/// One OIDC-bound account of the fixture: its localpart, subject as Synapse stores it, and
/// whether an IAM user carries it.
struct Person {
    localpart: &'static str,
    subject: &'static str,
    /// `univentionObjectIdentifier` of the IAM user, `None`: no user (an orphan).
    carried_as: Option<&'static str>,
}

/// 12 active OIDC-bound accounts, 3 of them orphaned (25%: exactly openDesk's default limit).
/// Subjects are compared as UUIDs (case and hyphens apart); `orphan-b`'s is no UUID (which
/// `univentionObjectIdentifier`, of UUID syntax, can never be); `orphan-c`'s subject is carried
/// by a group only, which is no IAM user.
const PEOPLE: [Person; 12] = [
    Person {
        localpart: "anna",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e01",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e01"),
    },
    Person {
        localpart: "bert",
        subject: "0D4F8A30-1B2C-403F-8A1E-5B1F2C3D4E02",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e02"),
    },
    Person {
        localpart: "carl",
        subject: "0d4f8a301b2c403f8a1e5b1f2c3d4e03",
        carried_as: Some("0D4F8A30-1B2C-403F-8A1E-5B1F2C3D4E03"),
    },
    Person {
        localpart: "dora",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e04",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e04"),
    },
    Person {
        localpart: "emil",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e05",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e05"),
    },
    Person {
        localpart: "fina",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e06",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e06"),
    },
    Person {
        localpart: "gert",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e07",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e07"),
    },
    Person {
        localpart: "hans",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e08",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e08"),
    },
    Person {
        localpart: "ines",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e09",
        carried_as: Some("0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e09"),
    },
    Person {
        localpart: "orphan-a",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4ea1",
        carried_as: None,
    },
    Person {
        localpart: "orphan-b",
        subject: "legacy-subject-orphan-b",
        carried_as: None,
    },
    Person {
        localpart: "orphan-c",
        subject: "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4ea3",
        carried_as: None,
    },
];

const ORPHANS: [&str; 3] = ["orphan-a", "orphan-b", "orphan-c"];

fn person_ldif(uid: &str, identifier: &str) -> String {
    format!(
        "dn: uid={uid},cn=users,{BASE_DN}\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nuniventionObjectType: users/user\nuid: {uid}\ncn: {uid}\nsn: {uid}\nuniventionObjectIdentifier: {identifier}\n\n"
    )
}

fn fixture_ldif() -> String {
    let mut out = format!("dn: cn=users,{BASE_DN}\nobjectClass: organizationalRole\ncn: users\n\n");
    out.push_str(&format!(
        "dn: cn=groups,{BASE_DN}\nobjectClass: organizationalRole\ncn: groups\n\n"
    ));
    for p in PEOPLE.iter() {
        if let Some(id) = p.carried_as {
            out.push_str(&person_ldif(p.localpart, id));
        }
    }
    // A group carrying orphan-c's subject: groups are no IAM users.
    out.push_str(&format!(
        "dn: cn=staff,cn=groups,{BASE_DN}\nobjectClass: posixGroup\nobjectClass: univentionObject\nuniventionObjectType: groups/group\ncn: staff\ngidNumber: 5000\nuniventionObjectIdentifier: 0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4ea3\n\n"
    ));
    out
}

/// A real Synapse with the fixture's accounts, its PostgreSQL, and the IAM's slapd.
struct World {
    _scene: Scene,
    slapd: Slapd,
    synapse: Synapse,
    pg: Postgres,
    guests: Vec<String>,
}

impl World {
    async fn start(shared_secret: SharedSecret) -> Self {
        let scene = Scene::offline();
        let slapd = Slapd::start_with(&SlapdOptions {
            initial_ldif: fixture_ldif(),
            ..SlapdOptions::default()
        });
        let pg = Postgres::start();
        let synapse = Synapse::start(&pg, SynapseOptions { shared_secret });
        let mut world = World {
            _scene: scene,
            slapd,
            synapse,
            pg,
            guests: Vec::new(),
        };
        if shared_secret == SharedSecret::None {
            return world;
        }
        for p in PEOPLE.iter() {
            let name = format!("{} Person", p.localpart);
            world
                .synapse
                .create_oidc_user(p.localpart, &name, p.subject)
                .await;
        }
        // Already deactivated, its IAM user gone: counts on neither side.
        let gone = world
            .synapse
            .create_oidc_user("left-2023", "Left", "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4eff")
            .await;
        world
            .synapse
            .admin_api(
                reqwest::Method::POST,
                &format!("/_synapse/admin/v1/deactivate/{gone}"),
                Some(&json!({"erase": false})),
            )
            .await;
        // A local account without OIDC binding is no candidate.
        world
            .synapse
            .admin_api(
                reqwest::Method::PUT,
                &format!(
                    "/_synapse/admin/v2/users/{}",
                    world.synapse.user_id("local-bot")
                ),
                Some(&json!({"password": "local-bot-password-1", "displayname": "Bot"})),
            )
            .await;
        world.guests = vec![
            world.synapse.create_guest().await,
            world.synapse.create_guest().await,
        ];
        world.guests.sort();
        world
    }

    fn id(&self, localpart: &str) -> String {
        self.synapse.user_id(localpart)
    }

    fn config(&self, dry_run: bool, erase: bool, max_percent: f64) -> Config {
        serde_json::from_value(self.config_json(dry_run, erase, max_percent)).unwrap()
    }

    fn config_json(&self, dry_run: bool, erase: bool, max_percent: f64) -> Value {
        json!({
            "ldap": {"pod": "ums-ldap-server-primary-0", "container": "main",
                     "ldapiUrl": self.slapd.ldapi_url()},
            "synapse": {
                "connection": {"url": self.synapse.base_url(), "concurrency": 3},
                "dryRun": dry_run, "erase": erase,
                "postgres": {"host": "127.0.0.1", "port": self.pg.port(), "name": "matrix",
                             "user": "matrix_user", "sslMode": "prefer"},
                "configPath": self.synapse.config_path().display().to_string()
            },
            "safety": {"maxOrphanPercent": max_percent}
        })
    }

    fn directory(&self) -> ExecDirectory<LocalLdapUtils> {
        ExecDirectory::new(LocalLdapUtils, self.slapd.ldapi_url())
    }

    /// Every account but the temporary admins: `name -> (deactivated, is_guest, erased)`.
    fn accounts(&self) -> BTreeMap<String, (i64, i64, bool)> {
        self.synapse
            .psql(
                "SELECT u.name, u.deactivated, u.is_guest, e.user_id IS NOT NULL FROM users u \
                 LEFT JOIN erased_users e ON e.user_id = u.name \
                 WHERE u.name NOT LIKE '@odmigs-%' ORDER BY u.name",
            )
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (
                    f[0].to_string(),
                    (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3] == "t"),
                )
            })
            .collect()
    }

    /// The temporary admins: `(name, admin, deactivated)`.
    fn temporary_admins(&self) -> Vec<(String, i64, i64)> {
        self.synapse
            .psql("SELECT name, admin, deactivated FROM users WHERE name LIKE '@odmigs-%' ORDER BY name")
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (
                    f[0].to_string(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                )
            })
            .collect()
    }

    /// Exactly `n` temporary admins, each `odmigs-<seconds>-<8 hex>`, an admin, deactivated.
    fn assert_temporary_admins_deactivated(&self, n: usize) {
        let admins = self.temporary_admins();
        assert_eq!(admins.len(), n, "{admins:?}");
        for (name, admin, deactivated) in &admins {
            let local = name
                .strip_prefix("@odmigs-")
                .and_then(|r| r.strip_suffix(&format!(":{}", self.synapse.server_name())))
                .unwrap_or_else(|| panic!("{name}"));
            let (secs, hex) = local.split_once('-').unwrap();
            assert!(secs.parse::<u64>().unwrap() > 1_700_000_000, "{name}");
            assert_eq!(hex.len(), 8, "{name}");
            assert_eq!(
                (*admin, *deactivated),
                (1, 1),
                "{name} is an admin, deactivated"
            );
        }
    }
}

fn sources<'a>(world: &World, dir: &'a dyn Directory, pod: &'a LocalLdapUtils) -> Sources<'a> {
    Sources {
        synapse_pod: pod,
        directory: dir,
        db_password: SecretValue::new(world.pg.password()),
        marker: None,
        warnings: Default::default(),
    }
}

fn rows(findings: &Findings, group: &str) -> Vec<String> {
    findings
        .rows
        .iter()
        .filter(|r| r.group == group)
        .map(|r| r.values[0].clone())
        .collect()
}

#[tokio::test]
async fn a_dry_run_lists_the_orphans_and_guests_and_changes_nothing_but_its_temporary_admin() {
    let w = World::start(SharedSecret::Inline).await;
    let dir = w.directory();
    let pod = LocalLdapUtils;
    let before = w.accounts();
    let config = w.config(true, true, 25.0);
    config
        .preflight_with(&sources(&w, &dir, &pod))
        .await
        .unwrap();
    assert!(
        w.temporary_admins().is_empty(),
        "the preflight registers nobody"
    );

    let out = config
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap();
    let findings = out.findings.clone().expect("a dry run carries findings");
    let orphans: Vec<String> = ORPHANS.iter().map(|o| w.id(o)).collect();
    assert_eq!(rows(&findings, "orphaned"), orphans);
    assert_eq!(rows(&findings, "guest"), w.guests);
    assert_eq!(
        findings.columns,
        ["matrixId", "displayName", "oidcSubject", "created"]
    );
    // The row as Synapse's database has it: the display name (profiles, joined on the
    // localpart), the subject as stored, the creation time.
    let a = findings
        .rows
        .iter()
        .find(|r| r.values[0] == w.id("orphan-a"))
        .unwrap();
    assert_eq!(a.values[1], "orphan-a Person");
    assert_eq!(a.values[2], "0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4ea1");
    let created: i64 = w.synapse.db().value(&format!(
        "SELECT creation_ts FROM users WHERE name = '{}'",
        w.id("orphan-a")
    ));
    let shown = chrono_free_utc(created);
    assert_eq!(a.values[3], shown);
    assert_eq!(findings.counts["activeOidcBound"], 12);
    assert_eq!(findings.counts["orphaned"], 3);
    assert_eq!(findings.counts["guests"], 2);
    assert_eq!(findings.counts["orphanPermille"], 250);
    assert!(
        out.summary.starts_with(
            "DRY RUN - would deactivate 3 of 12 active OIDC bound account(s) (25.0%, erase=true); 2 guest accounts would become deactivated accounts; temporary admin @odmigs-"
        ),
        "{}",
        out.summary
    );

    // Nothing changed but the temporary admin: registered, an admin, deactivated again.
    assert_eq!(w.accounts(), before);
    w.assert_temporary_admins_deactivated(1);
    let admin = &w.temporary_admins()[0].0;
    assert!(out.summary.contains(&format!(
        "temporary admin {admin} registered and deactivated"
    )));
    let seen = w.synapse.user(admin).await;
    assert_eq!(seen["deactivated"], true, "{seen}");
}

/// `YYYY-MM-DDTHH:MM:SSZ` of `secs` since the epoch (civil-from-days, proleptic Gregorian).
fn chrono_free_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[tokio::test]
async fn apply_deactivates_and_erases_the_orphans_converts_the_guests_and_leaves_the_rest() {
    let w = World::start(SharedSecret::File).await;
    let dir = w.directory();
    let pod = LocalLdapUtils;
    let before = w.accounts();
    let config = w.config(false, true, 25.0);
    let captured = CapturedLogs::start();
    let planned = config
        .plan_with(&sources(&w, &dir, &pod), false, None)
        .await
        .unwrap();
    assert!(
        w.temporary_admins().is_empty(),
        "a plan an apply follows registers nobody"
    );
    let out = config
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap();
    let logs = captured.text();
    drop(captured);

    let after = w.accounts();
    for (name, (deactivated, guest, erased)) in &after {
        let local = name.trim_start_matches('@').split(':').next().unwrap();
        let was = before[name];
        if ORPHANS.contains(&local) {
            assert_eq!((*deactivated, *guest, *erased), (1, 0, true), "{name}");
            assert_eq!(w.synapse.user(name).await["deactivated"], true);
        } else if w.guests.contains(name) {
            assert_eq!(
                (*deactivated, *guest, *erased),
                (1, 0, false),
                "{name} converted"
            );
        } else {
            assert_eq!((*deactivated, *guest, *erased), was, "{name} untouched");
        }
    }
    assert_eq!(after.len(), before.len());
    // Erased: the display name is gone.
    assert_eq!(
        w.synapse
            .psql(
                "SELECT count(*) FROM profiles WHERE user_id = 'orphan-a' AND displayname IS NOT NULL"
            )
            .trim(),
        "0"
    );
    w.assert_temporary_admins_deactivated(1);
    // The summary's counts are the database's.
    let deactivated: i64 = w
        .synapse
        .db()
        .value("SELECT count(*) FROM users WHERE deactivated <> 0 AND name ~ '^@orphan-'");
    let erased: i64 = w
        .synapse
        .db()
        .value("SELECT count(*) FROM erased_users WHERE user_id ~ '^@orphan-'");
    let guests_left: i64 = w
        .synapse
        .db()
        .value("SELECT count(*) FROM users WHERE is_guest <> 0");
    assert_eq!((deactivated, erased, guests_left), (3, 3, 0));
    assert!(
        out.summary.starts_with(&format!(
            "deactivated 3 of 12 active OIDC bound account(s) (25.0%, erase=true): the database shows {deactivated} deactivated, {erased} erased; 2 guest account(s) turned into deactivated accounts, {guests_left} guest(s) left; temporary admin @odmigs-"
        )),
        "{}",
        out.summary
    );
    assert_eq!(
        out.findings, planned.findings,
        "apply reports what the plan found"
    );
    assert_no_secret(&w, &[&out, &planned], &[], &logs);

    // A rerun finds nothing left to do (and leaves one more deactivated temporary admin).
    let again = config
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap();
    assert!(
        again
            .summary
            .starts_with("deactivated 0 of 9 active OIDC bound account(s) (0.0%, erase=true)"),
        "{}",
        again.summary
    );
    assert_eq!(w.accounts(), after);
    w.assert_temporary_admins_deactivated(2);
}

/// No secret of the run (the shared secret, the DB password, a Synapse access token) in the
/// outcomes, errors and log lines given.
fn assert_no_secret(w: &World, outcomes: &[&Outcome], errors: &[&ActionError], logs: &str) {
    let mut texts: Vec<String> = outcomes
        .iter()
        .map(|o| format!("{} {:?}", o.summary, o.findings))
        .collect();
    texts.extend(errors.iter().map(|e| format!("{e} {e:?}")));
    texts.push(logs.to_string());
    let secret = w.synapse.shared_secret().map(str::to_string);
    for text in &texts {
        if let Some(s) = &secret {
            assert!(
                !text.contains(s.as_str()),
                "the shared secret leaked: {text}"
            );
        }
        assert!(
            !text.contains(w.pg.password()),
            "the DB password leaked: {text}"
        );
        // Synapse's access tokens are `syt_<localpart>_<random>_<crc>`.
        assert!(!text.contains("syt_"), "an access token leaked: {text}");
    }
}

#[tokio::test]
async fn over_the_limit_an_apply_refuses_and_the_dry_run_says_it_would() {
    let w = World::start(SharedSecret::Inline).await;
    let dir = w.directory();
    let pod = LocalLdapUtils;
    let before = w.accounts();
    // 3 of 12 is 25%: above 24.9%.
    let refused = w
        .config(false, true, 24.9)
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap_err();
    assert!(matches!(refused, ActionError::Refused(_)), "{refused:?}");
    assert!(
        refused.to_string().starts_with(
            "3 of 12 active OIDC-bound Matrix accounts (25.0%) have no IAM user, more than safety.maxOrphanPercent (24.9%): nothing was deactivated"
        ),
        "{refused}"
    );
    assert_eq!(w.accounts(), before, "nothing changed");
    assert!(
        w.temporary_admins().is_empty(),
        "refused before registering anybody"
    );
    // The plan an apply follows refuses the same way.
    let planned = w
        .config(false, true, 24.9)
        .plan_with(&sources(&w, &dir, &pod), false, None)
        .await
        .unwrap_err();
    assert!(matches!(planned, ActionError::Refused(_)), "{planned:?}");

    let dry = w
        .config(true, true, 24.9)
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap();
    assert!(
        dry.summary.starts_with(
            "DRY RUN - would deactivate 3 of 12 active OIDC bound account(s) (25.0%, erase=true); that is more than safety.maxOrphanPercent (24.9%): an apply would refuse"
        ),
        "{}",
        dry.summary
    );
    assert_eq!(w.accounts(), before, "nothing changed");
    w.assert_temporary_admins_deactivated(1);
}

/// The IAM's directory, which adds `ldif` to the slapd the first time the action searches for
/// anything but all the users: an IAM user created between the action's reading of the users
/// and its re-reading of the orphans just before deactivating them.
#[derive(Debug)]
struct ReappearsBeforeReRead<'a> {
    inner: ExecDirectory<LocalLdapUtils>,
    slapd: &'a Slapd,
    ldif: String,
    added: AtomicBool,
}

impl Directory for ReappearsBeforeReRead<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn search<'a>(
        &'a self,
        base: &'a str,
        filter: &'a str,
        attrs: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Entry>, LdapError>> {
        if filter != USER_FILTER && !self.added.swap(true, Ordering::SeqCst) {
            self.slapd.modify(&self.ldif);
        }
        self.inner.search(base, filter, attrs)
    }

    fn replace<'a>(
        &'a self,
        changes: &'a [Replace],
    ) -> BoxFuture<'a, Result<Vec<Refused>, LdapError>> {
        self.inner.replace(changes)
    }

    fn naming_contexts(&self) -> BoxFuture<'_, Result<Vec<String>, LdapError>> {
        self.inner.naming_contexts()
    }
}

#[tokio::test]
async fn an_orphan_whose_iam_user_reappears_is_not_deactivated() {
    let w = World::start(SharedSecret::Inline).await;
    let pod = LocalLdapUtils;
    let before = w.accounts();
    let config = w.config(false, false, 25.0);

    // Between the action's reading of the users and its re-reading of the orphans, orphan-a
    // gets an IAM user: the action stops before deactivating anything, naming it.
    let dir = ReappearsBeforeReRead {
        inner: w.directory(),
        slapd: &w.slapd,
        ldif: format!(
            "dn: uid=orphan-a,cn=users,{BASE_DN}\nchangetype: add\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nuniventionObjectType: users/user\nuid: orphan-a\ncn: orphan-a\nsn: orphan-a\nuniventionObjectIdentifier: 0D4F8A30-1B2C-403F-8A1E-5B1F2C3D4EA1\n"
        ),
        added: AtomicBool::new(false),
    };
    let err = config
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap_err();
    assert!(
        dir.added.load(Ordering::SeqCst),
        "the orphans were read again"
    );
    assert!(matches!(err, ActionError::Conflict(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "the IAM has a user again for 1 orphaned account: {} (0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4ea1); stopped before deactivating it",
            w.id("orphan-a")
        )),
        "{text}"
    );
    assert!(text.contains("(the temporary admin @odmigs-"), "{text}");
    assert_eq!(w.accounts(), before, "nothing was deactivated");
    w.assert_temporary_admins_deactivated(1);

    // The next run reads it as a user's account: the two others go, orphan-a stays.
    let plain = w.directory();
    let out = config
        .apply_with(&sources(&w, &plain, &pod), None, &StopSignal::default())
        .await
        .unwrap();
    let after = w.accounts();
    assert_eq!(
        after[&w.id("orphan-b")],
        (1, 0, false),
        "deactivated, not erased"
    );
    assert_eq!(after[&w.id("orphan-c")], (1, 0, false));
    assert_eq!(
        after[&w.id("orphan-a")],
        (0, 0, false),
        "its IAM user is back"
    );
    assert!(
        out.summary.starts_with("deactivated 2 of 12 active OIDC bound account(s) (16.7%, erase=false): the database shows 2 deactivated, 0 erased"),
        "{}",
        out.summary
    );
    w.assert_temporary_admins_deactivated(2);
}

#[tokio::test]
async fn approved_findings_bind_the_apply_and_a_resumed_apply_is_not_stopped_by_its_own_work() {
    let w = World::start(SharedSecret::Inline).await;
    let dir = w.directory();
    let pod = LocalLdapUtils;
    let config = w.config(false, false, 25.0);
    let approved = config
        .plan_with(&sources(&w, &dir, &pod), false, None)
        .await
        .unwrap()
        .findings
        .unwrap();
    assert_eq!(approved.rows.len(), 5);

    // An earlier apply of this approval deactivated orphan-a and orphan-b, then stopped.
    for o in ["orphan-a", "orphan-b"] {
        w.synapse
            .admin_api(
                reqwest::Method::POST,
                &format!("/_synapse/admin/v1/deactivate/{}", w.id(o)),
                Some(&json!({"erase": false})),
            )
            .await;
    }
    // Meanwhile anna's IAM user was deleted: a new orphan, not approved.
    w.slapd.modify(&format!(
        "dn: uid=anna,cn=users,{BASE_DN}\nchangetype: delete\n"
    ));
    let before = w.accounts();
    let err = config
        .apply_with(
            &sources(&w, &dir, &pod),
            Some(&approved),
            &StopSignal::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ActionError::FindingsChanged(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "the Matrix accounts found now are not the ones approved (found now but not approved: {} (orphaned)); nothing was deactivated: plan the run again and review it",
            w.id("anna")
        ),
        "the approved accounts already deactivated are no difference"
    );
    assert_eq!(w.accounts(), before, "nothing changed");
    assert!(
        w.temporary_admins().is_empty(),
        "stopped before registering anybody"
    );
    let planned = config
        .plan_with(&sources(&w, &dir, &pod), false, Some(&approved))
        .await
        .unwrap_err();
    assert!(
        matches!(planned, ActionError::FindingsChanged(_)),
        "{planned:?}"
    );

    // anna's user is back: the resumed apply does the rest of what was approved.
    w.slapd.modify(&format!(
        "dn: uid=anna,cn=users,{BASE_DN}\nchangetype: add\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nuniventionObjectType: users/user\nuid: anna\ncn: anna\nsn: anna\nuniventionObjectIdentifier: 0d4f8a30-1b2c-403f-8a1e-5b1f2c3d4e01\n"
    ));
    config
        .plan_with(&sources(&w, &dir, &pod), false, Some(&approved))
        .await
        .unwrap();
    let out = config
        .apply_with(
            &sources(&w, &dir, &pod),
            Some(&approved),
            &StopSignal::default(),
        )
        .await
        .unwrap();
    let after = w.accounts();
    for o in ORPHANS {
        assert_eq!(after[&w.id(o)], (1, 0, false), "{o}");
    }
    for g in &w.guests {
        assert_eq!(after[g], (1, 0, false), "{g} converted");
    }
    assert_eq!(after[&w.id("anna")], (0, 0, false));
    assert!(
        out.summary
            .starts_with("deactivated 1 of 10 active OIDC bound account(s) (10.0%, erase=false)"),
        "{}",
        out.summary
    );
    w.assert_temporary_admins_deactivated(1);
}

#[tokio::test]
async fn a_synapse_without_a_usable_shared_secret_is_refused_and_nothing_changes() {
    let w = World::start(SharedSecret::None).await;
    let dir = w.directory();
    let pod = LocalLdapUtils;
    let users: i64 = w.synapse.db().value("SELECT count(*) FROM users");
    let captured = CapturedLogs::start();
    let config = w.config(true, true, 25.0);
    let pre = config
        .preflight_with(&sources(&w, &dir, &pod))
        .await
        .unwrap_err();
    let dry = config
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap_err();
    for e in [&pre, &dry] {
        assert!(matches!(e, ActionError::Refused(_)), "{e:?}");
        assert!(
            e.to_string().contains(&format!(
                "Synapse's configuration {} in local ldap-utils sets neither registration_shared_secret nor registration_shared_secret_path",
                w.synapse.config_path().display()
            )),
            "{e}"
        );
    }
    assert_eq!(
        w.synapse.db().value::<i64>("SELECT count(*) FROM users"),
        users
    );

    // A homeserver.yaml with a secret Synapse does not run with (changed without a restart):
    // Synapse hands out a nonce but refuses the registration; the action says so.
    let copy = w
        .synapse
        .config_path()
        .with_file_name("changed-homeserver.yaml");
    let text = std::fs::read_to_string(w.synapse.config_path()).unwrap();
    std::fs::write(
        &copy,
        format!("{text}\nregistration_shared_secret: \"not-the-one-synapse-has\"\n"),
    )
    .unwrap();
    let mut json = w.config_json(true, true, 25.0);
    json["synapse"]["configPath"] = json!(copy.display().to_string());
    let changed: Config = serde_json::from_value(json).unwrap();
    changed
        .preflight_with(&sources(&w, &dir, &pod))
        .await
        .unwrap();
    let err = changed
        .apply_with(&sources(&w, &dir, &pod), None, &StopSignal::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ActionError::Refused(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("Shared secret registration is not enabled"),
        "{err}"
    );
    assert_eq!(
        w.synapse.db().value::<i64>("SELECT count(*) FROM users"),
        users,
        "nobody registered"
    );
    let logs = captured.text();
    drop(captured);
    assert!(!logs.contains("not-the-one-synapse-has"), "{logs}");
    assert_no_secret(&w, &[], &[&pre, &dry, &err], &logs);
}

/// Rows PostgreSQL's statistics count as read from `tables` (sequential scans' rows and index
/// entries), once every session of the action has ended (a backend reports its counts when it
/// exits).
fn rows_read(synapse: &Synapse, tables: &str) -> i64 {
    for _ in 0..100 {
        let open: i64 = synapse
            .db()
            .value("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'stagehand'");
        if open == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    synapse.db().value(&format!(
        "SELECT COALESCE((SELECT sum(seq_tup_read) FROM pg_stat_user_tables WHERE relname IN ({tables})), 0) \
         + COALESCE((SELECT sum(idx_tup_read) FROM pg_stat_user_indexes WHERE relname IN ({tables})), 0)"
    ))
}

/// Reading the accounts reads each table's rows a bounded number of times, whatever PostgreSQL
/// knows of the tables. On tables never analyzed (a restored dump, accounts written in bulk,
/// before autovacuum's first pass) a join left to the planner is planned for one row: nested
/// loops that read the whole `user_external_ids` index once per account (n², 17 s of the dry
/// run at 20,000 accounts). Counted with PostgreSQL's own statistics of rows read, not a clock.
#[tokio::test]
async fn reading_the_accounts_stays_linear_on_tables_never_analyzed() {
    const N: usize = 2000;
    let _scene = Scene::offline();
    let subject = |i: usize| format!("{i:08x}-5a9e-4c0d-8e1f-{i:012x}");
    let orphaned = |i: usize| i.is_multiple_of(20);
    let mut ldif =
        format!("dn: cn=users,{BASE_DN}\nobjectClass: organizationalRole\ncn: users\n\n");
    for i in (0..N).filter(|i| !orphaned(*i)) {
        ldif.push_str(&person_ldif(&format!("user{i:05}"), &subject(i)));
    }
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: ldif,
        nosync: true,
        ..SlapdOptions::default()
    });
    let pg = Postgres::start();
    let synapse = Synapse::start(&pg, SynapseOptions::default());
    let tables = "'users', 'user_external_ids', 'profiles'";
    synapse.psql(
        "ALTER TABLE users SET (autovacuum_enabled = false); \
         ALTER TABLE user_external_ids SET (autovacuum_enabled = false); \
         ALTER TABLE profiles SET (autovacuum_enabled = false)",
    );
    let users: Vec<FixtureUser> = (0..N)
        .map(|i| FixtureUser {
            localpart: format!("user{i:05}"),
            display_name: format!("User {i}"),
            subject: subject(i),
            creation_ts: 1_650_000_000 + i as i64,
        })
        .collect();
    synapse.write_oidc_users(&users);
    // An orphan bound to two subjects, and a carried account with a second, unknown one.
    synapse.psql(&format!(
        "INSERT INTO user_external_ids (auth_provider, external_id, user_id) VALUES \
         ('oidc', 'a-second-subject', '{}'), ('oidc', 'unknown-subject', '{}')",
        synapse.user_id("user00020"),
        synapse.user_id("user00021")
    ));
    let analyzed = synapse.psql(&format!(
        "SELECT relname FROM pg_stat_user_tables WHERE relname IN ({tables}) \
         AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)"
    ));
    assert_eq!(
        analyzed.trim(),
        "",
        "the tables must never have been analyzed"
    );

    let config: Config = serde_json::from_value(json!({
        "ldap": {"ldapiUrl": slapd.ldapi_url()},
        "synapse": {
            "connection": {"url": synapse.base_url()},
            "dryRun": true,
            "postgres": {"host": pg.host(), "port": pg.port(), "name": pg.db(), "user": pg.user()},
            "configPath": synapse.config_path().display().to_string(),
        },
        "safety": {"maxOrphanPercent": 25},
    }))
    .unwrap();
    let dir = ExecDirectory::new(LocalLdapUtils, slapd.ldapi_url());
    let pod = LocalLdapUtils;
    let src = Sources {
        synapse_pod: &pod,
        directory: &dir,
        db_password: SecretValue::new(pg.password()),
        marker: None,
        warnings: Default::default(),
    };
    let before = rows_read(&synapse, tables);
    let out = config.plan_with(&src, false, None).await.unwrap();
    let read = rows_read(&synapse, tables) - before;

    let findings = out.findings.expect("the plan carries findings");
    assert_eq!(findings.counts["activeOidcBound"], N as u64);
    let expected: Vec<String> = (0..N)
        .filter(|i| orphaned(*i))
        .map(|i| synapse.user_id(&format!("user{i:05}")))
        .collect();
    assert_eq!(rows(&findings, "orphaned"), expected);
    let twice = findings
        .rows
        .iter()
        .find(|r| r.values[0] == synapse.user_id("user00020"))
        .unwrap();
    assert_eq!(
        twice.values[1..3],
        [
            "User 20".to_string(),
            format!("{}, a-second-subject", subject(20))
        ]
    );
    assert!(
        read <= 20 * N as i64,
        "reading {N} accounts read {read} rows and index entries of {tables}: more than 20 per account, a plan that grows faster than the accounts"
    );
}

#[tokio::test]
async fn a_whole_run_through_the_kubernetes_exec_api() {
    let w = World::start(SharedSecret::Inline).await;
    let scene = Scene::cluster_without_crds("syn-orphans").await;
    let (client, ns) = (scene.client().clone(), scene.namespace().to_string());
    let node = LocalExecNode::start_for(&["main", "synapse"]);
    for pod in [
        node.pod_with("opendesk-synapse-0", &[("app", "synapse")], &["synapse"]),
        node.pod_with(
            "ums-ldap-server-primary-0",
            &[("app", "ldap-primary")],
            &["main"],
        ),
    ] {
        ok(
            "create pod",
            &kubectl_stdin(&["create", "-n", &ns, "-f", "-"], Some(&pod)),
        );
    }
    running_pods(&ns, "synapse", 1).await;
    running_pods(&ns, "ldap-primary", 1).await;
    ok(
        "create marker",
        &kubectl_stdin(
            &["create", "-n", &ns, "-f", "-"],
            Some(
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "element-markers"},
                    "data": {"MATRIX_STACK_MSC3861": "legacy_auth"}})
                .to_string(),
            ),
        ),
    );
    // openDesk mounts database-synapse-password/password as the secret file synapse-db-password.
    create_secret(
        &ns,
        "database-synapse-password",
        "password",
        w.pg.password(),
    );

    let instantiate = |dry_run: bool| {
        let mut config = w.config_json(dry_run, true, 25.0);
        config["synapse"]["pod"] = json!("opendesk-synapse-0");
        stagehand_actions::instantiate("synapse_deactivate_orphaned_users", &config).unwrap()
    };
    let dry = instantiate(true);
    assert!(dry.dry_run());
    assert_eq!(dry.needs().secret_files, [DB_PASSWORD_FILE]);
    let stored = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("database-synapse-password")
        .await
        .unwrap();
    let password = String::from_utf8(stored.data.unwrap()["password"].0.clone()).unwrap();
    let ctx = ActionContext {
        client: client.clone(),
        namespace: ns.clone(),
        secrets: Secrets::new([(DB_PASSWORD_FILE.to_string(), SecretValue::new(password))]),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    };
    let before = w.accounts();
    let captured = CapturedLogs::start();
    dry.preflight(&ctx).await.unwrap();
    let planned = dry.plan(&ctx).await.unwrap();
    assert_eq!(
        rows(planned.findings.as_ref().unwrap(), "orphaned"),
        ORPHANS.iter().map(|o| w.id(o)).collect::<Vec<_>>()
    );
    assert_eq!(w.accounts(), before, "the dry run changed nothing");
    w.assert_temporary_admins_deactivated(1);

    // The real run: plan (registers nobody), then apply with the approved findings.
    let real = instantiate(false);
    let mut run_ctx = ctx.clone();
    run_ctx.run.apply_follows = true;
    run_ctx.approved_findings = planned.findings.clone();
    real.preflight(&run_ctx).await.unwrap();
    let plan = real.plan(&run_ctx).await.unwrap();
    w.assert_temporary_admins_deactivated(1);
    let applied = real.apply(&run_ctx).await.unwrap();
    let logs = captured.text();
    drop(captured);
    let after = w.accounts();
    for o in ORPHANS {
        assert_eq!(after[&w.id(o)], (1, 0, true), "{o}");
    }
    assert_eq!(
        after.values().filter(|(d, _, _)| *d == 0).count(),
        9 + 2,
        "the 9 users' accounts, the rig's admin and local-bot stay active"
    );
    w.assert_temporary_admins_deactivated(2);
    assert_no_secret(&w, &[&planned, &plan, &applied], &[], &logs);

    // A marker that says MAS already authenticates: refused, nothing changed.
    ok(
        "patch marker",
        &stagehand_e2e::kubectl(&[
            "patch",
            "configmap",
            "element-markers",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"data":{"MATRIX_STACK_MSC3861":"delegated_auth"}}"#,
        ]),
    );
    let err = dry.plan(&ctx).await.unwrap_err();
    assert!(matches!(err, ActionError::Refused(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("MATRIX_STACK_MSC3861=delegated_auth"),
        "{err}"
    );
    w.assert_temporary_admins_deactivated(2);
}
