//! The exec transport: `ldapsearch` and `ldapmodify` run inside the LDAP server's container
//! (openDesk's approach), bound with SASL EXTERNAL over the server's local socket
//! (`ldapi:///`), so no password leaves the pod. Searches are paged (`-E pr=1000/noprompt`)
//! and their LDIF is parsed here; all changes go as one LDIF stream on the standard input of
//! one `ldapmodify -c` (continue after a refused change), so one exec does the whole batch.
//! That runs as `sh -c 'head -c <bytes> | exec ldapmodify ...'`, so the command ends without
//! waiting for the end of its standard input, which the exec API cannot always signal.
//!
//! Running the command is behind [`CommandRunner`]: [`KubeExec`] is the Kubernetes exec API;
//! tests can run the same command lines against a local server. [`preflight`] proves the
//! transport before the first change of a stage.

pub mod preflight;

use std::fmt;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Directory, Entry, LdapError, Refused, Replace, ldif};
use crate::text::one_line;

/// Log directives every subscriber of Stagehand adds after its own filter (`RUST_LOG`), so that
/// no filter logs what an exec carries: `tungstenite`, the exec API's WebSocket, logs every
/// message it receives or sends at TRACE (a command's output: a signing key file, a
/// homeserver.yaml with its shared secret, LDIF) and the upgrade request with its
/// `Authorization` header; capped at DEBUG it logs only connections and close frames.
pub const PAYLOAD_LOG_CAPS: &[&str] = &["tungstenite=debug"];

/// What a command printed and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandOutput {
    /// Whether it exited with status 0.
    pub success: bool,
    /// How it ended, for messages: `exit code 0`, `exit code 50`, ...
    pub status: String,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
}

impl CommandOutput {
    /// The exit code `status` names (`exit code 32` is 32), when it names one: the LDAP
    /// result code of an `ldapsearch` the server answered with an error.
    pub fn exit_code(&self) -> Option<u32> {
        self.status.strip_prefix("exit code ")?.trim().parse().ok()
    }
}

/// Runs a command line somewhere, with an optional standard input.
pub trait CommandRunner: Send + Sync + fmt::Debug {
    /// Where commands run, for messages (`pod X, container Y, namespace Z`).
    fn describe(&self) -> String;

    /// Runs `argv` (no shell) and collects its output. An error means it could not be run at
    /// all; a command that ran and failed is an `Ok` with `success: false`.
    fn run<'a>(
        &'a self,
        argv: &'a [String],
        stdin: Option<&'a [u8]>,
    ) -> BoxFuture<'a, Result<CommandOutput, LdapError>>;
}

/// The Kubernetes exec API (`pods/exec`): runs commands in one container of one pod.
#[derive(Clone)]
pub struct KubeExec {
    client: kube::Client,
    namespace: String,
    pod: String,
    container: String,
}

impl fmt::Debug for KubeExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl KubeExec {
    /// Commands in `container` of `pod` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, pod: &str, container: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
        }
    }
}

/// The most bytes of a command's standard output an exec reads (the largest is an
/// `ldapsearch` of every entry's identifiers, a few hundred bytes an entry: 32 MiB holds some
/// hundred thousand entries). A command that prints more fails, naming the limit.
pub const MAX_STDOUT_BYTES: u64 = 32 * 1024 * 1024;

/// The most bytes of a command's standard error an exec reads (it only goes into messages).
pub const MAX_STDERR_BYTES: u64 = 1024 * 1024;

/// Reads a stream to its end (an absent stream is empty), at most `limit` bytes of it: a
/// longer one is an error naming the stream (`what`) and the limit, and reading stops there.
async fn read_all<R: tokio::io::AsyncRead + Unpin>(
    reader: Option<R>,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    if let Some(r) = reader {
        r.take(limit.saturating_add(1))
            .read_to_end(&mut buf)
            .await
            .map_err(|e| format!("reading its {what}: {e}"))?;
    }
    if buf.len() as u64 > limit {
        return Err(format!(
            "it printed more than {limit} bytes of {what}, more than Stagehand reads of one command (the operator's memory is bounded; see docs/deploy.md, \"Bounded answers\"): the command was abandoned; for the directory, the direct transport (ldap.url) reads entry by entry"
        ));
    }
    Ok(buf)
}

