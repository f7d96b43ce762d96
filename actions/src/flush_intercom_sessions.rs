//! `flush_intercom_sessions`: deletes the Intercom Service's sessions (keys matching
//! `keyPattern`, walked with SCAN; never FLUSH).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::ConfigIssue;

use crate::ActionConfig;

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The Redis server holding the sessions.
    #[serde(default)]
    pub redis: Redis,
}

/// The Redis server, as the Intercom Service's `cache.intercomService` block configures it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Redis {
    /// Host name.
    #[serde(default = "Redis::default_host")]
    #[schemars(length(min = 1))]
    pub host: String,
    /// Port.
    #[serde(default = "Redis::default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// ACL user name; the password is the `redis-password` secret file.
    #[serde(default = "Redis::default_username")]
    pub username: String,
    /// Connect with TLS (the certificate is verified).
    #[serde(default)]
    pub tls: bool,
    /// The database number.
    #[serde(default)]
    pub database: u32,
    /// The keys to delete, as a Redis glob; it must start with a literal part.
    #[serde(default = "Redis::default_key_pattern")]
    #[schemars(length(min = 1))]
    pub key_pattern: String,
    /// Timeout of one request.
    #[serde(default = "Redis::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
}

impl Redis {
    fn default_host() -> String {
        "redis-headless".into()
    }
    fn default_port() -> u16 {
        6379
    }
    fn default_username() -> String {
        "default".into()
    }
    fn default_key_pattern() -> String {
        "sess:*".into()
    }
    fn default_timeout() -> u64 {
        30
    }
}

impl Default for Redis {
    fn default() -> Self {
        Self {
            host: Self::default_host(),
            port: Self::default_port(),
            username: Self::default_username(),
            tls: false,
            database: 0,
            key_pattern: Self::default_key_pattern(),
            request_timeout_seconds: Self::default_timeout(),
        }
    }
}

/// The literal prefix of a Redis glob: the characters before its first unescaped wildcard
/// (`*`, `?`, `[`), with escapes resolved.
pub fn literal_prefix(pattern: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' => break,
            '\\' => match chars.next() {
                Some(escaped) => out.push(escaped),
                None => break,
            },
            other => out.push(other),
        }
    }
    out
}

impl ActionConfig for Config {
    const ID: &'static str = "flush_intercom_sessions";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        if literal_prefix(&self.redis.key_pattern).is_empty() {
            vec![ConfigIssue {
                path: "redis.keyPattern".into(),
                message: format!(
                    "{:?} has no literal part before its first wildcard, so it could match keys of other components sharing the database: start it with a fixed prefix such as \"sess:\"",
                    self.redis.key_pattern
                ),
            }]
        } else {
            Vec::new()
        }
    }
}
