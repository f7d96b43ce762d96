//! Benchmark driver of `e2e/bench/ldap-identifiers`: builds `ldap_entryuuid_to_object_identifier`
//! from its JSON config (direct transport) and times its planning and apply phases.
//!
//! `bench-ldap-identifiers URL BIND_DN PASSWORD_FILE BASE_DN` prints `plan <seconds>`,
//! `apply <seconds>` and the two summaries (shortened), one per line.

use std::time::Instant;

use stagehand_actions::action::ActionConfig;
use stagehand_actions::action::{ActionContext, SecretValue, Secrets};

fn short(text: &str) -> String {
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        format!("{cut}...")
    } else {
        cut
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, bind_dn, password_file, base_dn] = args.as_slice() else {
        eprintln!("usage: bench-ldap-identifiers URL BIND_DN PASSWORD_FILE BASE_DN");
        return std::process::ExitCode::from(2);
    };
    let password = match std::fs::read_to_string(password_file) {
        Ok(p) => p.trim_end_matches('\n').to_string(),
        Err(e) => {
            eprintln!("bench-ldap-identifiers: {password_file}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let config = serde_json::json!({"ldap": {"url": url, "bindDn": bind_dn, "baseDn": base_dn}});
    let action = match stagehand_actions::instantiate(
        stagehand_actions::ldap_entryuuid_to_object_identifier::Config::ID,
        &config,
    ) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench-ldap-identifiers: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match stagehand_e2e::bench_runtime("bench-ldap-identifiers") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async {
        // The direct transport needs no cluster: the client points nowhere and is not used.
        let client = match "http://127.0.0.1:9"
            .parse()
            .map_err(|e| format!("{e}"))
            .and_then(|uri| {
                kube::Client::try_from(kube::Config::new(uri)).map_err(|e| e.to_string())
            }) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bench-ldap-identifiers: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let ctx = ActionContext {
            client,
            namespace: "bench".into(),
            secrets: Secrets::new([(
                "ldap-admin-password".to_string(),
                SecretValue::new(password),
            )]),
            object_store: None,
            run: Default::default(),
            stop: Default::default(),
            approved_findings: None,
            warnings: stagehand_actions::action::Warnings::default(),
            progress: Default::default(),
        };
        let t0 = Instant::now();
        let planned = match action.plan(&ctx).await {
            Ok(o) => o,
            Err(e) => {
                eprintln!("bench-ldap-identifiers: plan: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let t1 = Instant::now();
        let applied = match action.apply(&ctx).await {
            Ok(o) => o,
            Err(e) => {
                eprintln!("bench-ldap-identifiers: apply: {}", short(&e.to_string()));
                return std::process::ExitCode::FAILURE;
            }
        };
        let t2 = Instant::now();
        println!("plan {:.3}", (t1 - t0).as_secs_f64());
        println!("apply {:.3}", (t2 - t1).as_secs_f64());
        println!("planned {}", short(&planned.summary));
        println!("applied {}", short(&applied.summary));
        std::process::ExitCode::SUCCESS
    })
}
