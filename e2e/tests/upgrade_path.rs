//! The upgrade path of one openDesk deployment, v1.17.3 → v1.18.0 → v1.19.0, through the
//! operator (issue 28), with openDesk's own declarations: the Migration is
//! `deploy/examples/opendesk-v1.18.yaml` and then `deploy/examples/opendesk-v1.19.yaml`, only
//! the namespace and the endpoints rewritten to this test's servers (and, where a transport
//! needs it, the test-only keys that point an action at a local server).
//!
//! - v1.17.3 applying v1.19 directly: refused by validation (`BelowMinimum`) before anything
//!   runs; no action started, no footprint.
//! - v1.18: pre then post against the UDM REST, OX SOAP and Provisioning simulators, a real
//!   MinIO, redis-server, slapd (the direct LDAP transport: the exec one runs `ldapi:///` in the
//!   pod) and the `ox-connector` StatefulSet; every action Succeeded, each system checked.
//! - Between v1.18's pre and post runs the v1.19 declarations do not run (their windows open
//!   at v1.18 only once v1.18's post run has recorded it).
//! - v1.19: a real Synapse on PostgreSQL (`stagehand_e2e::synapse`), the same slapd and the
//!   real API server; the pods the actions exec into (`ums-ldap-server-primary-0`,
//!   `opendesk-synapse-0`, the UDM REST API's, with the Nubus tools' stand-ins) on a node whose
//!   exec runs here (`LocalExecNode`). openDesk's review first: the pre stage alone with the
//!   orphaned-accounts action as a dry run (its findings kept in a ConfigMap, nothing
//!   deactivated, the marker ConfigMap and the signing key Secret made); then the option
//!   flipped to apply (only that action runs again), then post. v1.18's footprints carry over
//!   and none of its actions runs again; the orphans and the guest end deactivated, the IAM's
//!   accounts active; no NT hash or weak Kerberos key is left in the directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use stagehand_actions::clients::ldap::escape::child_dn;
use stagehand_actions::clients::ldap::ldif;
use std::path::{Path, PathBuf};

use stagehand_e2e::exec_node::LocalExecNode;
use stagehand_e2e::functional_accounts::{CONTEXT, Seeded, World, small_fixture};
use stagehand_e2e::manifests::{MigrationRun, yaml};
use stagehand_e2e::minio::BUCKET;
use stagehand_e2e::redis::{RedisOptions, RedisServer, session_commands};
use stagehand_e2e::slapd::{BASE_DN, ROOT_PASSWORD, Slapd, SlapdOptions};
use stagehand_e2e::synapse::{Postgres, Synapse, SynapseOptions};
use stagehand_e2e::{
    Scene, apply, condition, create_secret, footprints, get, kubectl, kubectl_stdin, ledger, ok,
    provisioning_deletes, provisioning_sim, replicas, running_pods, statefulset, wait,
};
use stagehand_simulators::provisioning::ProvisioningSim;

/// The release the deployment runs before the upgrade.
const INSTALLED: &str = "v1.17.3";
/// The redis password of the intercom service (the example's `redis-password`).
const REDIS_PASSWORD: &str = "intercom-redis-secret-pw";
/// The Secret holding the slapd admin password for the direct LDAP transport.
const LDAP_SECRET: &str = "ums-ldap-server-primary-admin";
/// Sessions of the intercom service in redis before the upgrade.
const SESSIONS: u64 = 40;

