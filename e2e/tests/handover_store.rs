//! The handover store (actions/src/handover.rs) against a real S3 server: MinIO, started per test
//! by `stagehand_e2e::minio` with a dedicated identity that may use the `migrations` bucket only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use stagehand_actions::action::{SecretValue, Secrets};
use stagehand_actions::clients::s3::{HandoverError, HandoverStore};
use stagehand_actions::functional_accounts::record::{
    FunctionalAccount, LinkedUser, OxFunctionalAccounts,
};
use stagehand_config::ObjectStore;
use stagehand_e2e::minio::{BUCKET, Minio, MinioOptions, unrelated_ca_pem};

const KEY: &str = "ox-functional-accounts.yaml";
const TIMEOUT: Duration = Duration::from_secs(5);

fn settings(minio: &Minio) -> ObjectStore {
    ObjectStore {
        endpoint: minio.endpoint(),
        bucket: BUCKET.into(),
        region: None,
        path_style: Some(true),
        insecure_skip_tls_verify: None,
        access_key_id: minio.access_key().into(),
        secret_key_file: "objectstore-migrations-secret-key".into(),
        ca_bundle: None,
    }
}

fn store(settings: &ObjectStore, secret: &str) -> HandoverStore {
    HandoverStore::connect(
        settings,
        &SecretValue::new(secret),
        TIMEOUT,
        &Default::default(),
    )
    .unwrap()
}

/// Asserts that an error message carries no credential material.
fn assert_clean(message: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!message.contains(s), "the error shows a secret: {message}");
    }
    assert!(
        !message.contains("X-Amz-Signature") && !message.contains("X-Amz-Credential"),
        "the error shows a signed URL: {message}"
    );
}

fn accounts(n: usize) -> OxFunctionalAccounts {
    let mut doc = OxFunctionalAccounts::new("1.18.0", "2026-03-02T10:15:00Z");
    doc.run = Some("pre-1-18-0".into());
    doc.ldap_base_dn = Some("dc=swp-ldap,dc=internal".into());
    for i in 0..n {
        let name = format!("Team Sales {i}");
        doc.accounts.push(FunctionalAccount {
            dn: format!("cn={name},cn=functional_accounts,cn=open-xchange,dc=swp-ldap,dc=internal"),
            name,
            display_name: None,
            position: "cn=functional_accounts,cn=open-xchange,dc=swp-ldap,dc=internal".into(),
            entry_uuid: format!("5b1c0000-0000-4000-8000-{i:012}"),
            univention_object_identifier: Some(format!("7e2d0000-0000-4000-8000-{i:012}")),
            mail_primary_address: format!("sales{i}@example.org"),
            ox_context: 1,
            personal: Some("Sales — Vertrieb".into()),
            ox_quota: None,
            users: vec![LinkedUser {
                dn: "uid=anna,cn=users,dc=swp-ldap,dc=internal".into(),
                uid: "anna".into(),
                entry_uuid: Some("0f3e0000-0000-4000-8000-000000000001".into()),
                univention_object_identifier: None,
                is_ox_user: true,
                ox_user_id: Some(3),
            }],
            groups: vec![],
            ox_secondary_accounts: vec![],
            udm_properties: Default::default(),
        });
    }
    doc
}

