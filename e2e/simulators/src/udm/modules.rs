//! The UDM modules the simulator serves and their rules, from the real handlers: `users/user`
//! and `groups/group` (UCS), `oxmail/functional_account`, `oxmail/shared_account` and
//! `oxmail/shared_account_permission` (`univention/ox-connector`, `udm/handlers/oxmail/*.py`,
//! containers from `udm/udm-data-loader/30-ox-connector.yaml`).

use serde_json::{Value, json};

/// One UDM module's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleDef {
    /// The module name, such as `users/user`.
    pub name: &'static str,
    /// The default container below the LDAP base (joined with `,<base>`).
    pub container: &'static str,
    /// The LDAP attribute of the RDN (`uid` for users, `cn` for the rest).
    pub rdn_attr: &'static str,
    /// The identifying property whose value is the RDN value and the object's `id`.
    pub naming: &'static str,
    /// The objectClasses (for `(objectClass=…)` in filters).
    pub object_classes: &'static [&'static str],
    /// Properties a create must give (`The property "X" is required.`).
    pub required: &'static [&'static str],
    /// Properties with `may_change=0` besides `univentionObjectIdentifier` (every module).
    pub immutable: &'static [&'static str],
    /// Properties stored lower-cased (`ListToLowerString`).
    pub lowercase: &'static [&'static str],
    /// Properties with an integer syntax: accepted as a number or a numeric string, returned
    /// as a JSON number.
    pub integers: &'static [&'static str],
    /// Multivalue properties whose values are `[a, b]` pairs (the shared account links).
    pub pairs: &'static [&'static str],
    /// Multivalue properties (a single value is wrapped in a list).
    pub lists: &'static [&'static str],
    /// Password properties: stored, but returned as `null`.
    pub passwords: &'static [&'static str],
    /// The properties the module has; `None` accepts any name (the UCS modules carry many
    /// extended attributes).
    pub known: Option<&'static [&'static str]>,
    /// LDAP attribute names a filter may use instead of a property (lower-case attribute,
    /// property).
    pub ldap_aliases: &'static [(&'static str, &'static str)],
    /// The module's title, as in `The <title> module has no property X.`.
    pub title: &'static str,
}

/// `users/user`.
pub const USERS_USER: ModuleDef = ModuleDef {
    name: "users/user",
    container: "cn=users",
    rdn_attr: "uid",
    naming: "username",
    object_classes: &[
        "top",
        "person",
        "univentionPWHistory",
        "posixAccount",
        "shadowAccount",
        "univentionMail",
        "sambaSamAccount",
        "krb5Principal",
        "krb5KDCEntry",
        "inetOrgPerson",
        "organizationalPerson",
        "univentionObject",
        "oxUserObject",
    ],
    required: &["username", "lastname", "password"],
    immutable: &[],
    lowercase: &["mailPrimaryAddress"],
    integers: &["oxContext"],
    pairs: &[],
    lists: &[
        "groups",
        "mailAlternativeAddress",
        "e-mail",
        "oxDeputyPermissionGivenTo",
    ],
    passwords: &["password"],
    known: None,
    ldap_aliases: &[
        ("uid", "username"),
        ("sn", "lastname"),
        ("givenname", "firstname"),
        ("mailprimaryaddress", "mailPrimaryAddress"),
        ("oxcontextidnum", "oxContext"),
        ("isoxuser", "isOxUser"),
        ("displayname", "displayName"),
        ("univentionobjectidentifier", "univentionObjectIdentifier"),
    ],
    title: "Users: User",
};

/// `groups/group`.
pub const GROUPS_GROUP: ModuleDef = ModuleDef {
    name: "groups/group",
    container: "cn=groups",
    rdn_attr: "cn",
    naming: "name",
    object_classes: &[
        "top",
        "posixGroup",
        "univentionGroup",
        "sambaGroupMapping",
        "univentionObject",
        "oxGroup",
    ],
    required: &["name"],
    immutable: &[],
    lowercase: &[],
    integers: &["oxContext"],
    pairs: &[],
    lists: &["users", "nestedGroup", "memberOf", "hosts"],
    passwords: &[],
    known: None,
    ldap_aliases: &[
        ("cn", "name"),
        ("oxcontextidnum", "oxContext"),
        ("isoxgroup", "isOxGroup"),
        ("univentionobjectidentifier", "univentionObjectIdentifier"),
    ],
    title: "Groups: Group",
};

