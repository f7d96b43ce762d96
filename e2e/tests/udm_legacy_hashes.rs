//! `udm_remove_legacy_hashes` through the Kubernetes exec API (the local exec node, a "UDM REST
//! API pod" labelled as openDesk's) running stand-ins of Nubus 1.22's two cleanup tools
//! (`e2e/ldap/nubus-tools`) against a real slapd holding NT hashes and Kerberos keys in Heimdal's
//! DER encoding. What the action did is checked by reading the directory, not the tools' output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use stagehand_actions::action::{Action, ActionContext, ActionError};
use stagehand_e2e::exec_node::LocalExecNode;
use stagehand_e2e::local_server::temp_dir;
use stagehand_e2e::slapd::{BASE_DN, Slapd, SlapdOptions};
use stagehand_e2e::{Scene, kubectl_stdin, ok, running_pods};

const ID: &str = "udm_remove_legacy_hashes";
const UDM_LABELS: &[(&str, &str)] = &[
    ("app.kubernetes.io/name", "udm-rest-api"),
    ("app.kubernetes.io/instance", "ums"),
    ("app", "udm-rest-api"),
];
const WITHIN: Duration = Duration::from_secs(120);

/// A DER element.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn der_int(n: u32) -> Vec<u8> {
    let mut bytes: Vec<u8> = n
        .to_be_bytes()
        .into_iter()
        .skip_while(|b| *b == 0)
        .collect();
    if bytes.first().is_none_or(|b| b & 0x80 != 0) {
        bytes.insert(0, 0);
    }
    der(0x02, &bytes)
}

/// A krb5Key value as Heimdal stores it: `Key ::= SEQUENCE { mkvno [0] OPTIONAL, key [1]
/// EncryptionKey { keytype [0], keyvalue [1] }, salt [2] Salt { type [0], salt [1] } OPTIONAL }`.
fn krb5_key(enctype: u32, seed: u8, salt: Option<&str>) -> Vec<u8> {
    let len = match enctype {
        18 => 32,
        16 => 24,
        1..=3 => 8,
        _ => 16,
    };
    let keyvalue: Vec<u8> = (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i))
        .collect();
    let encryption_key = der(
        0x30,
        &[
            der(0xA0, &der_int(enctype)),
            der(0xA1, &der(0x04, &keyvalue)),
        ]
        .concat(),
    );
    let mut fields = vec![der(0xA0, &der_int(1)), der(0xA1, &encryption_key)];
    if let Some(salt) = salt {
        fields.push(der(
            0xA2,
            &der(
                0x30,
                &[
                    der(0xA0, &der_int(3)),
                    der(0xA1, &der(0x04, salt.as_bytes())),
                ]
                .concat(),
            ),
        ));
    }
    der(0x30, &fields.concat())
}

/// A value no DER reader accepts as a Key (a SEQUENCE whose content runs past its end).
fn undecodable() -> Vec<u8> {
    vec![0x30, 0x10, 0xA1, 0x03, 0x02, 0x01]
}

struct Fixture {
    uid: &'static str,
    nt: bool,
    keys: Vec<Vec<u8>>,
    kvno: Option<u32>,
}

fn dn(uid: &str) -> String {
    format!("uid={uid},{BASE_DN}")
}

/// alice: NT hash, rc4 + two AES keys; bob: NT hash, three DES keys + AES-256; carol: AES only;
/// dave: NT hash, rc4 + AES + one undecodable value; eve: NT hash only.
fn fixtures() -> Vec<Fixture> {
    let salt = Some("SWP-LDAP.INTERNALalice");
    vec![
        Fixture {
            uid: "alice",
            nt: true,
            keys: vec![
                krb5_key(23, 1, None),
                krb5_key(18, 2, salt),
                krb5_key(17, 3, salt),
            ],
            kvno: Some(3),
        },
        Fixture {
            uid: "bob",
            nt: true,
            keys: vec![
                krb5_key(1, 4, None),
                krb5_key(3, 5, None),
                krb5_key(16, 6, None),
                krb5_key(18, 7, None),
            ],
            kvno: Some(1),
        },
        Fixture {
            uid: "carol",
            nt: false,
            keys: vec![krb5_key(17, 8, None), krb5_key(18, 9, None)],
            kvno: Some(5),
        },
        Fixture {
            uid: "dave",
            nt: true,
            keys: vec![
                krb5_key(23, 10, None),
                krb5_key(18, 11, None),
                undecodable(),
            ],
            kvno: Some(7),
        },
        Fixture {
            uid: "eve",
            nt: true,
            keys: vec![],
            kvno: None,
        },
    ]
}

