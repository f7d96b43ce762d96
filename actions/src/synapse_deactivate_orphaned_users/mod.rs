//! `synapse_deactivate_orphaned_users` (openDesk v1.19, pre): deactivates the Matrix accounts
//! of the previous Synapse whose IAM user is gone, before syn2mas carries them over.
//!
//! * Candidates: the active (`deactivated = 0`), non-guest accounts bound to the `oidc` auth
//!   provider, read from Synapse's PostgreSQL database ([`db`]) with display name, subject and
//!   creation time. The IAM side: every user object's `univentionObjectIdentifier` (objects of
//!   class `person` carrying it), read with `ldapsearch` in the LDAP pod. An account is
//!   orphaned when no user carries any of its subjects (compared as UUIDs where both are,
//!   else exactly: [`selection`]).
//! * Identity: a temporary admin `odmigs-<timestamp>-<random>` registered through Synapse's
//!   shared-secret registration (the secret read from `homeserver.yaml` in the Synapse pod:
//!   [`homeserver`]) and deactivated at the end of every run that registered it, failures
//!   included.
//! * Refusals, nothing changed: a Synapse that delegates authentication (MSC3861 / MAS in
//!   `homeserver.yaml`, shared-secret registration refused, or the `element-markers`
//!   ConfigMap not `legacy_auth`); an apply whose orphans are more than
//!   `safety.maxOrphanPercent` of the active OIDC-bound accounts; approved findings that differ
//!   from what is found at execution.
//! * Apply: in chunks, each chunk's subjects searched in LDAP again just before it is
//!   deactivated (one that reappeared stops the action naming it), then deactivated through
//!   the admin API (`erase` as configured); the guests turned into deactivated accounts; and
//!   what Synapse did read back from the database.

pub mod config;
pub mod db;
pub mod homeserver;
pub mod selection;

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use stagehand_config::{Endpoint, Needs};
use tracing::info;

pub use config::{Config, DB_PASSWORD_FILE};

use crate::action::{
    Action, ActionContext, ActionError, Findings, Outcome, Progress, SecretValue, StopSignal,
    Warnings,
};
use crate::batch::run_bounded;
use crate::clients::IDENTIFIER;
use crate::clients::ldap::Directory;
use crate::clients::ldap::escape::filter_value;
use crate::clients::ldap::exec::{CommandRunner, ExecDirectory, KubeExec};
use crate::clients::synapse::{Admin, SynapseAdmin};
use crate::clients::{format_uuid, parse_uuid};
use crate::shared_config::needs_secrets;
use crate::text::{one_line, plural};
use db::SynapseDb;
use homeserver::SecretSource;
use selection::{Account, SubjectKey};

/// The ConfigMap of the Element chart's deployment markers.
pub const MARKER_CONFIGMAP: &str = "element-markers";
/// Its key that says how Matrix authenticates.
pub const MARKER_KEY: &str = "MATRIX_STACK_MSC3861";
/// The marker value of a Synapse that authenticates itself.
pub const LEGACY_AUTH: &str = "legacy_auth";
/// The IAM's user objects.
pub const USER_FILTER: &str = "(&(objectClass=person)(univentionObjectIdentifier=*))";
/// Accounts deactivated per chunk (each chunk's subjects are read again from LDAP first).
pub const CHUNK: usize = 100;

/// What the action reads, given explicitly: the Synapse pod's commands (its configuration),
/// the IAM's directory, the database password and the Element marker (`None`: no
/// `element-markers` ConfigMap, or no `MATRIX_STACK_MSC3861` in it). `plan`/`apply` build them
/// from the context; tests and benchmarks give their own.
#[derive(Debug)]
pub struct Sources<'a> {
    /// Runs `cat` in the Synapse container.
    pub synapse_pod: &'a dyn CommandRunner,
    /// The IAM's directory.
    pub directory: &'a dyn Directory,
    /// The password of `synapse.postgres.user`.
    pub db_password: SecretValue,
    /// The value of `MATRIX_STACK_MSC3861` in `element-markers`.
    pub marker: Option<String>,
    /// The run's warnings (`synapse.connection.insecureSkipTlsVerify`).
    pub warnings: Warnings,
}

