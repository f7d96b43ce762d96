//! What the planner knows about a deployment: its last migrated release and its recorded
//! footprints, taken from the declarations, the recorded history and an override.

use crate::declarations::{Declarations, Recorded};
use crate::series::Release;
use crate::vocabulary::Footprint;

/// What the planner knows about the deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployment {
    /// The last migrated release: the recorded one, an override, or `installedRelease`.
    /// `None` is a fresh installation.
    pub last_migrated: Option<Release>,
    /// Every recorded footprint.
    pub history: Vec<Footprint>,
}

impl Deployment {
    /// The context of a Migration: `override_release` (the CLI's `--last-migrated`) wins over
    /// the recorded last migrated release, which wins over `installedRelease`.
    pub fn new(
        declarations: &Declarations,
        recorded: &Recorded,
        override_release: Option<Release>,
    ) -> Self {
        let last_migrated = override_release
            .or_else(|| recorded.last_migrated.clone())
            .or_else(|| declarations.installed_release.clone());
        Self {
            last_migrated,
            history: recorded.history.clone(),
        }
    }

    /// No recorded release and no `installedRelease`: runs execute no action.
    pub fn is_fresh_installation(&self) -> bool {
        self.last_migrated.is_none()
    }
}
