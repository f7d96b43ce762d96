//! Step 4, `preflight`: before the first change of a stage, everything the planned actions
//! need from the run is checked for the whole stage at once — each needed secret file listed
//! and present (and every non-optional one present), the object store where a handover is
//! planned, that the history ledger can be written, and each action's own read-only proof of
//! connectivity and credentials. Every problem is reported together; nothing is applied when
//! there is one.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use stagehand_actions::action::{Action, ActionContext, RunIdentity, SecretValue, Secrets};
use stagehand_config::Stage;
use stagehand_crds::Migration;
use stagehand_crds::unversioned::SecretFile;
use tracing::info;

use super::assess::Assessed;
use super::conditions::Phase;
use super::freeze::Planned;
use super::reconcile::{Reconcile, Step};

/// A planned action, built from its declaration, with the name messages give it
/// (`action <index> <id>`).
pub struct Prepared {
    /// `action <index> <id>`.
    pub label: String,
    /// The action.
    pub action: Box<dyn Action>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// The secret files the planned actions read, each with the actions that read it (pure).
/// A handover also reads the object store's secret key file.
pub fn needed_files(
    actions: &[&Prepared],
    store_secret_key_file: Option<&str>,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in actions {
        let needs = p.action.needs();
        let mut files = needs.secret_files;
        if needs.handover.is_some()
            && let Some(file) = store_secret_key_file
        {
            files.push(file.to_string());
        }
        for file in files {
            let users = out.entry(file).or_default();
            if !users.contains(&p.label) {
                users.push(p.label.clone());
            }
        }
    }
    out
}

/// Problems the declarations alone show (pure): a needed secret file `secretFiles` does not
/// list, a handover without `objectStore`. Validation reports the same as declaration
/// problems; the preflight repeats them so that no run can get past them.
pub fn declared_problems(
    actions: &[&Prepared],
    files: &[SecretFile],
    has_store: bool,
    needed: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (file, users) in needed {
        if !files.iter().any(|f| &f.name == file) {
            problems.push(format!(
                "{} read(s) the secret file {file:?}, which secretFiles does not list",
                users.join(", ")
            ));
        }
    }
    if !has_store {
        for p in actions
            .iter()
            .filter(|p| p.action.needs().handover.is_some())
        {
            problems.push(format!(
                "{} hands work over in the object store, but the Migration declares no objectStore",
                p.label
            ));
        }
    }
    problems
}

/// The problem of a secret file whose Secret the run may not read (403 Forbidden): the
/// Secret, its namespace, who was refused (the operator, or the ServiceAccount the run
/// impersonates, `identity`) and the RBAC rule to add. The API server's answer names the
/// identity it refused; it never holds a value (the Secret was not read).
pub fn forbidden(
    file: &SecretFile,
    namespace: &str,
    identity: Option<&str>,
    answer: &str,
    readers: &str,
) -> String {
    let secret = &file.secret.name;
    let (who, fix) = match identity {
        // The operator itself may not impersonate: its own rule is missing.
        Some(user) if answer.contains("cannot impersonate") => (
            format!("the operator may not impersonate {user}, so the run may not read"),
            "grant the operator impersonate on serviceaccounts in this namespace (the chart does: tenancy.impersonate)".to_string(),
        ),
        Some(user) => (
            format!("{user} (the run's ServiceAccount) may not read"),
            format!(
                "grant that ServiceAccount get on secrets, resourceNames [{secret}], in a Role of namespace {namespace} bound to it"
            ),
        ),
        None => (
            "the operator may not read".to_string(),
            format!(
                "add {secret} to rbac.secretNames in the chart values (Role rule: secrets get resourceNames)"
            ),
        ),
    };
    format!(
        "secret file {:?}: {who} Secret {namespace}/{secret} (403 Forbidden: {answer}; {readers}): {fix}",
        file.name
    )
}

/// Reads the credentials named in `secretFiles` from their Secrets: the ones found, and every
/// problem — a needed file whose Secret or key is missing (optional or not), a non-optional
/// one missing, a Secret the operator may not read ([`forbidden`]), a Secret that cannot be
/// read. An optional file no planned action needs is not read at all. Messages name the secret
/// file and the Secret, never a value.
pub async fn load_secrets(
    client: &Client,
    identity: Option<&str>,
    namespace: &str,
    files: &[SecretFile],
    needed: &BTreeMap<String, Vec<String>>,
) -> (Secrets, Vec<String>) {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut values = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        let optional = file.secret.optional.unwrap_or(false);
        let users = needed.get(&file.name);
        if optional && users.is_none() {
            continue;
        }
        let readers = match users {
            Some(users) => format!("{} read(s) it", users.join(", ")),
            None => "it is not optional".to_string(),
        };
        let secret = match api.get_opt(&file.secret.name).await {
            Ok(s) => s,
            Err(kube::Error::Api(e)) if e.code == 403 => {
                problems.push(forbidden(file, namespace, identity, &e.message, &readers));
                continue;
            }
            Err(e) => {
                problems.push(format!(
                    "secret file {:?}: reading Secret {}/{}: {e}",
                    file.name, namespace, file.secret.name
                ));
                continue;
            }
        };
        let exists = secret.is_some();
        let value = secret
            .and_then(|s| s.data)
            .and_then(|d| d.get(&file.secret.key).cloned())
            .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned());
        match value {
            Some(v) => values.push((file.name.clone(), SecretValue::new(v))),
            None => {
                let missing = if exists {
                    format!(
                        "Secret {}/{} has no key {:?}",
                        namespace, file.secret.name, file.secret.key
                    )
                } else {
                    format!("Secret {}/{} does not exist", namespace, file.secret.name)
                };
                let why = if users.is_some() {
                    readers
                } else {
                    format!("and {readers}")
                };
                problems.push(format!("secret file {:?}: {missing} ({why})", file.name));
            }
        }
    }
    (Secrets::new(values), problems)
}