#[tokio::test]
async fn probe_then_durable_write_and_read_with_the_dedicated_identity() {
    let minio = Minio::start(MinioOptions::default());
    let s = settings(&minio);
    // A Secret file usually ends with a line break: it is not part of the key.
    let secrets = Secrets::new([(
        "objectstore-migrations-secret-key".to_string(),
        SecretValue::new(format!("{}\n", minio.secret_key())),
    )]);
    let store =
        HandoverStore::connect_with_secrets(&s, &secrets, TIMEOUT, &Default::default()).unwrap();
    let e =
        HandoverStore::connect_with_secrets(&s, &Secrets::default(), TIMEOUT, &Default::default())
            .unwrap_err();
    assert!(
        e.to_string()
            .contains("\"objectstore-migrations-secret-key\" is not available"),
        "{e}"
    );
    store.probe().await.unwrap();
    assert_eq!(
        store.read(KEY).await.unwrap(),
        None,
        "a fresh bucket has no handover"
    );

    let doc = accounts(3);
    store.write_functional_accounts(KEY, &doc).await.unwrap();
    // What another S3 client (mc, as root) reads is what was written.
    let stored = minio
        .object(BUCKET, KEY)
        .expect("the handover is in the bucket");
    assert_eq!(stored, doc.to_yaml().unwrap());
    let text = String::from_utf8(stored).unwrap();
    assert!(
        text.starts_with("apiVersion: stagehand.dev/handover/v1\nkind: OxFunctionalAccounts\n"),
        "{text}"
    );
    assert_eq!(
        store.read_functional_accounts(KEY).await.unwrap(),
        Some(doc.clone())
    );

    // Overwrite, with keys that need escaping, and an object written by mc is read back.
    let key = "handover dir/ox functional+accounts (1).yaml";
    store.write_durable(key, &b"first"[..]).await.unwrap();
    store
        .write_durable(key, &b"second, longer"[..])
        .await
        .unwrap();
    assert_eq!(
        store.read(key).await.unwrap().as_deref(),
        Some(&b"second, longer"[..])
    );
    assert_eq!(
        minio.object(BUCKET, key).as_deref(),
        Some(&b"second, longer"[..])
    );
    minio.put_object(BUCKET, "by-mc.yaml", b"written by mc");
    assert_eq!(
        store.read("by-mc.yaml").await.unwrap().as_deref(),
        Some(&b"written by mc"[..])
    );

    // An object that is not a handover of this version is refused, naming where it is.
    minio.put_object(BUCKET, "other.yaml", b"apiVersion: v1\nkind: ConfigMap\n");
    let e = store
        .read_functional_accounts("other.yaml")
        .await
        .unwrap_err()
        .to_string();
    eprintln!("error: {e}");
    assert!(
        e.contains("\"other.yaml\"") && e.contains("bucket \"migrations\"") && e.contains("\"v1\""),
        "{e}"
    );

    store.delete(key).await.unwrap();
    assert_eq!(minio.object(BUCKET, key), None);
    store.delete(key).await.unwrap(); // deleting what is gone is no error
}

#[tokio::test]
async fn a_large_handover_is_written_and_verified() {
    let minio = Minio::start(MinioOptions::default());
    let store = store(&settings(&minio), minio.secret_key());
    let doc = accounts(5000);
    let bytes = doc.to_yaml().unwrap();
    let started = Instant::now();
    store.write_durable(KEY, bytes.clone()).await.unwrap();
    let write = started.elapsed();
    let started = Instant::now();
    let back = store.read_functional_accounts(KEY).await.unwrap().unwrap();
    let read = started.elapsed();
    assert_eq!(back.accounts.len(), 5000);
    assert_eq!(back, doc);
    eprintln!(
        "5000 accounts: {} bytes ({} per account); write_durable {write:?}, read+parse {read:?}",
        bytes.len(),
        bytes.len() / 5000
    );
}

#[tokio::test]
async fn a_wrong_secret_or_unknown_key_id_fails_the_probe_naming_everything_but_the_secret() {
    let minio = Minio::start(MinioOptions::default());
    let s = settings(&minio);
    let wrong = "wrong-secret-value-0123456789";
    let e = store(&s, wrong).probe().await.unwrap_err();
    eprintln!("error: {e}");
    assert!(matches!(e, HandoverError::Denied { .. }), "{e:?}");
    let msg = e.to_string();
    for part in [
        minio.endpoint().as_str(),
        "\"migrations\"",
        "\"stagehand-migrations\"",
        "SignatureDoesNotMatch",
        "\"objectstore-migrations-secret-key\"",
    ] {
        assert!(msg.contains(part), "{part:?} missing in: {msg}");
    }
    assert_clean(&msg, &[wrong, minio.secret_key()]);
    assert_clean(&format!("{e:?}"), &[wrong, minio.secret_key()]);

    // The same for a read and a write: nothing is written with a refused credential.
    let e = store(&s, wrong)
        .write_durable(KEY, &b"x"[..])
        .await
        .unwrap_err()
        .to_string();
    eprintln!("error: {e}");
    assert!(
        e.contains("SignatureDoesNotMatch") && e.contains(KEY),
        "{e}"
    );
    assert_eq!(minio.object(BUCKET, KEY), None);

    let unknown = ObjectStore {
        access_key_id: "nobody".into(),
        ..s.clone()
    };
    let e = store(&unknown, minio.secret_key())
        .probe()
        .await
        .unwrap_err()
        .to_string();
    eprintln!("error: {e}");
    assert!(
        e.contains("InvalidAccessKeyId") && e.contains("\"nobody\"") && e.contains("accessKeyId"),
        "{e}"
    );
    assert_clean(&e, &[minio.secret_key()]);
}

