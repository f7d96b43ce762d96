//! Reading a Migration manifest file for the offline commands.

use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use stagehand_actions::Library;
use stagehand_config::{
    Declarations, Deployment, ManifestError, Recorded, Release, Report, read_manifest, validate,
};

use super::output::EXIT_USAGE;

/// Why a manifest could not be read (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not YAML (or JSON).
    #[error("{file}: not valid YAML: {source}")]
    Yaml {
        /// The file.
        file: String,
        /// Why.
        source: serde_norway::Error,
    },
    /// A document cannot be represented as JSON (e.g. a non-string mapping key).
    #[error("{file}: document {index} cannot be read as a Kubernetes object: {message}")]
    NotJson {
        /// The file.
        file: String,
        /// The document's position (from 1).
        index: usize,
        /// Why.
        message: String,
    },
    /// The file holds no Migration, or more than one.
    #[error(
        "{file}: expected exactly one Migration (stagehand.dev/v1beta1 or v1alpha1), found {found}"
    )]
    Count {
        /// The file.
        file: String,
        /// How many were found.
        found: usize,
    },
    /// The Migration has the wrong shape.
    #[error("{file}: {source}")]
    Shape {
        /// The file.
        file: String,
        /// Why.
        source: ManifestError,
    },
    /// `--last-migrated` is not a release.
    #[error("--last-migrated {source}")]
    LastMigrated {
        /// Why.
        source: stagehand_config::VersionError,
    },
}

/// A Migration read from a file, with the deployment context it implies.
#[derive(Debug)]
pub struct Loaded {
    /// How to name the file in messages.
    pub file: String,
    /// The declarations and the problems met reading them.
    pub declarations: Declarations,
    /// The deployment context (last migrated release, history).
    pub context: Deployment,
}

/// [`load`], then the declarations validated against Stagehand's action library, for
/// `stagehand <command>`: a file it cannot read is said on stderr and answered with exit code
/// 2 (usage error or unreadable input).
pub fn load_validated(
    command: &str,
    path: &Path,
    last_migrated: Option<&str>,
) -> Result<(Loaded, Report), u8> {
    match load(path, last_migrated) {
        Ok(loaded) => {
            let report = validate(&loaded.declarations, &loaded.context, &Library);
            Ok((loaded, report))
        }
        Err(e) => {
            eprintln!("stagehand {command}: {e}");
            Err(EXIT_USAGE)
        }
    }
}

/// Reads `path` (`-` for stdin): exactly one Migration among its documents.
pub fn load(path: &Path, last_migrated: Option<&str>) -> Result<Loaded, ReadError> {
    let file = path.display().to_string();
    let text = if file == "-" {
        let mut buf = String::new();
        std::io::stdin()
            .read_to_string(&mut buf)
            .map_err(|source| ReadError::Io {
                file: file.clone(),
                source,
            })?;
        buf
    } else {
        std::fs::read_to_string(path).map_err(|source| ReadError::Io {
            file: file.clone(),
            source,
        })?
    };
    let override_release = last_migrated
        .map(Release::parse)
        .transpose()
        .map_err(|source| ReadError::LastMigrated { source })?;
    let mut migrations = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(&text).enumerate() {
        let yaml = serde_norway::Value::deserialize(doc).map_err(|source| ReadError::Yaml {
            file: file.clone(),
            source,
        })?;
        if yaml.is_null() {
            continue;
        }
        let json: Value = serde_json::to_value(&yaml).map_err(|e| ReadError::NotJson {
            file: file.clone(),
            index: i + 1,
            message: e.to_string(),
        })?;
        if json.get("kind").and_then(Value::as_str) == Some("Migration") {
            migrations.push(json);
        }
    }
    if migrations.len() != 1 {
        return Err(ReadError::Count {
            file,
            found: migrations.len(),
        });
    }
    let (declarations, recorded): (Declarations, Recorded) = read_manifest(&migrations[0])
        .map_err(|source| ReadError::Shape {
            file: file.clone(),
            source,
        })?;
    let context = Deployment::new(&declarations, &recorded, override_release);
    Ok(Loaded {
        file,
        declarations,
        context,
    })
}
