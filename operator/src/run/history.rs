//! The history ledger on the cluster: a ConfigMap in the Migration's namespace (named by
//! `spec.historyConfigMap`, default `<migration>-history`) with no owner reference, so it
//! outlives the Migration. Every footprint and the last migrated release are written here
//! first (resourceVersion-guarded), then mirrored into the Migration's status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use stagehand_crds::Migration;
use stagehand_crds::unversioned::MigrationStatus;

use super::ledger::{Ledger, LedgerError, ledger_name};
use super::status::{StatusError, update_migration_status};

/// Why the history could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The ledger exists but cannot be read; it is left as it is.
    #[error(
        "the history ledger ConfigMap {namespace}/{name} cannot be read: {why}. Nothing was changed; restore the ledger from a backup (docs/api.md, \"The history ledger\") or fix it, then create a new MigrationRun"
    )]
    Unreadable {
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
        /// What is wrong.
        why: LedgerError,
    },
    /// The API server refused or could not be reached.
    #[error("{context} the history ledger ConfigMap {namespace}/{name}: {source}")]
    Api {
        /// What was done.
        context: &'static str,
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
        /// The answer.
        source: Box<kube::Error>,
    },
    /// The API server refused a write of the ledger proven with a dry run
    /// ([`History::prove_writable`]): RBAC, a ResourceQuota, an admission webhook or policy.
    #[error(
        "the operator may not {verb} the history ledger ConfigMap {namespace}/{name} (the API server answered {code} {reason}: {answer}): {}",
        remedy(verb, namespace, *code, answer)
    )]
    Refused {
        /// What was refused: `get`, `create` or `update`.
        verb: &'static str,
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
        /// The API server's HTTP code.
        code: u16,
        /// Its reason (`Forbidden`, `Invalid`, …).
        reason: String,
        /// Its message.
        answer: String,
    },
    /// Others kept writing the ledger.
    #[error("the history ledger ConfigMap {namespace}/{name} kept changing; will retry")]
    Contended {
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
    },
    /// Mirroring into the Migration's status failed.
    #[error(transparent)]
    Status(#[from] StatusError),
}

impl HistoryError {
    /// Whether the ledger is malformed (the run stalls with `HistoryUnreadable`) rather than
    /// out of reach for a moment (the reconcile is retried).
    pub fn is_unreadable(&self) -> bool {
        matches!(self, HistoryError::Unreadable { .. })
    }

    /// Whether the API server refused the ledger's write ([`HistoryError::Refused`]: it stays
    /// refused until someone changes RBAC, a quota or a policy) rather than could not answer
    /// for a moment.
    pub fn is_refused(&self) -> bool {
        matches!(self, HistoryError::Refused { .. })
    }

    /// A 409 from the API server: someone else wrote first.
    fn is_conflict(&self) -> bool {
        matches!(self, HistoryError::Api { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 409))
    }
}

/// What to do about a refused `verb` of the ledger in `namespace`, told by the API server's
/// answer: a ResourceQuota (`exceeded quota`), RBAC (`User "…" cannot <verb> resource
/// "configmaps"`), or else an admission webhook or policy.
fn remedy(verb: &str, namespace: &str, code: u16, answer: &str) -> String {
    let what = if answer.contains("exceeded quota") {
        format!(
            "a ResourceQuota of namespace {namespace} has no room for it: raise the quota named above (count/configmaps) or remove ConfigMaps it counts"
        )
    } else if code == 403 && answer.contains(" cannot ") && answer.contains("\"configmaps\"") {
        format!(
            "grant the operator's ServiceAccount get, create and update on configmaps in namespace {namespace} (the chart's Role, docs/deploy.md)"
        )
    } else {
        format!(
            "an admission webhook or policy refused it: let it allow the operator to {verb} this ConfigMap (labels {}={}, {MIGRATION_LABEL}=<migration>)",
            MANAGED_BY.0, MANAGED_BY.1
        )
    };
    format!("{what}, then create a new MigrationRun")
}

/// Whether an answer of the API server is a refusal that stays until someone changes
/// something, rather than a conflict (409: someone wrote first), a throttle (429) or the API
/// server failing (5xx).
fn is_refusal(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 409 | 429)
}