#[tokio::test]
async fn a_missing_bucket_is_a_clear_error() {
    let minio = Minio::start(MinioOptions::default());
    // With the root identity, which could see any bucket: the store says there is none.
    let root = ObjectStore {
        bucket: "no-such-bucket".into(),
        access_key_id: minio.root_user().into(),
        ..settings(&minio)
    };
    let e = store(&root, minio.root_password())
        .probe()
        .await
        .unwrap_err();
    eprintln!("error: {e}");
    assert!(matches!(e, HandoverError::NoSuchBucket { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("no bucket \"no-such-bucket\"")
            && msg.contains(&minio.endpoint())
            && msg.contains("objectStore.bucket"),
        "{msg}"
    );
    let e = store(&root, minio.root_password())
        .read(KEY)
        .await
        .unwrap_err();
    eprintln!("error: {e}");
    assert!(
        matches!(e, HandoverError::NoSuchBucket { .. }),
        "a read must not take a missing bucket for a missing object: {e:?}"
    );
    let e = store(&root, minio.root_password())
        .write_durable(KEY, &b"x"[..])
        .await
        .unwrap_err();
    eprintln!("error: {e}");
    assert!(matches!(e, HandoverError::NoSuchBucket { .. }), "{e:?}");
}

#[tokio::test]
async fn the_dedicated_identity_cannot_touch_another_bucket() {
    let minio = Minio::start(MinioOptions::default());
    minio.make_bucket("other");
    minio.put_object("other", KEY, b"not yours");
    let other = ObjectStore {
        bucket: "other".into(),
        ..settings(&minio)
    };
    let store = store(&other, minio.secret_key());
    for e in [
        store.probe().await.unwrap_err(),
        store.read(KEY).await.unwrap_err(),
        store
            .write_durable(KEY, &b"overwritten"[..])
            .await
            .unwrap_err(),
        store
            .write_durable("new.yaml", &b"new"[..])
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(e, HandoverError::Denied { .. }), "{e:?}");
        let msg = e.to_string();
        eprintln!("error: {msg}");
        assert!(
            msg.contains("AccessDenied")
                && msg.contains("\"other\"")
                && msg.contains("s3:PutObject"),
            "{msg}"
        );
    }
    assert_eq!(
        minio.object("other", KEY).as_deref(),
        Some(&b"not yours"[..])
    );
    assert_eq!(minio.keys("other"), vec![KEY.to_string()]);
}

#[tokio::test]
async fn tls_is_verified_against_the_configured_ca() {
    let minio = Minio::start(MinioOptions {
        tls: true,
        ..MinioOptions::default()
    });
    let ca = minio.ca_pem().unwrap();
    let trusted = ObjectStore {
        ca_bundle: Some(ca.clone()),
        ..settings(&minio)
    };
    assert!(trusted.endpoint.starts_with("https://"));
    let verified = store(&trusted, minio.secret_key());
    verified.probe().await.unwrap();
    verified.write_durable(KEY, &b"over TLS"[..]).await.unwrap();
    assert_eq!(minio.object(BUCKET, KEY).as_deref(), Some(&b"over TLS"[..]));

    // The host name is verified too: the certificate is for 127.0.0.1 and localhost.
    let by_name = ObjectStore {
        endpoint: minio.endpoint_for("localhost"),
        ..trusted.clone()
    };
    assert_eq!(
        store(&by_name, minio.secret_key())
            .read(KEY)
            .await
            .unwrap()
            .as_deref(),
        Some(&b"over TLS"[..])
    );

    // The bundle as a PEM file path, as openDesk mounts its trust bundle.
    let file = minio.dir().join("trust-ca-certificates.crt");
    std::fs::write(&file, &ca).unwrap();
    let from_file = ObjectStore {
        ca_bundle: Some(file.to_string_lossy().into_owned()),
        ..settings(&minio)
    };
    assert_eq!(
        store(&from_file, minio.secret_key())
            .read(KEY)
            .await
            .unwrap()
            .as_deref(),
        Some(&b"over TLS"[..])
    );
    // A path that is not there is named before anything is sent.
    let absent = ObjectStore {
        ca_bundle: Some(format!("{}.absent", file.display())),
        ..settings(&minio)
    };
    let e = HandoverStore::connect(
        &absent,
        &SecretValue::new(minio.secret_key()),
        TIMEOUT,
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("objectStore.caBundle") && e.contains(".absent") && e.contains("no such file"),
        "{e}"
    );
}

#[tokio::test]
async fn tls_with_an_unknown_ca_fails_unless_verification_is_skipped() {
    let minio = Minio::start(MinioOptions {
        tls: true,
        ..MinioOptions::default()
    });
    for ca_bundle in [None, Some(unrelated_ca_pem())] {
        let s = ObjectStore {
            ca_bundle,
            ..settings(&minio)
        };
        let e = store(&s, minio.secret_key()).probe().await.unwrap_err();
        eprintln!("error: {e}");
        assert!(matches!(e, HandoverError::Unreachable { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("untrusted issuer")
                && msg.contains("add that CA to objectStore.caBundle")
                && msg.contains(&minio.endpoint()),
            "{msg}"
        );
        assert_clean(&msg, &[minio.secret_key()]);
    }
    // Nothing was written over the untrusted connection.
    assert_eq!(minio.object(BUCKET, KEY), None);

    let insecure = ObjectStore {
        insecure_skip_tls_verify: Some(true),
        ..settings(&minio)
    };
    let warnings = stagehand_actions::action::Warnings::default();
    HandoverStore::connect(
        &insecure,
        &SecretValue::new(minio.secret_key()),
        TIMEOUT,
        &warnings,
    )
    .unwrap()
    .probe()
    .await
    .unwrap();
    // Skipping the check is recorded once, as the run's warning (Event, summary line).
    let list = warnings.list();
    assert_eq!(list.len(), 1, "{list:?}");
    assert!(
        list[0].starts_with("objectStore.insecureSkipTlsVerify is set"),
        "{list:?}"
    );
    assert!(list[0].contains(&minio.endpoint()), "{list:?}");

    // A CA bundle with a plain-HTTP endpoint is a settings mistake.
    let plain = ObjectStore {
        endpoint: minio.endpoint().replace("https://", "http://"),
        ca_bundle: minio.ca_pem(),
        ..settings(&minio)
    };
    let e = HandoverStore::connect(
        &plain,
        &SecretValue::new(minio.secret_key()),
        TIMEOUT,
        &Default::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("caBundle is only used with an https:// endpoint"),
        "{e}"
    );
}

#[tokio::test]
async fn the_region_is_the_one_the_store_answers_for() {
    let minio = Minio::start(MinioOptions {
        region: Some("eu-test-1".into()),
        ..MinioOptions::default()
    });
    let right = ObjectStore {
        region: Some("eu-test-1".into()),
        ..settings(&minio)
    };
    store(&right, minio.secret_key()).probe().await.unwrap();
    let e = store(&settings(&minio), minio.secret_key())
        .probe()
        .await
        .unwrap_err()
        .to_string();
    eprintln!("error: {e}");
    assert!(
        e.contains("objectStore.region") && e.contains("eu-test-1"),
        "{e}"
    );
}

#[tokio::test]
async fn a_stopped_store_fails_fast_and_a_restarted_one_still_holds_the_handover() {
    let mut minio = Minio::start(MinioOptions::default());
    let store = store(&settings(&minio), minio.secret_key());
    store.write_durable(KEY, &b"kept"[..]).await.unwrap();
    minio.stop();

    let started = Instant::now();
    let e = store.probe().await.unwrap_err();
    eprintln!("error: {e}");
    let took = started.elapsed();
    assert!(matches!(e, HandoverError::Unreachable { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&minio.endpoint())
            && msg.contains("\"migrations\"")
            && msg.contains("refused"),
        "{msg}"
    );
    assert!(
        took < TIMEOUT,
        "a refused connection took {took:?} (timeout {TIMEOUT:?})"
    );
    let e = store
        .write_durable(KEY, &b"lost"[..])
        .await
        .unwrap_err()
        .to_string();
    eprintln!("error: {e}");
    assert!(e.contains("writing \"ox-functional-accounts.yaml\""), "{e}");

    minio.restart();
    store.probe().await.unwrap();
    assert_eq!(
        store.read(KEY).await.unwrap().as_deref(),
        Some(&b"kept"[..])
    );
}

/// A server that accepts connections and never answers.
fn silent_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let mut held = Vec::new();
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            match listener.accept() {
                Ok((conn, _)) => held.push(conn),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
            if held.len() >= 3 {
                break;
            }
        }
        std::thread::sleep(Duration::from_secs(3));
    });
    (port, handle)
}

#[tokio::test]
async fn a_store_that_does_not_answer_times_out_within_the_timeout() {
    let (port, _server) = silent_server();
    let s = ObjectStore {
        endpoint: format!("http://127.0.0.1:{port}"),
        bucket: BUCKET.into(),
        access_key_id: "stagehand-migrations".into(),
        secret_key_file: "objectstore-migrations-secret-key".into(),
        ..ObjectStore::default()
    };
    let timeout = Duration::from_secs(2);
    let store = HandoverStore::connect(
        &s,
        &SecretValue::new("s3cr3t-value"),
        timeout,
        &Default::default(),
    )
    .unwrap();
    let started = Instant::now();
    let e = store.probe().await.unwrap_err();
    eprintln!("error: {e}");
    let took = started.elapsed();
    assert!(
        matches!(e, HandoverError::Timeout { seconds: 2, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("did not answer within 2s"), "{e}");
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(2),
        "took {took:?}"
    );
}

/// A fake HTTP server for `connections` connections: `reply` gets the request line and
/// returns the whole response (sent with `Connection: close`).
fn fake_server(connections: usize, reply: fn(&str) -> &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(connections) {
            let mut conn = conn.unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
                if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            conn.write_all(reply(&line)).unwrap();
        }
    });
    port
}

