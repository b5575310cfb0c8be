//! The Landlock sandbox of command roles (`[sandbox]`, docs/SANDBOX.md): a
//! sandboxed role's process may read, list, write and execute anything on the
//! machine but the blackboard root and the paths in `sandbox.deny`. It reaches
//! the board only as the ACL and the zone table allow, through the daemon's API
//! with its run's token, and cannot read `.clawboard/person-token`.
//!
//! Landlock only grants: a ruleset lists the hierarchies a process may use, and
//! everything else is refused. So [`Denied::grants`] walks down from `/` to each
//! denied path and grants every entry it meets beside the way; a denied path and
//! its ancestors get no grant of their own. An ancestor can still be walked
//! through (resolving a path is not an access Landlock handles), but not listed,
//! and nothing new can be made directly in it: a sandboxed role's temporary
//! files go to `$TMPDIR`, which should not be an ancestor of the root.
//!
//! The daemon cannot restrict a child between fork and exec without `unsafe`
//! (forbidden in this workspace), so a sandboxed role is started through its own
//! binary, `clawboard __sandbox-exec`, which calls [`restrict_self`] and then
//! executes the role's program: the restriction holds for the role and for
//! everything it starts.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

/// The hidden subcommand of `clawboard` that starts a sandboxed role.
pub const EXEC_COMMAND: &str = "__sandbox-exec";

/// The newest Landlock ABI whose rights the sandbox handles: file system rights
/// through `IOCTL_DEV` (ABI 5) and the signal scope (ABI 6). Not later: ABI 9's
/// `RESOLVE_UNIX` would cut roles off the daemon's API socket in the root. On
/// an older kernel the rights it lacks beyond [`ABI_NEEDED`] are not handled
/// (best effort).
const ABI_USED: ABI = ABI::V6;

/// The oldest Landlock ABI the sandbox runs on (Linux 6.2): before ABI 3,
/// `truncate(2)` on a path was not a right Landlock handled, so a role could
/// empty any file of the tree by its name.
const ABI_NEEDED: ABI = ABI::V3;

/// Why a sandbox could not be set up. The role is then not started.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "this kernel does not enforce Landlock's ABI 3 ({0}); the sandbox needs Linux 6.2 or later with Landlock among its LSMs (lsm=...,landlock)"
    )]
    Unsupported(String),
    #[error("{path:?}: {reason}")]
    Path { path: PathBuf, reason: String },
    #[error("cannot list {dir:?} to grant what is beside the denied paths: {source}")]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open {path:?} to grant it: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("building the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
}

/// The paths a sandboxed role may not touch: absolute, their symlinks resolved
/// as far as they exist, none of them `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied(BTreeSet<PathBuf>);

/// One grant of the sandbox: a hierarchy (a directory and all beneath it) or a
/// single file, with every right Landlock handles there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub path: PathBuf,
    pub dir: bool,
}

impl Denied {
    /// `paths`, each absolute. A path is resolved through the symlinks of its
    /// longest existing prefix (the part that does not exist yet is kept as
    /// written), so that a denied path reached through a link is denied too.
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> Result<Denied, SandboxError> {
        let mut set = BTreeSet::new();
        for p in paths {
            if !p.is_absolute() {
                return Err(SandboxError::Path { path: p, reason: "is not an absolute path".into() });
            }
            if p.components().any(|c| matches!(c, Component::ParentDir)) {
                return Err(SandboxError::Path { path: p, reason: "has a `..` component".into() });
            }
            let resolved = resolve(&p);
            if resolved.parent().is_none() {
                return Err(SandboxError::Path { path: p, reason: "would deny the whole file system".into() });
            }
            set.insert(resolved);
        }
        // A path beneath another denied one adds nothing, and would make its
        // ancestor one to walk through and grant beside.
        let nested: Vec<PathBuf> =
            set.iter().filter(|p| p.ancestors().skip(1).any(|a| set.contains(a))).cloned().collect();
        for p in nested {
            set.remove(&p);
        }
        Ok(Denied(set))
    }

    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.0.iter().map(PathBuf::as_path)
    }

    /// What the sandbox grants, as of now: every entry of `/` and of each
    /// ancestor of a denied path that is neither denied nor itself such an
    /// ancestor. Symbolic links get no grant (what they lead to is checked
    /// where it is). A directory on the way that does not exist has nothing to
    /// grant.
    pub fn grants(&self) -> Result<Vec<Grant>, SandboxError> {
        let ancestors: BTreeSet<&Path> = self.0.iter().flat_map(|p| p.ancestors().skip(1)).collect();
        let mut grants = Vec::new();
        for dir in &ancestors {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(SandboxError::List { dir: dir.to_path_buf(), source: e }),
            };
            for entry in entries {
                let entry = entry.map_err(|e| SandboxError::List { dir: dir.to_path_buf(), source: e })?;
                let path = entry.path();
                if self.0.contains(&path) || ancestors.contains(path.as_path()) {
                    continue;
                }
                let kind = match entry.file_type() {
                    Ok(k) => k,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(SandboxError::Open { path, source: e }),
                };
                if !kind.is_symlink() {
                    grants.push(Grant { path, dir: kind.is_dir() });
                }
            }
        }
        Ok(grants)
    }
}