/// What [`History::update_seeded`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    /// The ledger as written.
    pub ledger: Ledger,
    /// Whether the ledger was gone and was written again from the seed's history (the caller
    /// records an Event `HistoryRecreated`).
    pub recreated: bool,
}

/// The ledger a change starts from: the `existing` one; when there is none, the history
/// `seed` recorded ([`Ledger::from_status`]), `recreated` when that holds anything — a ledger
/// is never started from nothing while the Migration's status holds history.
pub fn start(existing: Option<Ledger>, seed: Option<&MigrationStatus>) -> Updated {
    match existing {
        Some(ledger) => Updated {
            ledger,
            recreated: false,
        },
        None => {
            let ledger = seed.map(Ledger::from_status).unwrap_or_default();
            Updated {
                recreated: !ledger.is_empty(),
                ledger,
            }
        }
    }
}

/// The ledger of one Migration.
#[derive(Clone)]
pub struct History {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
    migration: String,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The label every ledger carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "stagehand");
/// The label naming the Migration a ledger belongs to.
pub const MIGRATION_LABEL: &str = "stagehand.dev/migration";
/// The annotations every ledger carries so that a GitOps tool never overwrites or prunes it:
/// the operator writes the ledger as runs finish, so any copy in git is stale, and syncing or
/// pruning it would roll back recorded footprints and make one-shot actions run again. Argo
/// CD: leave it out of the application's sync status, never prune it; Flux: never apply a
/// source's copy over it, never prune it (docs/adopting-opendesk.md).
pub const GITOPS_ANNOTATIONS: [(&str, &str); 3] = [
    ("argocd.argoproj.io/compare-options", "IgnoreExtraneous"),
    ("argocd.argoproj.io/sync-options", "Prune=false"),
    ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
];

/// The ConfigMap holding `ledger` for `migration`, as the operator creates it and
/// `stagehand import-opendesk` prints and applies it: the ledger's labels and
/// [`GITOPS_ANNOTATIONS`]. The one place a ledger object is built.
pub fn ledger_object(
    name: &str,
    namespace: Option<&str>,
    migration: &str,
    ledger: &Ledger,
) -> ConfigMap {
    let mut metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(BTreeMap::from([
            (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
            (MIGRATION_LABEL.to_string(), migration.to_string()),
        ])),
        ..ObjectMeta::default()
    };
    add_gitops_annotations(&mut metadata);
    ConfigMap {
        metadata,
        data: Some(ledger.to_data()),
        ..ConfigMap::default()
    }
}

/// Adds each of [`GITOPS_ANNOTATIONS`] the object lacks (a value already there, e.g. an
/// Argo CD `sync-options` with more options, is kept); returns whether it added one.
pub fn add_gitops_annotations(metadata: &mut ObjectMeta) -> bool {
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut added = false;
    for (key, value) in GITOPS_ANNOTATIONS {
        if !annotations.contains_key(key) {
            annotations.insert(key.to_string(), value.to_string());
            added = true;
        }
    }
    added
}

impl History {
    /// The ledger of `migration`.
    pub fn of(client: &Client, migration: &Migration) -> Self {
        let namespace = migration.namespace().unwrap_or_default();
        Self {
            api: Api::namespaced(client.clone(), &namespace),
            name: ledger_name(
                &migration.name_any(),
                migration.spec.history_config_map.as_deref(),
            ),
            namespace,
            migration: migration.name_any(),
        }
    }

