//! `stagehand import-opendesk`: a Migration from openDesk's `migrations:` values, and its
//! history ledger from the `migrations-status` ConfigMap (a file, or read live), printed,
//! checked against the cluster (`--dry-run`) or applied (`--apply`, server-side apply with
//! field manager `stagehand-import`). The logic is in [`crate::adopt`].
//!
//! Exit codes: 0 done; 1 problems (in the values, an interrupted upgrade, an existing ledger
//! that differs, imported entries that match no declaration under `--apply`/`--dry-run`
//! without `--allow-unmatched`); 2 usage error or unreadable input (a ConfigMap layout this
//! import does not understand is unreadable).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use stagehand_crds::Migration;

use super::output::{EXIT_INVALID, EXIT_OK, EXIT_USAGE, plan_lines, plan_rows};
use crate::adopt::status::{self as od_status, RecordedStatus, STATUS_CONFIGMAP, StatusRefusal};
use crate::adopt::{FIELD_MANAGER, Imported, Request, import};
use crate::run::ledger::Ledger;

/// Output formats of the printed manifests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManifestOutput {
    /// A YAML stream: the ledger ConfigMap (when there is a history, and no --ledger-file),
    /// then the Migration, each its own document.
    Yaml,
    /// One JSON object: `migration`, `ledger`, `unmatched`, `plan`, `notes`.
    Json,
}

/// The arguments of `import-opendesk`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// openDesk's values: the rendered helmfile values, or just the `migrations:` block (YAML;
    /// `-` for standard input).
    #[arg(long)]
    pub values: PathBuf,
    /// A dump of openDesk's ConfigMap (`kubectl get cm migrations-status -o yaml`).
    #[arg(long, conflicts_with = "from_cluster")]
    pub status_configmap: Option<PathBuf>,
    /// Read the ConfigMap `migrations-status` from the cluster (read-only).
    #[arg(long)]
    pub from_cluster: bool,
    /// The ConfigMap's name for --from-cluster.
    #[arg(long, default_value = STATUS_CONFIGMAP)]
    pub status_name: String,
    /// The Migration's name.
    #[arg(long, default_value = "opendesk")]
    pub name: String,
    /// The namespace of the Migration and its ledger (and of the ConfigMap read with
    /// --from-cluster); default: the kubeconfig context's for --from-cluster, --dry-run and
    /// --apply, none in the printed manifests otherwise.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Adopt by hand: the release the deployment runs (its last migrated release).
    #[arg(long)]
    pub installed_release: Option<String>,
    /// Adopt by hand: a recorded footprint, `id:tag:runMode` or `stage:id:tag:runMode`
    /// (runMode may be empty). Repeatable.
    #[arg(long = "footprint")]
    pub footprints: Vec<String>,
    /// Import a ConfigMap whose last stage is `pre` (an interrupted upgrade) anyway; entries
    /// without a stage then never stand for a post declaration.
    #[arg(long)]
    pub accept_interrupted: bool,
    /// Let --apply (and --dry-run) go on although imported entries match no declared action
    /// of their stage (listed on stderr): only when each is known to be the work of an
    /// earlier release that the values no longer declare.
    #[arg(long)]
    pub allow_unmatched: bool,
    /// Write the ledger ConfigMap to this file instead of standard output, so that standard
    /// output holds only the Migration (the ledger is applied once, never kept in git).
    #[arg(long)]
    pub ledger_file: Option<PathBuf>,
    /// PEM file of the object store's CA, carried into `spec.objectStore.caBundle` as PEM text;
    /// without it openDesk's `caBundle` path is carried over and the operator's pod must mount it.
    #[arg(long)]
    pub ca_bundle: Option<PathBuf>,
    /// `spec.historyConfigMap` of the Migration (default: `<name>-history`).
    #[arg(long)]
    pub history_configmap: Option<String>,
    /// Check everything `--apply` would do against the cluster, print what would be written,
    /// and write nothing. With --values and --status-configmap files and no usable kubeconfig,
    /// it runs offline (says so) and checks everything but the cluster.
    #[arg(long, conflicts_with = "apply")]
    pub dry_run: bool,
    /// Create the ledger and the Migration through the API server (server-side apply).
    #[arg(long)]
    pub apply: bool,
    /// Output format of the printed manifests.
    #[arg(short = 'o', long, value_enum, default_value_t = ManifestOutput::Yaml)]
    pub output: ManifestOutput,
}

