//! Release series and deployed releases (docs/design.md#release-series).
//!
//! A *series* is what a declaration's `versions` bound names: `v1` (every release of major 1),
//! `v1.17` (every release of 1.17) or `v1.17.2` (that one release). A *release* is a concrete
//! deployed release (`v1.18.0`, `1.18.0-rc.1`), ordered by semver.

use std::cmp::Ordering;
use std::fmt;

/// Why a string is not a release series or a release.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The bound is empty.
    #[error("is empty; write a release series such as \"v1.17\"")]
    Empty,
    /// The bound is not one to three dot-separated numbers.
    #[error(
        "{0:?} is not a release series: write one to three numbers separated by dots, optionally after a \"v\" (\"v1\", \"v1.17\", \"v1.17.2\"), with no suffix"
    )]
    NotASeries(String),
    /// A part does not fit in 64 bits.
    #[error("{0:?} has a number too large for a release")]
    TooLarge(String),
    /// The release is not a semantic version.
    #[error(
        "{0:?} is not a release: write MAJOR.MINOR.PATCH, optionally after a \"v\" and with a pre-release suffix (\"v1.18.0\", \"1.18.0-rc.1\")"
    )]
    NotARelease(String),
}

/// A release series: one to three numeric parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Series {
    parts: [u64; 3],
    precision: usize,
}

impl Series {
    /// Parses `v1`, `1.17`, `v1.17.2`; anything else (suffixes, four parts, signs) is an error.
    pub fn parse(text: &str) -> Result<Self, VersionError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(VersionError::Empty);
        }
        let body = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let mut parts = [0u64; 3];
        let mut precision = 0;
        for piece in body.split('.') {
            if precision == 3 || piece.is_empty() || !piece.bytes().all(|b| b.is_ascii_digit()) {
                return Err(VersionError::NotASeries(text.to_string()));
            }
            parts[precision] = piece
                .parse()
                .map_err(|_| VersionError::TooLarge(text.to_string()))?;
            precision += 1;
        }
        Ok(Self { parts, precision })
    }

    /// Builds a series from its parts (1 to 3 of them).
    pub fn from_parts(parts: &[u64]) -> Option<Self> {
        if parts.is_empty() || parts.len() > 3 {
            return None;
        }
        let mut all = [0u64; 3];
        all[..parts.len()].copy_from_slice(parts);
        Some(Self {
            parts: all,
            precision: parts.len(),
        })
    }

    /// How many parts were written (1 to 3).
    pub fn precision(&self) -> usize {
        self.precision
    }

    /// The first release of the series: `v1.15` starts at `v1.15.0`.
    pub fn start(&self) -> Release {
        Release(semver::Version::new(
            self.parts[0],
            self.parts[1],
            self.parts[2],
        ))
    }

    /// Whether `release` belongs to the series (ignoring pre-release and build suffixes).
    pub fn contains(&self, release: &Release) -> bool {
        self.compare_release(release) == Ordering::Equal
    }

    /// Whether `release` is at or before the end of the series: `v1.17` covers `v1.17.3`.
    pub fn covers_up_to(&self, release: &Release) -> bool {
        self.compare_release(release) != Ordering::Less
    }

    /// Whether the whole series lies before `release`'s series start, i.e. the series ends
    /// before `other` begins.
    pub fn ends_before(&self, other: &Series) -> bool {
        !self.covers_up_to(&other.start())
    }

    /// Compares the series with a release truncated to the series' precision: `Greater`
    /// when the release comes before the series, `Equal` when inside, `Less` when after.
    fn compare_release(&self, release: &Release) -> Ordering {
        let r = [release.0.major, release.0.minor, release.0.patch];
        self.parts[..self.precision].cmp(&r[..self.precision])
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.parts[0])?;
        for part in &self.parts[1..self.precision] {
            write!(f, ".{part}")?;
        }
        Ok(())
    }
}

/// A deployed release, ordered by semver (pre-releases before their release).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Release(semver::Version);