fn fake_settings(port: u16) -> ObjectStore {
    ObjectStore {
        endpoint: format!("http://127.0.0.1:{port}"),
        bucket: BUCKET.into(),
        access_key_id: "stagehand-migrations".into(),
        secret_key_file: "objectstore-migrations-secret-key".into(),
        ..ObjectStore::default()
    }
}

#[tokio::test]
async fn a_write_that_does_not_read_back_is_an_error() {
    // Accepts every PUT and answers every GET with other bytes.
    let port = fake_server(2, |line| {
        if line.starts_with("PUT") {
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nstale"
        }
    });
    let store = store(&fake_settings(port), "s3cr3t-value");
    let e = store.write_durable(KEY, &b"fresh"[..]).await.unwrap_err();
    eprintln!("error: {e}");
    assert!(matches!(e, HandoverError::ReadBackMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("does not read back as written") && msg.contains(KEY),
        "{msg}"
    );
}

#[tokio::test]
async fn an_endpoint_that_is_no_s3_api_is_never_taken_for_an_empty_handover() {
    // A web server that answers 404 to everything, without an S3 error document.
    let port = fake_server(2, |_| {
        b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 22\r\nConnection: close\r\n\r\n<h1>404 Not Found</h1>"
    });
    let store = store(&fake_settings(port), "s3cr3t-value");
    for e in [
        store.read(KEY).await.unwrap_err(),
        store.probe().await.unwrap_err(),
    ] {
        eprintln!("error: {e}");
        assert!(
            matches!(e, HandoverError::Store { status: 404, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("is objectStore.endpoint an S3 API?"),
            "{e}"
        );
    }
}

#[tokio::test]
async fn a_store_answering_5xx_is_retried_then_reported() {
    // Three 503 answers: the request is retried twice, then the answer is reported.
    let port = fake_server(3, |_| {
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 109\r\nConnection: close\r\n\r\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><Resource>/</Resource></Error>"
    });
    let store = store(&fake_settings(port), "s3cr3t-value");
    let started = Instant::now();
    let e = store.probe().await.unwrap_err();
    eprintln!("error: {e}");
    assert!(
        matches!(e, HandoverError::Store { status: 503, .. }),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("SlowDown: Please reduce your request rate."),
        "{e}"
    );
    // Backoff 0.5 s + 1 s between the three attempts.
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );
}

/// An object over the handover cap (64 MiB) is refused by its `Content-Length`, before its body
/// is read: the write of one is not verified (its read-back is refused) and a read of it fails
/// with the store's message.
#[tokio::test]
async fn an_object_over_the_cap_is_refused_without_being_read() {
    use stagehand_actions::action::ActionError;
    use stagehand_actions::clients::s3::MAX_OBJECT_BYTES;
    let minio = Minio::start(MinioOptions::default());
    let store = store(&settings(&minio), minio.secret_key());
    let oversized = vec![b'#'; MAX_OBJECT_BYTES + 1];
    let e = store.write_durable(KEY, oversized).await.unwrap_err();
    assert!(matches!(e, HandoverError::TooLarge { .. }), "{e:?}");
    let e = store.read(KEY).await.unwrap_err();
    let text = e.to_string();
    assert_eq!(
        text,
        format!(
            "the object \"{KEY}\" in bucket \"migrations\" at {} is larger than 67108864 bytes: it is not a handover Stagehand wrote",
            minio.endpoint()
        )
    );
    assert_clean(&text, &[minio.secret_key()]);
    assert!(matches!(
        ActionError::from(e),
        ActionError::InvalidAnswer(_)
    ));
    // Exactly the cap is read whole.
    let at_cap = vec![b'#'; MAX_OBJECT_BYTES];
    store.write_durable(KEY, at_cap).await.unwrap();
    assert_eq!(
        store.read(KEY).await.unwrap().map(|b| b.len()),
        Some(MAX_OBJECT_BYTES)
    );
}