/// `p` with the symlinks of its longest existing prefix resolved.
pub(crate) fn resolve(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut head = p;
    loop {
        if let Ok(real) = head.canonicalize() {
            return rest.iter().rev().fold(real, |acc: PathBuf, c| acc.join(c));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                head = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Opens `g` without following a link (`O_PATH | O_NOFOLLOW`): what is granted
/// is the entry that was listed, even if it is swapped for a link meanwhile.
fn open(g: &Grant) -> Result<Option<(File, bool)>, SandboxError> {
    let flags = nix::libc::O_PATH | nix::libc::O_NOFOLLOW;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open(&g.path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SandboxError::Open { path: g.path.clone(), source: e }),
    };
    let kind = file.metadata().map_err(|e| SandboxError::Open { path: g.path.clone(), source: e })?.file_type();
    Ok((!kind.is_symlink()).then_some((file, kind.is_dir())))
}

/// The temporary directory for sandboxed roles when the usual one (`$TMPDIR`,
/// else `/tmp`) is an ancestor of a denied path, where the sandbox would let
/// them make nothing: `{tmp}/clawboard-roles-{uid}`, made here (mode 700) if
/// missing, so that it is an entry beside the way down and granted. `None`
/// when the usual one is open to them. A directory of that name that is not
/// this user's own real directory is refused, never used.
pub fn private_tmp(denied: &[PathBuf]) -> Result<Option<PathBuf>, SandboxError> {
    private_tmp_in(&std::env::temp_dir(), denied)
}

fn private_tmp_in(tmp: &Path, denied: &[PathBuf]) -> Result<Option<PathBuf>, SandboxError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let tmp = resolve(tmp);
    // Only a denied path strictly beneath it cuts it off; one that is the
    // temporary directory itself, or above it, leaves nothing to make there.
    if !denied.iter().map(|d| resolve(d)).any(|d| d != tmp && d.starts_with(&tmp)) {
        return Ok(None);
    }
    let uid = nix::unistd::getuid().as_raw();
    let dir = tmp.join(format!("clawboard-roles-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(SandboxError::Open { path: dir, source: e }),
    }
    let m = std::fs::symlink_metadata(&dir).map_err(|e| SandboxError::Open { path: dir.clone(), source: e })?;
    if !m.is_dir() || m.uid() != uid || m.permissions().mode() & 0o077 != 0 {
        return Err(SandboxError::Path {
            path: dir,
            reason: format!("is not a directory of uid {uid} that only it may use (mode 700); remove it"),
        });
    }
    Ok(Some(dir))
}

/// Whether this kernel enforces Landlock; the error says why not.
pub fn check_supported() -> Result<(), SandboxError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI_NEEDED))
        .and_then(Ruleset::create)
        .map(drop)
        .map_err(|e| SandboxError::Unsupported(e.to_string()))
}

/// How far this kernel would enforce the sandbox, restricting nothing
/// (`clawboard doctor`); the error says why it would not run at all.
pub fn kernel_support() -> Result<Enforced, SandboxError> {
    check_supported()?;
    let full = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI_USED))
        .and_then(|r| r.scope(Scope::Signal))
        .and_then(Ruleset::create);
    Ok(if full.is_ok() { Enforced::Fully } else { Enforced::Partly })
}

/// How far the kernel enforced the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforced {
    /// Every right the sandbox handles.
    Fully,
    /// An older kernel (Landlock ABI 3 to 5, Linux 6.2 to 6.11): without the
    /// signal scope, or without `IOCTL_DEV` before 6.10.
    Partly,
}

/// Restricts the calling thread, and every process it starts from now on, to
/// everything but `denied`; it also may not signal a process outside its
/// sandbox (the daemon). Fails, restricting nothing, when the kernel enforces
/// no Landlock at all.
pub fn restrict_self(denied: &Denied) -> Result<Enforced, SandboxError> {
    let grants = denied.grants()?;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI_NEEDED))
        .map_err(|e| SandboxError::Unsupported(e.to_string()))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_USED))?
        .scope(Scope::Signal)?
        .create()
        .map_err(|e| SandboxError::Unsupported(e.to_string()))?;
    for g in &grants {
        let Some((file, dir)) = open(g)? else { continue };
        let access = if dir { AccessFs::from_all(ABI_USED) } else { AccessFs::from_file(ABI_USED) };
        ruleset = ruleset.add_rule(PathBeneath::new(file, access))?;
    }
    match ruleset.restrict_self()?.ruleset {
        RulesetStatus::FullyEnforced => Ok(Enforced::Fully),
        RulesetStatus::PartiallyEnforced => Ok(Enforced::Partly),
        RulesetStatus::NotEnforced => Err(SandboxError::Unsupported("no Landlock ABI".into())),
    }
}

#[cfg(test)]
mod tests;