/// An example Migration of `deploy/examples`, as JSON.
fn example(file: &str) -> Value {
    let path = format!("{}/../deploy/examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// An IAM user in slapd as openDesk's directory holds it after v1.17, LDIF: an OX user of
/// context [`CONTEXT`] (when `ox`) whose `univentionObjectIdentifier` is `identifier`, with the
/// legacy password material `legacy` (an NT hash, krb5Keys) Nubus 1.22 no longer writes.
fn iam_user(u: &IamUser) -> String {
    let (uid, entry_uuid, identifier, legacy) = (u.uid, u.entry_uuid, u.identifier, &u.legacy);
    // slapadd wants every value of an attribute on consecutive lines: classes first.
    let mut classes = String::from("objectClass: inetOrgPerson\nobjectClass: univentionObject\n");
    let mut attrs = format!(
        "{}\n{}\n{}\nentryUUID: {entry_uuid}\nuniventionObjectIdentifier: {identifier}\n",
        ldif::line("uid", uid),
        ldif::line("cn", uid),
        ldif::line("sn", uid),
    );
    if u.ox {
        classes.push_str("objectClass: oxUserObject\n");
        attrs.push_str(&format!("oxContextIDNum: {CONTEXT}\nisOxUser: OK\n"));
    }
    if let Some(nt) = legacy.nt {
        classes.push_str("objectClass: sambaSamAccount\n");
        attrs.push_str(&format!(
            "sambaSID: S-1-5-21-1-2-3-{}\nsambaNTPassword: {nt}\n",
            1000 + u32::from(legacy.kvno)
        ));
    }
    if !legacy.keys.is_empty() {
        classes.push_str("objectClass: krb5KDCEntry\n");
        attrs.push_str(&format!(
            "krb5PrincipalName: {uid}@SWP-LDAP.INTERNAL\nkrb5KeyVersionNumber: {}\n",
            legacy.kvno
        ));
        for enctype in legacy.keys {
            attrs.push_str(&format!("krb5Key:: {}\n", B64.encode(krb5_key(*enctype))));
        }
    }
    format!(
        "{}\n{classes}{attrs}\n",
        ldif::line("dn", &child_dn("uid", uid, &format!("cn=users,{BASE_DN}")))
    )
}

/// A user's legacy password material: an NT hash, krb5Keys of these enctypes (23 is RC4, 18
/// AES-256) at this key version.
struct Legacy {
    nt: Option<&'static str>,
    keys: &'static [u32],
    kvno: u8,
}

/// A krb5Key value as Heimdal stores it (DER: `Key { mkvno [0], key [1] EncryptionKey {
/// keytype [0], keyvalue [1] } }`), a key of `enctype`.
fn krb5_key(enctype: u32) -> Vec<u8> {
    let der = |tag: u8, content: &[u8]| -> Vec<u8> {
        let mut out = vec![tag, u8::try_from(content.len()).unwrap()];
        out.extend_from_slice(content);
        out
    };
    let int = |n: u32| der(0x02, &[u8::try_from(n).unwrap()]);
    let len = if enctype == 18 { 32 } else { 16 };
    let value: Vec<u8> = (0..len).map(|i| i ^ 0x5a).collect();
    let key = der(
        0x30,
        &[der(0xA0, &int(enctype)), der(0xA1, &der(0x04, &value))].concat(),
    );
    der(0x30, &[der(0xA0, &int(1)), der(0xA1, &key)].concat())
}

/// An IAM user of slapd.
struct IamUser {
    uid: &'static str,
    entry_uuid: &'static str,
    /// The `univentionObjectIdentifier` v1.17 left: lena's and mira's differ from their
    /// entryUUID (v1.18 sets it), the others' do not.
    identifier: &'static str,
    /// An OX user of context [`CONTEXT`] too.
    ox: bool,
    legacy: Legacy,
}

/// The IAM users of slapd (each the subject of a Matrix account in v1.19).
const IAM: [IamUser; 7] = [
    IamUser {
        uid: "lena",
        entry_uuid: "5e1a0000-0000-4000-8000-000000000001",
        identifier: "1d000000-0000-4000-8000-000000000001",
        ox: true,
        legacy: Legacy {
            nt: Some("0123456789ABCDEF0123456789ABCDEF"),
            keys: &[23, 18],
            kvno: 3,
        },
    },
    IamUser {
        uid: "mira",
        entry_uuid: "5e1a0000-0000-4000-8000-000000000002",
        identifier: "1d000000-0000-4000-8000-000000000002",
        ox: true,
        legacy: Legacy {
            nt: Some("FEDCBA9876543210FEDCBA9876543210"),
            keys: &[],
            kvno: 0,
        },
    },
    IamUser {
        uid: "nora",
        entry_uuid: "5e1a0000-0000-4000-8000-000000000003",
        identifier: "5e1a0000-0000-4000-8000-000000000003",
        ox: false,
        legacy: Legacy {
            nt: None,
            keys: &[18],
            kvno: 2,
        },
    },
    IamUser {
        uid: "olaf",
        entry_uuid: "5e1a0000-0000-4000-8000-000000000004",
        identifier: "5e1a0000-0000-4000-8000-000000000004",
        ox: false,
        legacy: Legacy {
            nt: None,
            keys: &[],
            kvno: 0,
        },
    },
    IamUser {
        uid: "pia",
        entry_uuid: "5e1a0000-0000-4000-8000-000000000005",
        identifier: "5e1a0000-0000-4000-8000-000000000005",
        ox: false,
        legacy: Legacy {
            nt: None,
            keys: &[],
            kvno: 0,
        },
    },
    IamUser {
        uid: "quinn",
        entry_uuid: "5e1a0000-0000-4000-8000-000000000006",
        identifier: "5e1a0000-0000-4000-8000-000000000006",
        ox: false,
        legacy: Legacy {
            nt: None,
            keys: &[],
            kvno: 0,
        },
    },
    IamUser {
        uid: "rita",
        entry_uuid: "5e1a0000-0000-4000-8000-000000000007",
        identifier: "5e1a0000-0000-4000-8000-000000000007",
        ox: false,
        legacy: Legacy {
            nt: None,
            keys: &[],
            kvno: 0,
        },
    },
];

/// The OX users among [`IAM`].
fn ox_users() -> impl Iterator<Item = &'static IamUser> {
    IAM.iter().filter(|u| u.ox)
}

fn slapd_fixture() -> String {
    let mut l = String::new();
    for cn in ["users", "groups", "open-xchange"] {
        l.push_str(&format!(
            "dn: cn={cn},{BASE_DN}\nobjectClass: organizationalRole\ncn: {cn}\n\n"
        ));
    }
    l.push_str(&format!(
        "dn: cn=context{CONTEXT},cn=open-xchange,{BASE_DN}\nobjectClass: oxContext\ncn: context{CONTEXT}\noxContextIDNum: {CONTEXT}\n\n"
    ));
    for u in &IAM {
        l.push_str(&iam_user(u));
    }
    l
}

/// The systems of the v1.18 stage and what was seeded into them.
struct V118 {
    world: World,
    seeded: Seeded,
    provisioning: ProvisioningSim,
    redis: RedisServer,
    slapd: Slapd,
    /// OX user ids of the IAM users, in [`ox_users`]'s order.
    ox_ids: Vec<u32>,
}

impl V118 {
    async fn start(ns: &str) -> Self {
        let world = World::start().await;
        let (users, accounts) = small_fixture();
        let seeded = world.seed(&users, &accounts, true);
        world.create_secrets(ns);
        let provisioning = provisioning_sim(ns, &["ox-connector"]).await;
        // The example reads the Provisioning API's password from openDesk's Secret.
        let copied = get(ns, "secret/provisioning")["data"]["password"]
            .as_str()
            .map(|b| B64.decode(b).unwrap())
            .map(|b| String::from_utf8(b).unwrap())
            .unwrap();
        create_secret(ns, "ums-provisioning-api-admin", "password", &copied);
        let redis = RedisServer::start(RedisOptions {
            default_password: Some(REDIS_PASSWORD.into()),
            ..RedisOptions::default()
        });
        redis.pipe(0, session_commands(SESSIONS, 3600, "u"));
        redis.cli(0, &["SET", "config:intercom", "kept"]);
        create_secret(
            ns,
            "cache-intercom-service-password",
            "password",
            REDIS_PASSWORD,
        );
        let slapd = Slapd::start_with(&SlapdOptions {
            initial_ldif: slapd_fixture(),
            ..SlapdOptions::default()
        });
        create_secret(ns, LDAP_SECRET, "password", ROOT_PASSWORD);
        let ox_ids = ox_users()
            .map(|u| {
                world
                    .ox
                    .state()
                    .add_user(CONTEXT, u.uid, &format!("{}@iam.example.org", u.uid))
                    .unwrap()
            })
            .collect();
        apply(&statefulset(ns, "ox-connector", 1));
        running_pods(ns, "ox-connector", 1).await;
        Self {
            world,
            seeded,
            provisioning,
            redis,
            slapd,
            ox_ids,
        }
    }

    /// `deploy/examples/opendesk-v1.18.yaml` in `ns`, installed release [`INSTALLED`], its
    /// endpoints pointed at these servers; the two LDAP actions use the direct transport to
    /// slapd (`ldap.url`, the `ldap-admin-password` secret file).
    fn migration(&self, ns: &str) -> Value {
        let mut m = example("opendesk-v1.18.yaml");
        m["metadata"]["namespace"] = json!(ns);
        m["spec"]["installedRelease"] = json!(INSTALLED);
        let store = self.world.ctx.object_store.clone().unwrap();
        let object_store = &mut m["spec"]["objectStore"];
        assert_eq!(object_store["bucket"], BUCKET);
        object_store["endpoint"] = json!(store.endpoint);
        object_store["accessKeyId"] = json!(store.access_key_id);
        // MinIO serves its default region.
        object_store.as_object_mut().unwrap().remove("region");
        m["spec"]["secretFiles"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "ldap-admin-password",
                         "secret": {"name": LDAP_SECRET, "key": "password"}}));
        let udm = self.world.udm.api_url();
        let soap = self.world.ox.soap_url();
        for stage in ["pre", "post"] {
            for action in m["spec"]["actions"][stage].as_array_mut().unwrap() {
                let id = action["id"].as_str().unwrap().to_string();
                let config = &mut action["config"];
                if config.get("udm").is_some() {
                    config["udm"]["url"] = json!(udm);
                }
                if config.get("oxAppSuite").is_some() {
                    config["oxAppSuite"]["soapUrl"] = json!(soap);
                }
                match id.as_str() {
                    "ldap_entryuuid_to_object_identifier" | "ox_names_to_object_identifier" => {
                        config["ldap"]["url"] = json!(self.slapd.url());
                    }
                    "provisioning_drop_subscriptions" => {
                        config["provisioning"]["url"] = json!(self.provisioning.api_url());
                    }
                    "flush_intercom_sessions" => {
                        config["redis"]["host"] = json!("127.0.0.1");
                        config["redis"]["port"] = json!(self.redis.port());
                    }
                    _ => {}
                }
            }
        }
        m
    }

    /// What the pre stage did: the connector scaled to 0, the Functional Accounts exported
    /// (and the handover written), every identifier its entryUUID, the OX users renamed to
    /// their identifiers, the connector's subscription dropped.
    fn assert_pre_done(&self, ns: &str) {
        assert_eq!(replicas(ns, "ox-connector"), 0, "workload_scale");
        assert!(
            self.world.functional_accounts().is_empty(),
            "the export deleted every Functional Account"
        );
        let handover = self
            .world
            .handover()
            .expect("the export wrote the handover");
        assert_eq!(handover.release, "v1.18.0");
        self.world.assert_every_account_described(&self.seeded);
        for u in &IAM {
            let found = self
                .slapd
                .search(&format!("(uid={})", u.uid), &["univentionObjectIdentifier"]);
            assert!(
                found.contains(&format!("univentionObjectIdentifier: {}", u.entry_uuid)),
                "{}'s identifier is its entryUUID: {found}",
                u.uid
            );
        }
        for (u, id) in ox_users().zip(&self.ox_ids) {
            let user = self.world.ox.state().user(CONTEXT, *id).unwrap();
            assert_eq!(user.name, u.entry_uuid, "OX user {} renamed", u.uid);
        }
        assert_eq!(provisioning_deletes(&self.provisioning), 1);
        assert_eq!(
            self.redis.count_matching(0, "sess:*"),
            SESSIONS,
            "the sessions are flushed in post, not before"
        );
    }

    /// What the post stage did: the Shared Accounts imported, the sessions flushed and
    /// nothing else of redis.
    fn assert_post_done(&self) {
        self.world.assert_imported_exactly(&self.seeded);
        assert_eq!(self.redis.count_matching(0, "sess:*"), 0);
        assert_eq!(
            self.redis.cli(0, &["GET", "config:intercom"]).trim(),
            "kept"
        );
    }
}

