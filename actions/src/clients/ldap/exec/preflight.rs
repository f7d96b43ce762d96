//! The exec transport's proof before the first change of a stage: the LDAP server's pod exists
//! and is running, it has the container, Stagehand may `create pods/exec` on it (a
//! SelfSubjectAccessReview, which needs no permission of its own), and a read-only
//! `ldapsearch` of the base DN alone (scope base, no attributes) succeeds in that container.
//! It changes nothing. The decisions are pure functions of what the API server and the command
//! answered ([`pod_problem`], [`review_problem`], [`search_problem`]); [`ExecDirectory::preflight`]
//! asks and applies them, stopping at the first problem.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SubjectAccessReviewStatus,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use super::{CommandOutput, CommandRunner, ExecDirectory, KubeExec, failure, ldapsearch};
use crate::action::ActionError;
use crate::clients::ldap::LdapError;
use crate::text::one_line;

/// Where the exec transport runs its commands, as the config names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecTarget {
    /// The namespace (the Migration's).
    pub namespace: String,
    /// `ldap.pod`.
    pub pod: String,
    /// `ldap.container`.
    pub container: String,
}

/// Why the exec transport cannot work, found before any change. Each message names the pod,
/// its namespace and (where it matters) the container, and says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecProblem {
    /// `ldap.pod` names no pod.
    #[error(
        "pod {namespace}/{pod} not found: set ldap.pod to the pod running the primary LDAP server (kubectl -n {namespace} get pods), or set ldap.url to use the direct transport"
    )]
    PodNotFound {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
    },
    /// The operator may not read the pod.
    #[error(
        "the operator may not read pod {namespace}/{pod} (403 Forbidden: {answer}): add {pod} to rbac.ldapExecPods in the chart values (Role rules: pods get and pods/exec create, resourceNames)"
    )]
    PodForbidden {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The API server's answer.
        answer: String,
    },
    /// The pod could not be read for another reason.
    #[error("reading pod {namespace}/{pod}: {message}")]
    PodUnreadable {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// What went wrong.
        message: String,
    },
    /// The pod is not running (pending, finished, being deleted).
    #[error(
        "pod {namespace}/{pod} is {state}, not Running: nothing can be executed in it; wait until the LDAP server runs (kubectl -n {namespace} get pod {pod}) and start the run again, or point ldap.pod at the running primary"
    )]
    PodNotRunning {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// Its phase, or that it is being deleted.
        state: String,
    },
    /// The pod has no such container.
    #[error(
        "pod {namespace}/{pod} has no container {container} (it has: {containers}): set ldap.container to the LDAP server's container"
    )]
    ContainerMissing {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// `ldap.container`.
        container: String,
        /// The containers the pod has.
        containers: String,
    },
    /// The container exists but is not running.
    #[error(
        "container {container} of pod {namespace}/{pod} is not running ({state}): wait until the LDAP server runs (kubectl -n {namespace} describe pod {pod}) and start the run again"
    )]
    ContainerNotRunning {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// `ldap.container`.
        container: String,
        /// What its status says (`waiting: CrashLoopBackOff`, `terminated: exit code 1`).
        state: String,
    },
    /// The operator may not execute commands in the pod.
    #[error(
        "the operator may not create pods/exec on pod {namespace}/{pod} ({reason}): add {pod} to rbac.ldapExecPods in the chart values (Role rule: pods/exec create, resourceNames), or set ldap.url to use the direct transport"
    )]
    ExecForbidden {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The authorizer's reason, or that it gave none.
        reason: String,
    },
    /// The access review could not be made or was not evaluated.
    #[error(
        "cannot tell whether the operator may create pods/exec on pod {namespace}/{pod}: {message}"
    )]
    ReviewFailed {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// What went wrong.
        message: String,
    },
    /// The read-only `ldapsearch` of the base DN failed.
    #[error(
        "a read-only ldapsearch of the base DN {base_dn} in container {container} of pod {namespace}/{pod} failed: {message}{hint}"
    )]
    SearchFailed {
        /// The namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// `ldap.container`.
        container: String,
        /// `ldap.baseDn`.
        base_dn: String,
        /// The tool's or the exec API's answer.
        message: String,
        /// What to do about it (`: set ldap.baseDn ...`), or empty.
        hint: String,
    },
}

