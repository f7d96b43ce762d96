//! The simulator binaries as the demo runs them: separate processes on free ports, the admin
//! password from a file, a seed file, steered over `/_sim/`, stopped with SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};
use serde_json::json;

/// A simulator process, killed (by its PID) when dropped.
struct Sim {
    child: Child,
    url: String,
    _dir: TempDir,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sim {
    /// Sends SIGTERM and waits for a clean exit.
    fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the simulator ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "stagehand-sim-{tag}-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spawn(bin: &str, tag: &str, seed: serde_json::Value, extra: &[&str]) -> Sim {
    let dir = TempDir::new(tag);
    let password = dir.0.join("admin-password");
    std::fs::write(&password, "file-secret\n").unwrap();
    let seed_file = dir.0.join("seed.json");
    std::fs::write(&seed_file, seed.to_string()).unwrap();
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--admin-user", "admin"])
        .arg("--admin-password-file")
        .arg(&password)
        .arg("--seed")
        .arg(&seed_file)
        .args(extra)
        .env_remove("SIM_ADMIN_PASSWORD")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    Sim {
        child,
        url,
        _dir: dir,
    }
}

#[tokio::test]
async fn provisioning_sim_process_serves_its_seed_and_obeys_the_control_api() {
    let sim = spawn(
        env!("CARGO_BIN_EXE_provisioning-sim"),
        "prov",
        json!({"subscriptions": [{"name": "ox-connector", "realms_topics": [{"realm": "udm", "topic": "users/user"}], "request_prefill": true, "password": "ox"}]}),
        &[],
    );
    let c = Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let list = c
        .get(format!("{}/v1/subscriptions", sim.url))
        .basic_auth("admin", Some("file-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);
    let list: serde_json::Value = list.json().await.unwrap();
    assert_eq!(list[0]["name"], "ox-connector");
    assert_eq!(list[0]["prefill_queue_status"], "pending");

    // Another process steers the faults.
    let r = c
        .post(format!("{}/_sim/faults", sim.url))
        .json(&json!({"method": "DELETE", "when": {"nth": 1}, "fault": {"kind": "status", "status": 500}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let url = format!("{}/v1/subscriptions/ox-connector", sim.url);
    let first = c
        .delete(&url)
        .basic_auth("admin", Some("file-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let second = c
        .delete(&url)
        .basic_auth("admin", Some("file-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let log: serde_json::Value = c
        .get(format!("{}/_sim/requests", sim.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let statuses: Vec<&serde_json::Value> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["status"])
        .collect();
    assert_eq!(statuses, vec![&json!(200), &json!(500), &json!(200)]);

    let status = sim.terminate();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn ox_soap_sim_process_uses_master_password_from_file() {
    let sim = spawn(
        env!("CARGO_BIN_EXE_ox-soap-sim"),
        "ox",
        json!({"contexts": [{"id": 1, "users": [{"name": "alice", "email": "a@example.org"}]}]}),
        &["--username-not-changeable"],
    );
    let envelope = |op: &str, inner: &str| {
        format!(
            r#"<e:Envelope xmlns:e="http://schemas.xmlsoap.org/soap/envelope/"><e:Body><t:{op} xmlns:t="http://soap.admin.openexchange.com" xmlns:d="http://dataobjects.soap.admin.openexchange.com/xsd" xmlns:r="http://dataobjects.rmi.admin.openexchange.com/xsd"><t:ctx><d:id>1</d:id></t:ctx>{inner}<t:auth><r:login>admin</r:login><r:password>file-secret</r:password></t:auth></t:{op}></e:Body></e:Envelope>"#
        )
    };
    let c = Client::new();
    let data = c
        .post(format!("{}/webservices/OXUserService", sim.url))
        .body(envelope(
            "getData",
            "<t:user><d:name>alice</d:name></t:user>",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(data.status(), StatusCode::OK);
    assert!(
        data.text()
            .await
            .unwrap()
            .contains("<ns2:name>alice</ns2:name>")
    );

    let rename = c
        .post(format!("{}/webservices/OXUserService", sim.url))
        .body(envelope(
            "change",
            "<t:usrdata><d:id>3</d:id><d:name>new</d:name></t:usrdata>",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(rename.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        rename
            .text()
            .await
            .unwrap()
            .contains("Changing username is disabled!")
    );

    let status = sim.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_missing_password_is_reported() {
    let output = Command::new(env!("CARGO_BIN_EXE_provisioning-sim"))
        .env_remove("SIM_ADMIN_PASSWORD")
        .env_remove("SIM_ADMIN_PASSWORD_FILE")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--admin-password-file"), "{stderr}");
    assert!(output.stdout.is_empty());

    let output = Command::new(env!("CARGO_BIN_EXE_ox-soap-sim"))
        .args(["--admin-password-file", "/nonexistent/pw"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/pw"));
}