/// Why the command cannot go on; each knows its exit code.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Refused(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Refused(_) => EXIT_INVALID,
        }
    }
}

fn read_text(path: &Path) -> Result<String, Failure> {
    if path.as_os_str() == "-" {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
            .map_err(|e| Failure::Usage(format!("-: cannot read: {e}")))?;
        return Ok(buf);
    }
    std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("{}: cannot read: {e}", path.display())))
}

fn read_yaml(path: &Path) -> Result<Value, Failure> {
    let text = read_text(path)?;
    let yaml: serde_norway::Value = serde_norway::from_str(&text)
        .map_err(|e| Failure::Usage(format!("{}: not valid YAML: {e}", path.display())))?;
    serde_json::to_value(yaml)
        .map_err(|e| Failure::Usage(format!("{}: cannot be read as data: {e}", path.display())))
}

/// The `.data` and `.binaryData` keys of a ConfigMap dump.
fn configmap_data(
    doc: &Value,
    what: &str,
) -> Result<(BTreeMap<String, String>, Vec<String>), Failure> {
    let doc = match doc.get("kind").and_then(Value::as_str) {
        Some("List") => match doc
            .get("items")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            Some([one]) => one,
            _ => {
                return Err(Failure::Usage(format!(
                    "{what}: a List must hold exactly one ConfigMap"
                )));
            }
        },
        _ => doc,
    };
    if doc.get("kind").and_then(Value::as_str) != Some("ConfigMap") {
        return Err(Failure::Usage(format!(
            "{what}: not a ConfigMap (expected the output of kubectl get configmap {STATUS_CONFIGMAP} -o yaml)"
        )));
    }
    let cm: ConfigMap = serde_json::from_value(doc.clone())
        .map_err(|e| Failure::Usage(format!("{what}: not a ConfigMap: {e}")))?;
    Ok((
        cm.data.unwrap_or_default(),
        cm.binary_data.unwrap_or_default().into_keys().collect(),
    ))
}

fn refusal(e: &StatusRefusal) -> Failure {
    match e {
        StatusRefusal::Interrupted { .. } => Failure::Refused(e.to_string()),
        _ => Failure::Usage(e.to_string()),
    }
}

/// Runs `import-opendesk` and returns the exit code.
pub fn run(args: ImportArgs) -> u8 {
    let needs_cluster = args.from_cluster || args.dry_run || args.apply;
    let result = if needs_cluster {
        let Some(runtime) = super::cluster::runtime("import-opendesk") else {
            return EXIT_USAGE;
        };
        runtime.block_on(async {
            let client = match kube::Client::try_default().await {
                Ok(client) => client,
                // Everything is in files: a dry run needs no cluster (CI, a laptop).
                Err(e) if args.dry_run && !args.from_cluster => {
                    eprintln!(
                        "dry run offline: no cluster to check against ({e}); the ledger and the Migration are checked as --apply would check them, except against the API server (an existing ledger, admission)"
                    );
                    return run_with(&args, None).await;
                }
                Err(e) => {
                    return Err(Failure::Usage(format!(
                        "cannot connect with the current kubeconfig: {e}"
                    )));
                }
            };
            let namespace = args
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string());
            run_with(&args, Some((client, namespace))).await
        })
    } else {
        futures::executor::block_on(run_with(&args, None))
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stagehand import-opendesk: {e}");
            e.code()
        }
    }
}