impl From<ExecProblem> for ActionError {
    /// By what the proof found: the pod or its container missing [`ActionError::NotFound`],
    /// the operator not allowed to read the pod or exec into it [`ActionError::Refused`],
    /// anything else (not running, the access review or the search failing)
    /// [`ActionError::Failed`]. The message is the problem's.
    fn from(problem: ExecProblem) -> Self {
        let message = problem.to_string();
        match problem {
            ExecProblem::PodNotFound { .. } | ExecProblem::ContainerMissing { .. } => {
                ActionError::NotFound(message)
            }
            ExecProblem::PodForbidden { .. } | ExecProblem::ExecForbidden { .. } => {
                ActionError::Refused(message)
            }
            _ => ActionError::Failed(message),
        }
    }
}

impl ExecTarget {
    fn pod_not_found(&self) -> ExecProblem {
        ExecProblem::PodNotFound {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
        }
    }
}

/// What the pod's object says about executing in `target.container` (pure): `None` when it is
/// running and has the container, running or without a status for it yet.
pub fn pod_problem(target: &ExecTarget, pod: &Pod) -> Option<ExecProblem> {
    let (namespace, name, container) = (&target.namespace, &target.pod, &target.container);
    let status = pod.status.as_ref();
    let phase = status
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(ExecProblem::PodNotRunning {
            namespace: namespace.clone(),
            pod: name.clone(),
            state: format!("being deleted ({phase})"),
        });
    }
    if phase != "Running" {
        return Some(ExecProblem::PodNotRunning {
            namespace: namespace.clone(),
            pod: name.clone(),
            state: phase,
        });
    }
    let containers: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.as_str()))
        .collect();
    if !containers.contains(&container.as_str()) {
        return Some(ExecProblem::ContainerMissing {
            namespace: namespace.clone(),
            pod: name.clone(),
            container: container.clone(),
            containers: if containers.is_empty() {
                "none".into()
            } else {
                containers.join(", ")
            },
        });
    }
    let state = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| &c.name == container))
        .and_then(|c| c.state.as_ref())?;
    if state.running.is_some() {
        return None;
    }
    let described = if let Some(w) = &state.waiting {
        format!(
            "waiting: {}",
            one_line(w.reason.as_deref().unwrap_or("no reason given"), 200)
        )
    } else if let Some(t) = &state.terminated {
        format!(
            "terminated: exit code {}{}",
            t.exit_code,
            t.reason
                .as_deref()
                .map(|r| format!(", {}", one_line(r, 200)))
                .unwrap_or_default()
        )
    } else {
        "no state reported".into()
    };
    Some(ExecProblem::ContainerNotRunning {
        namespace: namespace.clone(),
        pod: name.clone(),
        container: container.clone(),
        state: described,
    })
}

/// The access review asking whether the caller may `create pods/exec` on the target's pod.
pub fn exec_review(target: &ExecTarget) -> SelfSubjectAccessReview {
    SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(target.namespace.clone()),
                name: Some(target.pod.clone()),
                resource: Some("pods".into()),
                subresource: Some("exec".into()),
                verb: Some("create".into()),
                group: Some(String::new()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    }
}