/// `deploy/examples/opendesk-v1.19.yaml` in `ns`, keeping the deployment's
/// `installedRelease` [`INSTALLED`] (a spec replaced by the next release's declarations keeps
/// it: it says where the deployment came from until the ledger records a release).
fn v1_19(ns: &str) -> Value {
    let mut m = example("opendesk-v1.19.yaml");
    m["metadata"]["namespace"] = json!(ns);
    m["spec"]["installedRelease"] = json!(INSTALLED);
    m
}

/// Orphaned Matrix accounts: OIDC subjects no IAM user carries (2 of 9 OIDC-bound accounts,
/// 22%, under openDesk's `maxOrphanPercent` 25).
const ORPHANS: [(&str, &str); 2] = [
    ("gone-anton", "0a000000-0000-4000-8000-00000000dead"),
    ("gone-berta", "0a000000-0000-4000-8000-00000000beef"),
];
/// The UDM REST API pod's labels (`udm.podSelector`), and `app` for [`running_pods`].
const UDM_LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/name", "udm-rest-api"),
    ("app.kubernetes.io/instance", "ums"),
    ("app", "udm-rest-api"),
];

/// The systems of the v1.19 stage: the previous Synapse on PostgreSQL with its Matrix
/// accounts, and the pods openDesk's v1.19 actions exec into, on a node whose exec runs here.
struct V119 {
    _pg: Postgres,
    synapse: Synapse,
    _node: LocalExecNode,
    /// The Nubus tools' stand-ins, pointed at slapd (`udm.toolsDirectory`).
    tools: PathBuf,
    /// Matrix IDs: the IAM users' (in [`IAM`]'s order), the orphans', the guest's.
    iam_bound: Vec<String>,
    orphans: Vec<String>,
    guest: String,
}