impl CommandRunner for KubeExec {
    fn describe(&self) -> String {
        format!(
            "pod {}, container {}, namespace {}",
            self.pod, self.container, self.namespace
        )
    }

    fn run<'a>(
        &'a self,
        argv: &'a [String],
        stdin: Option<&'a [u8]>,
    ) -> BoxFuture<'a, Result<CommandOutput, LdapError>> {
        Box::pin(async move {
            let command = argv.first().cloned().unwrap_or_default();
            let fail = |message: String| LdapError::Exec {
                command: command.clone(),
                target: self.describe(),
                message,
            };
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
            let params = AttachParams::default()
                .container(self.container.clone())
                .stdin(stdin.is_some())
                .stdout(true)
                .stderr(true);
            let mut process = pods
                .exec(&self.pod, argv.to_vec(), &params)
                .await
                .map_err(|e| fail(exec_error_message(&e)))?;
            let writer = process.stdin();
            let feed = async move {
                if let (Some(mut w), Some(input)) = (writer, stdin) {
                    w.write_all(input).await?;
                    w.shutdown().await?;
                }
                Ok::<(), std::io::Error>(())
            };
            let status = process.take_status();
            // The output ends when the command does (its status arrives and the streams
            // close). A command that ends before reading all its input must not leave the
            // feed waiting for a reader: it is dropped then.
            let (stdout_reader, stderr_reader) = (process.stdout(), process.stderr());
            // The first stream to fail (or to grow past its limit) ends the reading.
            let reads = async {
                tokio::try_join!(
                    read_all(stdout_reader, MAX_STDOUT_BYTES, "output"),
                    read_all(stderr_reader, MAX_STDERR_BYTES, "error output"),
                )
            };
            tokio::pin!(feed, reads);
            let mut fed: Option<std::io::Result<()>> = None;
            let read = loop {
                tokio::select! {
                    r = &mut reads => break r,
                    f = &mut feed, if fed.is_none() => fed = Some(f),
                }
            };
            let (stdout, stderr) = read.map_err(fail)?;
            let status = match status {
                Some(s) => s.await,
                None => None,
            };
            let joined = process.join().await;
            let Some(status) = status else {
                let why = match (joined, fed) {
                    (Err(e), _) => format!("the exec stream failed: {e}"),
                    (_, Some(Err(e))) => format!("writing its input failed: {e}"),
                    _ => "the exec stream ended without the command's exit status".into(),
                };
                return Err(fail(why));
            };
            let success = status.status.as_deref() == Some("Success");
            let code = status
                .details
                .as_ref()
                .and_then(|d| d.causes.as_ref())
                .and_then(|causes| {
                    causes
                        .iter()
                        .find(|c| c.reason.as_deref() == Some("ExitCode"))
                        .and_then(|c| c.message.clone())
                });
            let status_text = match (success, code) {
                (true, _) => "exit code 0".to_string(),
                (false, Some(code)) => format!("exit code {code}"),
                (false, None) => one_line(status.message.as_deref().unwrap_or("failed"), 300),
            };
            Ok(CommandOutput {
                success,
                status: status_text,
                stdout,
                stderr,
            })
        })
    }
}

/// `ldapsearch` bound with SASL EXTERNAL over `ldapi_url`, LDIF unwrapped, with `options`,
/// searching `base` with `scope` for `filter` and returning `attrs`.
fn ldapsearch(
    ldapi_url: &str,
    options: &[&str],
    scope: &str,
    base: &str,
    filter: &str,
    attrs: &[&str],
) -> Vec<String> {
    let head = [
        "ldapsearch",
        "-LLL",
        "-Q",
        "-Y",
        "EXTERNAL",
        "-H",
        ldapi_url,
        "-o",
        "ldif-wrap=no",
    ];
    let tail = ["-s", scope, "-b", base, filter];
    head.iter()
        .chain(options)
        .chain(&tail)
        .chain(attrs)
        .map(|s| s.to_string())
        .collect()
}

