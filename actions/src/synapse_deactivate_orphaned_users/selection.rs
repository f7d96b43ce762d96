//! The pure part: which accounts are orphaned, their share, the refusal over the limit and the
//! findings a person reviews. No I/O.

use std::collections::HashSet;

use crate::action::{FindingRow, Findings};
use crate::clients::parse_uuid;

/// The findings' columns.
pub const COLUMNS: [&str; 4] = ["matrixId", "displayName", "oidcSubject", "created"];
/// The group of the orphaned accounts.
pub const ORPHANED: &str = "orphaned";
/// The group of the guest accounts.
pub const GUEST: &str = "guest";

/// An account as the database describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// `@alice:example.org`.
    pub matrix_id: String,
    /// Its display name, empty when it has none.
    pub display_name: String,
    /// Its OIDC subjects (`user_external_ids.external_id` of provider `oidc`); empty for a guest.
    pub subjects: Vec<String>,
    /// Its creation time (`2024-05-01T10:00:00Z`), empty when unknown.
    pub created: String,
}

/// A subject as compared: the 128 bits of a UUID (case and hyphens do not count), else the
/// text exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SubjectKey {
    /// A UUID.
    Uuid(u128),
    /// Anything else, as written.
    Text(String),
}

impl SubjectKey {
    /// The key of `subject`.
    pub fn of(subject: &str) -> Self {
        match parse_uuid(subject) {
            Some(uuid) => SubjectKey::Uuid(uuid),
            None => SubjectKey::Text(subject.to_string()),
        }
    }
}

/// The accounts none of whose subjects an IAM user carries, in the order given.
pub fn orphans<'a>(candidates: &'a [Account], carried: &HashSet<SubjectKey>) -> Vec<&'a Account> {
    candidates
        .iter()
        .filter(|a| {
            !a.subjects
                .iter()
                .any(|s| carried.contains(&SubjectKey::of(s)))
        })
        .collect()
}

/// The share of `orphaned` in `active` accounts, in tenths of a percent (rounded half up): 0
/// when there is no active account.
pub fn permille(orphaned: usize, active: usize) -> u64 {
    if active == 0 {
        return 0;
    }
    ((orphaned as u128 * 2000 + active as u128) / (2 * active as u128)) as u64
}

/// `12.5` from 125 ‰.
pub fn percent_text(permille: u64) -> String {
    format!("{}.{}", permille / 10, permille % 10)
}

/// Whether `orphaned` of `active` is more than `max_percent` percent (exactly, not rounded).
pub fn over_limit(orphaned: usize, active: usize, max_percent: f64) -> bool {
    active > 0 && (orphaned as f64) * 100.0 > max_percent * active as f64
}

/// `25` or `12.5`: a configured percentage as written.
pub fn limit_text(max_percent: f64) -> String {
    let text = format!("{max_percent}");
    text.strip_suffix(".0").map(str::to_string).unwrap_or(text)
}

/// The refusal of an apply over the limit.
pub fn over_limit_message(orphaned: usize, active: usize, max_percent: f64) -> String {
    format!(
        "{orphaned} of {active} active OIDC-bound Matrix accounts ({}%) have no IAM user, more than safety.maxOrphanPercent ({}%): nothing was deactivated. Review the orphaned accounts (a dry run lists them: stagehand report), then raise safety.maxOrphanPercent to at least {} if they are all meant to go, or restore the IAM users that should not",
        percent_text(permille(orphaned, active)),
        limit_text(max_percent),
        percent_text((orphaned as u64 * 1000).div_ceil(active.max(1) as u64)),
    )
}

/// One finding row.
fn row(group: &str, a: &Account) -> FindingRow {
    FindingRow {
        group: group.to_string(),
        values: vec![
            a.matrix_id.clone(),
            a.display_name.clone(),
            a.subjects.join(", "),
            a.created.clone(),
        ],
    }
}