/// Everything proven before the first change.
#[derive(Debug)]
struct Ready {
    api: SynapseAdmin,
    secret: SecretValue,
    db: SynapseDb,
    bases: Vec<String>,
}

/// What the accounts are now.
#[derive(Debug)]
struct Survey {
    active: usize,
    orphans: Vec<Account>,
    guests: Vec<Account>,
    findings: Findings,
}

/// `odmigs-<unix seconds>-<8 hex digits>` and a random password.
fn temporary_identity() -> Result<(String, SecretValue), ActionError> {
    let mut bytes = [0u8; 36];
    getrandom::fill(&mut bytes).map_err(|e| {
        ActionError::Failed(format!(
            "no randomness for the temporary admin's password: {e}"
        ))
    })?;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok((
        format!("odmigs-{now}-{}", hex(&bytes[..4])),
        SecretValue::new(hex(&bytes[4..])),
    ))
}

/// The spellings a subject may be stored under in LDAP (as given, and for a UUID its lower-
/// and upper-case hyphenated forms), for the re-read's filter.
fn spellings(subject: &str) -> Vec<String> {
    let mut out = vec![subject.to_string()];
    if let Some(uuid) = parse_uuid(subject) {
        let canonical = format_uuid(uuid);
        out.push(canonical.to_uppercase());
        out.push(canonical);
    }
    out.sort();
    out.dedup();
    out
}

/// The filter finding any user object carrying one of `subjects`.
pub fn reappeared_filter(subjects: &[&str]) -> String {
    let alternatives: String = subjects
        .iter()
        .flat_map(|s| spellings(s))
        .map(|v| format!("({IDENTIFIER}={})", filter_value(&v)))
        .collect();
    format!("(&(objectClass=person)(|{alternatives}))")
}

impl Config {
    fn api(&self, warnings: &Warnings) -> Result<SynapseAdmin, ActionError> {
        let api = SynapseAdmin::new(
            &self.synapse.connection.url,
            Duration::from_secs(self.synapse.connection.request_timeout_seconds.max(1)),
            &self.synapse.connection.tls(warnings),
        )?;
        Ok(match self.synapse.connection.max_response_bytes {
            Some(bytes) => api.with_max_response_bytes(bytes),
            None => api,
        })
    }

    /// `cat <path>` in the Synapse container.
    async fn read_file(&self, pod: &dyn CommandRunner, path: &str) -> Result<Vec<u8>, ActionError> {
        let argv = vec!["cat".to_string(), path.to_string()];
        let out = pod.run(&argv, None).await.map_err(ActionError::from)?;
        if !out.success {
            return Err(ActionError::NotFound(format!(
                "cannot read {path} in {} ({}: {}): set synapse.pod, synapse.container and synapse.configPath to the previous Synapse's",
                pod.describe(),
                out.status,
                one_line(&String::from_utf8_lossy(&out.stderr), 200)
            )));
        }
        Ok(out.stdout)
    }