/// A kube error of an exec request, with what usually causes it spelled out.
fn exec_error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 404 => format!(
            "the pod or container does not exist (API server: {})",
            status.message
        ),
        kube::Error::Api(status) if status.code == 403 => format!(
            "forbidden: Stagehand's ServiceAccount needs permission to create pods/exec (API server: {})",
            status.message
        ),
        other => other.to_string(),
    }
}

/// The LDAP server's own tools, run through a [`CommandRunner`].
#[derive(Debug)]
pub struct ExecDirectory<R> {
    runner: R,
    ldapi_url: String,
}

/// The server's local socket inside its container.
pub const POD_LDAPI_URL: &str = "ldapi:///";

impl<R: CommandRunner> ExecDirectory<R> {
    /// Tools run by `runner`, connecting to `ldapi_url` ([`POD_LDAPI_URL`] in the pod).
    pub fn new(runner: R, ldapi_url: impl Into<String>) -> Self {
        Self {
            runner,
            ldapi_url: ldapi_url.into(),
        }
    }

    /// The `ldapsearch` command line of a paged subtree search.
    pub fn search_command(&self, base: &str, filter: &str, attrs: &[&str]) -> Vec<String> {
        ldapsearch(
            &self.ldapi_url,
            &["-E", "pr=1000/noprompt"],
            "sub",
            base,
            filter,
            attrs,
        )
    }