/// What the access review's answer means (pure): `None` when it allows the exec.
pub fn review_problem(
    target: &ExecTarget,
    status: Option<&SubjectAccessReviewStatus>,
) -> Option<ExecProblem> {
    let (namespace, pod) = (target.namespace.clone(), target.pod.clone());
    let Some(status) = status else {
        return Some(ExecProblem::ReviewFailed {
            namespace,
            pod,
            message: "the API server's answer has no status".into(),
        });
    };
    if status.allowed {
        return None;
    }
    let reason = status
        .reason
        .as_deref()
        .filter(|r| !r.is_empty())
        .map(|r| one_line(r, 300))
        .unwrap_or_else(|| "no RBAC rule allows it".into());
    let reason = match status.evaluation_error.as_deref().filter(|e| !e.is_empty()) {
        Some(e) => format!("{reason}; evaluation error: {}", one_line(e, 300)),
        None => reason,
    };
    Some(ExecProblem::ExecForbidden {
        namespace,
        pod,
        reason,
    })
}

/// The read-only `ldapsearch` of the base DN alone: scope base, no attributes (`1.1`).
pub fn base_search_command(ldapi_url: &str, base_dn: &str) -> Vec<String> {
    ldapsearch(ldapi_url, &[], "base", base_dn, "(objectClass=*)", &["1.1"])
}

/// What the base search's outcome means (pure): `None` when it found the base DN.
pub fn search_problem(
    target: &ExecTarget,
    base_dn: &str,
    out: &CommandOutput,
) -> Option<ExecProblem> {
    if out.success {
        return None;
    }
    let message = failure("ldapsearch", out);
    let hint = match exit_code(&out.status) {
        Some(32) => format!(
            "; the base DN does not exist: set ldap.baseDn to the directory's base DN (ldap.baseDn is {base_dn})"
        ),
        Some(126 | 127) => format!(
            "; container {} cannot run ldapsearch: set ldap.container to the LDAP server's container",
            target.container
        ),
        Some(255) => "; the LDAP server does not answer on its local socket ldapi:/// in this container: is it the LDAP server's container, and is slapd up?".into(),
        Some(48..=50) => "; the server refused the SASL EXTERNAL bind over ldapi:/// or the read: the LDAP server must map the container's root user to an identity that may read the base DN".into(),
        _ => String::new(),
    };
    Some(search_failed(target, base_dn, message, hint))
}

/// The exit code in how a command ended: `exit code 32` (the exit API's `ExitCode` cause), or a
/// message ending in `exit status 32` (what some runtimes report instead).
pub(crate) fn exit_code(status: &str) -> Option<i32> {
    let status = status.trim_end_matches(')').trim_end();
    let digits = status
        .strip_prefix("exit code ")
        .or_else(|| status.rsplit_once("exit status ").map(|(_, code)| code))?;
    digits.trim().parse().ok()
}

fn search_failed(target: &ExecTarget, base_dn: &str, message: String, hint: String) -> ExecProblem {
    ExecProblem::SearchFailed {
        namespace: target.namespace.clone(),
        pod: target.pod.clone(),
        container: target.container.clone(),
        base_dn: base_dn.to_string(),
        message,
        hint,
    }
}

impl KubeExec {
    /// Where this runs commands, as the config names it.
    pub fn target(&self) -> ExecTarget {
        ExecTarget {
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            container: self.container.clone(),
        }
    }

    /// The pod exists, runs and has the container, and the operator may `create pods/exec` on
    /// it. Reads only (a SelfSubjectAccessReview writes nothing).
    pub async fn check_target(&self) -> Result<(), ExecProblem> {
        let target = self.target();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let pod = match pods.get_opt(&self.pod).await {
            Ok(Some(pod)) => pod,
            Ok(None) => return Err(target.pod_not_found()),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Err(ExecProblem::PodForbidden {
                    namespace: target.namespace,
                    pod: target.pod,
                    answer: one_line(&status.message, 300),
                });
            }
            Err(e) => {
                return Err(ExecProblem::PodUnreadable {
                    namespace: target.namespace,
                    pod: target.pod,
                    message: one_line(&e.to_string(), 300),
                });
            }
        };
        if let Some(problem) = pod_problem(&target, &pod) {
            return Err(problem);
        }
        let reviews: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let answer = reviews
            .create(&PostParams::default(), &exec_review(&target))
            .await
            .map_err(|e| ExecProblem::ReviewFailed {
                namespace: target.namespace.clone(),
                pod: target.pod.clone(),
                message: one_line(&e.to_string(), 300),
            })?;
        match review_problem(&target, answer.status.as_ref()) {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }
}

