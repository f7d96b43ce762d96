//! Stamps the binary with the git commit it was built from: `stagehand --version` prints
//! `stagehand <crate version> (<commit>)`. The commit is `STAGEHAND_GIT_COMMIT` when set
//! (a build from a source archive, e.g. a container build without `.git`), otherwise
//! `git rev-parse --short=12 HEAD`, otherwise `unknown`. No dependencies.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=STAGEHAND_GIT_COMMIT");
    let commit = match std::env::var("STAGEHAND_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            // Rebuild when HEAD moves: HEAD itself (a checkout), the branch refs (a commit)
            // and packed-refs (a gc).
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                let dir = PathBuf::from(dir);
                for path in [
                    dir.join("HEAD"),
                    dir.join("refs").join("heads"),
                    dir.join("packed-refs"),
                ] {
                    if path.exists() {
                        println!("cargo:rerun-if-changed={}", path.display());
                    }
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=STAGEHAND_GIT_COMMIT={commit}");
}
