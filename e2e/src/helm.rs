//! Helm (v4 and v3) and the deploy tools that drive it, run as processes against the test
//! control plane: the binaries, a command with homes of its own, and a process running in the
//! background whose output goes to a file.
//!
//! - helm v4 from `STAGEHAND_HELM4_BIN` (e2e/test sets it from `e2e/cluster/build-helm 4`),
//!   else built with that script; v3 from `e2e/cluster/build-helm`.
//! - helmfile and the helm-diff plugin from `STAGEHAND_HELMFILE_DIR` (e2e/test sets it from
//!   `e2e/helmfile/build`), else built with that script.
//!
//! Without a binary the tests fail, saying how to build it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::cluster::kubeconfig;
use crate::process::{ok, workspace_root};

/// The last line of a build script's stdout (`e2e/...`, run from the workspace): the path it
/// built.
fn built_path(script: &str, args: &[&str]) -> PathBuf {
    let out = match Command::new(workspace_root().join(script))
        .args(args)
        .stderr(Stdio::inherit())
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("cannot run {script}: {e}"),
    };
    let text = ok(&format!("{script} {}", args.join(" ")), &out);
    match text.lines().last() {
        Some(line) => PathBuf::from(line.trim()),
        None => panic!("{script} printed no path"),
    }
}

/// The output of `bin ARG` (`version`, `--version`), asserting that it runs.
fn version_of(bin: &Path, arg: &str) -> String {
    match Command::new(bin).arg(arg).output() {
        Ok(out) => ok(&format!("{} version", bin.display()), &out),
        Err(e) => panic!("cannot run {}: {e}", bin.display()),
    }
}

/// helm v4 (`STAGEHAND_HELM4_BIN`, else `e2e/cluster/build-helm 4`).
pub fn helm4_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var("STAGEHAND_HELM4_BIN") {
            Ok(path) => PathBuf::from(path),
            Err(_) => built_path("e2e/cluster/build-helm", &["4"]),
        };
        assert!(
            bin.is_file(),
            "no helm v4 binary at {} (STAGEHAND_HELM4_BIN, or build it with e2e/cluster/build-helm 4)",
            bin.display()
        );
        let version = version_of(&bin, "version");
        assert!(
            version.contains("v4."),
            "{} is not helm v4: {version}",
            bin.display()
        );
        bin
    })
    .clone()
}

/// helm v3 (`e2e/cluster/build-helm`).
pub fn helm3_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = built_path("e2e/cluster/build-helm", &[]);
        let version = version_of(&bin, "version");
        assert!(
            version.contains("v3."),
            "{} is not helm v3: {version}",
            bin.display()
        );
        bin
    })
    .clone()
}

/// What `e2e/helmfile/build` built: helmfile, and the plugin directory holding helm-diff.
#[derive(Debug, Clone)]
pub struct Helmfile {
    /// The helmfile binary.
    pub bin: PathBuf,
    /// A directory of helm plugins (`HELM_PLUGINS`) holding `diff`.
    pub plugins: PathBuf,
}

/// helmfile and helm-diff (`STAGEHAND_HELMFILE_DIR`, else `e2e/helmfile/build`).
pub fn helmfile() -> Helmfile {
    static BUILT: OnceLock<Helmfile> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = match std::env::var("STAGEHAND_HELMFILE_DIR") {
                Ok(path) => PathBuf::from(path),
                Err(_) => built_path("e2e/helmfile/build", &[]),
            };
            let built = Helmfile {
                bin: dir.join("helmfile"),
                plugins: dir.join("plugins"),
            };
            let diff = built.plugins.join("diff");
            assert!(
                built.bin.is_file()
                    && diff.join("plugin.yaml").is_file()
                    && diff.join("bin/diff").is_file(),
                "no helmfile and helm-diff plugin in {} (STAGEHAND_HELMFILE_DIR, or build them with e2e/helmfile/build)",
                dir.display()
            );
            // `helmfile version` also asks GitHub for the latest release; `--version` does not.
            version_of(&built.bin, "--version");
            built
        })
        .clone()
}

/// helm (or helmfile, which runs helm) with helm's config, cache and data directories under
/// `home` (nothing of the user's), against the test control plane, in the workspace.
pub fn helm_command(bin: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.current_dir(workspace_root())
        .env("KUBECONFIG", kubeconfig())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null());
    cmd
}

/// A process (helm, helmfile, `stagehand wait`) running in the background, its output going
/// to a file; killed when dropped.
#[derive(Debug)]
pub struct Background {
    child: Child,
    output: PathBuf,
    /// When it was started.
    pub started: Instant,
}

impl Background {
    /// Starts `cmd`, its stdout and stderr going to `output`.
    pub fn spawn(mut cmd: Command, output: PathBuf) -> Self {
        let file = match std::fs::File::create(&output) {
            Ok(file) => file,
            Err(e) => panic!("cannot create {}: {e}", output.display()),
        };
        let err = match file.try_clone() {
            Ok(err) => err,
            Err(e) => panic!("cannot share {}: {e}", output.display()),
        };
        let child = match cmd.stdout(file).stderr(err).spawn() {
            Ok(child) => child,
            Err(e) => panic!("cannot start {:?}: {e}", cmd.get_program()),
        };
        Self {
            child,
            output,
            started: Instant::now(),
        }
    }

    /// Its exit status once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        match self.child.try_wait() {
            Ok(status) => status,
            Err(e) => panic!(
                "cannot check the process writing to {}: {e}",
                self.output.display()
            ),
        }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Waits for it to exit, at most `timeout`; fails the test otherwise.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}; its output:\n{}",
                self.output.display(),
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
