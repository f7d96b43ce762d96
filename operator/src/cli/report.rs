//! `stagehand report migrationrun/NAME [-n NS] [-o json]`: each action's decision and
//! summary, and the findings it reported (docs/design.md#findings) read back from the
//! ConfigMaps its status names — the review of a dry run, and of a `Manual` run before it is
//! approved. Read-only.

use std::collections::BTreeMap;

use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde::Serialize;
use stagehand_actions::action::{FindingRow, Findings};
use stagehand_crds::MigrationRun;
use stagehand_crds::unversioned::ActionStatus;

use super::output::{EXIT_INVALID, EXIT_OK, EXIT_USAGE, Output, print_json};
use super::wait::{Named, parse_target};
use crate::run::findings::{self, FindingsError};

/// `stagehand report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run to report on: `migrationrun/NAME`.
    pub target: String,
    /// The namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// The JSON document of `stagehand report -o json` (docs/cli.md): stable field names.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The run.
    pub run: String,
    /// Its namespace.
    pub namespace: String,
    /// Its Migration.
    pub migration: String,
    /// `pre` or `post`.
    pub stage: String,
    /// The release it migrates to.
    pub release: String,
    /// Whether the run is a dry run (`spec.dryRun`).
    pub dry_run: bool,
    /// `Automatic` or `Manual`.
    pub approval: String,
    /// The `Ready` condition's reason (`null` before the first status).
    pub reason: Option<String>,
    /// The `Ready` condition's message.
    pub message: Option<String>,
    /// The digest a `Manual` run's approval names (`null` for a run not planned yet).
    pub approval_digest: Option<String>,
    /// One entry per declared action, in order.
    pub actions: Vec<ActionReport>,
}

/// One action of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionReport {
    /// Its position in the stage.
    pub index: u32,
    /// Its id.
    pub id: String,
    /// `Run`, `Skipped`, `Succeeded` or `Failed`.
    pub decision: String,
    /// Why.
    pub reason: String,
    /// What it did or would do.
    pub summary: Option<String>,
    /// What it found as it ran (dry runs included); `null` when it reported none.
    pub findings: Option<FindingsReport>,
    /// What was found planning a `Manual` run and approved with it; `null` when none.
    pub approved_findings: Option<FindingsReport>,
}

/// Findings as the report prints them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FindingsReport {
    /// `Plan` or `Execution`.
    pub phase: String,
    /// The ConfigMaps that hold them.
    pub config_maps: Vec<String>,
    /// `sha256:` over the objects (what an approval binds).
    pub digest: String,
    /// Named counts.
    pub counts: BTreeMap<String, u64>,
    /// The column names.
    pub columns: Vec<String>,
    /// The rows (`group`, `values` in column order), sorted.
    pub rows: Vec<FindingRow>,
}

fn findings_report(findings: &Findings, phase: &str, config_maps: Vec<String>) -> FindingsReport {
    FindingsReport {
        phase: phase.to_string(),
        config_maps,
        digest: findings.digest(),
        counts: findings.counts.clone(),
        columns: findings.columns.clone(),
        rows: findings.rows.clone(),
    }
}

/// The report of `run` with the findings `entries` (what [`findings::read`] returned) (pure
/// but for the parse errors it returns).
pub fn build(
    run: &MigrationRun,
    namespace: &str,
    entries: &BTreeMap<String, String>,
) -> Result<Report, FindingsError> {
    let name = run.metadata.name.clone().unwrap_or_default();
    let status = run.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    let mut actions = Vec::new();
    for a in &status.actions {
        actions.push(action_report(a, namespace, &name, entries)?);
    }
    Ok(Report {
        run: name,
        namespace: namespace.to_string(),
        migration: run.spec.migration_ref.clone(),
        stage: run.spec.stage.to_string(),
        release: run.spec.release.clone(),
        dry_run: run.spec.dry_run,
        approval: format!("{:?}", run.spec.approval),
        reason: ready.map(|c| c.reason.clone()),
        message: ready.map(|c| c.message.clone()),
        approval_digest: status
            .frozen_plan
            .as_ref()
            .map(|_| crate::run::approval::approval_digest(&status)),
        actions,
    })
}

