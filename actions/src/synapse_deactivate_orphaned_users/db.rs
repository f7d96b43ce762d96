//! What the action reads from and writes to Synapse's database: the active OIDC-bound
//! accounts (one statement, joined here with their display names), the guests, their
//! conversion into deactivated accounts, and the read-back of what Synapse did. Tables and
//! columns are Synapse's (`users`, `user_external_ids`, `profiles`, `erased_users`);
//! `profiles.user_id` is the localpart in every schema version, so the join does not depend on
//! `full_user_id` (filled by a background update that a database upgraded from an older
//! Synapse may not have finished).
//!
//! The candidates are read as three single-table scans in one statement (one snapshot) and
//! joined in memory, in time linear in the accounts: a join left to PostgreSQL's planner is
//! planned from the tables' statistics, and on tables never analyzed (a restored dump,
//! accounts written in bulk, before autovacuum's first pass) it estimates one row and nests
//! loops, reading the whole `user_external_ids` index once per account: 17 s at 20,000
//! accounts instead of 0.1 s (docs/benchmarks.md).

use std::collections::{BTreeMap, HashMap};

use crate::action::{ActionError, SecretValue};
use tokio_postgres::Row;

use crate::clients::postgres::{PgClient, PgSettings};

use super::selection::Account;

/// The tables the action reads or writes.
pub const TABLES: [&str; 4] = ["users", "user_external_ids", "profiles", "erased_users"];

/// The auth provider openDesk's Synapse records its OIDC logins under.
pub const AUTH_PROVIDER: &str = "oidc";

const CREATED: &str = "COALESCE(to_char(to_timestamp(u.creation_ts) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')";
const PROFILE_JOIN: &str =
    "LEFT JOIN profiles p ON p.user_id = split_part(substr(u.name, 2), ':', 1)";

/// The localpart of a Matrix ID, as [`PROFILE_JOIN`] takes it: after the sigil, up to the
/// first `:` (`alice` of `@alice:example.org`).
fn localpart(matrix_id: &str) -> &str {
    let mut chars = matrix_id.chars();
    chars.next();
    chars.as_str().split(':').next().unwrap_or_default()
}

/// Column `i` of `row`, or an error naming the column's index and what was read: a schema
/// other than Synapse's answers other types.
fn col<'r, T: tokio_postgres::types::FromSql<'r>>(
    row: &'r Row,
    i: usize,
    what: &str,
) -> Result<T, ActionError> {
    row.try_get(i).map_err(|e| {
        ActionError::InvalidAnswer(format!(
            "{what}: column {i} is not what Synapse's schema has: {e}"
        ))
    })
}

/// Synapse's database, connected.
#[derive(Debug)]
pub struct SynapseDb {
    client: PgClient,
    settings: PgSettings,
}

impl SynapseDb {
    /// Connects with `password` and checks that Synapse's tables are there.
    pub async fn connect(
        settings: PgSettings,
        password: &SecretValue,
    ) -> Result<Self, ActionError> {
        let client = PgClient::connect(&settings, password).await?;
        let db = Self { client, settings };
        db.check_tables().await?;
        Ok(db)
    }

    /// What it is connected to, for messages.
    pub fn describe(&self) -> &str {
        self.client.target()
    }

    async fn check_tables(&self) -> Result<(), ActionError> {
        let wanted: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
        let rows = self
            .client
            .query(
                &self.settings,
                "looking for Synapse's tables",
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ANY($1)",
                &[&wanted],
            )
            .await?;
        let found = rows
            .iter()
            .map(|r| col::<String>(r, 0, "information_schema.tables"))
            .collect::<Result<Vec<_>, _>>()?;
        let missing: Vec<&str> = TABLES
            .iter()
            .copied()
            .filter(|t| !found.iter().any(|f| f == t))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(ActionError::NotFound(format!(
            "{} has no table {} (or {} may not read it): is synapse.postgres.name Synapse's database?",
            self.describe(),
            missing.join(", "),
            self.settings.user
        )))
    }

