//! `stagehand crds`: prints the CRD manifests.

use std::io::Write;

use stagehand_crds::generate::{crds, to_yaml, v1alpha1_only_crds};

use super::output::{EXIT_OK, EXIT_USAGE};

/// Prints the current CRDs (or the v1alpha1-only ones) as YAML.
pub fn run(v1alpha1_only: bool) -> u8 {
    let rendered = if v1alpha1_only {
        v1alpha1_only_crds()
    } else {
        crds()
    }
    .and_then(|c| to_yaml(&c));
    match rendered {
        Ok(yaml) => {
            if std::io::stdout().write_all(yaml.as_bytes()).is_err() {
                return EXIT_USAGE;
            }
            EXIT_OK
        }
        Err(e) => {
            eprintln!("stagehand crds: {e}");
            EXIT_USAGE
        }
    }
}