fn action_report(
    a: &ActionStatus,
    namespace: &str,
    run: &str,
    entries: &BTreeMap<String, String>,
) -> Result<ActionReport, FindingsError> {
    let holders = |phase: &str| {
        a.findings
            .as_ref()
            .filter(|f| f.phase == phase)
            .map(|f| f.config_maps.clone())
            .unwrap_or_else(|| vec![findings::config_map_name(run, 1)])
    };
    let found = findings::parse(entries, namespace, run, a.index, findings::EXECUTION)?
        .map(|f| findings_report(&f, findings::EXECUTION, holders(findings::EXECUTION)));
    let approved = findings::parse(entries, namespace, run, a.index, findings::PLAN)?
        .map(|f| findings_report(&f, findings::PLAN, holders(findings::PLAN)));
    Ok(ActionReport {
        index: a.index,
        id: a.id.clone(),
        decision: format!("{:?}", a.decision),
        reason: a.reason.clone(),
        summary: a.summary.clone(),
        findings: found,
        approved_findings: approved,
    })
}

/// The report as text (pure).
pub fn text(report: &Report) -> String {
    let mut out = format!(
        "migrationrun/{}: stage {} of release {} (Migration {}){}: {}",
        report.run,
        report.stage,
        report.release,
        report.migration,
        if report.dry_run { ", dry run" } else { "" },
        report.reason.as_deref().unwrap_or("not reconciled yet"),
    );
    if let Some(m) = report.message.as_deref().filter(|m| !m.is_empty()) {
        out.push_str(&format!(": {m}"));
    }
    out.push('\n');
    for a in &report.actions {
        out.push_str(&format!(
            "action {} {}: {} ({})",
            a.index, a.id, a.decision, a.reason
        ));
        if let Some(s) = &a.summary {
            out.push_str(&format!(": {s}"));
        }
        out.push('\n');
        for (title, f) in [
            ("findings approved with the plan", &a.approved_findings),
            ("findings", &a.findings),
        ] {
            if let Some(f) = f {
                out.push_str(&findings_text(title, f));
            }
        }
    }
    out
}

fn findings_text(title: &str, f: &FindingsReport) -> String {
    let counts: Vec<String> = f.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut out = format!(
        "  {title}: {} object(s), {} (ConfigMap {}); counts: {}\n",
        f.rows.len(),
        f.digest,
        f.config_maps.join(", "),
        if counts.is_empty() {
            "none".to_string()
        } else {
            counts.join(" ")
        }
    );
    let mut groups: BTreeMap<&str, Vec<&FindingRow>> = BTreeMap::new();
    for row in &f.rows {
        groups.entry(row.group.as_str()).or_default().push(row);
    }
    for (group, rows) in groups {
        out.push_str(&format!("  {group} ({}):\n", rows.len()));
        let mut widths: Vec<usize> = f.columns.iter().map(|c| c.chars().count()).collect();
        for row in &rows {
            for (n, v) in row.values.iter().enumerate() {
                if let Some(w) = widths.get_mut(n) {
                    *w = (*w).max(v.chars().count());
                }
            }
        }
        let line = |values: Vec<&str>| -> String {
            let cells: Vec<String> = values
                .iter()
                .enumerate()
                .map(|(n, v)| {
                    let w = widths.get(n).copied().unwrap_or(0);
                    format!("{v:<w$}")
                })
                .collect();
            format!("    {}\n", cells.join("  ").trim_end())
        };
        out.push_str(&line(f.columns.iter().map(String::as_str).collect()));
        for row in rows {
            out.push_str(&line(row.values.iter().map(String::as_str).collect()));
        }
    }
    out
}