    /// The active (`deactivated = 0`), non-guest accounts bound to the `oidc` provider, each
    /// with every subject it is bound to, sorted by Matrix ID.
    pub async fn active_oidc_bound(&self) -> Result<Vec<Account>, ActionError> {
        let sql = format!(
            "SELECT 'u'::text, u.name::text, {CREATED} FROM users u \
             WHERE u.deactivated = 0 AND u.is_guest = 0 \
             UNION ALL SELECT 'e'::text, e.user_id::text, e.external_id::text \
             FROM user_external_ids e WHERE e.auth_provider = $1 \
             UNION ALL SELECT 'p'::text, p.user_id::text, COALESCE(p.displayname, '')::text \
             FROM profiles p"
        );
        let rows = self
            .client
            .query(
                &self.settings,
                "reading the active OIDC-bound accounts",
                &sql,
                &[&AUTH_PROVIDER],
            )
            .await?;
        let what = "the active OIDC-bound accounts";
        let mut active: HashMap<String, String> = HashMap::new();
        let mut subjects: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut display_names: HashMap<String, String> = HashMap::new();
        for r in &rows {
            let table: &str = col(r, 0, what)?;
            let key: String = col(r, 1, what)?;
            let value: String = col(r, 2, what)?;
            match table {
                "u" => {
                    active.insert(key, value);
                }
                "e" => subjects.entry(key).or_default().push(value),
                _ => {
                    display_names.insert(key, value);
                }
            }
        }
        Ok(subjects
            .into_iter()
            .filter_map(|(matrix_id, mut subjects)| {
                let created = active.remove(&matrix_id)?;
                subjects.sort();
                Some(Account {
                    display_name: display_names
                        .get(localpart(&matrix_id))
                        .cloned()
                        .unwrap_or_default(),
                    matrix_id,
                    subjects,
                    created,
                })
            })
            .collect())
    }

    /// Every guest account (`is_guest <> 0`), sorted by Matrix ID.
    pub async fn guests(&self) -> Result<Vec<Account>, ActionError> {
        let sql = format!(
            "SELECT u.name, COALESCE(p.displayname, ''), {CREATED} FROM users u {PROFILE_JOIN} \
             WHERE u.is_guest <> 0 ORDER BY u.name"
        );
        let rows = self
            .client
            .query(&self.settings, "reading the guest accounts", &sql, &[])
            .await?;
        let what = "the guest accounts";
        rows.iter()
            .map(|r| {
                Ok(Account {
                    matrix_id: col(r, 0, what)?,
                    display_name: col(r, 1, what)?,
                    subjects: Vec::new(),
                    created: col(r, 2, what)?,
                })
            })
            .collect()
    }

    /// Turns the guests named into deactivated regular accounts (syn2mas does not carry
    /// guests over); answers the rows changed.
    pub async fn convert_guests(&self, names: &[String]) -> Result<u64, ActionError> {
        self.client
            .execute(
                &self.settings,
                "turning the guest accounts into deactivated accounts",
                "UPDATE users SET is_guest = 0, deactivated = 1 WHERE is_guest <> 0 AND name = ANY($1)",
                &[&names],
            )
            .await
    }

    /// Of `names`, how many are deactivated and how many erased, as the database says.
    pub async fn deactivated_and_erased(
        &self,
        names: &[String],
    ) -> Result<(u64, u64), ActionError> {
        let rows = self
            .client
            .query(
                &self.settings,
                "reading back the deactivated accounts",
                "SELECT count(*) FILTER (WHERE u.deactivated <> 0), count(e.user_id) \
                 FROM users u LEFT JOIN erased_users e ON e.user_id = u.name WHERE u.name = ANY($1)",
                &[&names],
            )
            .await?;
        let what = "the read-back";
        let (d, e): (i64, i64) = match rows.first() {
            Some(r) => (col(r, 0, what)?, col(r, 1, what)?),
            None => (0, 0),
        };
        Ok((d.max(0) as u64, e.max(0) as u64))
    }

    /// Of `names`, those the database shows deactivated.
    pub async fn deactivated_among(
        &self,
        names: &[String],
    ) -> Result<std::collections::HashSet<String>, ActionError> {
        let rows = self
            .client
            .query(
                &self.settings,
                "reading which approved accounts are deactivated",
                "SELECT name FROM users WHERE deactivated <> 0 AND name = ANY($1)",
                &[&names],
            )
            .await?;
        rows.iter()
            .map(|r| col::<String>(r, 0, "the deactivated accounts"))
            .collect()
    }

    /// How many guest accounts there are.
    pub async fn guests_left(&self) -> Result<u64, ActionError> {
        let rows = self
            .client
            .query(
                &self.settings,
                "counting the guest accounts",
                "SELECT count(*) FROM users WHERE is_guest <> 0",
                &[],
            )
            .await?;
        match rows.first() {
            Some(r) => Ok(col::<i64>(r, 0, "the guest count")?.max(0) as u64),
            None => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_localpart_is_what_the_profile_join_takes() {
        assert_eq!(localpart("@alice:example.org"), "alice");
        assert_eq!(localpart("@bob:matrix.example.org:8448"), "bob");
        assert_eq!(localpart("@ünï:x"), "ünï");
        assert_eq!(localpart("@nohost"), "nohost");
        assert_eq!(localpart(""), "");
    }
}
