//! `provisioning_drop_subscriptions`: deletes the named Provisioning API subscriptions so that
//! their components register them again with the release's topics.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;

/// The action's config. `subscriptions` is required: a default would drop a subscription the
/// declaration did not name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The Provisioning API.
    #[serde(default)]
    pub provisioning: Provisioning,
    /// The names of the subscriptions to drop (e.g. `ox-connector`).
    #[schemars(length(min = 1), inner(length(min = 1)))]
    pub subscriptions: Vec<SubscriptionName>,
}

/// A subscription name.
pub type SubscriptionName = String;

/// The Provisioning API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provisioning {
    /// The API's base URL.
    #[serde(default = "Provisioning::default_url")]
    #[schemars(length(min = 1))]
    pub url: String,
    /// The admin user (HTTP basic).
    #[serde(default = "Provisioning::default_username")]
    #[schemars(length(min = 1))]
    pub username: String,
    /// Timeout of one request.
    #[serde(default = "Provisioning::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
}

impl Provisioning {
    fn default_url() -> String {
        "http://ums-provisioning-api/v1".into()
    }
    fn default_username() -> String {
        "admin".into()
    }
    fn default_timeout() -> u64 {
        30
    }
}

impl Default for Provisioning {
    fn default() -> Self {
        Self {
            url: Self::default_url(),
            username: Self::default_username(),
            request_timeout_seconds: Self::default_timeout(),
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "provisioning_drop_subscriptions";
}