impl<R: CommandRunner> ExecDirectory<R> {
    /// Runs the read-only base search of `base_dn` (see [`base_search_command`]), within
    /// `timeout`; `target` names where for messages.
    pub async fn check_base(
        &self,
        target: &ExecTarget,
        base_dn: &str,
        timeout: Duration,
    ) -> Result<(), ExecProblem> {
        let argv = base_search_command(&self.ldapi_url, base_dn);
        let out = match tokio::time::timeout(timeout, self.runner.run(&argv, None)).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                let message = match e {
                    LdapError::Exec { message, .. } => message,
                    other => other.to_string(),
                };
                return Err(search_failed(target, base_dn, message, String::new()));
            }
            Err(_) => {
                return Err(search_failed(
                    target,
                    base_dn,
                    format!("no answer within {} s", timeout.as_secs()),
                    "; the exec API or the LDAP server hangs: check the pod (kubectl describe pod) and the LDAP server's log".into(),
                ));
            }
        };
        match search_problem(target, base_dn, &out) {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }
}

impl ExecDirectory<KubeExec> {
    /// The exec transport's whole proof, shared by every action that uses it: the pod, the
    /// container and the exec right ([`KubeExec::check_target`]), then the read-only base
    /// search ([`ExecDirectory::check_base`]). Changes nothing; the first problem found.
    pub async fn preflight(&self, base_dn: &str, timeout: Duration) -> Result<(), ExecProblem> {
        self.runner.check_target().await?;
        self.check_base(&self.runner.target(), base_dn, timeout)
            .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, ContainerStatus, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn target() -> ExecTarget {
        ExecTarget {
            namespace: "opendesk".into(),
            pod: "ums-ldap-server-primary-0".into(),
            container: "main".into(),
        }
    }

    fn pod(phase: &str, containers: &[&str], state: Option<ContainerState>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: containers
                    .iter()
                    .map(|n| Container {
                        name: n.to_string(),
                        ..Container::default()
                    })
                    .collect(),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: state.map(|s| {
                    vec![ContainerStatus {
                        name: "main".into(),
                        state: Some(s),
                        ..ContainerStatus::default()
                    }]
                }),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn running() -> Option<ContainerState> {
        Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        })
    }

    #[test]
    fn a_running_pod_with_the_container_is_fine() {
        assert_eq!(
            pod_problem(&target(), &pod("Running", &["main"], running())),
            None
        );
        // No container status yet (some kubelets report late): the phase decides.
        assert_eq!(
            pod_problem(&target(), &pod("Running", &["main"], None)),
            None
        );
    }

    #[test]
    fn a_pod_that_does_not_run_is_named_with_its_phase() {
        let err = pod_problem(&target(), &pod("Pending", &["main"], None))
            .unwrap()
            .to_string();
        assert!(
            err.starts_with("pod opendesk/ums-ldap-server-primary-0 is Pending, not Running"),
            "{err}"
        );
        let mut deleting = pod("Running", &["main"], running());
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let err = pod_problem(&target(), &deleting).unwrap().to_string();
        assert!(err.contains("is being deleted (Running)"), "{err}");
    }