/// `oxmail/functional_account`.
pub const FUNCTIONAL_ACCOUNT: ModuleDef = ModuleDef {
    name: "oxmail/functional_account",
    container: "cn=functional_accounts,cn=open-xchange",
    rdn_attr: "cn",
    naming: "name",
    object_classes: &["top", "oxFunctionalAccount", "univentionObject"],
    required: &["name", "mailPrimaryAddress"],
    immutable: &["name", "mailPrimaryAddress"],
    lowercase: &["mailPrimaryAddress"],
    integers: &["oxQuota", "oxContext"],
    pairs: &[],
    lists: &["users", "groups"],
    passwords: &[],
    known: Some(&[
        "name",
        "mailPrimaryAddress",
        "oxQuota",
        "personal",
        "users",
        "groups",
        "oxContext",
        "univentionObjectIdentifier",
        "objectFlag",
    ]),
    ldap_aliases: &[
        ("cn", "name"),
        ("mailprimaryaddress", "mailPrimaryAddress"),
        ("oxpersonal", "personal"),
        ("oxcontextidnum", "oxContext"),
        ("univentionobjectidentifier", "univentionObjectIdentifier"),
    ],
    title: "OX Mail: Functional Mailbox",
};

/// `oxmail/shared_account`.
pub const SHARED_ACCOUNT: ModuleDef = ModuleDef {
    name: "oxmail/shared_account",
    container: "cn=shared_accounts,cn=open-xchange",
    rdn_attr: "cn",
    naming: "name",
    object_classes: &["top", "oxSharedAccount", "univentionObject"],
    required: &["name", "displayName", "oxContext", "mailPrimaryAddress"],
    immutable: &["oxContext"],
    lowercase: &["mailPrimaryAddress"],
    integers: &["oxContext"],
    pairs: &["users", "groups"],
    lists: &["users", "groups"],
    passwords: &[],
    known: Some(&[
        "name",
        "displayName",
        "oxContext",
        "mailPrimaryAddress",
        "users",
        "groups",
        "univentionObjectIdentifier",
        "objectFlag",
    ]),
    ldap_aliases: &[
        ("cn", "name"),
        ("displayname", "displayName"),
        ("mailprimaryaddress", "mailPrimaryAddress"),
        ("oxcontextidnum", "oxContext"),
        ("oxlinkusers", "users"),
        ("oxlinkgroups", "groups"),
        ("univentionobjectidentifier", "univentionObjectIdentifier"),
    ],
    title: "OX Mail: Shared Account",
};

/// `oxmail/shared_account_permission`.
pub const SHARED_ACCOUNT_PERMISSION: ModuleDef = ModuleDef {
    name: "oxmail/shared_account_permission",
    container: "cn=shared_account_permissions,cn=open-xchange",
    rdn_attr: "cn",
    naming: "name",
    object_classes: &["top", "oxSharedAccountPermission", "univentionObject"],
    required: &["name", "displayName"],
    immutable: &[],
    lowercase: &[],
    integers: &[],
    pairs: &[],
    lists: &[],
    passwords: &[],
    known: Some(&[
        "name",
        "displayName",
        "mail",
        "calendar",
        "sendAs",
        "sendOnBehalf",
        "snippets",
        "writeSnippets",
        "manageSieve",
        "writeJSlob",
        "univentionObjectIdentifier",
        "objectFlag",
    ]),
    ldap_aliases: &[
        ("cn", "name"),
        ("displayname", "displayName"),
        ("univentionobjectidentifier", "univentionObjectIdentifier"),
    ],
    title: "OX Mail: Shared Account Permission",
};

/// Every module the simulator serves.
pub const MODULES: &[ModuleDef] = &[
    USERS_USER,
    GROUPS_GROUP,
    FUNCTIONAL_ACCOUNT,
    SHARED_ACCOUNT,
    SHARED_ACCOUNT_PERMISSION,
];

/// The module of that name.
pub fn module(name: &str) -> Option<&'static ModuleDef> {
    MODULES.iter().find(|m| m.name == name)
}

impl ModuleDef {
    /// The default container's DN under `base`.
    pub fn default_container(&self, base: &str) -> String {
        format!("{},{base}", self.container)
    }

    /// Whether the module has the property.
    pub fn has_property(&self, name: &str) -> bool {
        match self.known {
            Some(known) => known.contains(&name),
            None => true,
        }
    }

    /// Whether the property may not change once set.
    pub fn is_immutable(&self, name: &str) -> bool {
        name == "univentionObjectIdentifier" || self.immutable.contains(&name)
    }

    /// The `options` of the representation.
    pub fn options(&self) -> Value {
        match self.name {
            "users/user" => json!({"pki": false}),
            "groups/group" => json!({}),
            _ => json!({"default": true}),
        }
    }

    /// The `policies` of the representation (with every property requested).
    pub fn policies(&self) -> Value {
        match self.name {
            "users/user" => json!({
                "policies/desktop": [],
                "policies/pwhistory": [],
                "policies/umc": [],
            }),
            "groups/group" => json!({"policies/umc": []}),
            _ => json!({}),
        }
    }
}
