//! Fixtures the unit tests share: a `MigrationRun` of the Migration `opendesk` and its
//! conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use stagehand_config::Stage;
use stagehand_crds::{MigrationRun, MigrationRunSpec};

/// A run of the Migration `opendesk` for `stage` of `release`, with no status.
pub(crate) fn migration_run(name: &str, stage: Stage, release: &str) -> MigrationRun {
    MigrationRun::new(
        name,
        MigrationRunSpec {
            migration_ref: "opendesk".into(),
            stage,
            release: release.into(),
            ..MigrationRunSpec::default()
        },
    )
}

/// A condition of generation 1, `True` or `False`, set at the epoch.
pub(crate) fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(1),
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}