    /// The ConfigMap's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn api_error(&self, context: &'static str) -> impl FnOnce(kube::Error) -> HistoryError {
        let (namespace, name) = (self.namespace.clone(), self.name.clone());
        move |source| HistoryError::Api {
            context,
            namespace,
            name,
            source: Box::new(source),
        }
    }

    /// A refusal ([`is_refusal`]) of `verb` as [`HistoryError::Refused`], anything else as
    /// [`HistoryError::Api`].
    fn refusal(&self, context: &'static str, verb: &'static str, e: kube::Error) -> HistoryError {
        match e {
            kube::Error::Api(s) if is_refusal(s.code) => HistoryError::Refused {
                verb,
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                code: s.code,
                reason: s.reason,
                answer: s.message,
            },
            source => self.api_error(context)(source),
        }
    }

    fn unreadable(&self, why: LedgerError) -> HistoryError {
        HistoryError::Unreadable {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            why,
        }
    }

    fn parse(&self, cm: &ConfigMap) -> Result<Ledger, HistoryError> {
        Ledger::parse(&cm.data.clone().unwrap_or_default()).map_err(|why| self.unreadable(why))
    }

    /// The ledger, or `None` when there is none.
    pub async fn read(&self) -> Result<Option<Ledger>, HistoryError> {
        let cm = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(self.api_error("reading"))?;
        cm.map(|cm| self.parse(&cm)).transpose()
    }

    /// The ledger; when there is none but the Migration's status recorded a history (a
    /// Migration created before the ledger existed), writes it from that status first.
    pub async fn ensure(&self, status: Option<&MigrationStatus>) -> Result<Ledger, HistoryError> {
        if let Some(ledger) = self.read().await? {
            return Ok(ledger);
        }
        let seeded = status.map(Ledger::from_status).unwrap_or_default();
        if seeded.is_empty() {
            return Ok(seeded);
        }
        tracing::info!(ledger = %self.name, footprints = seeded.footprints.len(), "writing the history ledger from the Migration's status");
        match self.create(&seeded).await {
            Ok(()) => Ok(seeded),
            // Someone else wrote it meanwhile: theirs is the record.
            Err(e) if e.is_conflict() => self.read().await.map(Option::unwrap_or_default),
            Err(e) => Err(e),
        }
    }

    /// The ConfigMap holding `ledger`, as [`History::update`] creates it.
    fn object(&self, ledger: &Ledger) -> ConfigMap {
        ledger_object(&self.name, Some(&self.namespace), &self.migration, ledger)
    }

    async fn create(&self, ledger: &Ledger) -> Result<(), HistoryError> {
        self.api
            .create(&PostParams::default(), &self.object(ledger))
            .await
            .map(drop)
            .map_err(self.api_error("creating"))
    }

    /// Proves, before the first change of a run, that the ledger can be written: a
    /// server-side dry run (`dryRun=All`, nothing is stored) of the write the run will make —
    /// a `replace` of the ConfigMap as read when it exists (update allowed: RBAC, admission
    /// webhooks and policies), else a `create` of the ConfigMap [`History::update`] would
    /// create, with its labels and an empty ledger (create allowed: RBAC, a ResourceQuota,
    /// admission webhooks and policies — all evaluate dry-run requests). A refusal is
    /// [`HistoryError::Refused`], naming the ConfigMap, the API server's answer and what to
    /// do; an API server that cannot answer is [`HistoryError::Api`].
    pub async fn prove_writable(&self) -> Result<(), HistoryError> {
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        for _ in 0..5 {
            let current = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(|e| self.refusal("reading", "get", e))?;
            let (verb, answer) = match current {
                Some(cm) => ("update", self.api.replace(&self.name, &dry_run, &cm).await),
                None => {
                    let cm = self.object(&Ledger::default());
                    ("create", self.api.create(&dry_run, &cm).await)
                }
            };
            match answer {
                Ok(_) => return Ok(()),
                // Written, created or deleted meanwhile: prove the write against what is there.
                Err(kube::Error::Api(s))
                    if s.code == 409 || (s.code == 404 && verb == "update") =>
                {
                    continue;
                }
                Err(e) => return Err(self.refusal("proving a write of", verb, e)),
            }
        }
        Err(HistoryError::Contended {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        })
    }

    /// Reads the ledger, lets `change` edit it, and writes it back guarded by the
    /// resourceVersion read (creating it when there is none, from nothing); retries on a
    /// conflict. A malformed ledger is never rewritten. Returns the ledger as written.
    /// [`History::update_seeded`] without a seed.
    pub async fn update<F>(&self, change: F) -> Result<Ledger, HistoryError>
    where
        F: FnMut(&mut Ledger),
    {
        self.update_seeded(None, change).await.map(|u| u.ledger)
    }

    /// Reads the ledger, lets `change` edit it, and writes it back guarded by the
    /// resourceVersion read; retries on a conflict. A malformed ledger is never rewritten.
    /// When there is no ledger, the one created starts from the history `seed` holds (the
    /// Migration's status: [`start`]) — never from nothing while the status holds history —
    /// and [`Updated::recreated`] tells that it did. Returns the ledger as written.
    pub async fn update_seeded<F>(
        &self,
        seed: Option<&MigrationStatus>,
        mut change: F,
    ) -> Result<Updated, HistoryError>
    where
        F: FnMut(&mut Ledger),
    {
        for _ in 0..10 {
            let current = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(self.api_error("reading"))?;
            let existing = current.as_ref().map(|cm| self.parse(cm)).transpose()?;
            let Updated {
                mut ledger,
                recreated,
            } = start(existing, seed);
            let before = ledger.clone();
            change(&mut ledger);
            let Some(mut cm) = current else {
                match self.create(&ledger).await {
                    Ok(()) => return Ok(Updated { ledger, recreated }),
                    // Someone else created it meanwhile: change theirs.
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e),
                }
            };
            if ledger == before {
                return Ok(Updated { ledger, recreated });
            }
            cm.data = Some(ledger.to_data());
            // A ledger written before the annotations existed gains them with its next write.
            add_gitops_annotations(&mut cm.metadata);
            // `replace` sends the resourceVersion read: a concurrent writer makes it 409.
            match self
                .api
                .replace(&self.name, &PostParams::default(), &cm)
                .await
            {
                Ok(_) => return Ok(Updated { ledger, recreated }),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(source) => return Err(self.api_error("writing")(source)),
            }
        }
        Err(HistoryError::Contended {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        })
    }
}