fn ldif(fixtures: &[Fixture]) -> String {
    let mut out = String::new();
    for (i, f) in fixtures.iter().enumerate() {
        // slapadd wants every value of an attribute on consecutive lines: classes first.
        let mut classes = String::from("objectClass: inetOrgPerson\n");
        let mut attrs = format!("cn: {uid}\nsn: {uid}\nuid: {uid}\n", uid = f.uid);
        if f.nt {
            classes.push_str("objectClass: sambaSamAccount\n");
            attrs.push_str(&format!(
                "sambaSID: S-1-5-21-1-2-3-{}\nsambaNTPassword: {:032X}\n",
                1000 + i,
                0xABCD_0000 + i
            ));
        }
        if let Some(kvno) = f.kvno {
            classes.push_str("objectClass: krb5KDCEntry\n");
            attrs.push_str(&format!(
                "krb5PrincipalName: {}@SWP-LDAP.INTERNAL\nkrb5KeyVersionNumber: {kvno}\n",
                f.uid
            ));
            for k in &f.keys {
                attrs.push_str(&format!("krb5Key:: {}\n", B64.encode(k)));
            }
        }
        out.push_str(&format!("dn: {}\n{classes}{attrs}\n", dn(f.uid)));
    }
    out
}

/// What the directory holds per uid: (has sambaNTPassword, krb5Key values, kvno).
type State = BTreeMap<String, (bool, BTreeSet<Vec<u8>>, Option<u32>)>;

fn read(slapd: &Slapd) -> State {
    let text = slapd.search(
        "(objectClass=inetOrgPerson)",
        &["uid", "sambaNTPassword", "krb5Key", "krb5KeyVersionNumber"],
    );
    let mut state = State::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut uid = String::new();
        let mut entry = (false, BTreeSet::new(), None);
        for line in block.lines() {
            let (name, value) = line.split_once(':').unwrap();
            match name {
                "uid" => uid = value.trim().to_string(),
                "sambaNTPassword" => entry.0 = true,
                "krb5Key" => {
                    entry
                        .1
                        .insert(B64.decode(value.trim_start_matches(':').trim()).unwrap());
                }
                "krb5KeyVersionNumber" => entry.2 = Some(value.trim().parse().unwrap()),
                _ => {}
            }
        }
        state.insert(uid, entry);
    }
    state
}

/// The stand-ins copied into a directory of this test, pointed at `slapd`.
fn tools_for(slapd: Option<&Slapd>) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("ldap/nubus-tools");
    let dir = temp_dir("sh-nubus-tools");
    for name in [
        "nubus_standin.py",
        "remove_sambantpassword",
        "remove_krb5key_keytypes",
    ] {
        std::fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    if let Some(slapd) = slapd {
        std::fs::write(dir.join("ldapi-url"), slapd.ldapi_url()).unwrap();
    }
    dir
}

fn action(config: Value) -> Box<dyn Action> {
    match stagehand_actions::instantiate(ID, &config) {
        Ok(a) => a,
        Err(e) => panic!("instantiate {ID}: {e}"),
    }
}

fn config(tools: &Path, timeout: u64) -> Value {
    json!({"dryRun": false, "udm": {
        "podSelector": "app.kubernetes.io/name=udm-rest-api,app.kubernetes.io/instance=ums",
        "container": "main", "timeoutSeconds": timeout,
        "toolsDirectory": tools.display().to_string()}})
}

fn ctx(scene: &Scene) -> ActionContext {
    ActionContext {
        client: scene.client().clone(),
        namespace: scene.name.clone(),
        secrets: Default::default(),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    }
}

