//! The Synapse + PostgreSQL rig (`stagehand_e2e::synapse`) that the v1.19 Synapse actions are
//! tested on: a real Synapse on a real PostgreSQL, accounts made through Synapse itself and
//! read back through its admin API and its database, the signing key it generates, the
//! shared secret in a file, and shared-secret registration refused when none is configured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use stagehand_e2e::Scene;
use stagehand_e2e::synapse::{
    FixtureUser, OIDC_PROVIDER, Postgres, SERVER_NAME, SharedSecret, Synapse, SynapseOptions,
};

#[tokio::test]
async fn synapse_on_postgres_records_oidc_users_and_guests_as_synapse_does() {
    let _scene = Scene::offline();
    let pg = Postgres::start();
    // Synapse refuses a database whose collation is not C.
    assert_eq!(
        pg.psql("SELECT datcollate || '/' || pg_encoding_to_char(encoding) FROM pg_database WHERE datname = 'matrix'")
            .trim(),
        "C/UTF8"
    );
    let synapse = Synapse::start(&pg, SynapseOptions::default());
    assert_eq!(synapse.server_name(), SERVER_NAME);
    let config = std::fs::read_to_string(synapse.config_path()).unwrap();
    assert!(config.contains("name: psycopg2"), "{config}");
    assert!(
        config.contains(&format!(
            "registration_shared_secret: \"{}\"",
            synapse.shared_secret().unwrap()
        )),
        "{config}"
    );

    // An OIDC-bound account, through the admin API: visible with its external id.
    let subject = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b";
    let alice = synapse
        .create_oidc_user("alice", "Alice Anders", subject)
        .await;
    assert_eq!(alice, format!("@alice:{SERVER_NAME}"));
    let seen = synapse.user(&alice).await;
    assert_eq!(seen["displayname"], "Alice Anders");
    assert_eq!(seen["is_guest"], false);
    assert_eq!(seen["deactivated"], false);
    assert_eq!(
        seen["external_ids"],
        serde_json::json!([{"auth_provider": OIDC_PROVIDER, "external_id": subject}])
    );

    // A guest is a guest.
    let guest = synapse.create_guest().await;
    assert_eq!(synapse.user(&guest).await["is_guest"], true);

    // A fresh admin from the shared-secret registration is an admin.
    let admin = synapse.register_admin().await;
    let me = synapse.user(&admin.user_id).await;
    assert_eq!(me["admin"], true, "{me}");

    // Accounts written straight into the database read back through the admin API like
    // those Synapse made itself.
    let fixtures: Vec<FixtureUser> = (0..3)
        .map(|i| FixtureUser {
            localpart: format!("bulk{i}"),
            display_name: format!("Bulk\tUser {i}"),
            subject: format!("00000000-0000-4000-8000-00000000000{i}"),
            creation_ts: 1_700_000_000 + i,
        })
        .collect();
    synapse.write_oidc_users(&fixtures);
    let bulk1 = synapse.user(&synapse.user_id("bulk1")).await;
    assert_eq!(bulk1["displayname"], "Bulk\tUser 1");
    // The single-user API answers creation_ts in seconds, as stored (the list answers ms).
    assert_eq!(bulk1["creation_ts"], 1_700_000_001_i64);
    assert_eq!(
        bulk1["external_ids"][0]["external_id"],
        "00000000-0000-4000-8000-000000000001"
    );

    // The database reads them as the action will: active OIDC-bound accounts, guests apart.
    let oidc_active = synapse.psql(
        "SELECT u.name || '=' || e.external_id FROM users u JOIN user_external_ids e ON e.user_id = u.name \
         WHERE e.auth_provider = 'oidc' AND u.deactivated = 0 AND u.is_guest = 0 ORDER BY u.name",
    );
    let rows: Vec<&str> = oidc_active.lines().collect();
    assert_eq!(
        rows,
        vec![
            format!("{alice}={subject}"),
            format!("@bulk0:{SERVER_NAME}=00000000-0000-4000-8000-000000000000"),
            format!("@bulk1:{SERVER_NAME}=00000000-0000-4000-8000-000000000001"),
            format!("@bulk2:{SERVER_NAME}=00000000-0000-4000-8000-000000000002"),
        ]
    );
    let guests: i64 = synapse
        .db()
        .value("SELECT count(*) FROM users WHERE is_guest <> 0");
    assert_eq!(guests, 1);
    assert_eq!(
        synapse
            .psql("SELECT name FROM users WHERE is_guest <> 0")
            .trim(),
        guest
    );

    // A deactivation through the admin API is what the DB then shows.
    synapse
        .admin_api(
            reqwest::Method::POST,
            &format!("/_synapse/admin/v1/deactivate/{}", synapse.user_id("bulk2")),
            Some(&serde_json::json!({"erase": true})),
        )
        .await;
    let bulk2 = synapse.user(&synapse.user_id("bulk2")).await;
    assert_eq!(bulk2["deactivated"], true);
    assert_eq!(bulk2["erased"], true);

    // The signing key Synapse generated: one line `ed25519 a_xxxx <base64 of 32 bytes>`.
    let key = std::fs::read_to_string(synapse.signing_key_path()).unwrap();
    let fields: Vec<&str> = key.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{key:?}");
    assert_eq!(fields[0], "ed25519");
    assert!(
        fields[1].starts_with("a_") && fields[1].len() == 6,
        "key id {:?}",
        fields[1]
    );
    use base64::Engine as _;
    let seed = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(fields[2].trim_end_matches('='))
        .unwrap();
    assert_eq!(seed.len(), 32);
}

#[tokio::test]
async fn the_shared_secret_in_a_file_registers_and_none_refuses_registration() {
    let _scene = Scene::offline();
    let pg = Postgres::start();
    let synapse = Synapse::start(
        &pg,
        SynapseOptions {
            shared_secret: SharedSecret::File,
        },
    );
    let config = std::fs::read_to_string(synapse.config_path()).unwrap();
    assert!(!config.contains("registration_shared_secret:"), "{config}");
    assert!(
        config.contains(&format!(
            "registration_shared_secret_path: \"{}\"",
            synapse.shared_secret_path().display()
        )),
        "{config}"
    );
    assert_eq!(
        std::fs::read_to_string(synapse.shared_secret_path()).unwrap(),
        synapse.shared_secret().unwrap()
    );
    let admin = synapse.register_admin().await;
    assert_eq!(synapse.user(&admin.user_id).await["admin"], true);
    drop(synapse);

    // Behind MAS no shared secret is configured: Synapse refuses the registration.
    let refusing = Synapse::start(
        &pg,
        SynapseOptions {
            shared_secret: SharedSecret::None,
        },
    );
    assert_eq!(refusing.shared_secret(), None);
    // The nonce is still handed out; the registration itself is refused.
    let refused = refusing.register("someone", "pw", true).await;
    let Err(refusal) = refused else {
        panic!("registration without a shared secret succeeded: {refused:?}")
    };
    assert!(
        refusal.contains("400") && refusal.contains("Shared secret registration is not enabled"),
        "{refusal}"
    );
    let someone: i64 = refusing
        .db()
        .value("SELECT count(*) FROM users WHERE name LIKE '@someone:%'");
    assert_eq!(someone, 0, "the refused registration left an account");
}
