//! Step 2, `assess` (pure): are the Migration's declarations valid, given the deployment's
//! history? The one function both controllers use, so that a spec that cannot be read at all
//! is handled one way (a problem in the conditions, never a retry loop).

use stagehand_actions::Library;
use stagehand_config::{
    Declarations, Deployment, Footprint, Problem, Recorded, Release, Warning, validate,
};
use stagehand_crds::Migration;

use super::ledger::Ledger;

/// The declarations of a Migration that validated, with what the planner knows.
#[derive(Debug, Clone)]
pub struct Assessment {
    /// The declarations of both stages.
    pub declarations: Declarations,
    /// The last migrated release and the footprints.
    pub context: Deployment,
    /// Warnings (they fail nothing).
    pub warnings: Vec<Warning>,
}

/// Why the declarations cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Every problem found (empty when the spec could not be read at all).
    pub problems: Vec<Problem>,
    /// One line per problem, `<code> <location>: <message>`, for conditions and events.
    pub lines: Vec<String>,
    /// Warnings found alongside.
    pub warnings: Vec<Warning>,
}

impl Invalid {
    /// `N problem(s) in the declarations, nothing was executed: ...`.
    pub fn message(&self) -> String {
        format!(
            "{} problem(s) in the declarations, nothing was executed: {}",
            self.lines.len(),
            self.lines.join("; ")
        )
    }
}

/// What the ledger recorded, as the planner reads it.
pub fn recorded(ledger: &Ledger) -> Recorded {
    Recorded {
        last_migrated: ledger
            .last_migrated_release
            .as_deref()
            .and_then(|r| Release::parse(r).ok()),
        history: ledger.prints(),
        problems: Vec::new(),
    }
}

/// One line of a problem, as conditions and events show it.
pub fn problem_line(p: &Problem) -> String {
    format!("{} {}: {}", p.code, p.location(), p.message)
}

/// Validates the Migration's declarations of both stages against the library and the
/// recorded history.
pub fn assess(migration: &Migration, ledger: &Ledger) -> Result<Assessment, Invalid> {
    let unreadable = |message: String| Invalid {
        problems: Vec::new(),
        lines: vec![message],
        warnings: Vec::new(),
    };
    let spec = serde_json::to_value(&migration.spec)
        .map_err(|e| unreadable(format!("the spec cannot be read: {e}")))?;
    let declarations = Declarations::from_spec(&spec).map_err(|e| unreadable(e.to_string()))?;
    let recorded = recorded(ledger);
    let context = Deployment::new(&declarations, &recorded, None);
    let report = validate(&declarations, &context, &Library);
    if !report.is_valid() {
        return Err(Invalid {
            lines: report.problems.iter().map(problem_line).collect(),
            problems: report.problems,
            warnings: report.warnings,
        });
    }
    Ok(Assessment {
        declarations,
        context,
        warnings: report.warnings,
    })
}

impl Assessment {
    /// Whether `print` is recorded.
    pub fn recorded(&self, print: &Footprint) -> bool {
        self.context.history.contains(print)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagehand_crds::MigrationSpec;
    use stagehand_crds::unversioned::{ActionDeclaration, StageActions, VersionWindow};

    fn migration(actions: Vec<ActionDeclaration>) -> Migration {
        Migration::new(
            "opendesk",
            MigrationSpec {
                release_version: "v1.18.0".into(),
                installed_release: Some("v1.17.3".into()),
                actions: StageActions {
                    pre: actions,
                    post: Vec::new(),
                },
                ..MigrationSpec::default()
            },
        )
    }

    fn declaration(id: &str, config: serde_json::Value) -> ActionDeclaration {
        ActionDeclaration {
            id: id.into(),
            tag: Some("v1.18.0".into()),
            run_mode: None,
            versions: VersionWindow {
                minimum: "v1.15".into(),
                from: "v1.15".into(),
                to: "v1.17".into(),
            },
            config: config.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn valid_declarations_carry_the_ledger_release() {
        let m = migration(vec![declaration(
            "workload_scale",
            serde_json::json!({"workload": {"kind": "StatefulSet", "name": "x", "replicas": 0}}),
        )]);
        let ledger = Ledger {
            last_migrated_release: Some("v1.16.2".into()),
            ..Ledger::default()
        };
        let a = assess(&m, &ledger).map_err(|e| e.message());
        assert_eq!(
            a.map(|a| a.context.last_migrated.map(|r| r.to_string())),
            Ok(Some("v1.16.2".into())),
            "the ledger's release wins over installedRelease"
        );
        let a = assess(&m, &Ledger::default()).map_err(|e| e.message());
        assert_eq!(
            a.map(|a| a.context.last_migrated.map(|r| r.to_string())),
            Ok(Some("v1.17.3".into())),
            "installedRelease while the ledger holds no release"
        );
    }

    #[test]
    fn problems_are_all_listed() {
        let m = migration(vec![
            declaration("scale_everything", serde_json::json!({})),
            declaration(
                "provisioning_drop_subscriptions",
                serde_json::json!({"subscriptions": ["ox-connector"]}),
            ),
        ]);
        let Err(invalid) = assess(&m, &Ledger::default()) else {
            panic!("must be invalid")
        };
        let codes: Vec<String> = invalid
            .problems
            .iter()
            .map(|p| p.code.to_string())
            .collect();
        assert_eq!(
            codes,
            ["UnknownAction", "MissingSecretFile"],
            "{}",
            invalid.message()
        );
        assert!(invalid.message().starts_with(
            "2 problem(s) in the declarations, nothing was executed: UnknownAction actions.pre[0]"
        ));
    }
}