/// Runs `stagehand report`; the exit code: 0 printed, 1 the findings its status names can no
/// longer be read (a ConfigMap deleted or edited), 2 usage error, unknown run or cluster
/// unreachable.
pub fn run(args: ReportArgs) -> u8 {
    let name = match parse_target(&args.target) {
        Ok(Named::Run(name)) => name,
        Ok(Named::Migration(_)) => {
            eprintln!("stagehand report: findings belong to a run: name it as migrationrun/NAME");
            return EXIT_USAGE;
        }
        Err(e) => {
            eprintln!("stagehand report: {e}");
            return EXIT_USAGE;
        }
    };
    super::cluster::with_client("report", |client| async move {
        let ns = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let runs: Api<MigrationRun> = Api::namespaced(client.clone(), &ns);
        let run = match runs.get_opt(&name).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                eprintln!("stagehand report: migrationrun/{name} not found in namespace {ns}");
                return EXIT_USAGE;
            }
            Err(e) => {
                eprintln!("stagehand report: reading migrationrun/{name}: {e}");
                return EXIT_USAGE;
            }
        };
        let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
        let entries = match findings::read(&maps, &ns, &name).await {
            Ok(e) => e,
            Err(e @ FindingsError::Api { .. }) => {
                eprintln!("stagehand report: migrationrun/{name}: {e}");
                return EXIT_USAGE;
            }
            Err(e) => {
                eprintln!("stagehand report: migrationrun/{name}: {e}");
                return EXIT_INVALID;
            }
        };
        let report = match build(&run, &ns, &entries) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("stagehand report: migrationrun/{name}: {e}");
                return EXIT_INVALID;
            }
        };
        let missing: Vec<String> = report
            .actions
            .iter()
            .zip(run.status.iter().flat_map(|s| s.actions.iter()))
            .filter(|(r, s)| {
                s.findings.as_ref().is_some_and(|f| {
                    if f.phase == findings::PLAN {
                        r.approved_findings.is_none()
                    } else {
                        r.findings.is_none()
                    }
                })
            })
            .map(|(r, _)| format!("action {} {}", r.index, r.id))
            .collect();
        match args.output {
            Output::Json => print_json(&report),
            Output::Text => print!("{}", text(&report)),
        }
        if !missing.is_empty() {
            eprintln!(
                "stagehand report: migrationrun/{name}: the findings its status names for {} are no longer in ConfigMap {ns}/{} (deleted?)",
                missing.join(", "),
                findings::config_map_name(&name, 1)
            );
            return EXIT_INVALID;
        }
        EXIT_OK
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use stagehand_crds::MigrationRunSpec;
    use stagehand_crds::unversioned::{ActionDecision, MigrationRunStatus};

    #[test]
    fn the_report_prints_each_actions_findings_by_group() {
        let found = Findings::new(
            &["dn", "univentionObjectIdentifier", "entryUUID"],
            vec![
                FindingRow {
                    group: "differs".into(),
                    values: vec!["uid=bob".into(), "legacy-b".into(), "u-b".into()],
                },
                FindingRow {
                    group: "differs".into(),
                    values: vec!["uid=alice".into(), "legacy-a".into(), "u-a".into()],
                },
            ],
            [("carrying".to_string(), 3), ("differs".to_string(), 2)],
        );
        let mut run = MigrationRun::new(
            "pre",
            MigrationRunSpec {
                release: "v1.18.0".into(),
                dry_run: true,
                ..Default::default()
            },
        );
        let mut status = MigrationRunStatus::default();
        status.actions.push(ActionStatus {
            index: 0,
            id: "ldap_entryuuid_to_object_identifier".into(),
            tag: None,
            run_mode: None,
            decision: ActionDecision::Succeeded,
            reason: "DryRun".into(),
            start_time: None,
            completion_time: None,
            summary: Some("dry run: 2 differ".into()),
            digest: None,
            findings: Some(findings::status(
                &found,
                vec!["pre-findings".into()],
                findings::EXECUTION,
            )),
            progress: None,
        });
        run.status = Some(status);
        let entries: BTreeMap<String, String> = [(
            findings::key(0, findings::EXECUTION),
            serde_json::to_string(&found).unwrap(),
        )]
        .into_iter()
        .collect();
        let report = build(&run, "ns", &entries).unwrap();
        let f = report.actions[0].findings.as_ref().unwrap();
        assert_eq!(f.rows[0].values[0], "uid=alice", "sorted");
        assert_eq!(f.counts["differs"], 2);
        assert_eq!(f.config_maps, ["pre-findings"]);
        assert!(report.actions[0].approved_findings.is_none());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["actions"][0]["findings"]["columns"][1],
            "univentionObjectIdentifier"
        );
        assert_eq!(json["dryRun"], true);
        let text = text(&report);
        assert!(text.contains("counts: carrying=3 differs=2"), "{text}");
        assert!(text.contains("  differs (2):\n    dn         univentionObjectIdentifier  entryUUID\n    uid=alice  legacy-a                    u-a\n"), "{text}");

        let broken: BTreeMap<String, String> =
            [(findings::key(0, findings::EXECUTION), "{".to_string())]
                .into_iter()
                .collect();
        let e = build(&run, "ns", &broken).unwrap_err().to_string();
        assert!(
            e.contains("ConfigMap ns/pre-findings, key action-0.json"),
            "{e}"
        );
    }
}