    /// The marker, the configuration, the shared secret, the registration endpoint, the
    /// database and the LDAP base: everything read-only, in that order, the first problem
    /// returned.
    async fn prepare(&self, src: &Sources<'_>) -> Result<Ready, ActionError> {
        if let Some(marker) = src.marker.as_deref().filter(|m| *m != LEGACY_AUTH) {
            return Err(ActionError::Refused(format!(
                "the ConfigMap {MARKER_CONFIGMAP} says {MARKER_KEY}={marker}, not {LEGACY_AUTH}: Matrix already delegates authentication to the Matrix Authentication Service, where deactivating accounts in Synapse would leave them active in MAS; nothing was changed (remove the action, or use MAS's own tools)"
            )));
        }
        let path = &self.synapse.config_path;
        let text = self.read_file(src.synapse_pod, path).await?;
        let hs = homeserver::read(&String::from_utf8_lossy(&text), path)?;
        if let Some(key) = hs.delegated {
            return Err(ActionError::Refused(format!(
                "Synapse's configuration {path} in {} sets {key}: it delegates authentication to the Matrix Authentication Service (MSC3861), where deactivating accounts in Synapse would leave them active in MAS; nothing was changed",
                src.synapse_pod.describe()
            )));
        }
        let secret = match hs.secret {
            Some(SecretSource::Inline(secret)) => secret,
            Some(SecretSource::File(file)) => {
                let content = self.read_file(src.synapse_pod, &file).await?;
                homeserver::secret_from_file(&content).ok_or_else(|| {
                    ActionError::Refused(format!(
                        "the registration shared secret file {file} (registration_shared_secret_path in {path}) in {} is empty: the action registers its temporary admin with it; nothing was changed",
                        src.synapse_pod.describe()
                    ))
                })?
            }
            None => {
                return Err(ActionError::Refused(format!(
                    "Synapse's configuration {path} in {} sets neither registration_shared_secret nor registration_shared_secret_path: the action registers its temporary admin with the shared secret; nothing was changed",
                    src.synapse_pod.describe()
                )));
            }
        };
        let api = self.api(&src.warnings)?;
        api.nonce().await?;
        let db = SynapseDb::connect(self.synapse.postgres.settings(), &src.db_password).await?;
        let bases = self.bases(src.directory).await?;
        Ok(Ready {
            api,
            secret,
            db,
            bases,
        })
    }

    /// `ldap.baseDn`, or every naming context of the root DSE.
    async fn bases(&self, dir: &dyn Directory) -> Result<Vec<String>, ActionError> {
        if let Some(base) = &self.ldap.base_dn {
            return Ok(vec![base.clone()]);
        }
        let found = dir.naming_contexts().await.map_err(ActionError::from)?;
        if found.is_empty() {
            return Err(ActionError::NotFound(format!(
                "the root DSE of {} lists no namingContexts: set ldap.baseDn",
                dir.describe()
            )));
        }
        Ok(found)
    }

    /// The subjects every IAM user carries.
    async fn carried(
        &self,
        ready: &Ready,
        dir: &dyn Directory,
        filter: &str,
    ) -> Result<Vec<String>, ActionError> {
        let mut out = Vec::new();
        for base in &ready.bases {
            let entries = dir
                .search(base, filter, &[IDENTIFIER])
                .await
                .map_err(ActionError::from)?;
            out.extend(entries.iter().flat_map(|e| e.values(IDENTIFIER).to_vec()));
        }
        Ok(out)
    }

    async fn survey(&self, ready: &Ready, dir: &dyn Directory) -> Result<Survey, ActionError> {
        let candidates = ready.db.active_oidc_bound().await?;
        let guests = ready.db.guests().await?;
        let carried: HashSet<SubjectKey> = self
            .carried(ready, dir, USER_FILTER)
            .await?
            .iter()
            .map(|s| SubjectKey::of(s))
            .collect();
        let orphaned = selection::orphans(&candidates, &carried);
        let findings = selection::findings(candidates.len(), &orphaned, &guests);
        let orphans = orphaned.into_iter().cloned().collect();
        Ok(Survey {
            active: candidates.len(),
            orphans,
            guests,
            findings,
        })
    }

    /// `would deactivate 3 of 12 active OIDC bound account(s) (25.0%, erase=true)`.
    fn share(&self, s: &Survey) -> String {
        format!(
            "{} of {} active OIDC bound account(s) ({}%, erase={})",
            s.orphans.len(),
            s.active,
            selection::percent_text(selection::permille(s.orphans.len(), s.active)),
            self.synapse.erase
        )
    }

    fn over_limit(&self, s: &Survey) -> bool {
        selection::over_limit(s.orphans.len(), s.active, self.safety.max_orphan_percent)
    }