async fn run_with(
    args: &ImportArgs,
    cluster: Option<(kube::Client, String)>,
) -> Result<u8, Failure> {
    let values_name = args.values.display().to_string();
    let values = read_yaml(&args.values)?;
    let ca_bundle = args.ca_bundle.as_deref().map(read_text).transpose()?;
    if let Some(pem) = &ca_bundle
        && !pem.contains("-----BEGIN CERTIFICATE-----")
    {
        return Err(Failure::Usage(
            "--ca-bundle: the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }

    // What migrations-status records.
    let data = match (&args.status_configmap, &cluster) {
        (Some(path), _) => {
            let what = path.display().to_string();
            Some(configmap_data(&read_yaml(path)?, &what)?)
        }
        (None, Some((client, ns))) if args.from_cluster => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let cm = api.get_opt(&args.status_name).await.map_err(|e| {
                Failure::Usage(format!("reading ConfigMap {ns}/{}: {e}", args.status_name))
            })?;
            let cm = cm.ok_or_else(|| {
                Failure::Usage(format!(
                    "there is no ConfigMap {ns}/{}: check the namespace (-n), or adopt by hand with --installed-release and --footprint",
                    args.status_name
                ))
            })?;
            Some((
                cm.data.unwrap_or_default(),
                cm.binary_data.unwrap_or_default().into_keys().collect(),
            ))
        }
        _ => None,
    };
    let mut last_pre = od_status::LastPre::NotPre;
    let status: Option<RecordedStatus> = match &data {
        Some((data, binary)) => {
            let s = od_status::read(data, binary).map_err(|e| refusal(&e))?;
            let importing = od_status::Importing::from_values(&values);
            last_pre = od_status::check_interrupted(&s, args.accept_interrupted, &importing)
                .map_err(|e| refusal(&e))?;
            Some(s)
        }
        None => None,
    };

    let namespace = cluster
        .as_ref()
        .map(|(_, ns)| ns.as_str())
        .or(args.namespace.as_deref());
    let imported = import(&Request {
        values: Some(&values),
        name: &args.name,
        namespace,
        status: status.as_ref(),
        status_data: data.as_ref().map(|(d, _)| d),
        installed_release: args.installed_release.as_deref(),
        footprints: &args.footprints,
        history_config_map: args.history_configmap.as_deref(),
        ca_bundle: ca_bundle.as_deref(),
        accept_interrupted: args.accept_interrupted,
        last_pre,
    })
    .map_err(|e| Failure::Usage(e.to_string()))?;

    print_findings(&values_name, &imported, status.as_ref());
    if !imported.is_valid() {
        return Ok(EXIT_INVALID);
    }
    print_unmatched_and_plan(&imported);
    let unmatched = imported.unmatched.len();
    let refused = unmatched > 0 && !args.allow_unmatched;
    if refused && args.apply {
        return Err(Failure::Refused(format!(
            "{}; nothing was written",
            unmatched_refusal(unmatched)
        )));
    }
    if unmatched > 0 && args.allow_unmatched && (args.apply || args.dry_run) {
        eprintln!(
            "{unmatched} unmatched entr{} allowed by --allow-unmatched",
            if unmatched == 1 { "y" } else { "ies" }
        );
    }
    let ledger_manifest = imported.ledger_manifest(namespace);
    let output = Printed {
        ledger: ledger_manifest.as_ref(),
        imported: &imported,
        format: args.output,
        ledger_file: args.ledger_file.as_deref(),
    };
    match cluster {
        Some((client, ns)) if args.apply || args.dry_run => {
            apply(
                &client,
                &ns,
                &imported,
                ledger_manifest.as_ref(),
                args.dry_run,
            )
            .await?;
            if args.dry_run {
                output.print()?;
            }
        }
        _ => {
            if args.dry_run {
                eprintln!("dry run offline: nothing written, nothing read from a cluster");
            }
            output.print()?;
        }
    }
    if refused && args.dry_run {
        eprintln!(
            "stagehand import-opendesk: --apply would refuse: {}",
            unmatched_refusal(unmatched)
        );
        return Ok(EXIT_INVALID);
    }
    Ok(EXIT_OK)
}

/// Why `--apply` refuses imported entries that match no declaration, and what to do.
fn unmatched_refusal(n: usize) -> String {
    let entries = if n == 1 {
        "entry matches"
    } else {
        "entries match"
    };
    format!(
        "{n} imported {entries} no declared action of its stage (listed above as Unmatched): no declaration is skipped for an unmatched entry, so a one-shot action it stands for would run again. Compare each with the values: where they declare the action with another runMode, tag or stage, the history and the values disagree; if the work was done, adopt by hand with --footprint as the values declare it (docs/runbook.md, \"Unmatched history entries\"). Only if each is the work of an earlier release that the values no longer declare, pass --allow-unmatched"
    )
}

/// On stderr: every unmatched entry at once, then the plan of both stages with the imported
/// history (`FootprintRecorded`: what the history makes skip).
fn print_unmatched_and_plan(imported: &Imported) {
    for u in &imported.unmatched {
        eprintln!("warning Unmatched: {u}");
    }
    for (stage, actions) in &imported.plan {
        eprintln!("plan of stage {stage} with the imported history:");
        for line in plan_lines(&plan_rows(actions)) {
            eprintln!("  {line}");
        }
    }
}

/// Findings as `FILE: error CODE: PATH (id): MESSAGE` on stderr, notes on how the history was
/// read, and a summary; stdout stays the manifests.
fn print_findings(file: &str, imported: &Imported, status: Option<&RecordedStatus>) {
    for f in imported
        .findings
        .iter()
        .filter(|f| f.error)
        .chain(imported.findings.iter().filter(|f| !f.error))
    {
        let level = if f.error { "error" } else { "warning" };
        let id =
            f.id.as_deref()
                .map(|i| format!(" ({i})"))
                .unwrap_or_default();
        eprintln!("{file}: {level} {}: {}{id}: {}", f.code, f.path, f.message);
    }
    if let Some(s) = status {
        eprintln!(
            "migrations-status ({} layout): last migrated release {}, {} history entries{}",
            s.layout,
            s.last_migrated_release
                .as_ref()
                .map_or_else(|| "none".into(), ToString::to_string),
            s.history.len(),
            s.last_stage
                .map(|st| format!(", last stage {st}"))
                .unwrap_or_default()
        );
    }
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    let problems = imported.findings.iter().filter(|f| f.error).count();
    let warnings = imported.findings.len() - problems;
    let footprints = imported.ledger.as_ref().map_or(0, |l| l.footprints.len());
    if problems == 0 {
        eprintln!(
            "{file}: valid ({warnings} warning{}); ledger {}: {footprints} footprint{}",
            plural(warnings),
            imported.ledger_name,
            plural(footprints)
        );
    } else {
        eprintln!(
            "{file}: invalid ({problems} problem{}, {warnings} warning{}): nothing printed or written",
            plural(problems),
            plural(warnings)
        );
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// What the import prints: the ledger and the Migration, apart.
struct Printed<'a> {
    ledger: Option<&'a Value>,
    imported: &'a Imported,
    format: ManifestOutput,
    ledger_file: Option<&'a Path>,
}

/// The comment heading the ledger's document.
const LEDGER_HEADER: &str = "# The history ledger: apply it once (import-opendesk --apply, or kubectl apply --server-side).\n# Never keep it in git: the operator writes it as runs finish (docs/adopting-opendesk.md).\n";

impl Printed<'_> {
    /// `-o yaml`: the ledger and the Migration as separate documents (the ledger to
    /// --ledger-file when given); `-o json`: one object keeping them apart, with the
    /// unmatched entries and the plan.
    fn print(&self) -> Result<(), Failure> {
        let yaml = |v: &Value| {
            serde_norway::to_string(v)
                .map_err(|e| Failure::Usage(format!("cannot render YAML: {e}")))
        };
        let json = |v: &Value| {
            serde_json::to_string_pretty(v)
                .map_err(|e| Failure::Usage(format!("cannot render JSON: {e}")))
        };
        let ledger_text = match (self.ledger, self.format) {
            (None, _) => None,
            (Some(l), ManifestOutput::Yaml) => Some(format!("---\n{LEDGER_HEADER}{}", yaml(l)?)),
            (Some(l), ManifestOutput::Json) => Some(json(l)? + "\n"),
        };
        if let (Some(path), Some(text)) = (self.ledger_file, &ledger_text) {
            std::fs::write(path, text).map_err(|e| {
                Failure::Usage(format!(
                    "--ledger-file {}: cannot write: {e}",
                    path.display()
                ))
            })?;
            eprintln!(
                "ledger written to {}: apply it once, never keep it in git",
                path.display()
            );
        }
        match self.format {
            ManifestOutput::Yaml => {
                if let (None, Some(text)) = (self.ledger_file, &ledger_text) {
                    print!("{text}");
                }
                print!("---\n{}", yaml(&self.imported.migration)?);
            }
            ManifestOutput::Json => {
                let plan: serde_json::Map<String, Value> = self
                    .imported
                    .plan
                    .iter()
                    .map(|(stage, actions)| (stage.to_string(), json!(actions)))
                    .collect();
                let report = json!({
                    "migration": self.imported.migration,
                    "ledger": self.ledger,
                    "unmatched": self.imported.unmatched,
                    "plan": plan,
                    "notes": self.imported.notes,
                });
                println!("{}", json(&report)?);
            }
        }
        Ok(())
    }
}

/// Writes (or, with `dry_run`, checks) the ledger first, then the Migration, so that the
/// operator's first reconcile of the Migration finds its history. Never overwrites a ledger
/// that differs.
async fn apply(
    client: &kube::Client,
    ns: &str,
    imported: &Imported,
    ledger_manifest: Option<&Value>,
    dry_run: bool,
) -> Result<(), Failure> {
    let suffix = if dry_run {
        " (dry run: nothing written)"
    } else {
        ""
    };
    let mut params = PatchParams::apply(FIELD_MANAGER);
    params.dry_run = dry_run;
    let api_err = |what: String| move |e: kube::Error| Failure::Usage(format!("{what}: {e}"));
    if let (Some(ledger), Some(manifest)) = (&imported.ledger, ledger_manifest) {
        let name = &imported.ledger_name;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let existing = cms
            .get_opt(name)
            .await
            .map_err(api_err(format!("reading ConfigMap {ns}/{name}")))?;
        let write = match existing {
            None => true,
            Some(cm) => {
                let data = cm.data.clone().unwrap_or_default();
                match Ledger::parse(&data) {
                    Ok(current) if current.to_data() == ledger.to_data() => false,
                    Ok(current) => {
                        return Err(Failure::Refused(format!(
                            "the history ledger {ns}/{name} exists and differs from the import (it records {} footprint(s) and release {}; the import would write {} footprint(s) and release {}). Stagehand never overwrites a ledger: compare them (kubectl get configmap {name} -n {ns} -o yaml, and this command without --apply), and only if the existing one is wrong, back it up, delete it and import again",
                            current.footprints.len(),
                            current.last_migrated_release.as_deref().unwrap_or("none"),
                            ledger.footprints.len(),
                            ledger.last_migrated_release.as_deref().unwrap_or("none"),
                        )));
                    }
                    Err(why) => {
                        return Err(Failure::Refused(format!(
                            "the ConfigMap {ns}/{name} exists and is not a history ledger Stagehand can read ({why}); nothing was written. Restore it or choose another name with --history-configmap"
                        )));
                    }
                }
            }
        };
        if write {
            cms.patch(name, &params, &Patch::Apply(manifest))
                .await
                .map_err(api_err(format!("writing the history ledger {ns}/{name}")))?;
            report(&format!("configmap/{name} created{suffix}"), dry_run);
        } else {
            report(&format!("configmap/{name} unchanged{suffix}"), dry_run);
        }
    }
    let name = imported.migration["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let migrations: Api<Migration> = Api::namespaced(client.clone(), ns);
    migrations
        .patch(&name, &params, &Patch::Apply(&imported.migration))
        .await
        .map_err(api_err(format!("applying Migration {ns}/{name}")))?;
    report(
        &format!("migration.stagehand.dev/{name} applied{suffix}"),
        dry_run,
    );
    Ok(())
}

/// What `--apply` did goes to stdout; in `--dry-run` to stderr (stdout is the manifests).
fn report(line: &str, dry_run: bool) {
    if dry_run {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}