    /// The command line that applies `len` bytes of change records from standard input
    /// with `ldapmodify -c` (going on after a refused one). `head -c` hands `ldapmodify` the
    /// input and its end: the exec API cannot always signal the end of standard input (its
    /// WebSocket protocol v4 has no way to, and not every server relays v5's close), so the
    /// command must not wait for it.
    pub fn modify_command(&self, len: usize) -> Vec<String> {
        [
            "sh",
            "-c",
            "head -c \"$1\" | exec ldapmodify -c -Q -Y EXTERNAL -H \"$2\"",
            "sh",
            &len.to_string(),
            &self.ldapi_url,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

/// The distinct error lines of a tool's standard error (at most `max`), for a message.
fn error_lines(stderr: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(stderr);
    let mut lines: Vec<String> = Vec::new();
    let mut more = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if lines.iter().any(|l| l == line) {
            continue;
        }
        if lines.len() < max {
            lines.push(line.to_string());
        } else {
            more += 1;
        }
    }
    let mut joined = one_line(&lines.join("; "), 600);
    if more > 0 {
        joined.push_str(&format!(" (and {more} more lines)"));
    }
    joined
}

/// `ldapsearch failed (exit code 32): No such object (32)`.
fn failure(tool: &str, out: &CommandOutput) -> String {
    let errors = error_lines(&out.stderr, 5);
    if errors.is_empty() {
        format!("{tool} failed ({})", out.status)
    } else {
        format!("{tool} failed ({}): {errors}", out.status)
    }
}

impl<R: CommandRunner> Directory for ExecDirectory<R> {
    fn describe(&self) -> String {
        self.runner.describe()
    }

    fn search<'a>(
        &'a self,
        base: &'a str,
        filter: &'a str,
        attrs: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Entry>, LdapError>> {
        Box::pin(async move {
            let argv = self.search_command(base, filter, attrs);
            let out = self.runner.run(&argv, None).await?;
            if !out.success {
                return Err(LdapError::Search {
                    server: self.describe(),
                    base: base.to_string(),
                    filter: filter.to_string(),
                    message: failure("ldapsearch", &out),
                    code: out.exit_code(),
                });
            }
            let text = String::from_utf8_lossy(&out.stdout);
            ldif::parse_entries(&text).map_err(|e| LdapError::Ldif {
                command: "ldapsearch".into(),
                target: self.describe(),
                message: e.to_string(),
            })
        })
    }

    /// `ldapsearch -s base -b "" namingContexts`: the root DSE, read with the same bind.
    fn naming_contexts(&self) -> BoxFuture<'_, Result<Vec<String>, LdapError>> {
        Box::pin(async move {
            let filter = "(objectClass=*)";
            let argv = ldapsearch(
                &self.ldapi_url,
                &[],
                "base",
                "",
                filter,
                &["namingContexts"],
            );
            let out = self.runner.run(&argv, None).await?;
            if !out.success {
                return Err(LdapError::Search {
                    server: self.describe(),
                    base: "the root DSE".into(),
                    filter: filter.into(),
                    message: failure("ldapsearch", &out),
                    code: out.exit_code(),
                });
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let entries = ldif::parse_entries(&text).map_err(|e| LdapError::Ldif {
                command: "ldapsearch".into(),
                target: self.describe(),
                message: e.to_string(),
            })?;
            Ok(entries
                .iter()
                .flat_map(|e| e.values("namingContexts").to_vec())
                .collect())
        })
    }

    fn replace<'a>(
        &'a self,
        changes: &'a [Replace],
    ) -> BoxFuture<'a, Result<Vec<Refused>, LdapError>> {
        Box::pin(async move {
            if changes.is_empty() {
                return Ok(Vec::new());
            }
            let input = ldif::modify_records(changes);
            let out = self
                .runner
                .run(&self.modify_command(input.len()), Some(input.as_bytes()))
                .await?;
            if out.success {
                return Ok(Vec::new());
            }
            Ok(vec![Refused {
                dn: None,
                message: failure("ldapmodify -c", &out),
            }])
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Answers with canned output and records what it was asked to run.
    #[derive(Debug, Default)]
    struct Canned {
        answer: CommandOutput,
        calls: Mutex<Vec<(Vec<String>, Option<String>)>>,
    }

    impl CommandRunner for Canned {
        fn describe(&self) -> String {
            "pod p, container c, namespace n".into()
        }
        fn run<'a>(
            &'a self,
            argv: &'a [String],
            stdin: Option<&'a [u8]>,
        ) -> BoxFuture<'a, Result<CommandOutput, LdapError>> {
            self.calls.lock().unwrap().push((
                argv.to_vec(),
                stdin.map(|s| String::from_utf8_lossy(s).into_owned()),
            ));
            let answer = self.answer.clone();
            Box::pin(async move { Ok(answer) })
        }
    }

    #[tokio::test]
    async fn search_runs_a_paged_ldapsearch_and_parses_its_ldif() {
        let runner = Canned {
            answer: CommandOutput {
                success: true,
                status: "exit code 0".into(),
                stdout: b"dn: uid=a,dc=x\nentryUUID: 1\n\ndn: uid=b,dc=x\nentryUUID: 2\n".to_vec(),
                stderr: vec![],
            },
            ..Canned::default()
        };
        let dir = ExecDirectory::new(runner, POD_LDAPI_URL);
        let found = dir
            .search("dc=x", "(univentionObjectIdentifier=*)", &["entryUUID"])
            .await
            .unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].values("entryUUID"), ["2"]);
        let calls = dir.runner.calls.lock().unwrap();
        let argv = calls[0].0.join(" ");
        assert_eq!(
            argv,
            "ldapsearch -LLL -Q -Y EXTERNAL -H ldapi:/// -o ldif-wrap=no -E pr=1000/noprompt -s sub -b dc=x (univentionObjectIdentifier=*) entryUUID"
        );
        assert!(calls[0].1.is_none());
    }

    #[tokio::test]
    async fn a_failing_search_names_the_pod_and_the_tools_error() {
        let runner = Canned {
            answer: CommandOutput {
                success: false,
                status: "exit code 32".into(),
                stdout: vec![],
                stderr: b"No such object (32)\n".to_vec(),
            },
            ..Canned::default()
        };
        let dir = ExecDirectory::new(runner, POD_LDAPI_URL);
        let err = dir
            .search("dc=x", "(a=*)", &[])
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("pod p, container c"), "{err}");
        assert!(err.contains("exit code 32"), "{err}");
        assert!(err.contains("No such object (32)"), "{err}");
    }

    #[tokio::test]
    async fn search_failures_become_the_action_error_that_says_what_happened() {
        use crate::action::ActionError;
        async fn searched(success: bool, status: &str, stdout: &[u8]) -> ActionError {
            let runner = Canned {
                answer: CommandOutput {
                    success,
                    status: status.into(),
                    stdout: stdout.to_vec(),
                    stderr: b"ldapsearch: an error\n".to_vec(),
                },
                ..Canned::default()
            };
            let dir = ExecDirectory::new(runner, POD_LDAPI_URL);
            let e = dir.search("dc=x", "(a=*)", &[]).await.unwrap_err();
            let text = e.to_string();
            let action = ActionError::from(e);
            assert_eq!(action.to_string(), text, "the message is kept");
            action
        }
        let missing = searched(false, "exit code 32", b"").await;
        assert!(matches!(missing, ActionError::NotFound(_)), "{missing:?}");
        let denied = searched(false, "exit code 50", b"").await;
        assert!(matches!(denied, ActionError::Refused(_)), "{denied:?}");
        let other = searched(false, "exit code 1", b"").await;
        assert!(matches!(other, ActionError::Failed(_)), "{other:?}");
        let unreadable = searched(true, "exit code 0", b"dn uid=a without a colon\n").await;
        assert!(
            matches!(unreadable, ActionError::InvalidAnswer(_)),
            "{unreadable:?}"
        );
    }

    #[tokio::test]
    async fn replace_streams_one_ldif_into_one_ldapmodify() {
        let runner = Canned {
            answer: CommandOutput {
                success: false,
                status: "exit code 50".into(),
                stdout: vec![],
                stderr: b"ldap_modify: Insufficient access (50)\nldap_modify: Insufficient access (50)\n".to_vec(),
            },
            ..Canned::default()
        };
        let dir = ExecDirectory::new(runner, POD_LDAPI_URL);
        let changes = [
            Replace {
                dn: "uid=a,dc=x".into(),
                attr: "univentionObjectIdentifier".into(),
                value: "u1".into(),
            },
            Replace {
                dn: "uid=b,dc=x".into(),
                attr: "univentionObjectIdentifier".into(),
                value: "u2".into(),
            },
        ];
        let refused = dir.replace(&changes).await.unwrap();
        assert_eq!(refused.len(), 1);
        assert_eq!(
            refused[0].message,
            "ldapmodify -c failed (exit code 50): ldap_modify: Insufficient access (50)"
        );
        {
            let calls = dir.runner.calls.lock().unwrap();
            assert_eq!(calls.len(), 1);
            assert_eq!(
                calls[0].0.join(" "),
                format!(
                    "sh -c head -c \"$1\" | exec ldapmodify -c -Q -Y EXTERNAL -H \"$2\" sh {} ldapi:///",
                    ldif::modify_records(&changes).len()
                )
            );
            let input = calls[0].1.clone().unwrap();
            assert_eq!(input, ldif::modify_records(&changes));
        }
        assert!(dir.replace(&[]).await.unwrap().is_empty());
        assert_eq!(
            dir.runner.calls.lock().unwrap().len(),
            1,
            "nothing to change, no exec"
        );
    }

    #[tokio::test]
    async fn a_command_printing_more_than_the_limit_fails_naming_it() {
        let out = read_all(Some(&b"12345"[..]), 5, "output").await.unwrap();
        assert_eq!(out, b"12345");
        let e = read_all(Some(&b"123456"[..]), 5, "output")
            .await
            .unwrap_err();
        assert!(
            e.starts_with("it printed more than 5 bytes of output"),
            "{e}"
        );
        assert!(
            read_all::<&[u8]>(None, 5, "output")
                .await
                .unwrap()
                .is_empty()
        );
    }
}