/// The findings: the orphaned and the guest accounts, and the counts `activeOidcBound`,
/// `orphaned`, `guests` and `orphanPermille` (the share in tenths of a percent).
pub fn findings(active: usize, orphaned: &[&Account], guests: &[Account]) -> Findings {
    let rows = orphaned
        .iter()
        .map(|a| row(ORPHANED, a))
        .chain(guests.iter().map(|a| row(GUEST, a)))
        .collect();
    Findings::new(
        &COLUMNS,
        rows,
        [
            ("activeOidcBound".to_string(), active as u64),
            ("orphaned".to_string(), orphaned.len() as u64),
            ("guests".to_string(), guests.len() as u64),
            (
                "orphanPermille".to_string(),
                permille(orphaned.len(), active),
            ),
        ],
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn account(id: &str, subjects: &[&str]) -> Account {
        Account {
            matrix_id: id.into(),
            display_name: String::new(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            created: String::new(),
        }
    }

    #[test]
    fn subjects_compare_as_uuids_where_both_are_uuids_else_exactly() {
        let carried: HashSet<SubjectKey> = ["0D4F8A30-1B2C-103F-8A1E-5B1F2C3D4E5F", "legacy-Alice"]
            .iter()
            .map(|s| SubjectKey::of(s))
            .collect();
        let candidates = [
            account("@a:x", &["0d4f8a301b2c103f8a1e5b1f2c3d4e5f"]),
            account("@b:x", &["legacy-Alice"]),
            account("@c:x", &["legacy-alice"]),
            account("@d:x", &["11111111-1111-1111-1111-111111111111"]),
            account("@e:x", &["nope", "legacy-Alice"]),
        ];
        let gone: Vec<&str> = orphans(&candidates, &carried)
            .iter()
            .map(|a| a.matrix_id.as_str())
            .collect();
        assert_eq!(gone, ["@c:x", "@d:x"]);
    }

    #[test]
    fn the_share_has_one_decimal_and_the_limit_is_exact() {
        assert_eq!(percent_text(permille(1, 8)), "12.5");
        assert_eq!(percent_text(permille(1, 3)), "33.3");
        assert_eq!(percent_text(permille(2, 3)), "66.7");
        assert_eq!(percent_text(permille(0, 0)), "0.0");
        assert!(!over_limit(1, 4, 25.0), "exactly the limit is allowed");
        assert!(over_limit(251, 1000, 25.0));
        assert!(!over_limit(0, 0, 0.0));
        assert!(over_limit(1, 1000, 0.0));
        let m = over_limit_message(3, 10, 25.0);
        assert!(
            m.starts_with("3 of 10 active OIDC-bound Matrix accounts (30.0%) have no IAM user, more than safety.maxOrphanPercent (25%): nothing was deactivated"),
            "{m}"
        );
        assert_eq!(limit_text(12.5), "12.5");
    }

    #[test]
    fn findings_carry_both_groups_and_the_counts() {
        let a = account("@a:x", &["s1"]);
        let g = account("@guest:x", &[]);
        let f = findings(8, &[&a], std::slice::from_ref(&g));
        assert_eq!(f.columns, COLUMNS);
        assert_eq!(f.rows.len(), 2);
        assert_eq!(f.rows[0].group, "guest");
        assert_eq!(f.rows[1].values, ["@a:x", "", "s1", ""]);
        assert_eq!(f.counts["orphanPermille"], 125);
        assert_eq!(f.counts["activeOidcBound"], 8);
        assert_eq!(f.counts["guests"], 1);
    }

    proptest! {
        #[test]
        fn a_uuid_matches_itself_in_any_case_and_hyphenation(bits in any::<u128>(), upper in any::<bool>(), hyphens in any::<bool>()) {
            let canonical = crate::clients::format_uuid(bits);
            let mut written = if hyphens { canonical.clone() } else { canonical.replace('-', "") };
            if upper { written = written.to_uppercase(); }
            prop_assert_eq!(SubjectKey::of(&written), SubjectKey::Uuid(bits));
            let carried: HashSet<SubjectKey> = [SubjectKey::of(&canonical)].into_iter().collect();
            let candidates = [account("@a:x", &[&written])];
            prop_assert!(orphans(&candidates, &carried).is_empty());
        }

        #[test]
        fn the_rounded_share_is_within_a_twentieth_percent(n in 0usize..100_000, extra in 0usize..100_000) {
            let m = n + extra;
            prop_assume!(m > 0);
            let exact = n as f64 * 1000.0 / m as f64;
            prop_assert!((permille(n, m) as f64 - exact).abs() <= 0.5 + 1e-9);
        }
    }
}