    /// Stops with [`ActionError::FindingsChanged`] when the accounts found now are not the
    /// approved ones. An approved account no longer found because it is deactivated now (an
    /// earlier apply of the same approval deactivated it before it was stopped, or a guest it
    /// converted) is no difference: an apply resumes after a stop.
    async fn check_approved(
        &self,
        ready: &Ready,
        s: &Survey,
        approved: Option<&Findings>,
    ) -> Result<(), ActionError> {
        let Some(approved) = approved else {
            return Ok(());
        };
        if s.findings.difference_from(approved).is_none() {
            return Ok(());
        }
        let found: HashSet<(&str, &str)> = s
            .findings
            .rows
            .iter()
            .map(|r| {
                (
                    r.group.as_str(),
                    r.values.first().map_or("", String::as_str),
                )
            })
            .collect();
        let gone: Vec<String> = approved
            .rows
            .iter()
            .filter_map(|r| {
                let id = r.values.first()?;
                (!found.contains(&(r.group.as_str(), id.as_str()))).then(|| id.clone())
            })
            .collect();
        let done = ready.db.deactivated_among(&gone).await?;
        let still = Findings {
            rows: approved
                .rows
                .iter()
                .filter(|r| r.values.first().is_none_or(|id| !done.contains(id)))
                .cloned()
                .collect(),
            ..approved.clone()
        };
        match s.findings.difference_from(&still) {
            Some(difference) => Err(ActionError::FindingsChanged(format!(
                "the Matrix accounts found now are not the ones approved ({difference}); nothing was deactivated: plan the run again and review it"
            ))),
            None => Ok(()),
        }
    }

    /// The planning phase on given sources: proves everything, reads the accounts, says what
    /// an apply would do. With `register` (a dry run: its report is the result) the temporary
    /// admin is registered and deactivated as well; a plan an apply follows only proves the
    /// registration endpoint, and fails when the apply would refuse.
    pub async fn plan_with(
        &self,
        src: &Sources<'_>,
        register: bool,
        approved: Option<&Findings>,
    ) -> Result<Outcome, ActionError> {
        let ready = self.prepare(src).await?;
        let survey = self.survey(&ready, src.directory).await?;
        let mut summary = format!("DRY RUN - would deactivate {}", self.share(&survey));
        if self.over_limit(&survey) {
            if !register {
                return Err(ActionError::Refused(selection::over_limit_message(
                    survey.orphans.len(),
                    survey.active,
                    self.safety.max_orphan_percent,
                )));
            }
            summary.push_str(&format!(
                "; that is more than safety.maxOrphanPercent ({}%): an apply would refuse",
                selection::limit_text(self.safety.max_orphan_percent)
            ));
        }
        if !register {
            self.check_approved(&ready, &survey, approved).await?;
        }
        summary.push_str(&format!(
            "; {} would become deactivated accounts",
            plural(survey.guests.len(), "guest account")
        ));
        let findings = survey.findings.clone();
        if register {
            let admin = self.register_admin(&ready).await?;
            let (admin, ()) = self.release_admin(&ready, admin, Ok(())).await?;
            summary.push_str(&format!(
                "; temporary admin {admin} registered and deactivated"
            ));
        }
        info!(summary = %summary, "synapse_deactivate_orphaned_users planned");
        Ok(Outcome::new(summary).with_findings(findings))
    }

    /// Registers the temporary admin. Whoever registered it hands the result of the work done
    /// with it to [`Config::release_admin`], on every path.
    async fn register_admin(&self, ready: &Ready) -> Result<Admin, ActionError> {
        let (user, password) = temporary_identity()?;
        ready
            .api
            .register_admin(&ready.secret, &user, &password)
            .await
    }

