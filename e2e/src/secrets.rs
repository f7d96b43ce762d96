//! Secrets the tests create, and the search for their values where they must never appear.

use crate::cluster::kubectl;
use crate::process::ok;

/// `kubectl create secret generic NAME --from-literal=KEY=VALUE -n NS`; fails the test on
/// error.
pub fn create_secret(ns: &str, name: &str, key: &str, value: &str) {
    let args = secret_args(ns, name, key, value);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok("create secret", &kubectl(&args));
}

/// The kubectl arguments of [`create_secret`].
pub fn secret_args(ns: &str, name: &str, key: &str, value: &str) -> Vec<String> {
    [
        "create",
        "secret",
        "generic",
        name,
        "-n",
        ns,
        &format!("--from-literal={key}={value}"),
    ]
    .map(String::from)
    .to_vec()
}

/// The secret-leak search: fails the test when any of `values` (secret values the test put in
/// Secrets) appears in what Stagehand writes in `ns` — Migrations, MigrationRuns (status,
/// conditions, problems), Events, ConfigMaps (the history ledger) — or in `texts` (the
/// operator's log, a command's output). `texts` name where each came from.
pub fn assert_no_secret_leak(ns: &str, values: &[&str], texts: &[(&str, &str)]) {
    let objects = ok(
        "dump",
        &kubectl(&[
            "get",
            "migrations.stagehand.dev,migrationruns.stagehand.dev,events,configmaps",
            "-n",
            ns,
            "-o",
            "yaml",
        ]),
    );
    assert!(
        objects.contains("kind: MigrationRun") || objects.contains("kind: Migration"),
        "the search reads Stagehand's objects in {ns}"
    );
    for (place, text) in
        std::iter::once(("the objects and Events", objects.as_str())).chain(texts.iter().copied())
    {
        for value in values {
            assert!(
                !value.is_empty() && !text.contains(value),
                "a secret value leaked into {place}"
            );
        }
    }
}