impl Release {
    /// Parses `v1.18.0`, `1.18.0`, `v1.18.0-rc.1`; a short `v1.18` is read as `v1.18.0`.
    pub fn parse(text: &str) -> Result<Self, VersionError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(VersionError::Empty);
        }
        let body = trimmed.strip_prefix('v').unwrap_or(trimmed);
        if let Ok(v) = semver::Version::parse(body) {
            return Ok(Self(v));
        }
        // Accept the short forms a user types (`v1.18`) as the series start.
        Series::parse(trimmed)
            .map(|s| s.start())
            .map_err(|_| VersionError::NotARelease(text.to_string()))
    }

    /// Builds a release from its numbers.
    pub fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self(semver::Version::new(major, minor, patch))
    }

    /// The underlying semantic version.
    pub fn version(&self) -> &semver::Version {
        &self.0
    }
}

impl PartialOrd for Release {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Release {
    /// Semver precedence; releases of equal precedence that differ only in build metadata
    /// (`v1.18.0+a`, `v1.18.0+b`) are ordered by it, so that `Ord` agrees with `Eq`.
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .cmp_precedence(&other.0)
            .then_with(|| self.0.build.cmp(&other.0.build))
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// A declaration's window, with its three bounds parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The oldest supported series.
    pub minimum: Series,
    /// The first series the action runs for.
    pub from: Series,
    /// The last series the action runs for.
    pub to: Series,
}

impl Window {
    /// Whether a last migrated release lies in `[from.start, end of to]`.
    pub fn includes(&self, last_migrated: &Release) -> bool {
        *last_migrated >= self.from.start() && self.to.covers_up_to(last_migrated)
    }