    /// Deactivates the temporary admin, whatever the work done with it answered; answers the
    /// admin's Matrix ID with the work's result. A failing deactivation of the admin is
    /// reported, never hidden.
    async fn release_admin<T>(
        &self,
        ready: &Ready,
        admin: Admin,
        result: Result<T, ActionError>,
    ) -> Result<(String, T), ActionError> {
        let cleanup = ready.api.deactivate(&admin, &admin.user_id, false).await;
        let id = admin.user_id;
        match (result, cleanup) {
            (Ok(value), Ok(())) => Ok((id, value)),
            (Ok(_), Err(e)) => Err(ActionError::Failed(format!(
                "the work is done, but deactivating the temporary admin {id} failed: {e}; deactivate it by hand (POST /_synapse/admin/v1/deactivate/{id})"
            ))),
            (Err(e), Ok(())) => Err(e.map_message(|m| {
                format!("{m} (the temporary admin {id} was deactivated)")
            })),
            (Err(e), Err(c)) => Err(e.map_message(|m| {
                format!(
                    "{m}; deactivating the temporary admin {id} failed too: {c}; deactivate it by hand"
                )
            })),
        }
    }

    /// The apply phase on given sources (see the module's documentation). With
    /// `synapse.dryRun` it is the dry run's plan.
    pub async fn apply_with(
        &self,
        src: &Sources<'_>,
        approved: Option<&Findings>,
        stop: &StopSignal,
    ) -> Result<Outcome, ActionError> {
        self.apply_reporting(src, approved, stop, &Progress::default())
            .await
    }

    /// [`Config::apply_with`], counting the deactivations in `progress`.
    async fn apply_reporting(
        &self,
        src: &Sources<'_>,
        approved: Option<&Findings>,
        stop: &StopSignal,
        progress: &Progress,
    ) -> Result<Outcome, ActionError> {
        if self.synapse.dry_run {
            return self.plan_with(src, true, approved).await;
        }
        stop.check()?;
        progress.step("reading Synapse's accounts and the IAM");
        let ready = self.prepare(src).await?;
        let survey = self.survey(&ready, src.directory).await?;
        self.check_approved(&ready, &survey, approved).await?;
        if self.over_limit(&survey) {
            return Err(ActionError::Refused(selection::over_limit_message(
                survey.orphans.len(),
                survey.active,
                self.safety.max_orphan_percent,
            )));
        }
        let findings = survey.findings.clone();
        let admin = self.register_admin(&ready).await?;
        let result = self
            .deactivate_all(&ready, src.directory, &admin, &survey, stop, progress)
            .await;
        let (admin, summary) = self.release_admin(&ready, admin, result).await?;
        Ok(Outcome::new(format!(
            "{summary}; temporary admin {admin} registered and deactivated"
        ))
        .with_findings(findings))
    }