/// Mirrors the ledger into the Migration's `status.history` and `status.lastMigratedRelease`
/// (status is a copy: reconstructible from the ledger). A Migration deleted meanwhile has no
/// status to mirror into: the ledger holds the record, and a recreated Migration shows it.
pub async fn mirror(
    migrations: &Api<Migration>,
    name: &str,
    ledger: &Ledger,
) -> Result<(), HistoryError> {
    match update_migration_status(migrations, name, |s| ledger.mirror_into(s)).await {
        Ok(_) => Ok(()),
        Err(StatusError::Write {
            source: kube::Error::Api(e),
            ..
        }) if e.code == 404 => {
            tracing::info!(migration = %name, "the Migration is gone: the history ledger alone holds the record");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::State;
    use axum::http::{Method, StatusCode, Uri, header};
    use axum::response::{IntoResponse, Response};
    use serde_json::{Value, json};
    use stagehand_config::Stage;
    use stagehand_crds::unversioned::HistoryEntry;

    use super::*;

    /// The part of an API server the ledger talks to: one ConfigMap path, one stored object.
    #[derive(Default)]
    struct Fake {
        stored: Option<Value>,
        version: u64,
        /// The answer to every write: `(code, reason, message)`.
        refuse: Option<(u16, &'static str, &'static str)>,
        /// `METHOD path?query` of every request.
        requests: Vec<String>,
    }

    fn answer(code: u16, body: &Value) -> Response {
        (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }

    fn status(code: u16, reason: &str, message: &str) -> Response {
        answer(
            code,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": message, "reason": reason, "code": code}),
        )
    }

    async fn serve_fake(
        State(fake): State<Arc<Mutex<Fake>>>,
        method: Method,
        uri: Uri,
        body: String,
    ) -> Response {
        let mut f = fake
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.requests.push(format!("{method} {uri}"));
        let dry_run = uri.query().is_some_and(|q| q.contains("dryRun=All"));
        if method != Method::GET
            && let Some((code, reason, message)) = f.refuse
        {
            return status(code, reason, message);
        }
        let mut sent: Value = serde_json::from_str(&body).unwrap_or_default();
        match (method, f.stored.clone()) {
            (Method::GET, Some(cm)) => answer(200, &cm),
            (Method::GET, None) | (Method::PUT, None) => status(404, "NotFound", "not found"),
            (Method::POST, Some(_)) => status(409, "AlreadyExists", "already exists"),
            (Method::PUT, Some(cm))
                if sent["metadata"]["resourceVersion"] != cm["metadata"]["resourceVersion"] =>
            {
                status(409, "Conflict", "the object has been modified")
            }
            (method, _) => {
                f.version += 1;
                sent["metadata"]["resourceVersion"] = json!(f.version.to_string());
                if !dry_run {
                    f.stored = Some(sent.clone());
                }
                answer(if method == Method::POST { 201 } else { 200 }, &sent)
            }
        }
    }

    /// A [`History`] of Migration `opendesk` in namespace `ns`, talking to `fake`.
    async fn history(fake: &Arc<Mutex<Fake>>) -> History {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let router = Router::new().fallback(serve_fake).with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        let config = kube::Config::new(url.parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        History {
            api: Api::namespaced(client, "ns"),
            namespace: "ns".into(),
            name: "opendesk-history".into(),
            migration: "opendesk".into(),
        }
    }

    fn fake() -> Arc<Mutex<Fake>> {
        Arc::new(Mutex::new(Fake::default()))
    }

    fn with<T>(fake: &Arc<Mutex<Fake>>, f: impl FnOnce(&mut Fake) -> T) -> T {
        f(&mut fake
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn entry(id: &str) -> HistoryEntry {
        HistoryEntry {
            stage: Some(Stage::Pre),
            id: id.into(),
            tag: Some("v1.18.0".into()),
            run_mode: None,
            release: Some("v1.18.0".into()),
            run_name: Some("opendesk-v1.18.0-pre".into()),
            completed_at: None,
        }
    }

    fn seed() -> MigrationStatus {
        MigrationStatus {
            last_migrated_release: Some("v1.17.3".into()),
            history: vec![entry("ldap_entryuuid_to_object_identifier")],
            ..MigrationStatus::default()
        }
    }

    const PATH: &str = "/api/v1/namespaces/ns/configmaps";

    #[tokio::test]
    async fn the_write_is_proven_with_a_dry_run_and_nothing_is_stored() {
        let fake = fake();
        let h = history(&fake).await;
        h.prove_writable().await.expect("create allowed");
        let requests = with(&fake, |f| std::mem::take(&mut f.requests));
        assert_eq!(
            requests,
            [
                format!("GET {PATH}/opendesk-history"),
                format!("POST {PATH}?&dryRun=All")
            ]
        );
        assert!(
            with(&fake, |f| f.stored.is_none()),
            "a dry run stores nothing"
        );

        h.update(|l| {
            l.record(entry("x"));
        })
        .await
        .expect("written");
        let stored = with(&fake, |f| f.stored.clone());
        h.prove_writable().await.expect("update allowed");
        let requests = with(&fake, |f| std::mem::take(&mut f.requests));
        assert_eq!(
            requests[requests.len() - 2..],
            [
                format!("GET {PATH}/opendesk-history"),
                format!("PUT {PATH}/opendesk-history?&dryRun=All")
            ]
        );
        assert_eq!(with(&fake, |f| f.stored.clone()), stored);
        assert_eq!(
            stored.as_ref().map(|cm| cm["metadata"]["labels"].clone()),
            Some(json!({"app.kubernetes.io/managed-by": "stagehand",
                        "stagehand.dev/migration": "opendesk"}))
        );
    }

    #[tokio::test]
    async fn every_ledger_written_carries_the_gitops_annotations() {
        let gitops = json!({"argocd.argoproj.io/compare-options": "IgnoreExtraneous",
                            "argocd.argoproj.io/sync-options": "Prune=false",
                            "kustomize.toolkit.fluxcd.io/reconcile": "disabled"});
        // Created by the operator.
        let fake = fake();
        let h = history(&fake).await;
        h.update(|l| {
            l.record(entry("x"));
        })
        .await
        .expect("written");
        let stored = with(&fake, |f| f.stored.clone()).expect("created");
        assert_eq!(stored["metadata"]["annotations"], gitops);
        // A ledger written before the annotations existed gains them with its next write; a
        // value already there stays.
        with(&fake, |f| {
            if let Some(cm) = f.stored.as_mut() {
                cm["metadata"]["annotations"] =
                    json!({"argocd.argoproj.io/sync-options": "Prune=false,Delete=false"});
            }
        });
        h.update(|l| {
            l.record(entry("y"));
        })
        .await
        .expect("written");
        let stored = with(&fake, |f| f.stored.clone()).expect("stored");
        let mut want = gitops.clone();
        want["argocd.argoproj.io/sync-options"] = json!("Prune=false,Delete=false");
        assert_eq!(stored["metadata"]["annotations"], want);
    }

    #[tokio::test]
    async fn a_refused_write_names_the_configmap_the_answer_and_what_to_do() {
        let fake = fake();
        let h = history(&fake).await;
        for (code, reason, answer, what_to_do) in [
            (
                403,
                "Forbidden",
                "configmaps \"opendesk-history\" is forbidden: exceeded quota: cms, requested: count/configmaps=1, used: count/configmaps=4, limited: count/configmaps=4",
                "a ResourceQuota of namespace ns has no room for it: raise the quota named above (count/configmaps) or remove ConfigMaps it counts, then create a new MigrationRun",
            ),
            (
                403,
                "Forbidden",
                "configmaps \"opendesk-history\" is forbidden: User \"system:serviceaccount:stagehand:stagehand\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"ns\"",
                "grant the operator's ServiceAccount get, create and update on configmaps in namespace ns (the chart's Role, docs/deploy.md), then create a new MigrationRun",
            ),
            (
                400,
                "BadRequest",
                "admission webhook \"policy.example\" denied the request: no",
                "an admission webhook or policy refused it: let it allow the operator to create this ConfigMap (labels app.kubernetes.io/managed-by=stagehand, stagehand.dev/migration=<migration>), then create a new MigrationRun",
            ),
        ] {
            with(&fake, |f| f.refuse = Some((code, reason, answer)));
            let e = h.prove_writable().await.expect_err("refused");
            assert!(e.is_refused(), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!(
                    "the operator may not create the history ledger ConfigMap ns/opendesk-history (the API server answered {code} {reason}: {answer}): {what_to_do}"
                )
            );
        }

        // An API server failing for a moment is not a refusal.
        with(&fake, |f| {
            f.refuse = Some((500, "InternalError", "etcdserver: request timed out"))
        });
        let e = h.prove_writable().await.expect_err("failed");
        assert!(!e.is_refused(), "{e:?}");
        assert!(matches!(e, HistoryError::Api { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_lost_ledger_is_written_again_from_the_seed() {
        let fake = fake();
        let h = history(&fake).await;
        let seed = seed();
        let written = h
            .update_seeded(Some(&seed), |l| {
                l.record(entry("workload_scale"));
            })
            .await
            .expect("written");
        assert!(written.recreated);
        assert_eq!(
            written.ledger.last_migrated_release.as_deref(),
            Some("v1.17.3")
        );
        assert_eq!(
            written.ledger.history(),
            [
                entry("ldap_entryuuid_to_object_identifier"),
                entry("workload_scale")
            ]
        );
        let stored = with(&fake, |f| f.stored.clone()).expect("created");
        assert_eq!(
            serde_json::to_value(written.ledger.to_data()).ok(),
            Some(stored["data"].clone())
        );

        // It exists now: changed as it is, not recreated.
        let again = h
            .update_seeded(Some(&seed), |l| {
                l.record(entry("third"));
            })
            .await
            .expect("written");
        assert!(!again.recreated);
        assert_eq!(again.ledger.footprints.len(), 3);

        // Without a seed (or an empty one), it starts from nothing, as `update` always did.
        let fake = self::fake();
        let h = history(&fake).await;
        let written = h
            .update_seeded(Some(&MigrationStatus::default()), |l| {
                l.record(entry("workload_scale"));
            })
            .await
            .expect("written");
        assert!(!written.recreated);
        assert_eq!(written.ledger.history(), [entry("workload_scale")]);
    }

    #[test]
    fn the_starting_ledger_is_the_existing_one_else_the_seed() {
        let seed = seed();
        let existing = Ledger {
            last_migrated_release: Some("v1.18.0".into()),
            ..Ledger::default()
        };
        assert_eq!(
            start(Some(existing.clone()), Some(&seed)),
            Updated {
                ledger: existing,
                recreated: false
            }
        );
        assert_eq!(
            start(None, Some(&seed)),
            Updated {
                ledger: Ledger::from_status(&seed),
                recreated: true
            }
        );
        let only_legacy = MigrationStatus {
            history: vec![HistoryEntry {
                stage: None,
                id: "legacy".into(),
                ..HistoryEntry::default()
            }],
            ..MigrationStatus::default()
        };
        for nothing in [None, Some(&only_legacy)] {
            assert_eq!(
                start(None, nothing),
                Updated {
                    ledger: Ledger::default(),
                    recreated: false
                }
            );
        }
    }
}
