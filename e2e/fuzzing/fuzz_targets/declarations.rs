//! The declaration reader, the validator and the planner (config/src/declarations.rs,
//! validate.rs, plan.rs, with the action library's config checks): the input read as the
//! operator reads a Migration from the API server (one JSON document) and as
//! `stagehand validate -f` reads a manifest file (YAML documents, each turned into JSON as
//! operator/src/cli/manifest.rs does). Every Migration among them is read, validated against
//! the library and planned for both stages.
//!
//! Beyond not panicking: a Migration that validates plans every declared action, and every
//! action it plans the engine can build from its config (validation is what the engine trusts).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::Value;
use stagehand_actions::{Library, instantiate};
use stagehand_config::{Deployment, Stage, plan_stage, read_manifest, validate};

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = serde_json::from_slice::<Value>(data) {
        migration(&doc);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for doc in serde_norway::Deserializer::from_str(text) {
        let Ok(yaml) = serde_norway::Value::deserialize(doc) else {
            break;
        };
        if yaml.is_null() {
            continue;
        }
        if let Ok(json) = serde_json::to_value(&yaml) {
            migration(&json);
        }
    }
});

fn migration(doc: &Value) {
    let Ok((declarations, recorded)) = read_manifest(doc) else {
        return;
    };
    let context = Deployment::new(&declarations, &recorded, None);
    let report = validate(&declarations, &context, &Library);
    for finding in &report.problems {
        let _ = (finding.code.to_string(), finding.location());
    }
    for finding in &report.warnings {
        let _ = (finding.code.to_string(), finding.location());
    }
    for stage in Stage::ALL {
        let fingerprint = declarations.fingerprint(stage);
        assert!(fingerprint.first_change(&fingerprint).is_none());
        let _ = fingerprint.digest();
        let plan = plan_stage(&declarations, stage, &context);
        if !report.is_valid() {
            continue;
        }
        assert_eq!(
            plan.actions.len(),
            declarations.stage(stage).actions.len(),
            "a valid Migration leaves a declared action of {stage} unplanned"
        );
        for action in &plan.actions {
            if let Err(e) = instantiate(&action.id, &action.config) {
                panic!(
                    "validation accepted {} with {} but the engine cannot build it: {e}",
                    action.id, action.config
                );
            }
        }
    }
}