    async fn deactivate_all(
        &self,
        ready: &Ready,
        dir: &dyn Directory,
        admin: &Admin,
        survey: &Survey,
        stop: &StopSignal,
        reporter: &Progress,
    ) -> Result<String, ActionError> {
        let total = survey.orphans.len();
        reporter.phase(
            "deactivating orphaned accounts in Synapse",
            Some(total as u64),
            "accounts",
        );
        let mut done = 0usize;
        let progress = |done: usize| {
            (done > 0).then(|| {
                format!(
                    "{done} of {total} orphaned accounts were deactivated before this, a rerun finds them deactivated"
                )
            })
        };
        for chunk in survey.orphans.chunks(CHUNK) {
            stop.check().map_err(|e| e.after(progress(done)))?;
            let subjects: Vec<&str> = chunk
                .iter()
                .flat_map(|a| a.subjects.iter().map(String::as_str))
                .collect();
            let back: HashSet<SubjectKey> = self
                .carried(ready, dir, &reappeared_filter(&subjects))
                .await
                .map_err(|e| e.after(progress(done)))?
                .iter()
                .map(|s| SubjectKey::of(s))
                .collect();
            let reappeared: Vec<String> = chunk
                .iter()
                .filter(|a| a.subjects.iter().any(|s| back.contains(&SubjectKey::of(s))))
                .map(|a| format!("{} ({})", a.matrix_id, a.subjects.join(", ")))
                .collect();
            if !reappeared.is_empty() {
                return Err(ActionError::Conflict(format!(
                    "the IAM has a user again for {}: {}; stopped before deactivating it (plan again: it is no longer orphaned)",
                    plural(reappeared.len(), "orphaned account"),
                    reappeared.join("; ")
                ))
                .after(progress(done)));
            }
            let batch = run_bounded(
                futures::stream::iter(chunk.iter()),
                self.synapse.connection.concurrency,
                stop,
                |a| async move {
                    let r = ready
                        .api
                        .deactivate(admin, &a.matrix_id, self.synapse.erase)
                        .await;
                    if r.is_ok() {
                        reporter.add(1);
                    }
                    r
                },
            )
            .await;
            done += batch.succeeded;
            if let Some(stopped) = batch.stop_error() {
                return Err(stopped.after(progress(done)));
            }
            if let Some((index, e)) = batch.into_first_failure() {
                let id = chunk.get(index).map_or("", |a| a.matrix_id.as_str());
                return Err(e
                    .map_message(|m| format!("deactivating {id}: {m}"))
                    .after(progress(done)));
            }
        }
        let guest_names: Vec<String> = survey.guests.iter().map(|g| g.matrix_id.clone()).collect();
        let converted = if guest_names.is_empty() {
            0
        } else {
            ready
                .db
                .convert_guests(&guest_names)
                .await
                .map_err(|e| e.after(progress(done)))?
        };
        let names: Vec<String> = survey.orphans.iter().map(|a| a.matrix_id.clone()).collect();
        let (deactivated, erased) = ready.db.deactivated_and_erased(&names).await?;
        let guests_left = ready.db.guests_left().await?;
        if deactivated < total as u64 {
            return Err(ActionError::Failed(format!(
                "Synapse answered every deactivation, but its database shows {deactivated} of the {total} orphaned accounts deactivated"
            )));
        }
        Ok(format!(
            "deactivated {}: the database shows {deactivated} deactivated, {erased} erased; {converted} guest account(s) turned into deactivated accounts, {guests_left} guest(s) left",
            self.share(survey)
        ))
    }

    /// The preflight on given sources: everything [`Config::plan_with`] reads, proven
    /// read-only (no admin registered).
    pub async fn preflight_with(&self, src: &Sources<'_>) -> Result<(), ActionError> {
        self.prepare(src).await.map(drop)
    }

    fn synapse_exec(&self, ctx: &ActionContext) -> KubeExec {
        KubeExec::new(
            ctx.client.clone(),
            &ctx.namespace,
            &self.synapse.pod,
            &self.synapse.container,
        )
    }

    fn ldap_exec(&self, ctx: &ActionContext) -> ExecDirectory<KubeExec> {
        ExecDirectory::new(
            KubeExec::new(
                ctx.client.clone(),
                &ctx.namespace,
                &self.ldap.pod,
                &self.ldap.container,
            ),
            self.ldap.ldapi_url.clone(),
        )
    }

    /// The `MATRIX_STACK_MSC3861` of the `element-markers` ConfigMap in the run's namespace.
    async fn marker(ctx: &ActionContext) -> Result<Option<String>, ActionError> {
        let maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        let found = maps
            .get_opt(MARKER_CONFIGMAP)
            .await
            .map_err(ActionError::kube(format!(
                "reading ConfigMap {}/{MARKER_CONFIGMAP} (the Element deployment marker)",
                ctx.namespace
            )))?;
        Ok(found
            .and_then(|cm| cm.data)
            .and_then(|d| d.get(MARKER_KEY).cloned()))
    }