fn udm_pod(scene: &Scene, node: &LocalExecNode, name: &str, containers: &[&str]) {
    ok(
        "create pod",
        &kubectl_stdin(
            &["create", "-n", &scene.name, "-f", "-"],
            Some(&node.pod_with(name, UDM_LABELS, containers)),
        ),
    );
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WITHIN, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {WITHIN:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tools_remove_nt_hashes_and_weak_keys_and_a_rerun_finds_nothing() {
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: ldif(&fixtures()),
        ..SlapdOptions::default()
    });
    let scene = Scene::cluster_without_crds("udm-hashes").await;
    let node = LocalExecNode::start();
    udm_pod(&scene, &node, "ums-udm-rest-api-7d9f-x2", &["main"]);
    running_pods(&scene.name, "udm-rest-api", 1).await;
    let tools = tools_for(Some(&slapd));
    let a = action(config(&tools, 60));
    let ctx = ctx(&scene);
    let before = read(&slapd);
    assert_eq!(before.len(), 5, "{before:?}");

    within("preflight", a.preflight(&ctx)).await.unwrap();
    let plan = within("plan", a.plan(&ctx)).await.unwrap();
    eprintln!("plan: {}", plan.summary);
    assert!(
        plan.summary
            .starts_with("remove_sambantpassword: sambaNTPassword would be removed from 4 objects"),
        "{}",
        plan.summary
    );
    assert!(
        plan.summary.contains(
            "remove_krb5key_keytypes: 4 weak krb5Key value(s) would be removed from 2 objects"
        ),
        "{}",
        plan.summary
    );
    assert!(
        plan.summary
            .contains(&format!("1 object skipped by remove_krb5key_keytypes, its krb5Key cannot be decoded, left as it is (a password reset rewrites it): {}", dn("dave"))),
        "{}",
        plan.summary
    );
    let findings = plan.findings.clone().unwrap();
    assert_eq!(findings.counts["sambaNTPassword"], 4);
    assert_eq!(findings.counts["krb5Key"], 2);
    assert_eq!(findings.counts["krb5KeySkipped"], 1);
    assert_eq!(read(&slapd), before, "the plan changed nothing");

    let applied = within("apply", a.apply(&ctx)).await.unwrap();
    eprintln!("apply: {}", applied.summary);
    assert!(
        applied
            .summary
            .contains("the dry runs afterwards find nothing left"),
        "{}",
        applied.summary
    );
    let after = read(&slapd);
    let fx = fixtures();
    let keys_of = |uid: &str, keep: &[usize]| -> BTreeSet<Vec<u8>> {
        let f = fx.iter().find(|f| f.uid == uid).unwrap();
        keep.iter().map(|i| f.keys[*i].clone()).collect()
    };
    // No NT hash left anywhere.
    assert!(after.values().all(|(nt, _, _)| !nt), "{after:?}");
    // alice: rc4 gone, both AES kept, kvno raised; bob: the DES keys gone, AES-256 kept.
    assert_eq!(after["alice"].1, keys_of("alice", &[1, 2]));
    assert_eq!(after["alice"].2, Some(4));
    assert_eq!(after["bob"].1, keys_of("bob", &[3]));
    assert_eq!(after["bob"].2, Some(2));
    // carol had only strong keys: untouched, kvno too.
    assert_eq!(after["carol"], before["carol"]);
    // dave's undecodable value: the object's keys and kvno left as they were.
    assert_eq!(after["dave"].1, before["dave"].1);
    assert_eq!(after["dave"].2, Some(7));
    assert_eq!(after["eve"].1, BTreeSet::new());

    // A rerun finds nothing to remove and changes nothing.
    let again = within("plan again", a.plan(&ctx)).await.unwrap();
    assert!(
        again
            .summary
            .starts_with("the dry runs find nothing to remove: "),
        "{}",
        again.summary
    );
    within("apply again", a.apply(&ctx)).await.unwrap();
    assert_eq!(read(&slapd), after, "the rerun changed nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_or_hanging_tool_stops_the_action_naming_it() {
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: ldif(&fixtures()),
        ..SlapdOptions::default()
    });
    let scene = Scene::cluster_without_crds("udm-hashes-fail").await;
    let node = LocalExecNode::start();
    udm_pod(&scene, &node, "ums-udm-rest-api-0", &["main"]);
    running_pods(&scene.name, "udm-rest-api", 1).await;
    let tools = tools_for(Some(&slapd));
    let ctx = ctx(&scene);
    let before = read(&slapd);

    // The second tool fails: the first one's work stays, the second changed nothing, and the
    // error says which tool, how it ended and what it printed.
    std::fs::write(
        tools.join("fail-remove_krb5key_keytypes"),
        "ldap.INSUFFICIENT_ACCESS: {'desc': 'Insufficient access'}",
    )
    .unwrap();
    let a = action(config(&tools, 60));
    within("plan", a.plan(&ctx))
        .await
        .expect_err("the dry run fails too");
    let err = within("apply", a.apply(&ctx)).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ActionError::Failed(_)), "{err:?}");
    assert!(
        text.starts_with(&format!(
            "remove_krb5key_keytypes failed (exit code 1) in pod ums-udm-rest-api-0, container main, namespace {}: its error output: ldap.INSUFFICIENT_ACCESS: {{'desc': 'Insufficient access'}}",
            scene.name
        )),
        "{text}"
    );
    assert!(
        text.ends_with(
            "(remove_sambantpassword had removed sambaNTPassword from 4 objects before)"
        ),
        "{text}"
    );
    let after = read(&slapd);
    assert!(after.values().all(|(nt, _, _)| !nt), "{after:?}");
    for (uid, (_, keys, kvno)) in &after {
        assert_eq!((keys, kvno), (&before[uid].1, &before[uid].2), "{uid}");
    }

    // A tool that outlives udm.timeoutSeconds is a failure naming it and the key.
    std::fs::remove_file(tools.join("fail-remove_krb5key_keytypes")).unwrap();
    std::fs::write(tools.join("hang-remove_sambantpassword"), "20").unwrap();
    let slow = action(config(&tools, 2));
    let err = within("apply", slow.apply(&ctx))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("remove_sambantpassword did not finish within 2 s (udm.timeoutSeconds) in pod ums-udm-rest-api-0"),
        "{err}"
    );
    assert_eq!(read(&slapd), after, "nothing ran after the timeout");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_preflight_wants_exactly_one_running_pod_with_the_tools() {
    let scene = Scene::cluster_without_crds("udm-hashes-pods").await;
    let node = LocalExecNode::start();
    let ctx = ctx(&scene);
    let tools = tools_for(None);
    let a = action(config(&tools, 30));
    let selector = "app.kubernetes.io/name=udm-rest-api,app.kubernetes.io/instance=ums";

    let none = within("preflight", a.preflight(&ctx)).await.unwrap_err();
    assert!(matches!(none, ActionError::NotFound(_)), "{none:?}");
    assert!(
        none.to_string().starts_with(&format!(
            "no pod in namespace {} matches udm.podSelector {selector}",
            scene.name
        )),
        "{none}"
    );

    udm_pod(&scene, &node, "udm-a", &["main"]);
    running_pods(&scene.name, "udm-rest-api", 1).await;
    within("preflight", a.preflight(&ctx)).await.unwrap();
    // The tools missing (another directory): named, with the keys to check.
    let empty = temp_dir("sh-no-tools");
    let err = within("preflight", action(config(&empty, 30)).preflight(&ctx))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "{0}/remove_sambantpassword and {0}/remove_krb5key_keytypes missing or not executable in pod udm-a, container main, namespace {1}",
            empty.display(),
            scene.name
        )),
        "{err}"
    );

    udm_pod(&scene, &node, "udm-b", &["main"]);
    running_pods(&scene.name, "udm-rest-api", 2).await;
    let two = within("preflight", a.preflight(&ctx)).await.unwrap_err();
    assert!(matches!(two, ActionError::Conflict(_)), "{two:?}");
    assert!(
        two.to_string().starts_with(&format!(
            "2 Running pods in namespace {} match udm.podSelector {selector} (udm-a, udm-b)",
            scene.name
        )),
        "{two}"
    );
    // The plan refuses the same way, before running anything.
    let planned = within("plan", a.plan(&ctx)).await.unwrap_err();
    assert!(matches!(planned, ActionError::Conflict(_)), "{planned:?}");
}

