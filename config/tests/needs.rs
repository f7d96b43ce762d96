#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The checks of what declared actions need from their run, which need no cluster (issue 12):
//! `MissingSecretFile`, `MissingObjectStore`, `HandoverKeyMismatch`, `HalfOptOut` (of a
//! handover, and of a pair the catalog says belongs together). Findings are compared as exact
//! lists, so a missing and an unexpected finding both fail.

use serde_json::{Value, json};
use stagehand_config::{
    ActionCatalog, ConfigIssue, Declarations, Deployment, Handover, HandoverRole, Needs,
    ProblemCode, Recorded, Stage, validate,
};

/// `creds` reads the secret file its config names; `writer`/`reader` hand over the object
/// named by `key` (and read `udm`); `ids`/`names` belong together (as openDesk's
/// `ldap_entryuuid_to_object_identifier` and `ox_names_to_object_identifier`).
struct Catalog;

impl ActionCatalog for Catalog {
    fn config_issues(&self, id: &str, _config: &Value) -> Option<Vec<ConfigIssue>> {
        ["creds", "writer", "reader", "ids", "names"]
            .contains(&id)
            .then(Vec::new)
    }

    fn pairs(&self) -> &'static [[&'static str; 2]] {
        &[["ids", "names"]]
    }

    fn needs(&self, id: &str, config: &Value) -> Needs {
        let key = config["key"].as_str().unwrap_or("fa.yaml").to_string();
        match id {
            "creds" => Needs {
                secret_files: vec![config["file"].as_str().unwrap_or("pw").to_string()],
                handover: None,
            },
            "writer" | "reader" => Needs {
                secret_files: vec!["udm".into()],
                handover: Some(Handover {
                    object_key: key,
                    role: if id == "writer" {
                        HandoverRole::Writes
                    } else {
                        HandoverRole::Reads
                    },
                }),
            },
            _ => Needs::default(),
        }
    }
}

/// A finding as compared: code, stage, index, field.
type Key = (ProblemCode, Option<Stage>, Option<usize>, Option<String>);

fn decl(id: &str, config: Value) -> Value {
    json!({"id": id, "tag": "v1.18.0", "versions": {"minimum": "v1.15", "from": "v1.15", "to": "v1.17"}, "config": config})
}

fn file(name: &str) -> Value {
    json!({"name": name, "secret": {"name": format!("{name}-secret"), "key": "k"}})
}

fn store(key_file: &str) -> Value {
    json!({"endpoint": "https://s3", "bucket": "migrations", "accessKeyId": "id", "secretKeyFile": key_file})
}

fn problems(spec: Value) -> Vec<Key> {
    let d = Declarations::from_spec(&spec).unwrap();
    let report = validate(
        &d,
        &Deployment::new(&d, &Recorded::default(), None),
        &Catalog,
    );
    report
        .problems
        .into_iter()
        .map(|p| (p.code, p.stage, p.index, p.field))
        .collect()
}

fn p(code: ProblemCode, stage: Stage, index: usize, field: &str) -> Key {
    (code, Some(stage), Some(index), Some(field.into()))
}

#[test]
fn every_needed_secret_file_must_be_listed() {
    // Two declarations of one action: distinct runModes, or they would be a DuplicateFootprint.
    let mut second = decl("creds", json!({"file": "b"}));
    second["runMode"] = json!("second");
    let spec = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [decl("creds", json!({"file": "a"})), second]},
        "secretFiles": [file("a")],
    });
    assert_eq!(
        problems(spec),
        [p(
            ProblemCode::MissingSecretFile,
            Stage::Pre,
            1,
            "secretFiles"
        )]
    );
}

#[test]
fn a_valid_handover_pair_has_no_problem() {
    let spec = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [decl("writer", json!({}))], "post": [decl("reader", json!({}))]},
        "secretFiles": [file("udm"), file("store-key")],
        "objectStore": store("store-key"),
    });
    assert_eq!(problems(spec), []);
}