/// Every planned action's own preflight, all at once; the problems of those that failed.
/// An action whose secret files are not all in `ctx.secrets` is left out (its missing files
/// are already reported).
pub async fn prove(actions: &[&Prepared], ctx: &ActionContext) -> Vec<String> {
    let ready: Vec<&Prepared> = actions
        .iter()
        .copied()
        .filter(|p| {
            p.action
                .needs()
                .secret_files
                .iter()
                .all(|f| ctx.secrets.get(f).is_ok())
        })
        .collect();
    let results = futures::future::join_all(ready.iter().map(|p| p.action.preflight(ctx))).await;
    ready
        .iter()
        .zip(results)
        .filter_map(|(p, r)| r.err().map(|e| format!("{}: {e}", p.label)))
        .collect()
}

/// `N problem(s) found before the first change, nothing was applied: ...`.
pub fn message(problems: &[String]) -> String {
    format!(
        "preflight: {} problem(s) found before the first change, nothing was applied: {}",
        problems.len(),
        problems.join("; ")
    )
}

/// The preflight step: builds the actions' context (the secrets they read, and the client of
/// the run's ServiceAccount, [`super::context::Tenancy`]) and, on the first pass, proves
/// everything before the first change; on resume, the secrets are loaded again.
pub(super) async fn step(
    r: &mut Reconcile,
    migration: &Migration,
    assessed: &Assessed,
    planned: &Planned,
) -> Step<ActionContext> {
    let files = migration.spec.secret_files.as_slice();
    let store = migration.spec.object_store.as_ref();
    let actions: Vec<&Prepared> = planned.prepared.iter().map(|(_, p)| p).collect();
    let needed = needed_files(&actions, store.map(|s| s.secret_key_file.as_str()));
    let first_pass = r.status.actions.iter().all(|a| a.start_time.is_none());
    let namespace = r.run.namespace().unwrap_or_default();
    // Every Kubernetes call of the preflight and the actions is the run's ServiceAccount's;
    // the ledger, the status and the Events below stay the operator's.
    let run_client = match r.context.tenancy.client(
        &r.context.client,
        &namespace,
        migration.spec.service_account_name.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            let message = message(&[e.to_string()]);
            return if first_pass {
                r.stop(Phase::PreflightFailed(message)).await
            } else {
                r.stop(Phase::Failed(message)).await
            };
        }
    };
    if first_pass && let Some(identity) = &run_client.identity {
        info!(%identity, "the run's Kubernetes calls impersonate its ServiceAccount");
    }
    let mut ctx = ActionContext {
        client: run_client.client.clone(),
        namespace,
        secrets: Secrets::default(),
        object_store: store.cloned(),
        run: RunIdentity {
            release: migration.spec.release_version.clone(),
            name: r.run.metadata.name.clone(),
            uid: r.run.metadata.uid.clone(),
            apply_follows: false,
        },
        stop: r.context.steering.stop.clone(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    };
    // The run writes the ledger when a tagged action succeeds, and a post run when it ends.
    let writes_ledger = !r.run.spec.dry_run
        && (r.run.spec.stage == Stage::Post
            || r.status.actions.iter().any(|a| {
                a.decision == stagehand_crds::unversioned::ActionDecision::Run && a.tag.is_some()
            }));
    let mut problems = Vec::new();
    if first_pass && writes_ledger {
        match assessed.history.prove_writable().await {
            Ok(()) => {}
            // Refused (RBAC, a quota, an admission policy): a problem of the stage.
            Err(e) if e.is_refused() => problems.push(e.to_string()),
            // Out of reach for a moment: the reconcile is tried again.
            Err(e) => return Err(e.into()),
        }
    }
    if !planned.prepared.is_empty() {
        if first_pass {
            problems.extend(declared_problems(&actions, files, store.is_some(), &needed));
        }
        let (secrets, missing) = load_secrets(
            &run_client.client,
            run_client.identity.as_deref(),
            &ctx.namespace,
            files,
            &needed,
        )
        .await;
        ctx.secrets = secrets;
        problems.extend(missing);
        if first_pass {
            problems.extend(prove(&actions, &ctx).await);
            // What the proofs warned of (an unverified certificate) is on the run at once;
            // each action's own run records it again in its summary.
            for warning in std::mem::take(&mut ctx.warnings).list() {
                r.event(
                    EventType::Warning,
                    super::execute::INSECURE_SETTING,
                    format!("preflight: {warning}"),
                )
                .await;
            }
        }
    }
    if !problems.is_empty() {
        let message = message(&problems);
        return if first_pass {
            r.stop(Phase::PreflightFailed(message)).await
        } else {
            r.stop(Phase::Failed(message)).await
        };
    }
    if first_pass && !planned.prepared.is_empty() {
        info!(actions = planned.prepared.len(), "preflight passed");
    }
    Ok(ControlFlow::Continue(ctx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagehand_crds::unversioned::SecretKeyRef;

    fn prepared(index: usize, id: &str, config: serde_json::Value) -> Prepared {
        match stagehand_actions::instantiate(id, &config) {
            Ok(action) => Prepared {
                label: format!("action {index} {id}"),
                action,
            },
            Err(e) => panic!("{id}: {e}"),
        }
    }

    fn file(name: &str) -> SecretFile {
        SecretFile {
            name: name.into(),
            secret: SecretKeyRef {
                name: format!("{name}-secret"),
                key: "k".into(),
                optional: None,
            },
        }
    }

    #[test]
    fn needed_files_name_their_readers_and_the_store_key() {
        let actions = [
            prepared(
                0,
                "provisioning_drop_subscriptions",
                serde_json::json!({"subscriptions": ["a"]}),
            ),
            prepared(
                1,
                "workload_scale",
                serde_json::json!({"workload": {"kind": "StatefulSet", "name": "x", "replicas": 0}}),
            ),
        ];
        let actions: Vec<&Prepared> = actions.iter().collect();
        let needed = needed_files(&actions, Some("store-key"));
        assert_eq!(
            needed.get("provisioning-api-password"),
            Some(&vec![
                "action 0 provisioning_drop_subscriptions".to_string()
            ])
        );
        assert!(!needed.contains_key("store-key"), "no handover planned");
        let problems = declared_problems(&actions, &[file("redis-password")], false, &needed);
        assert_eq!(
            problems,
            [
                "action 0 provisioning_drop_subscriptions read(s) the secret file \"provisioning-api-password\", which secretFiles does not list"
            ]
        );
        assert!(
            declared_problems(
                &actions,
                &[file("provisioning-api-password")],
                false,
                &needed
            )
            .is_empty()
        );
    }

    #[test]
    fn a_forbidden_secret_names_the_secret_and_the_rule_to_add() {
        let message = forbidden(
            &file("redis-password"),
            "opendesk",
            None,
            "secrets \"redis-password-secret\" is forbidden",
            "action 0 flush_intercom_sessions read(s) it",
        );
        assert_eq!(
            message,
            "secret file \"redis-password\": the operator may not read Secret opendesk/redis-password-secret (403 Forbidden: secrets \"redis-password-secret\" is forbidden; action 0 flush_intercom_sessions read(s) it): add redis-password-secret to rbac.secretNames in the chart values (Role rule: secrets get resourceNames)"
        );
    }

    #[test]
    fn a_secret_the_run_s_service_account_may_not_read_names_it_and_the_role_to_add() {
        let tenant = "system:serviceaccount:opendesk:tenant";
        let message = forbidden(
            &file("redis-password"),
            "opendesk",
            Some(tenant),
            "secrets \"redis-password-secret\" is forbidden: User \"system:serviceaccount:opendesk:tenant\" cannot get resource \"secrets\"",
            "action 0 flush_intercom_sessions read(s) it",
        );
        assert!(
            message.starts_with("secret file \"redis-password\": system:serviceaccount:opendesk:tenant (the run's ServiceAccount) may not read Secret opendesk/redis-password-secret (403 Forbidden: "),
            "{message}"
        );
        assert!(
            message.ends_with("grant that ServiceAccount get on secrets, resourceNames [redis-password-secret], in a Role of namespace opendesk bound to it"),
            "{message}"
        );
        let refused = forbidden(
            &file("redis-password"),
            "opendesk",
            Some(tenant),
            "users \"system:serviceaccount:opendesk:tenant\" is forbidden: User \"system:serviceaccount:stagehand:stagehand\" cannot impersonate resource \"users\"",
            "it is not optional",
        );
        assert!(
            refused.starts_with("secret file \"redis-password\": the operator may not impersonate system:serviceaccount:opendesk:tenant"),
            "{refused}"
        );
        assert!(
            refused.contains("impersonate on serviceaccounts"),
            "{refused}"
        );
    }

    #[test]
    fn the_message_counts_every_problem() {
        assert_eq!(
            message(&["a".into(), "b".into()]),
            "preflight: 2 problem(s) found before the first change, nothing was applied: a; b"
        );
    }
}