/// A hash written again while the tools ran (UDM writes the NT hash on a password change while
/// `password/samba/nthash` is not false): the tools say done, the dry runs afterwards still
/// find it, and the action fails naming the object instead of reporting a clean directory.
#[tokio::test]
async fn a_hash_written_again_while_the_tools_ran_fails_the_action_naming_it() {
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: ldif(&fixtures()),
        ..SlapdOptions::default()
    });
    let scene = Scene::cluster_without_crds("udm-hashes-again").await;
    let node = LocalExecNode::start();
    udm_pod(&scene, &node, "ums-udm-rest-api-0", &["main"]);
    running_pods(&scene.name, "udm-rest-api", 1).await;
    let tools = tools_for(Some(&slapd));
    let alice = dn("alice");
    std::fs::write(tools.join("nthash-written-again"), &alice).unwrap();
    let ctx = ctx(&scene);

    let err = within("apply", action(config(&tools, 60)).apply(&ctx))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ActionError::Failed(_)), "{err:?}");
    assert!(
        text.contains(&format!(
            "their dry runs still report 1 object in pod ums-udm-rest-api-0, container main, namespace {}: {alice} (sambaNTPassword)",
            scene.name
        )),
        "{text}"
    );
    let after = read(&slapd);
    assert!(
        after["alice"].0,
        "the hash written again is there: {after:?}"
    );
    assert!(
        after
            .iter()
            .filter(|(uid, _)| *uid != "alice")
            .all(|(_, (nt, _, _))| !nt),
        "{after:?}"
    );
}