    /// What the run's context gives: the two pods' exec, the password, the marker.
    async fn parts(&self, ctx: &ActionContext) -> Result<CtxParts, ActionError> {
        Ok(CtxParts {
            synapse: self.synapse_exec(ctx),
            ldap: self.ldap_exec(ctx),
            password: ctx.secrets.get(DB_PASSWORD_FILE)?.clone(),
            marker: Self::marker(ctx).await?,
            warnings: ctx.warnings.clone(),
        })
    }
}

/// The sources a run's context gives, owned.
#[derive(Debug)]
struct CtxParts {
    synapse: KubeExec,
    ldap: ExecDirectory<KubeExec>,
    password: SecretValue,
    marker: Option<String>,
    warnings: Warnings,
}

impl CtxParts {
    fn sources(&self) -> Sources<'_> {
        Sources {
            synapse_pod: &self.synapse,
            directory: &self.ldap,
            db_password: self.password.clone(),
            marker: self.marker.clone(),
            warnings: self.warnings.clone(),
        }
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let parts = self.parts(ctx).await?;
            self.plan_with(
                &parts.sources(),
                !ctx.run.apply_follows,
                ctx.approved_findings.as_ref(),
            )
            .await
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let parts = self.parts(ctx).await?;
            self.apply_reporting(
                &parts.sources(),
                ctx.approved_findings.as_ref(),
                &ctx.stop,
                &ctx.progress,
            )
            .await
        })
    }

    fn needs(&self) -> Needs {
        needs_secrets([DB_PASSWORD_FILE])
    }

    fn endpoints(&self, _namespace: &str) -> Vec<Endpoint> {
        Endpoint::from_url("synapse.connection.url", &self.synapse.connection.url)
            .into_iter()
            .chain([Endpoint::new(
                "synapse.postgres.host",
                self.synapse.postgres.host.clone(),
                Some(self.synapse.postgres.port),
            )])
            .collect()
    }

    fn dry_run(&self) -> bool {
        self.synapse.dry_run
    }

    /// Its findings are the review a `Manual` approval binds (docs/design.md#findings).
    fn reports_findings(&self) -> bool {
        true
    }

    /// Both pods (exist, run, have the container, `pods/exec` allowed), the LDAP base readable
    /// by a read-only search, then everything [`Config::preflight_with`] proves.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            self.synapse_exec(ctx).check_target().await.map_err(|p| {
                ActionError::from(p).map_message(|m| {
                    m.replace("ldap.pod", "synapse.pod")
                        .replace("ldap.container", "synapse.container")
                        .replace("rbac.ldapExecPods", "rbac.synapseExecPods")
                })
            })?;
            let ldap = self.ldap_exec(ctx);
            let timeout = Duration::from_secs(self.ldap.request_timeout_seconds.max(1));
            for base in self.bases(&ldap).await? {
                ldap.preflight(&base, timeout)
                    .await
                    .map_err(ActionError::from)?;
            }
            let parts = self.parts(ctx).await?;
            self.preflight_with(&parts.sources()).await
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_re_read_filter_asks_for_every_spelling_and_escapes() {
        let f = reappeared_filter(&["0D4F8A30-1B2C-103F-8A1E-5B1F2C3D4E5F", "a*b"]);
        assert_eq!(
            f,
            "(&(objectClass=person)(|(univentionObjectIdentifier=0D4F8A30-1B2C-103F-8A1E-5B1F2C3D4E5F)(univentionObjectIdentifier=0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f)(univentionObjectIdentifier=a\\2ab)))"
        );
    }

    #[test]
    fn the_temporary_identity_is_fresh_and_shaped_as_documented() {
        let (a, pa) = temporary_identity().unwrap();
        let (b, pb) = temporary_identity().unwrap();
        assert_ne!(a, b);
        assert_ne!(pa, pb);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[0], "odmigs");
        assert!(parts[1].parse::<u64>().unwrap() > 1_700_000_000);
        assert_eq!(parts[2].len(), 8);
        assert_eq!(pa.expose().len(), 64);
        assert!(!format!("{pa:?}").contains(pa.expose()));
    }
}
