//! Declaration problems and warnings, with their codes (docs/design.md#problem-codes-and-reasons).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::vocabulary::Stage;

/// What is wrong with a declaration. Every code fails validation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ProblemCode {
    /// An action or skip entry without an `id`.
    MissingId,
    /// An `id` that is not in Stagehand's action library.
    UnknownAction,
    /// One of `minimum`, `from`, `to` is missing from `versions`.
    MissingVersionsKey,
    /// `versions` holds a key other than `minimum`, `from`, `to`.
    UnknownVersionsKey,
    /// A value that is not a release series (or a release, for `releaseVersion`,
    /// `installedRelease` and the last migrated release).
    InvalidVersion,
    /// `from` starts below `minimum`.
    FromBelowMinimum,
    /// `to` ends before `from` begins.
    ToBeforeFrom,
    /// The last migrated release is older than a declared `minimum` (mandatory upgrade path).
    BelowMinimum,
    /// An `actionsSkip` entry whose id the stage declares only under another tag.
    MistypedSkip,
    /// The action's `config` (or a declaration key) is not what the action accepts.
    InvalidConfig,
    /// An action reads a credential (or the object store's secret key) whose name
    /// `secretFiles` does not list.
    MissingSecretFile,
    /// An action hands work over between the stages but the Migration declares no
    /// `objectStore`.
    MissingObjectStore,
    /// The action that writes a handover object and the one that reads it name different
    /// `handover.objectKey`s.
    HandoverKeyMismatch,
    /// Only one half of a handover pair is opted out (e.g. the Functional Accounts export in
    /// `pre` but not the import in `post`): the migration would be half applied.
    HalfOptOut,
    /// Two declarations of one stage with the same footprint (id, tag and runMode): after the
    /// first succeeded, the second would be skipped as `FootprintRecorded` without running.
    /// Reported on the later one, field `tag`.
    DuplicateFootprint,
    /// An `actionsSkip` entry whose id its stage does not declare but the other stage does: it
    /// skips nothing, and the action it was meant for runs. Reported on the entry, field
    /// `actionsSkip.id`; the message names the stage that declares the id.
    SkipInWrongStage,
    /// An endpoint an action contacts (`udm.url`, `redis.host`, with its default applied) or
    /// the `objectStore.endpoint` is not allowed by the operator's `--allowed-endpoints`
    /// (docs/deploy.md#tenancy-and-the-threat-model). The message names the key, the host and
    /// the allowed patterns.
    EndpointNotAllowed,
}

/// Something worth knowing that does not fail validation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum WarningCode {
    /// An `actionsSkip` entry whose id the stage does not declare at all (an opt-out whose
    /// release is behind you).
    SkipMatchesNothing,
}

/// One finding: a problem or a warning. Keys that do not apply are null in JSON.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct Finding<C> {
    /// The problem or warning code.
    pub code: C,
    /// The stage the finding is in, when it belongs to one.
    pub stage: Option<Stage>,
    /// The position of the entry in its list (`actions.<stage>` or `actionsSkip.<stage>`).
    pub index: Option<usize>,
    /// The action id of the entry, when it has one.
    pub id: Option<String>,
    /// The field: relative to the entry (`versions.from`, `config.workload.kind`,
    /// `actionsSkip.tag`) or to the spec (`releaseVersion`).
    pub field: Option<String>,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

/// A finding that fails validation.
pub type Problem = Finding<ProblemCode>;
/// A finding that does not.
pub type Warning = Finding<WarningCode>;

impl<C> Finding<C> {
    /// A finding about the entry at `index` of `stage`.
    pub fn at(
        code: C,
        stage: Stage,
        index: usize,
        id: Option<&str>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            stage: Some(stage),
            index: Some(index),
            id: id.map(str::to_string),
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// A finding about a field of the spec (or status) itself.
    pub fn top(code: C, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            stage: None,
            index: None,
            id: None,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// Where the finding is, for humans: `actions.pre[2] (workload_scale) versions.from`.
    pub fn location(&self) -> String {
        let field = self.field.as_deref().unwrap_or("");
        let (Some(stage), Some(index)) = (self.stage, self.index) else {
            return field.to_string();
        };
        let (list, rest) = match field.strip_prefix("actionsSkip.") {
            Some(rest) => ("actionsSkip", rest),
            None => ("actions", field),
        };
        let mut out = format!("{list}.{stage}[{index}]");
        if let Some(id) = &self.id {
            out.push_str(&format!(" ({id})"));
        }
        if !rest.is_empty() {
            out.push(' ');
            out.push_str(rest);
        }
        out
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::fmt::Display for WarningCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