    #[test]
    fn a_missing_container_lists_the_pods_containers() {
        let err = pod_problem(&target(), &pod("Running", &["openldap", "exporter"], None))
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "pod opendesk/ums-ldap-server-primary-0 has no container main (it has: openldap, exporter): set ldap.container to the LDAP server's container"
        );
    }

    #[test]
    fn a_container_that_does_not_run_says_why() {
        let waiting = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                ..ContainerStateWaiting::default()
            }),
            ..ContainerState::default()
        });
        let err = pod_problem(&target(), &pod("Running", &["main"], waiting))
            .unwrap()
            .to_string();
        assert!(
            err.starts_with("container main of pod opendesk/ums-ldap-server-primary-0 is not running (waiting: CrashLoopBackOff)"),
            "{err}"
        );
        let terminated = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                reason: Some("Error".into()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
        let err = pod_problem(&target(), &pod("Running", &["main"], terminated))
            .unwrap()
            .to_string();
        assert!(err.contains("(terminated: exit code 1, Error)"), "{err}");
    }

    #[test]
    fn the_review_asks_for_create_pods_exec_on_the_pod() {
        let review = exec_review(&target());
        let attrs = review.spec.resource_attributes.unwrap();
        assert_eq!(attrs.namespace.as_deref(), Some("opendesk"));
        assert_eq!(attrs.name.as_deref(), Some("ums-ldap-server-primary-0"));
        assert_eq!(attrs.resource.as_deref(), Some("pods"));
        assert_eq!(attrs.subresource.as_deref(), Some("exec"));
        assert_eq!(attrs.verb.as_deref(), Some("create"));
    }

    #[test]
    fn a_denied_review_names_the_pod_and_the_values_to_change() {
        let allowed = SubjectAccessReviewStatus {
            allowed: true,
            ..SubjectAccessReviewStatus::default()
        };
        assert_eq!(review_problem(&target(), Some(&allowed)), None);
        let denied = SubjectAccessReviewStatus::default();
        let err = review_problem(&target(), Some(&denied))
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "the operator may not create pods/exec on pod opendesk/ums-ldap-server-primary-0 (no RBAC rule allows it): add ums-ldap-server-primary-0 to rbac.ldapExecPods in the chart values (Role rule: pods/exec create, resourceNames), or set ldap.url to use the direct transport"
        );
        let err = review_problem(&target(), None).unwrap().to_string();
        assert!(err.starts_with("cannot tell whether"), "{err}");
    }

    fn failed(status: &str, stderr: &str) -> CommandOutput {
        CommandOutput {
            success: false,
            status: status.into(),
            stdout: vec![],
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_failed_base_search_names_the_base_dn_and_what_to_fix() {
        let ok = CommandOutput {
            success: true,
            status: "exit code 0".into(),
            ..CommandOutput::default()
        };
        assert_eq!(search_problem(&target(), "dc=x", &ok), None);
        let err = search_problem(
            &target(),
            "dc=x",
            &failed("exit code 32", "No such object (32)\n"),
        )
        .unwrap()
        .to_string();
        assert_eq!(
            err,
            "a read-only ldapsearch of the base DN dc=x in container main of pod opendesk/ums-ldap-server-primary-0 failed: ldapsearch failed (exit code 32): No such object (32); the base DN does not exist: set ldap.baseDn to the directory's base DN (ldap.baseDn is dc=x)"
        );
        let err = search_problem(
            &target(),
            "dc=x",
            &failed("exit code 127", "sh: ldapsearch: not found\n"),
        )
        .unwrap()
        .to_string();
        assert!(err.contains("set ldap.container"), "{err}");
    }

    #[test]
    fn exit_codes_are_read_from_either_status_form() {
        assert_eq!(exit_code("exit code 32"), Some(32));
        assert_eq!(
            exit_code(
                "error executing command in container: cmd wait: ldapsearch ...: exit status 32"
            ),
            Some(32)
        );
        assert_eq!(exit_code("exit code 0"), Some(0));
        assert_eq!(exit_code("no exec found for container \"main\""), None);
    }

    #[test]
    fn the_base_search_reads_the_base_entry_alone() {
        assert_eq!(
            base_search_command("ldapi:///", "dc=x").join(" "),
            "ldapsearch -LLL -Q -Y EXTERNAL -H ldapi:/// -o ldif-wrap=no -s base -b dc=x (objectClass=*) 1.1"
        );
    }
}
