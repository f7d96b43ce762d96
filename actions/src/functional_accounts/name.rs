//! The name rule of the migration (reference: the name paragraph of `ox_shared_accounts_import`):
//! a Functional Account's name is a plain string, a Shared Account is named with the syntax of a
//! user name (UDM `uid_umlauts`: letters, digits and `_`, with `.` and `-` between them, no
//! spaces). Both actions apply this one function, so that `ox_functional_accounts_export` stops
//! in planning on every name `ox_shared_accounts_import` could not create.
//!
//! The rule: every character that is not a letter, a digit, `_`, `.` or `-` separates words; a
//! run of separators becomes one `-` (a single `.` or `-` between two words is kept as it is);
//! separators at the start and the end are dropped. A name without any letter (only digits, only
//! punctuation, or both) leaves nothing to build on and is refused rather than turned into
//! something invented: "Team Sales" becomes `Team-Sales`, "Sales (EU)" `Sales-EU`, "a.b" stays
//! `a.b`, and "2024" or "---" fail.

use std::collections::BTreeMap;

/// Why no Shared Account name can be built from a Functional Account's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty or only white space.
    #[error(
        "the Functional Account {dn:?} has an empty name: no Shared Account can be named after it; give it a name in the IAM and run the stage again"
    )]
    Empty {
        /// The account's DN (or another way to find it).
        dn: String,
    },
    /// The name has no letter: only digits and/or punctuation.
    #[error(
        "the Functional Account {name:?} ({dn}) has no letter in its name (only digits or punctuation): a Shared Account is named like a user and nothing can be built from it; rename the Functional Account in the IAM and run the stage again"
    )]
    NothingToBuildOn {
        /// The name.
        name: String,
        /// The account's DN.
        dn: String,
    },
    /// Two accounts would get the same Shared Account name.
    #[error(
        "the Functional Accounts {first:?} and {second:?} would both become the Shared Account {shared:?} (names are compared without case): rename one of them in the IAM and run the stage again"
    )]
    Clash {
        /// The first account's name.
        first: String,
        /// The second account's name.
        second: String,
        /// The name both would get.
        shared: String,
    },
}

/// Whether `c` is a word character of the `uid_umlauts` syntax (Python's `\w`).
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The Shared Account name for a Functional Account named `name` (with DN `dn`, for messages).
pub fn shared_account_name(name: &str, dn: &str) -> Result<String, NameError> {
    if name.trim().is_empty() {
        return Err(NameError::Empty { dn: dn.to_string() });
    }
    if !name.chars().any(char::is_alphabetic) {
        return Err(NameError::NothingToBuildOn {
            name: name.to_string(),
            dn: dn.to_string(),
        });
    }
    let mut out = String::with_capacity(name.len());
    let mut separators = String::new();
    for c in name.chars() {
        if is_word(c) {
            if !separators.is_empty() {
                if !out.is_empty() {
                    match separators.as_str() {
                        "." | "-" => out.push_str(&separators),
                        _ => out.push('-'),
                    }
                }
                separators.clear();
            }
            out.push(c);
        } else {
            separators.push(c);
        }
    }
    // A name with a letter always has a word character, so `out` is not empty here.
    Ok(out)
}

/// The Shared Account names for `accounts` (`(name, dn)` pairs), in order; the first problem
/// (an unusable name, or two accounts that would get one name) is the error, all of them are
/// in the list this returns on failure.
pub fn shared_account_names<'a>(
    accounts: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<String>, Vec<NameError>> {
    let mut names = Vec::new();
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (name, dn) in accounts {
        match shared_account_name(name, dn) {
            Ok(shared) => {
                let key = shared.to_lowercase();
                if let Some(first) = seen.get(&key) {
                    problems.push(NameError::Clash {
                        first: first.clone(),
                        second: name.to_string(),
                        shared: shared.clone(),
                    });
                } else {
                    seen.insert(key, name.to_string());
                }
                names.push(shared);
            }
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(names)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn name(n: &str) -> Result<String, NameError> {
        shared_account_name(n, "cn=x")
    }

    #[test]
    fn spaces_and_punctuation_become_dashes() {
        assert_eq!(name("Team Sales").unwrap(), "Team-Sales");
        assert_eq!(name("  Team   Sales  ").unwrap(), "Team-Sales");
        assert_eq!(name("Sales (EU)").unwrap(), "Sales-EU");
        assert_eq!(name("Sales & Marketing").unwrap(), "Sales-Marketing");
        assert_eq!(name("info@example").unwrap(), "info-example");
        assert_eq!(name("Team - Sales").unwrap(), "Team-Sales");
        assert_eq!(name("a..b").unwrap(), "a-b");
        assert_eq!(name("\tTeam\nSales!").unwrap(), "Team-Sales");
    }

    #[test]
    fn valid_user_names_stay() {
        for ok in [
            "sales",
            "Team-Sales",
            "team.sales",
            "team_sales",
            "Büro",
            "Vertrieb2",
            "2nd-level",
            "_x",
        ] {
            assert_eq!(name(ok).unwrap(), ok);
        }
        assert_eq!(name(".hidden.").unwrap(), "hidden");
        assert_eq!(
            name("Zoë Müller-Lüdenscheidt").unwrap(),
            "Zoë-Müller-Lüdenscheidt"
        );
    }

    #[test]
    fn digits_or_punctuation_only_fail() {
        for bad in [
            "2024", "123 456", "---", "!!!", "...", "1.2.3", "_", "__1__", "(42)",
        ] {
            let e = name(bad).unwrap_err();
            assert!(
                matches!(e, NameError::NothingToBuildOn { .. }),
                "{bad:?}: {e:?}"
            );
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
            assert!(e.to_string().contains("rename"), "{e}");
        }
        assert!(matches!(name("   "), Err(NameError::Empty { .. })));
    }

    #[test]
    fn two_accounts_with_one_name_clash() {
        let e = shared_account_names([("Team Sales", "cn=a"), ("team-sales", "cn=b")]).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(
            e[0].to_string()
                .contains("\"Team Sales\" and \"team-sales\""),
            "{}",
            e[0]
        );
        let all =
            shared_account_names([("A B", "cn=a"), ("2024", "cn=b"), ("C", "cn=c")]).unwrap_err();
        assert_eq!(all.len(), 1);
        assert_eq!(
            shared_account_names([("A B", "cn=a"), ("C", "cn=c")]).unwrap(),
            vec!["A-B", "C"]
        );
    }
}
