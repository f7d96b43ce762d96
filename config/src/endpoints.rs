//! The network endpoints a run contacts and the operator's allow-list of them
//! (`--allowed-endpoints`, docs/deploy.md#tenancy-and-the-threat-model). Pure: the actions say
//! which endpoints their config names ([`ActionCatalog::endpoints`]), this module decides
//! whether the operator allows them; a refused one is the declaration problem
//! [`ProblemCode::EndpointNotAllowed`] and nothing of the run runs.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::declarations::Declarations;
use crate::problems::{Problem, ProblemCode};
use crate::vocabulary::{ActionCatalog, Stage};

/// A network endpoint an action contacts: the config key that names it (`udm.url`,
/// `redis.host`), its host and its port (the URL's, else its scheme's default; `None` when
/// neither says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The config key, relative to the action's `config` (or to the spec: `objectStore.endpoint`).
    pub key: String,
    /// The host: a name or an IP address, as written (compared case-insensitively).
    pub host: String,
    /// The port, when known.
    pub port: Option<u16>,
}

impl Endpoint {
    /// The endpoint `host:port` named by `key`.
    pub fn new(key: impl Into<String>, host: impl Into<String>, port: Option<u16>) -> Self {
        Self {
            key: key.into(),
            host: host.into(),
            port,
        }
    }

    /// The endpoint of the URL `url` (`https://udm.example.org/univention/udm`,
    /// `ldap://ldap:389`); the port is the URL's or its scheme's default. `None` for what is no
    /// network endpoint (an `ldapi://` socket) or a URL without a host.
    pub fn from_url(key: impl Into<String>, url: &str) -> Option<Self> {
        let url = url.trim();
        let (scheme, rest) = match url.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None => (String::new(), url),
        };
        if scheme == "ldapi" || scheme == "unix" || scheme == "file" {
            return None;
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = split_host_port(authority).ok()?;
        if host.is_empty() {
            return None;
        }
        let port = port.or(match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            "ldap" => Some(389),
            "ldaps" => Some(636),
            "redis" | "rediss" => Some(6379),
            "postgres" | "postgresql" => Some(5432),
            _ => None,
        });
        Some(Self::new(key, host, port))
    }

    /// `host` or `host:port` (`[v6]:port`), as a problem names it.
    pub fn address(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(port) => format!("{host}:{port}"),
            None => host,
        }
    }
}

/// Why an `--allowed-endpoints` pattern cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointPatternError {
    /// The list names no pattern at all.
    #[error(
        "--allowed-endpoints names no pattern: list host patterns separated by commas (ldap.example.org, *.example.org, 10.0.0.5:389), or leave the flag out to allow every endpoint"
    )]
    Empty,
    /// One pattern is malformed.
    #[error(
        "--allowed-endpoints pattern {pattern:?}: {reason} (a pattern is a host, a host below a leading '*.' label, or an IP address, each optionally with ':port')"
    )]
    Invalid {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// This host exactly (a name, lowercased, without a trailing dot).
    Name(String),
    /// This IP address exactly.
    Ip(IpAddr),
    /// A name with one or more labels before this suffix (stored as `.example.org`).
    Below(String),
}

/// One allowed host pattern: `ldap.example.org`, `*.example.org` (any name one or more labels
/// below it, not `example.org` itself), an IP address; each optionally with `:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPattern {
    written: String,
    host: HostPattern,
    port: Option<u16>,
}

impl fmt::Display for EndpointPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

impl FromStr for EndpointPattern {
    type Err = EndpointPatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let written = s.trim();
        let invalid = |reason: &str| EndpointPatternError::Invalid {
            pattern: written.to_string(),
            reason: reason.to_string(),
        };
        let (host, port) = split_host_port(written).map_err(|reason| invalid(&reason))?;
        if host.is_empty() {
            return Err(invalid("it names no host"));
        }
        let host = if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Ip(ip)
        } else {
            let name = normalize(&host);
            let (below, rest) = match name.strip_prefix("*.") {
                Some(rest) => (true, rest.to_string()),
                None => (false, name.clone()),
            };
            if rest.is_empty() || rest.contains('*') {
                return Err(invalid(
                    "'*' may only be the whole first label, followed by a domain ('*.example.org')",
                ));
            }
            if rest
                .split('.')
                .any(|label| label.is_empty() || !label.chars().all(host_char))
            {
                return Err(invalid("it is not a host name"));
            }
            if below {
                HostPattern::Below(format!(".{rest}"))
            } else {
                HostPattern::Name(rest)
            }
        };
        Ok(Self {
            written: written.to_string(),
            host,
            port,
        })
    }
}

