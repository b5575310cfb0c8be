//! `clawboard doctor`: checks a setup before the daemon meets it, one line per
//! check (ok, warn or fail) with the fix for each. The local checks are here;
//! the bucket, the archive's remote, GitHub and the model servers are asked in
//! `doctor/remote.rs`. Exit 0 when nothing fails, 1 otherwise.

use std::path::Path;

use clap::Args;
use serde::Serialize;

use crate::config::Settings;

mod remote;
mod team;

/// Check the config, the tree, the kernel and every server the config names
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard doctor                                   # every check, one line each
  clawboard --config /etc/clawboard/clawboard.toml doctor --json")]
pub struct DoctorArgs {
    /// Skip the checks that talk to servers (bucket, git remote, GitHub, models)
    #[arg(long)]
    pub offline: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: String,
    pub level: Level,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(check: impl Into<String>, detail: impl Into<String>) -> Check {
        Check { check: check.into(), level: Level::Ok, detail: detail.into(), fix: None }
    }

    pub fn warn(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { check: check.into(), level: Level::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }

    pub fn fail(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { check: check.into(), level: Level::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }
}

pub fn run(a: DoctorArgs, s: &Settings) -> anyhow::Result<u8> {
    let mut checks = vec![config(s)];
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("/"));
    checks.extend(team::checks(s, &cwd));
    checks.extend(root(&s.root));
    checks.push(inotify(&s.root));
    checks.push(disk(&s.root));
    checks.push(sandbox(s));
    if !a.offline {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        checks.extend(runtime.block_on(remote::checks(s)));
    }
    report(&checks, s.json)
}

/// A config that does not load: the one check there is, failed.
pub fn config_failed(json: bool, e: &anyhow::Error) -> u8 {
    let check = Check::fail(
        "config",
        format!("{e:#}"),
        "correct the key the error names (docs: config/README.md), then run clawboard doctor again",
    );
    report(&[check], json).unwrap_or(crate::cli::EXIT_FAILURE)
}

/// Prints the checks; 1 when one failed.
fn report(checks: &[Check], json: bool) -> anyhow::Result<u8> {
    if json {
        outln!("{}", serde_json::to_string_pretty(checks)?)?;
    } else {
        let width = checks.iter().map(|c| c.check.chars().count()).max().unwrap_or(0);
        for c in checks {
            let level = match c.level {
                Level::Ok => "ok",
                Level::Warn => "warn",
                Level::Fail => "fail",
            };
            outln!("{level:<5} {:<width$}  {}", c.check, crate::output::printable(&c.detail))?;
            if let Some(fix) = &c.fix {
                outln!("{:<5} {:<width$}  fix: {}", "", "", crate::output::printable(fix))?;
            }
        }
    }
    let failed = checks.iter().any(|c| c.level == Level::Fail);
    Ok(if failed { crate::cli::EXIT_FAILURE } else { crate::cli::EXIT_OK })
}

/// The config parsed (or the CLI would not be here); the engine's config,
/// with the ACL file, builds from it as the daemon's start would.
fn config(s: &Settings) -> Check {
    let file = s
        .config_file
        .as_deref()
        .map_or("no config file (embedded defaults)".to_owned(), |f| format!("{} parses", f.display()));
    match crate::config::engine::build(s) {
        Ok((_, acl)) => Check::ok("config", format!("{file}; the ACL from {acl}")),
        Err(e) => Check::fail("config", format!("{e:#}"), "correct the ACL file the error names (docs/ACL.md)"),
    }
}

/// The root: there, initialized, writable, and on a local file system.
fn root(root: &Path) -> Vec<Check> {
    let shown = root.display();
    if !root.join(clawboard_core::layout::STATE).is_dir() {
        return vec![Check::fail(
            "root",
            format!("{shown} is not an initialized blackboard"),
            format!("clawboard --root {shown} init"),
        )];
    }
    let probe = root.join(clawboard_core::layout::STATE).join(format!("doctor-{}", std::process::id()));
    let writable = std::fs::write(&probe, b"doctor\n").and_then(|()| std::fs::remove_file(&probe));
    let mut checks = vec![match writable {
        Ok(()) => Check::ok("root", format!("{shown}: writable")),
        Err(e) => Check::fail(
            "root",
            format!("{shown}: cannot write {}: {e}", probe.display()),
            format!("run clawboard as the user that owns {shown}, or chown -R that user {shown}"),
        ),
    }];
    checks.push(match file_system(root) {
        Ok((name, Locality::Local)) => Check::ok("root.filesystem", format!("{name}, local")),
        Ok((name, Locality::Fuse)) => Check::warn(
            "root.filesystem",
            format!("{name}: a FUSE file system; inotify may miss changes made beneath it"),
            "put the root on a local disk (ext4, xfs, btrfs)",
        ),
        Ok((name, Locality::Network)) => Check::fail(
            "root.filesystem",
            format!(
                "{name}: a network file system; inotify sees no change made by another machine, and file locks may not hold"
            ),
            "put the root on a local disk on each machine and share the tree through [sync] (docs/SYNC.md)",
        ),
        Err(e) => Check::warn("root.filesystem", format!("cannot tell: statfs: {e}"), "check the root's mount"),
    });
    checks
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locality {
    Local,
    Fuse,
    Network,
}

/// The file system under `path`, by its magic number (statfs(2)).
fn file_system(path: &Path) -> nix::Result<(String, Locality)> {
    let magic = nix::sys::statfs::statfs(path)?.filesystem_type().0 as u64;
    Ok(match magic {
        0x6969 => ("nfs".into(), Locality::Network),
        0x517B => ("smb".into(), Locality::Network),
        0xFF53_4D42 => ("cifs".into(), Locality::Network),
        0xFE53_4D42 => ("smb2".into(), Locality::Network),
        0x0102_1997 => ("9p".into(), Locality::Network),
        0x00C3_6400 => ("ceph".into(), Locality::Network),
        0x5346_414F => ("afs".into(), Locality::Network),
        0x6573_5546 => ("fuse".into(), Locality::Fuse),
        0xEF53 => ("ext4".into(), Locality::Local),
        0x5846_5342 => ("xfs".into(), Locality::Local),
        0x9123_683E => ("btrfs".into(), Locality::Local),
        0x0102_1994 => ("tmpfs".into(), Locality::Local),
        0x794C_7630 => ("overlayfs".into(), Locality::Local),
        0x2FC1_2FC1 => ("zfs".into(), Locality::Local),
        other => (format!("file system 0x{other:x}"), Locality::Local),
    })
}

/// The inotify watch limit against the tree's directories: the journal's
/// recorder watches every directory of the tree.
fn inotify(root: &Path) -> Check {
    const LIMIT: &str = "/proc/sys/fs/inotify/max_user_watches";
    let read = std::fs::read_to_string(LIMIT).map_err(|e| e.to_string());
    let limit = match read.and_then(|t| t.trim().parse::<u64>().map_err(|e| e.to_string())) {
        Ok(n) => n,
        Err(e) => return Check::warn("inotify", format!("{LIMIT}: {e}"), "check the kernel's inotify support"),
    };
    let dirs = walkdir::WalkDir::new(root).into_iter().filter_map(Result::ok).filter(|e| e.file_type().is_dir()).count()
        as u64;
    inotify_verdict(limit, dirs)
}

fn inotify_verdict(limit: u64, dirs: u64) -> Check {
    let wanted = (dirs * 4).next_power_of_two().max(524_288);
    let fix = format!(
        "sysctl -w fs.inotify.max_user_watches={wanted}, and keep it: echo fs.inotify.max_user_watches={wanted} > /etc/sysctl.d/60-clawboard.conf"
    );
    let detail = format!("max_user_watches {limit}; {dirs} directories under the root");
    if dirs >= limit {
        Check::fail("inotify", format!("{detail}: the daemon cannot watch them all"), fix)
    } else if dirs * 2 >= limit {
        Check::warn("inotify", format!("{detail}: less than twice as many watches as directories"), fix)
    } else {
        Check::ok("inotify", detail)
    }
}

/// Free space where the root is.
fn disk(root: &Path) -> Check {
    match nix::sys::statvfs::statvfs(root) {
        Ok(v) => {
            let unit = v.fragment_size();
            disk_verdict(v.blocks_available() * unit, v.blocks() * unit)
        }
        Err(e) => Check::warn("disk", format!("cannot tell: statvfs: {e}"), "check the root's mount"),
    }
}

fn disk_verdict(free: u64, total: u64) -> Check {
    const MIB: u64 = 1 << 20;
    let percent = (free * 100).checked_div(total).unwrap_or(0);
    let detail = format!("{} free of {} ({percent} %)", human(free), human(total));
    let fix = "free space on the root's file system, or shorten what [retention] keeps (docs/RETENTION.md)";
    if free < 256 * MIB {
        Check::fail("disk", format!("{detail}: writes will soon fail"), fix)
    } else if free < 2048 * MIB || percent < 5 {
        Check::warn("disk", format!("{detail}: little room left"), fix)
    } else {
        Check::ok("disk", detail)
    }
}

fn human(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b >= GIB { format!("{:.1} GiB", b / GIB) } else { format!("{:.0} MiB", b / MIB) }
}

/// The role sandbox: whether the config uses it, and what this kernel enforces.
fn sandbox(s: &Settings) -> Check {
    use clawboard_roles::sandbox::{Enforced, kernel_support};
    let landlock = s.roles.sandbox.mode == clawboard_roles::config::SandboxMode::Landlock;
    let used = landlock || s.roles.roles.values().any(|r| r.sandbox == Some(true));
    let kernel = kernel_support();
    let fix = "Linux 6.2 or later with landlock among its LSMs (lsm=...,landlock on the kernel command line)";
    match (used, kernel) {
        (true, Ok(Enforced::Fully)) => Check::ok("sandbox", "Landlock enforces every right the sandbox handles"),
        (true, Ok(Enforced::Partly)) => Check::warn(
            "sandbox",
            "Landlock ABI 3 to 5: sandboxed roles run without the signal scope (or IOCTL_DEV before Linux 6.10)",
            "Linux 6.12 or later for the whole sandbox (docs/SANDBOX.md)",
        ),
        (true, Err(e)) => Check::fail("sandbox", format!("sandboxed roles cannot start: {e}"), fix),
        (false, Ok(_)) => Check::ok("sandbox", "not used (sandbox.mode = \"off\"); this kernel enforces Landlock"),
        (false, Err(_)) => Check::ok("sandbox", "not used (sandbox.mode = \"off\"); this kernel has no Landlock ABI 3"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_limit_is_judged_against_the_directories() {
        assert_eq!(inotify_verdict(8192, 100).level, Level::Ok);
        let warn = inotify_verdict(8192, 5000);
        assert_eq!(warn.level, Level::Warn);
        let fail = inotify_verdict(8192, 9000);
        assert_eq!(fail.level, Level::Fail);
        assert!(fail.fix.unwrap().contains("fs.inotify.max_user_watches=524288"));
        assert!(inotify_verdict(100_000, 200_000).fix.unwrap().contains("=1048576"));
    }

    #[test]
    fn free_space_is_judged_in_bytes_and_share() {
        const GIB: u64 = 1 << 30;
        assert_eq!(disk_verdict(50 * GIB, 100 * GIB).level, Level::Ok);
        assert_eq!(disk_verdict(GIB, 100 * GIB).level, Level::Warn);
        assert_eq!(disk_verdict(4 * GIB, 100 * GIB).level, Level::Warn, "under 5 %");
        let fail = disk_verdict(100 << 20, 100 * GIB);
        assert_eq!(fail.level, Level::Fail);
        assert!(fail.detail.starts_with("100 MiB free of 100.0 GiB (0 %)"), "{}", fail.detail);
    }

    #[test]
    fn a_missing_root_fails_with_the_init_command() {
        let dir = tempfile::tempdir().unwrap();
        let checks = root(&dir.path().join("none"));
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].level, Level::Fail);
        assert!(checks[0].fix.as_deref().unwrap().ends_with(" init"));
    }
}