#[test]
fn a_handover_needs_an_object_store_with_a_listed_key() {
    let no_store = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [decl("writer", json!({}))], "post": [decl("reader", json!({}))]},
        "secretFiles": [file("udm")],
    });
    assert_eq!(
        problems(no_store),
        [
            p(
                ProblemCode::MissingObjectStore,
                Stage::Pre,
                0,
                "objectStore"
            ),
            p(
                ProblemCode::MissingObjectStore,
                Stage::Post,
                0,
                "objectStore"
            ),
        ]
    );
    let unlisted_key = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [decl("writer", json!({}))]},
        "secretFiles": [file("udm")],
        "objectStore": store("store-key"),
    });
    assert_eq!(
        problems(unlisted_key),
        [p(
            ProblemCode::MissingSecretFile,
            Stage::Pre,
            0,
            "objectStore.secretKeyFile"
        )]
    );
}

#[test]
fn both_sides_of_a_handover_name_the_same_key() {
    let spec = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [decl("writer", json!({"key": "a.yaml"}))], "post": [decl("reader", json!({"key": "b.yaml"}))]},
        "secretFiles": [file("udm"), file("store-key")],
        "objectStore": store("store-key"),
    });
    assert_eq!(
        problems(spec),
        [p(
            ProblemCode::HandoverKeyMismatch,
            Stage::Post,
            0,
            "config.handover.objectKey"
        )]
    );
}

#[test]
fn opting_out_of_half_a_pair_is_a_problem_and_of_both_is_not() {
    let base = |skips: Value| {
        json!({
            "releaseVersion": "v1.18.0",
            "actions": {"pre": [decl("writer", json!({}))], "post": [decl("reader", json!({}))]},
            "actionsSkip": skips,
            "secretFiles": [file("udm"), file("store-key")],
            "objectStore": store("store-key"),
        })
    };
    let skip = json!([{"id": "writer", "tag": "v1.18.0"}]);
    assert_eq!(
        problems(base(json!({"pre": skip}))),
        [p(ProblemCode::HalfOptOut, Stage::Pre, 0, "actionsSkip")]
    );
    assert_eq!(
        problems(base(json!({"post": [{"id": "reader", "tag": "v1.18.0"}]}))),
        [p(ProblemCode::HalfOptOut, Stage::Post, 0, "actionsSkip")]
    );
    assert_eq!(
        problems(base(
            json!({"pre": skip, "post": [{"id": "reader", "tag": "v1.18.0"}]})
        )),
        []
    );
}

#[test]
fn opting_out_of_half_a_pair_that_belongs_together_is_a_problem() {
    let base = |skips: Value| {
        json!({
            "releaseVersion": "v1.18.0",
            "actions": {"pre": [decl("ids", json!({})), decl("names", json!({}))], "post": []},
            "actionsSkip": {"pre": skips},
        })
    };
    let skip = |id: &str| json!({"id": id, "tag": "v1.18.0"});
    assert_eq!(
        problems(base(json!([skip("ids")]))),
        [p(ProblemCode::HalfOptOut, Stage::Pre, 0, "actionsSkip")]
    );
    assert_eq!(
        problems(base(json!([skip("names")]))),
        [p(ProblemCode::HalfOptOut, Stage::Pre, 1, "actionsSkip")]
    );
    assert_eq!(problems(base(json!([skip("ids"), skip("names")]))), []);
    assert_eq!(problems(base(json!([]))), []);
    let d = Declarations::from_spec(&base(json!([skip("names")]))).unwrap();
    let report = validate(
        &d,
        &Deployment::new(&d, &Recorded::default(), None),
        &Catalog,
    );
    assert_eq!(
        report.problems[0].message,
        "names is opted out but ids (actions.pre[0]), which belongs together with it (applying one without the other leaves a state the release cannot work with), is not: opt out of both or of neither, or the migration is half applied"
    );
}

#[test]
fn an_opted_out_action_needs_nothing() {
    let spec = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [decl("creds", json!({"file": "a"}))]},
        "actionsSkip": {"pre": [{"id": "creds", "tag": "v1.18.0"}]},
    });
    assert_eq!(problems(spec), []);
}