impl EndpointPattern {
    /// Whether `endpoint` is allowed by this pattern: the host matches (a wildcard matches
    /// names only, never an IP address) and, when the pattern names a port, the endpoint's
    /// port is that one.
    pub fn matches(&self, endpoint: &Endpoint) -> bool {
        if self.port.is_some() && self.port != endpoint.port {
            return false;
        }
        let host = endpoint.host.trim_start_matches('[').trim_end_matches(']');
        match (&self.host, host.parse::<IpAddr>()) {
            (HostPattern::Ip(ip), Ok(other)) => *ip == other,
            (HostPattern::Ip(_), Err(_)) | (_, Ok(_)) => false,
            (HostPattern::Name(name), Err(_)) => normalize(host) == *name,
            (HostPattern::Below(suffix), Err(_)) => {
                let host = normalize(host);
                host.len() > suffix.len()
                    && host.ends_with(suffix.as_str())
                    && !host[..host.len() - suffix.len()].ends_with('.')
            }
        }
    }
}

/// The endpoints the operator allows runs to contact (`--allowed-endpoints`): every endpoint
/// when no list is given (the default), else those matching one of the patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedEndpoints(Option<Vec<EndpointPattern>>);

impl AllowedEndpoints {
    /// Every endpoint allowed (no `--allowed-endpoints`).
    pub fn everything() -> Self {
        Self(None)
    }

    /// Reads a comma-separated list of patterns; empty entries are ignored, an empty list is
    /// an error.
    pub fn parse(list: &str) -> Result<Self, EndpointPatternError> {
        let patterns = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(EndpointPattern::from_str)
            .collect::<Result<Vec<_>, _>>()?;
        if patterns.is_empty() {
            return Err(EndpointPatternError::Empty);
        }
        Ok(Self(Some(patterns)))
    }

    /// Whether every endpoint is allowed.
    pub fn is_everything(&self) -> bool {
        self.0.is_none()
    }

    /// Whether `endpoint` may be contacted.
    pub fn allows(&self, endpoint: &Endpoint) -> bool {
        match &self.0 {
            None => true,
            Some(patterns) => patterns.iter().any(|p| p.matches(endpoint)),
        }
    }

