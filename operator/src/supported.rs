//! The Kubernetes versions this release supports (docs/deploy.md#supported-kubernetes-versions):
//! the newest three minors, the window upstream maintains. The oldest is exercised by
//! `e2e/cluster/smoke-oldest`; the e2e control plane (`e2e/cluster`) is v1.36.3 until its move
//! to v1.37.2 lands (issue 30).
//!
//! What the operator needs is far older (CRDs `apiextensions.k8s.io/v1` with CEL validation
//! rules, server-side apply, `coordination.k8s.io/v1` Leases, `events.k8s.io/v1`,
//! `authorization.k8s.io/v1` access reviews); the window is what is tested, and an API server
//! outside it is only warned about, never refused.

use tracing::{info, warn};

/// The Kubernetes major version.
pub const KUBERNETES_MAJOR: u32 = 1;
/// The oldest supported minor (`e2e/cluster/smoke-oldest` runs against it).
pub const OLDEST_MINOR: u32 = 35;
/// The newest supported minor.
pub const NEWEST_MINOR: u32 = 37;

/// The supported range as people write it, e.g. `1.35–1.37`.
pub fn range() -> String {
    format!("{KUBERNETES_MAJOR}.{OLDEST_MINOR}–{KUBERNETES_MAJOR}.{NEWEST_MINOR}")
}

/// Whether an API server's `/version` major and minor fall in the supported range; `None` when
/// they do not parse. Providers append to the minor (`"37+"` on GKE and EKS): the leading digits
/// count.
pub fn is_supported(major: &str, minor: &str) -> Option<bool> {
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    let (major, minor) = (digits(major)?, digits(minor)?);
    Some(major == KUBERNETES_MAJOR && (OLDEST_MINOR..=NEWEST_MINOR).contains(&minor))
}

/// Reads the API server's version once and logs it with the supported range: a warning when it
/// is outside the range or cannot be read, never an error (the operator works on).
pub async fn log_server_version(client: &kube::Client) {
    let supported = range();
    match client.apiserver_version().await {
        Ok(info) => match is_supported(&info.major, &info.minor) {
            Some(true) => info!(
                kubernetes = %info.git_version,
                supported = %supported,
                "Kubernetes version"
            ),
            Some(false) => warn!(
                kubernetes = %info.git_version,
                supported = %supported,
                "the API server's Kubernetes version is outside the supported range: it is untested, upgrade the cluster or use a Stagehand release that supports it"
            ),
            None => warn!(
                kubernetes = %info.git_version,
                major = %info.major,
                minor = %info.minor,
                supported = %supported,
                "the API server's /version does not parse: cannot tell whether it is supported"
            ),
        },
        Err(e) => warn!(
            error = %e,
            supported = %supported,
            "cannot read the API server's version: cannot tell whether it is supported"
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    #[test]
    fn the_window_is_three_minors() {
        assert_eq!(range(), "1.35–1.37");
        assert_eq!(NEWEST_MINOR - OLDEST_MINOR, 2);
    }

    #[test]
    fn operator_help_names_the_range() {
        use clap::CommandFactory;
        let mut cli = crate::cli::Cli::command();
        let operator = cli
            .find_subcommand_mut("operator")
            .expect("the operator subcommand");
        let help = operator.render_long_help().to_string();
        assert!(
            help.contains(&format!("Supported Kubernetes versions: {}", range())),
            "{help}"
        );
    }

    #[test]
    fn both_charts_state_the_range() {
        for chart in ["stagehand", "stagehand-migration"] {
            let path = format!(
                "{}/../deploy/charts/{chart}/Chart.yaml",
                env!("CARGO_MANIFEST_DIR")
            );
            let text = std::fs::read_to_string(&path).expect("the chart's Chart.yaml");
            let want = format!("  stagehand.dev/supported-kubernetes: \"{}\"", range());
            assert!(
                text.lines().any(|l| l == want),
                "{path} lacks the line {want:?}"
            );
        }
    }

    #[test]
    fn versions_inside_and_outside_the_range() {
        assert_eq!(is_supported("1", "35"), Some(true));
        assert_eq!(is_supported("1", "36"), Some(true));
        assert_eq!(is_supported("1", "37"), Some(true));
        assert_eq!(is_supported("1", "37+"), Some(true));
        assert_eq!(is_supported("1", "34"), Some(false));
        assert_eq!(is_supported("1", "38"), Some(false));
        assert_eq!(is_supported("2", "36"), Some(false));
        assert_eq!(is_supported("1", ""), None);
        assert_eq!(is_supported("", "36"), None);
        assert_eq!(is_supported("1", "+"), None);
    }
}
