//! What Synapse's `homeserver.yaml` says about the action's identity (pure): where the
//! registration shared secret is (inline `registration_shared_secret`, else the file named by
//! `registration_shared_secret_path`, Synapse's own order) and whether authentication is
//! delegated to the Matrix Authentication Service (`experimental_features.msc3861.enabled`,
//! `matrix_authentication_service.enabled`), where the action must not act.

use serde_norway::Value;

use crate::action::{ActionError, SecretValue};

/// Where the shared secret is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// In the file itself.
    Inline(SecretValue),
    /// In the file at this path (in the same container).
    File(String),
}

/// What the configuration says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Homeserver {
    /// The shared secret, when one is configured.
    pub secret: Option<SecretSource>,
    /// Why authentication is delegated (the key that says so), when it is.
    pub delegated: Option<String>,
}

fn enabled(root: &Value, path: &[&str]) -> bool {
    let mut at = root;
    for key in path {
        match at.get(*key) {
            Some(v) => at = v,
            None => return false,
        }
    }
    matches!(at, Value::Bool(true))
}

/// Reads `text` (the file at `path`, for messages). The secret's value never appears in an
/// error: a YAML error quotes no value.
pub fn read(text: &str, path: &str) -> Result<Homeserver, ActionError> {
    let root: Value = serde_norway::from_str(text).map_err(|e| {
        ActionError::InvalidAnswer(format!(
            "Synapse's configuration {path} is not YAML (line {}): set synapse.configPath to homeserver.yaml",
            e.location().map_or(0, |l| l.line())
        ))
    })?;
    if !root.is_mapping() {
        return Err(ActionError::InvalidAnswer(format!(
            "Synapse's configuration {path} is not a YAML mapping: set synapse.configPath to homeserver.yaml"
        )));
    }
    let delegated = if enabled(&root, &["experimental_features", "msc3861", "enabled"]) {
        Some("experimental_features.msc3861.enabled".to_string())
    } else if enabled(&root, &["matrix_authentication_service", "enabled"]) {
        Some("matrix_authentication_service.enabled".to_string())
    } else {
        None
    };
    let text_of = |key: &str| {
        root.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let secret = match text_of("registration_shared_secret") {
        Some(inline) => Some(SecretSource::Inline(SecretValue::new(inline))),
        None => text_of("registration_shared_secret_path").map(SecretSource::File),
    };
    Ok(Homeserver { secret, delegated })
}

/// The secret file's content as Synapse reads it (surrounding whitespace stripped); an empty
/// file is no secret.
pub fn secret_from_file(content: &[u8]) -> Option<SecretValue> {
    let text = String::from_utf8_lossy(content);
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| SecretValue::new(trimmed))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const PATH: &str = "/config/homeserver.yaml";

    #[test]
    fn the_inline_secret_wins_over_the_path_as_in_synapse() {
        let h = read(
            "server_name: example.org\nregistration_shared_secret: s3cr3t\nregistration_shared_secret_path: /data/secret\n",
            PATH,
        )
        .unwrap();
        assert_eq!(
            h.secret,
            Some(SecretSource::Inline(SecretValue::new("s3cr3t")))
        );
        assert_eq!(h.delegated, None);
        let h = read("registration_shared_secret_path: /data/secret\n", PATH).unwrap();
        assert_eq!(h.secret, Some(SecretSource::File("/data/secret".into())));
        let h = read("registration_shared_secret: ''\n", PATH).unwrap();
        assert_eq!(h.secret, None);
        assert_eq!(read("server_name: x\n", PATH).unwrap().secret, None);
    }

    #[test]
    fn msc3861_or_mas_enabled_is_delegation() {
        let h = read(
            "experimental_features:\n  msc3861:\n    enabled: true\n",
            PATH,
        )
        .unwrap();
        assert_eq!(
            h.delegated.as_deref(),
            Some("experimental_features.msc3861.enabled")
        );
        let h = read("matrix_authentication_service:\n  enabled: true\n", PATH).unwrap();
        assert_eq!(
            h.delegated.as_deref(),
            Some("matrix_authentication_service.enabled")
        );
        let h = read(
            "experimental_features:\n  msc3861:\n    enabled: false\n",
            PATH,
        )
        .unwrap();
        assert_eq!(h.delegated, None);
    }

    #[test]
    fn unreadable_files_are_named_without_their_content() {
        let e = read("registration_shared_secret: [topsecret\n", PATH).unwrap_err();
        assert!(matches!(e, ActionError::InvalidAnswer(_)), "{e:?}");
        assert!(e.to_string().contains(PATH), "{e}");
        assert!(!e.to_string().contains("topsecret"), "{e}");
        assert!(read("- a list\n", PATH).is_err());
        assert_eq!(secret_from_file(b"  abc\n"), Some(SecretValue::new("abc")));
        assert_eq!(secret_from_file(b"\n"), None);
    }
}