    /// The patterns, comma-separated, as a problem names them.
    pub fn describe(&self) -> String {
        match &self.0 {
            None => "every endpoint".to_string(),
            Some(patterns) => patterns
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The `EndpointNotAllowed` problems of `declarations`: every endpoint a declared action
/// names (with its defaults, `namespace` the Migration's) that `allowed` refuses, and the
/// `objectStore.endpoint` (`object_store_endpoint`, when declared) if refused, on each action
/// that hands work over through it (the store is contacted by those only). Nothing when every
/// endpoint is allowed.
pub fn endpoint_problems(
    declarations: &Declarations,
    object_store_endpoint: Option<&str>,
    catalog: &dyn ActionCatalog,
    namespace: &str,
    allowed: &AllowedEndpoints,
) -> Vec<Problem> {
    if allowed.is_everything() {
        return Vec::new();
    }
    let refused = |endpoint: &Endpoint| {
        format!(
            "the endpoint {} ({}) is not allowed by the operator's --allowed-endpoints ({}): name an allowed host, or ask the operator's administrator to allow it",
            endpoint.address(),
            endpoint.key,
            allowed.describe()
        )
    };
    let store =
        object_store_endpoint.and_then(|url| Endpoint::from_url("objectStore.endpoint", url));
    let mut problems = Vec::new();
    for stage in Stage::ALL {
        for d in &declarations.stage(stage).actions {
            let Some(id) = d.id.as_deref() else { continue };
            let mut refused_here = |endpoint: &Endpoint, field: String, message: String| {
                if !allowed.allows(endpoint) {
                    problems.push(Problem::at(
                        ProblemCode::EndpointNotAllowed,
                        stage,
                        d.index,
                        Some(id),
                        field,
                        message,
                    ));
                }
            };
            for endpoint in catalog.endpoints(id, &d.config, namespace) {
                refused_here(
                    &endpoint,
                    format!("config.{}", endpoint.key),
                    refused(&endpoint),
                );
            }
            // The store is contacted by the actions that hand work over, and only by them.
            if let Some(endpoint) = &store
                && catalog.needs(id, &d.config).handover.is_some()
            {
                refused_here(
                    endpoint,
                    "objectStore.endpoint".to_string(),
                    format!(
                        "{} (the Migration's object store, which this action's handover uses)",
                        refused(endpoint)
                    ),
                );
            }
        }
    }
    problems
}

fn host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// `host[:port]`, `[v6][:port]` or a bare IPv6 address, split.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let read_port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("{p:?} is not a port (1-65535)"))
            .and_then(|port| {
                if port == 0 {
                    Err("port 0 is no port".to_string())
                } else {
                    Ok(port)
                }
            })
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "an IPv6 address in '[' lacks its ']'".to_string())?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(read_port(p)?),
            None if after.is_empty() => None,
            None => return Err(format!("{after:?} follows the address")),
        };
        return Ok((host.to_string(), port));
    }
    if s.matches(':').count() > 1 {
        return Ok((s.to_string(), None));
    }
    match s.split_once(':') {
        Some((host, p)) => Ok((host.to_string(), Some(read_port(p)?))),
        None => Ok((s.to_string(), None)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    fn allowed(list: &str) -> AllowedEndpoints {
        AllowedEndpoints::parse(list).expect("patterns")
    }

    fn at(host: &str, port: Option<u16>) -> Endpoint {
        Endpoint::new("udm.url", host, port)
    }

    #[test]
    fn exact_hosts_match_case_insensitively_and_nothing_else() {
        let a = allowed("LDAP.example.org");
        assert!(a.allows(&at("ldap.example.org", Some(389))));
        assert!(a.allows(&at("Ldap.Example.Org.", None)));
        assert!(!a.allows(&at("ldap.example.org.evil.test", None)));
        assert!(!a.allows(&at("x.ldap.example.org", None)));
        assert!(!a.allows(&at("example.org", None)));
    }

    #[test]
    fn a_wildcard_matches_names_below_not_the_apex_nor_a_lookalike() {
        let a = allowed("*.example.org");
        assert!(a.allows(&at("ldap.example.org", None)));
        assert!(a.allows(&at("a.b.EXAMPLE.org", None)));
        assert!(!a.allows(&at("example.org", None)));
        assert!(!a.allows(&at("badexample.org", None)));
        assert!(!a.allows(&at("ldap.example.org.test", None)));
    }

    #[test]
    fn ports_restrict_when_given_and_ips_match_exactly() {
        let a = allowed("*.allowed.test:443, 10.0.0.5, [::1]:8080");
        assert!(a.allows(&at("udm.allowed.test", Some(443))));
        assert!(!a.allows(&at("udm.allowed.test", Some(80))));
        assert!(!a.allows(&at("udm.allowed.test", None)));
        assert!(a.allows(&at("10.0.0.5", Some(1))));
        assert!(!a.allows(&at("10.0.0.50", None)));
        assert!(a.allows(&at("::1", Some(8080))));
        assert!(a.allows(&at("0:0::1", Some(8080))));
        assert!(!a.allows(&at("::1", Some(80))));
        // A wildcard never matches an address.
        assert!(!allowed("*.0.0.1").allows(&at("127.0.0.1", None)));
    }

    #[test]
    fn no_list_allows_everything_and_bad_patterns_are_refused() {
        assert!(AllowedEndpoints::everything().allows(&at("anything", None)));
        assert_eq!(
            AllowedEndpoints::parse(" , "),
            Err(EndpointPatternError::Empty)
        );
        for bad in [
            "*",
            "*.",
            "a.*.org",
            "ex ample.org",
            "host:0",
            "host:x",
            "[::1",
            ":80",
        ] {
            assert!(
                AllowedEndpoints::parse(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn urls_give_their_host_and_port_or_the_scheme_default() {
        let e = |u: &str| Endpoint::from_url("k", u).map(|e| (e.host, e.port));
        assert_eq!(
            e("https://user:pw@udm.example.org/univention/udm/"),
            Some(("udm.example.org".into(), Some(443)))
        );
        assert_eq!(e("ldap://ldap:1389"), Some(("ldap".into(), Some(1389))));
        assert_eq!(e("ldaps://ldap"), Some(("ldap".into(), Some(636))));
        assert_eq!(e("http://[::1]:9000"), Some(("::1".into(), Some(9000))));
        assert_eq!(e("ldapi:///run/slapd/ldapi"), None);
        assert_eq!(e("http:///path"), None);
    }

    struct Catalog;

    impl ActionCatalog for Catalog {
        fn config_issues(
            &self,
            _id: &str,
            _config: &serde_json::Value,
        ) -> Option<Vec<crate::ConfigIssue>> {
            Some(Vec::new())
        }

        fn needs(&self, id: &str, _config: &serde_json::Value) -> crate::Needs {
            crate::Needs {
                secret_files: Vec::new(),
                handover: (id == "export").then(|| crate::Handover {
                    object_key: "k".into(),
                    role: crate::HandoverRole::Writes,
                }),
            }
        }

        fn endpoints(
            &self,
            _id: &str,
            config: &serde_json::Value,
            namespace: &str,
        ) -> Vec<Endpoint> {
            let url = config["url"]
                .as_str()
                .map_or(format!("http://svc.{namespace}.svc"), str::to_string);
            Endpoint::from_url("api.url", &url).into_iter().collect()
        }
    }

    #[test]
    fn refused_endpoints_are_problems_of_the_action_naming_them_and_of_the_store_s_users() {
        let spec = serde_json::json!({
            "releaseVersion": "v1.18.0",
            "objectStore": {"endpoint": "https://s3.elsewhere.test"},
            "actions": {
                "pre": [
                    {"id": "plain", "tag": "v1.18.0", "versions": {"minimum": "v1.15", "from": "v1.15", "to": "v1.17"},
                     "config": {"url": "https://api.allowed.test"}},
                    {"id": "export", "tag": "v1.18.0", "versions": {"minimum": "v1.15", "from": "v1.15", "to": "v1.17"},
                     "config": {}},
                ],
            },
        });
        let declarations = Declarations::from_spec(&spec).expect("declarations");
        let problems = |list: &str| {
            endpoint_problems(
                &declarations,
                Some("https://s3.elsewhere.test"),
                &Catalog,
                "ns",
                &allowed(list),
            )
        };
        let found = problems("*.allowed.test");
        let summary: Vec<_> = found
            .iter()
            .map(|p| (p.code, p.index, p.id.as_deref(), p.field.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    ProblemCode::EndpointNotAllowed,
                    Some(1),
                    Some("export"),
                    Some("config.api.url")
                ),
                (
                    ProblemCode::EndpointNotAllowed,
                    Some(1),
                    Some("export"),
                    Some("objectStore.endpoint")
                ),
            ]
        );
        assert!(
            found[0].message.contains("svc.ns.svc:80 (api.url)"),
            "{}",
            found[0].message
        );
        assert!(
            found[0].message.contains("(*.allowed.test)"),
            "{}",
            found[0].message
        );
        assert!(
            found[1].message.contains("s3.elsewhere.test:443"),
            "{}",
            found[1].message
        );
        assert!(problems("*.allowed.test, *.svc, s3.elsewhere.test").is_empty());
        assert!(
            endpoint_problems(
                &declarations,
                None,
                &Catalog,
                "ns",
                &AllowedEndpoints::everything()
            )
            .is_empty()
        );
    }

    proptest! {
        #[test]
        fn a_wildcard_matches_exactly_the_names_strictly_below_it(
            labels in prop::collection::vec("[a-z0-9][a-z0-9-]{0,8}", 0..4),
            domain in "[a-z]{1,8}\\.[a-z]{2,4}",
            upper in any::<bool>(),
        ) {
            let host = labels.iter().map(|l| format!("{l}.")).collect::<String>() + &domain;
            let host = if upper { host.to_ascii_uppercase() } else { host };
            let wildcard = allowed(&format!("*.{domain}"));
            let exact = allowed(&domain);
            prop_assert_eq!(wildcard.allows(&at(&host, None)), !labels.is_empty());
            prop_assert_eq!(exact.allows(&at(&host, None)), labels.is_empty());
            // A sibling that only ends with the same characters is never below.
            let sibling = format!("x{domain}");
            prop_assert!(!wildcard.allows(&at(&sibling, None)));
        }
    }
}