impl V119 {
    async fn start(ns: &Scene, slapd: &Slapd) -> Self {
        let pg = Postgres::start();
        let synapse = Synapse::start(&pg, SynapseOptions::default());
        create_secret(
            &ns.name,
            "database-synapse-password",
            "password",
            pg.password(),
        );
        let mut iam_bound = Vec::new();
        for u in &IAM {
            iam_bound.push(
                synapse
                    .create_oidc_user(u.uid, &format!("{} (IAM)", u.uid), u.entry_uuid)
                    .await,
            );
        }
        let mut orphans = Vec::new();
        for (localpart, subject) in ORPHANS {
            orphans.push(
                synapse
                    .create_oidc_user(localpart, &format!("{localpart} (left)"), subject)
                    .await,
            );
        }
        let guest = synapse.create_guest().await;

        let node = LocalExecNode::start_for(&["main", "synapse"]);
        for pod in [
            node.pod_with(
                "ums-ldap-server-primary-0",
                &[("app", "ldap-primary")],
                &["main"],
            ),
            node.pod_with("opendesk-synapse-0", &[("app", "synapse")], &["synapse"]),
            node.pod_with("ums-udm-rest-api-0", UDM_LABELS, &["main"]),
        ] {
            ok(
                "create pod",
                &kubectl_stdin(&["create", "-n", &ns.name, "-f", "-"], Some(&pod)),
            );
        }
        for app in ["ldap-primary", "synapse", "udm-rest-api"] {
            running_pods(&ns.name, app, 1).await;
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("ldap/nubus-tools");
        let tools = ns.dir().join("nubus-tools");
        std::fs::create_dir_all(&tools).unwrap();
        for name in [
            "nubus_standin.py",
            "remove_sambantpassword",
            "remove_krb5key_keytypes",
        ] {
            std::fs::copy(src.join(name), tools.join(name)).unwrap();
        }
        std::fs::write(tools.join("ldapi-url"), slapd.ldapi_url()).unwrap();
        Self {
            _pg: pg,
            synapse,
            _node: node,
            tools,
            iam_bound,
            orphans,
            guest,
        }
    }

    /// `deploy/examples/opendesk-v1.19.yaml` in `ns` (see [`v1_19`]), its endpoints pointed at
    /// these servers, plus the test-only keys that point the exec'd commands at local files
    /// and sockets (`synapse.configPath`, `ldap.ldapiUrl`, `udm.toolsDirectory`). With `apply`,
    /// the orphaned-accounts action flipped from openDesk's review default to apply (runMode
    /// `apply`, `synapse.dryRun: false`), as `actionOptions.synapseDeactivateOrphanedUsers
    /// .dryRun: false` renders it.
    fn migration(&self, ns: &str, slapd: &Slapd, apply: bool) -> Value {
        let mut m = v1_19(ns);
        for stage in ["pre", "post"] {
            for action in m["spec"]["actions"][stage].as_array_mut().unwrap() {
                let id = action["id"].as_str().unwrap().to_string();
                match id.as_str() {
                    "synapse_deactivate_orphaned_users" => {
                        assert_eq!(action["runMode"], "dry-run", "openDesk's default");
                        let c = &mut action["config"];
                        assert_eq!(c["synapse"]["dryRun"], true);
                        c["synapse"]["connection"]["url"] = json!(self.synapse.base_url());
                        c["synapse"]["postgres"]["host"] = json!(self._pg.host());
                        c["synapse"]["postgres"]["port"] = json!(self._pg.port());
                        c["synapse"]["configPath"] =
                            json!(self.synapse.config_path().display().to_string());
                        c["ldap"]["ldapiUrl"] = json!(slapd.ldapi_url());
                        if apply {
                            action["runMode"] = json!("apply");
                            action["config"]["synapse"]["dryRun"] = json!(false);
                        }
                    }
                    "synapse_signing_key_export" => {
                        action["config"]["source"]["path"] =
                            json!(self.synapse.signing_key_path().display().to_string());
                    }
                    "udm_remove_legacy_hashes" => {
                        action["config"]["udm"]["toolsDirectory"] =
                            json!(self.tools.display().to_string());
                    }
                    _ => {}
                }
            }
        }
        m
    }

    /// The Matrix IDs of the active accounts, the rig's own admin left out.
    fn active(&self) -> Vec<String> {
        self.synapse
            .psql("SELECT name FROM users WHERE deactivated = 0 AND name NOT LIKE '@rig-admin-%' ORDER BY name")
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

/// The findings ConfigMaps the run `name`'s action `id` reported, as one text.
fn findings_text(ns: &str, name: &str, id: &str) -> String {
    let r = get(ns, &format!("migrationrun/{name}"));
    let action = r["status"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {r}"))
        .clone();
    let maps = action["findings"]["configMaps"]
        .as_array()
        .unwrap_or_else(|| panic!("{id} reported no findings: {action}"));
    maps.iter()
        .map(|m| get(ns, &format!("configmap/{}", m.as_str().unwrap())).to_string())
        .collect()
}

/// The decisions of the run `name`: (id, decision).
fn decisions(ns: &str, name: &str) -> Vec<(String, String)> {
    get(ns, &format!("migrationrun/{name}"))["status"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
        .collect()
}

/// The ids of the actions `m` declares in both stages.
fn declared(m: &Value) -> usize {
    ["pre", "post"]
        .iter()
        .map(|s| m["spec"]["actions"][*s].as_array().map_or(0, Vec::len))
        .sum()
}

fn run(ns: &str, name: &str, stage: &str, release: &str) -> String {
    MigrationRun::new(ns, name, stage)
        .release(release)
        .to_yaml()
}

/// Applies the Migration `m` and waits until the operator found it valid.
fn declare(ns: &str, m: &Value) {
    apply(&yaml(m));
    wait(ns, "migration/opendesk", "Ready");
}

/// Runs the stage as the MigrationRun `name` and waits until it is over.
fn run_stage(ns: &str, name: &str, stage: &str, release: &str) {
    apply(&run(ns, name, stage, release));
    wait(ns, &format!("migrationrun/{name}"), "Ready");
}

/// Every action of the run `name` Succeeded; their ids in order.
fn all_succeeded(ns: &str, name: &str) -> Vec<String> {
    let r = get(ns, &format!("migrationrun/{name}"));
    assert_eq!(condition(&r, "Succeeded")["status"], "True", "{r}");
    let actions = r["status"]["actions"].as_array().unwrap();
    assert!(!actions.is_empty(), "{r}");
    for a in actions {
        assert_eq!(a["decision"], "Succeeded", "{name}: {a}");
    }
    actions
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_string())
        .collect()
}

/// The footprints of the ledger of `ns` (none without a ledger).
fn recorded(ns: &str) -> Vec<String> {
    ledger(ns)
        .map(|l| footprints(&l, "").into_iter().cloned().collect())
        .unwrap_or_default()
}

/// A v1.19 run applied to a deployment the v1.19 windows do not admit: refused by validation
/// before anything runs, naming `BelowMinimum`; no action started, no footprint added; the run
/// deleted afterwards (as a person would before going on).
fn assert_v1_19_refused(ns: &str, name: &str, before: &[String]) {
    let m = v1_19(ns);
    assert!(declared(&m) > 0, "the v1.19 example declares actions: {m}");
    apply(&yaml(&m));
    wait(ns, "migration/opendesk", "Stalled");
    let migration = get(ns, "migration/opendesk");
    let problems = migration["status"]["problems"].as_array().unwrap();
    assert!(
        !problems.is_empty() && problems.iter().all(|p| p["code"] == "BelowMinimum"),
        "{migration}"
    );
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("the last migrated release {INSTALLED} is older")),
        "{migration}"
    );
    apply(&run(ns, name, "pre", "v1.19.0"));
    wait(ns, &format!("migrationrun/{name}"), "Stalled");
    let refused = get(ns, &format!("migrationrun/{name}"));
    assert_eq!(
        condition(&refused, "Ready")["reason"],
        "Invalid",
        "{refused}"
    );
    assert_eq!(condition(&refused, "Succeeded")["status"], "False");
    assert_eq!(
        refused["status"]["actions"],
        json!([]),
        "nothing planned or executed: {refused}"
    );
    assert!(
        refused["status"]["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["code"] == "BelowMinimum"),
        "{refused}"
    );
    assert_eq!(recorded(ns), before, "no footprint added");
    ok(
        "delete the refused run",
        &kubectl(&["delete", "migrationrun", name, "-n", ns, "--wait=true"]),
    );
}

// Multi-threaded: the simulators serve from this process while the test blocks on kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_17_to_v1_18_to_v1_19_through_the_operator() {
    let ns = Scene::cluster("upgrade").await;
    let v118 = V118::start(&ns.name).await;
    let _operator = ns.start_operator();

    // v1.17.3 cannot go to v1.19 directly: install v1.18.x first.
    assert_v1_19_refused(&ns.name, "v1-19-from-v1-17", &[]);
    assert_eq!(replicas(&ns.name, "ox-connector"), 1, "nothing ran");
    assert_eq!(provisioning_deletes(&v118.provisioning), 0, "nothing ran");

    // v1.18: openDesk's declarations, pre.
    let m118 = v118.migration(&ns.name);
    declare(&ns.name, &m118);
    run_stage(&ns.name, "v1-18-pre", "pre", "v1.18.0");
    assert_eq!(
        all_succeeded(&ns.name, "v1-18-pre"),
        [
            "workload_scale",
            "ox_functional_accounts_export",
            "ldap_entryuuid_to_object_identifier",
            "ox_names_to_object_identifier",
            "provisioning_drop_subscriptions",
        ]
    );
    v118.assert_pre_done(&ns.name);
    let after_pre = recorded(&ns.name);
    assert_eq!(after_pre.len(), 5, "{after_pre:?}");

    // With only v1.18's pre stage done, v1.19's windows (from v1.18) are not open yet.
    assert_v1_19_refused(&ns.name, "v1-19-too-early", &after_pre);

    // Back to v1.18's declarations for its post stage.
    declare(&ns.name, &m118);
    run_stage(&ns.name, "v1-18-post", "post", "v1.18.0");
    assert_eq!(
        all_succeeded(&ns.name, "v1-18-post"),
        ["ox_shared_accounts_import", "flush_intercom_sessions"]
    );
    v118.assert_post_done();
    let migration = get(&ns.name, "migration/opendesk");
    assert_eq!(migration["status"]["lastMigratedRelease"], "v1.18.0");
    let v1_18_footprints = recorded(&ns.name);
    assert_eq!(v1_18_footprints.len(), 7, "{v1_18_footprints:?}");
    assert!(
        v1_18_footprints.iter().all(|f| f.contains("v1.18.0")),
        "{v1_18_footprints:?}"
    );

    // v1.19: openDesk's declarations, the orphaned accounts reviewed first (a dry run: the
    // pre stage alone, as openDesk's review deploys it).
    let v119 = V119::start(&ns, &v118.slapd).await;
    let mut all = v119.iam_bound.clone();
    all.extend(v119.orphans.iter().cloned());
    all.push(v119.guest.clone());
    all.sort();
    assert_eq!(v119.active(), all);
    let key_file = std::fs::read_to_string(v119.synapse.signing_key_path()).unwrap();
    declare(&ns.name, &v119.migration(&ns.name, &v118.slapd, false));
    run_stage(&ns.name, "v1-19-pre-review", "pre", "v1.19.0");
    assert_eq!(
        all_succeeded(&ns.name, "v1-19-pre-review"),
        [
            "synapse_deactivate_orphaned_users",
            "configmap_create",
            "synapse_signing_key_export",
        ],
        "the v1.18 actions are not declared by v1.19, so not run again"
    );
    assert_eq!(v119.active(), all, "the review deactivated nothing");
    // Stagehand's dry-run rule (docs/declarations.md): the review records nothing for the
    // orphaned-accounts action, only the two others' apply footprints.
    let after_review: Vec<String> = recorded(&ns.name)
        .into_iter()
        .filter(|k| !v1_18_footprints.contains(k))
        .collect();
    assert!(
        after_review.len() == 2
            && after_review
                .iter()
                .all(|k| k.contains("v1.19.0") && !k.contains("synapse_deactivate_orphaned_users")),
        "only configmap_create and synapse_signing_key_export recorded: {after_review:?}"
    );
    let review = findings_text(
        &ns.name,
        "v1-19-pre-review",
        "synapse_deactivate_orphaned_users",
    );
    for orphan in &v119.orphans {
        assert!(
            review.contains(orphan.as_str()),
            "{orphan} listed: {review}"
        );
    }
    for kept in &v119.iam_bound {
        assert!(
            !review.contains(kept.as_str()),
            "{kept} not listed: {review}"
        );
    }
    let markers = get(&ns.name, "configmap/element-markers");
    assert_eq!(
        markers["data"],
        json!({"MATRIX_STACK_MSC3861": "legacy_auth"})
    );
    assert_eq!(
        markers["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "matrix-tools-deployment-markers"
    );
    let generated = get(&ns.name, "secret/element-generated");
    let exported = B64
        .decode(generated["data"]["SYNAPSE_SIGNING_KEY"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        String::from_utf8(exported).unwrap().trim(),
        key_file.trim(),
        "the previous Synapse's signing key"
    );
    assert_eq!(
        generated["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "matrix-tools-init-secrets"
    );

    // The option flipped to apply: the orphaned-accounts action runs once more, the others'
    // footprints stand; then post.
    declare(&ns.name, &v119.migration(&ns.name, &v118.slapd, true));
    run_stage(&ns.name, "v1-19-pre", "pre", "v1.19.0");
    assert_eq!(
        decisions(&ns.name, "v1-19-pre"),
        pairs(&[
            ("synapse_deactivate_orphaned_users", "Succeeded"),
            ("configmap_create", "Skipped"),
            ("synapse_signing_key_export", "Skipped"),
        ])
    );
    let mut kept = v119.iam_bound.clone();
    kept.sort();
    assert_eq!(
        v119.active(),
        kept,
        "the orphans deactivated, the guest turned into a deactivated account"
    );
    for orphan in &v119.orphans {
        let user = v119.synapse.user(orphan).await;
        assert_eq!(user["deactivated"], true, "{user}");
        assert_eq!(user["erased"], true, "erase: true: {user}");
    }
    run_stage(&ns.name, "v1-19-post", "post", "v1.19.0");
    assert_eq!(
        all_succeeded(&ns.name, "v1-19-post"),
        ["udm_remove_legacy_hashes"]
    );
    let nt = v118.slapd.search("(sambaNTPassword=*)", &["dn"]);
    assert!(nt.trim().is_empty(), "no NT hash left: {nt}");
    let lena = v118
        .slapd
        .search("(uid=lena)", &["krb5Key", "krb5KeyVersionNumber"]);
    assert!(
        lena.contains(&format!("krb5Key:: {}", B64.encode(krb5_key(18))))
            && !lena.contains(&format!("krb5Key:: {}", B64.encode(krb5_key(23))))
            && lena.contains("krb5KeyVersionNumber: 4"),
        "lena's RC4 key gone, her AES key kept, the key version raised: {lena}"
    );

    let migration = get(&ns.name, "migration/opendesk");
    assert_eq!(migration["status"]["lastMigratedRelease"], "v1.19.0");
    let after = recorded(&ns.name);
    for footprint in &v1_18_footprints {
        assert!(
            after.contains(footprint),
            "{footprint} carried over: {after:?}"
        );
    }
    for expected in [
        "footprint.pre.synapse_deactivate_orphaned_users.v1.19.0.apply",
        "footprint.pre.configmap_create.v1.19.0.apply",
        "footprint.pre.synapse_signing_key_export.v1.19.0.apply",
        "footprint.post.udm_remove_legacy_hashes.v1.19.0.apply",
    ] {
        assert!(
            after.iter().any(|f| f == expected),
            "{expected} in {after:?}"
        );
    }
}