    /// Whether a last migrated release is older than the supported minimum.
    pub fn below_minimum(&self, last_migrated: &Release) -> bool {
        *last_migrated < self.minimum.start()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[allow(clippy::unwrap_used)]
    fn ordering_agrees_with_equality_also_for_build_metadata() {
        let a = Release::parse("v1.18.0+a").unwrap();
        let b = Release::parse("v1.18.0+b").unwrap();
        assert_ne!(a, b);
        assert_ne!(a.cmp(&b), Ordering::Equal);
        assert!(Release::parse("v1.18.0").unwrap() < Release::parse("v1.18.1+a").unwrap());
        assert_eq!(a.cmp(&a.clone()), Ordering::Equal);
    }

    use super::*;
    use proptest::prelude::*;

    fn s(text: &str) -> Series {
        Series::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }
    fn r(text: &str) -> Release {
        Release::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn series_parse_accepts_one_to_three_parts_with_optional_v() {
        assert_eq!(s("v1").precision(), 1);
        assert_eq!(s("1.17").precision(), 2);
        assert_eq!(s("v1.17.2").precision(), 3);
        assert_eq!(s("v1.17").to_string(), "v1.17");
        assert_eq!(s("1.17.2").to_string(), "v1.17.2");
    }

    #[test]
    fn series_parse_rejects_suffixes_and_garbage() {
        for bad in [
            "",
            "v",
            "1.",
            ".1",
            "1..2",
            "1.2.3.4",
            "v1.18.0-rc1",
            "1.2+b",
            "latest",
            "-1",
            "vv1",
            "1.x",
            " ",
        ] {
            assert!(Series::parse(bad).is_err(), "{bad:?} must not parse");
        }
        assert!(matches!(
            Series::parse("99999999999999999999999"),
            Err(VersionError::TooLarge(_))
        ));
    }

    #[test]
    fn lower_bound_starts_at_the_beginning_of_its_series() {
        assert_eq!(s("v1.15").start(), r("v1.15.0"));
        assert_eq!(s("v1").start(), r("v1.0.0"));
        assert_eq!(s("v1.15.2").start(), r("v1.15.2"));
    }

    #[test]
    fn upper_bound_includes_its_whole_series() {
        assert!(s("v1.17").covers_up_to(&r("v1.17.3")));
        assert!(s("v1.17").covers_up_to(&r("v1.17.99")));
        assert!(s("v1.17").covers_up_to(&r("v1.16.9")));
        assert!(!s("v1.17").covers_up_to(&r("v1.18.0")));
        assert!(s("v1").covers_up_to(&r("v1.99.0")));
        assert!(!s("v1").covers_up_to(&r("v2.0.0")));
        assert!(s("v1.17.2").covers_up_to(&r("v1.17.2")));
        assert!(!s("v1.17.2").covers_up_to(&r("v1.17.3")));
    }

    #[test]
    fn window_from_v1_15_to_v1_17() {
        let w = Window {
            minimum: s("v1.15"),
            from: s("v1.15"),
            to: s("v1.17"),
        };
        assert!(!w.includes(&r("v1.14.9")));
        assert!(w.includes(&r("v1.15.0")));
        assert!(w.includes(&r("v1.17.3")));
        assert!(!w.includes(&r("v1.18.0")));
        assert!(w.below_minimum(&r("v1.14.2")));
        assert!(!w.below_minimum(&r("v1.15.0")));
    }

    #[test]
    fn deployed_prereleases_follow_semver_ordering() {
        assert!(r("v1.15.0-rc.1") < r("v1.15.0"));
        let w = Window {
            minimum: s("v1.14"),
            from: s("v1.15"),
            to: s("v1.17"),
        };
        assert!(
            !w.includes(&r("v1.15.0-rc.1")),
            "a pre-release of v1.15.0 comes before the window"
        );
        assert!(
            w.includes(&r("v1.17.4-rc.1")),
            "a pre-release of a v1.17 patch is inside v1.17"
        );
        assert!(!w.includes(&r("v1.18.0-rc.1")));
        assert_eq!(r("1.18.0+build.5").to_string(), "v1.18.0+build.5");
    }

    #[test]
    fn release_parse_forms() {
        assert_eq!(r("1.18.0"), r("v1.18.0"));
        assert_eq!(r("v1.18"), r("v1.18.0"));
        assert!(Release::parse("next").is_err());
        assert!(Release::parse("").is_err());
        assert!(Release::parse("v1.18.0.1").is_err());
    }

    #[test]
    fn ends_before() {
        assert!(s("v1.14").ends_before(&s("v1.15")));
        assert!(!s("v1.15").ends_before(&s("v1.15.2")));
        assert!(!s("v1").ends_before(&s("v1.15")));
        assert!(s("v1.15.1").ends_before(&s("v1.15.2")));
    }

    fn series_strategy() -> impl Strategy<Value = Series> {
        prop::collection::vec(0u64..50, 1..=3)
            .prop_filter_map("1-3 parts", |p| Series::from_parts(&p))
    }
    fn release_strategy() -> impl Strategy<Value = Release> {
        (0u64..50, 0u64..50, 0u64..50).prop_map(|(a, b, c)| Release::new(a, b, c))
    }

    proptest! {
        #[test]
        fn display_parses_back(series in series_strategy(), with_v in any::<bool>()) {
            let text = series.to_string();
            let text = if with_v { text } else { text.trim_start_matches('v').to_string() };
            prop_assert_eq!(Series::parse(&text), Ok(series));
        }

        #[test]
        fn a_series_contains_and_covers_its_start(series in series_strategy()) {
            prop_assert!(series.contains(&series.start()));
            prop_assert!(series.covers_up_to(&series.start()));
        }

        #[test]
        fn covers_is_downward_closed(series in series_strategy(), a in release_strategy(), b in release_strategy()) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            if series.covers_up_to(&hi) {
                prop_assert!(series.covers_up_to(&lo));
            }
        }

        #[test]
        fn members_are_at_or_after_the_start_and_covered(series in series_strategy(), rel in release_strategy()) {
            if series.contains(&rel) {
                prop_assert!(rel >= series.start());
                prop_assert!(series.covers_up_to(&rel));
            }
        }

        #[test]
        fn not_covered_means_after_every_member(series in series_strategy(), rel in release_strategy(), member in release_strategy()) {
            if !series.covers_up_to(&rel) && series.contains(&member) {
                prop_assert!(rel > member);
            }
        }

        #[test]
        fn window_matches_the_definition(from in series_strategy(), to in series_strategy(), rel in release_strategy()) {
            let w = Window { minimum: from, from, to };
            prop_assert_eq!(w.includes(&rel), rel >= from.start() && to.covers_up_to(&rel));
            if w.includes(&rel) { prop_assert!(!to.ends_before(&from)); }
        }

        #[test]
        fn parser_never_panics(text in "\\PC{0,12}") {
            let _ = Series::parse(&text);
            let _ = Release::parse(&text);
        }
    }
}
