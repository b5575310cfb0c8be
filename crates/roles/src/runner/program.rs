//! Which file a command role runs: its program looked up on PATH once and
//! remembered (as bash's `hash` does), and this process's own binary, handed
//! to roles as `CLAWBOARD_EXE`.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::config::RoleConfig;

/// Programs [`on_path`] found: name → (the PATH it was found on, the file).
static FOUND: std::sync::Mutex<Option<HashMap<String, (OsString, PathBuf)>>> = std::sync::Mutex::new(None);

/// The file a command's `program` names: a bare name (`sh`) is looked up on
/// `path` here, one `stat` per directory, rather than by the new process trying
/// `execve` in each directory in turn (each failed `execve` costs the kernel far
/// more, with the whole environment copied each time). Not found, no PATH, or a
/// relative directory on PATH before it (which the process would resolve from
/// its own working directory): the name as given, and the spawn searches PATH
/// itself as before.
///
/// A name found is remembered with its PATH, as bash's `hash` remembers it: the
/// next run checks that one file (still an executable file) with one `stat`
/// instead of walking PATH again (on a PATH of ten directories that walk was
/// ~15 µs of every step; docs/BENCHMARKS.md). A remembered program removed or no
/// longer executable is looked up afresh; as with bash, one installed later in
/// an earlier PATH directory is not preferred until then, or until a config
/// reload ([`forget_programs`], as `hash -r`).
fn on_path(program: &str, path: Option<&OsStr>) -> PathBuf {
    if program.contains('/') {
        return program.into();
    }
    let Some(path) = path else { return program.into() };
    let remembered = {
        let found = FOUND.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        found.as_ref().and_then(|m| m.get(program)).filter(|(p, _)| p == path).map(|(_, file)| file.clone())
    };
    if let Some(file) = remembered
        && is_program(&file)
    {
        return file;
    }
    let Some(file) = search_path(program, path) else { return program.into() };
    let mut found = FOUND.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    found.get_or_insert_default().insert(program.to_owned(), (path.to_owned(), file.clone()));
    file
}

/// `program` in the first directory of `path` that holds it as an executable
/// file; `None` if none does, or a relative directory comes first.
fn search_path(program: &str, path: &OsStr) -> Option<PathBuf> {
    for dir in std::env::split_paths(path) {
        if !dir.is_absolute() {
            return None;
        }
        let candidate = dir.join(program);
        if is_program(&candidate) {
            return Some(candidate);
        }
    }
    None
}

/// The file `role`'s command runs: `name` looked up on the role's own PATH if
/// its env sets one (the process runs with it), else on this process's.
pub(crate) fn program(name: &str, role: &RoleConfig) -> PathBuf {
    match role.env.get("PATH") {
        Some(p) => on_path(name, Some(OsStr::new(p))),
        None => on_path(name, std::env::var_os("PATH").as_deref()),
    }
}

/// Forgets every program found so far: the next run of each looks it up anew.
pub(crate) fn forget_programs() {
    FOUND.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
}

/// Looks up every command role's program now (remembered, see [`on_path`]),
/// so that a role's first run does not walk PATH: ~45 µs of the first step
/// of `clawboard run` on this machine's PATH (docs/BENCHMARKS.md).
pub(crate) fn resolve_programs(roles: &BTreeMap<String, RoleConfig>) {
    for role in roles.values() {
        if let Some(name) = role.command.as_ref().and_then(|argv| argv.first()) {
            program(name, role);
        }
    }
}

/// Where a command role's files are: the program as it would run, and each
/// argument that names a file (has a `/`, is no option or URL), from the role's
/// `cwd` else `daemon_cwd`. `Err` says which is missing and where it was looked for.
pub fn check_command(role: &RoleConfig, daemon_cwd: &Path) -> Result<String, String> {
    let Some((name, args)) = role.command.as_deref().and_then(<[String]>::split_first) else {
        return Err("no command".to_owned());
    };
    let cwd = role.cwd.as_deref().map_or_else(|| daemon_cwd.to_owned(), |c| daemon_cwd.join(c));
    let from = match &role.cwd {
        Some(_) => format!("the role's cwd {}", cwd.display()),
        None => format!("the daemon's working directory, here {}", cwd.display()),
    };
    let exe = program(name, role);
    let exe = if exe.is_relative() && name.contains('/') { cwd.join(&exe) } else { exe };
    if !is_program(&exe) {
        let looked = if name.contains('/') { format!("relative to {from}") } else { "on PATH".to_owned() };
        return Err(format!("{name}: no executable file {looked}"));
    }
    for arg in args.iter().filter(|a| a.contains('/') && !a.starts_with('-') && !a.contains("://") && !a.contains('='))
    {
        let file = cwd.join(arg);
        if !file.exists() {
            let looked = if Path::new(arg).is_relative() { format!(" (relative to {from})") } else { String::new() };
            return Err(format!("{arg}: no such file{looked}"));
        }
    }
    Ok(format!("{} {}", exe.display(), args.join(" ")).trim_end().to_owned())
}

/// An executable regular file (following symlinks, as `execve` does).
fn is_program(file: &Path) -> bool {
    std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// This process's binary, as it was when first asked (read from `/proc` once,
/// when the engine is made, not at every run; a binary replaced by an upgrade
/// meanwhile is still named by its path).
pub(crate) fn own_exe() -> Option<&'static Path> {
    static EXE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| std::env::current_exe().ok()).as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(argv: &[&str]) -> RoleConfig {
        serde_json::from_value(serde_json::json!({"command": argv})).unwrap()
    }

    #[test]
    fn a_bare_program_is_found_on_path_as_execvp_would() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        // Not executable in a: skipped; executable in b: found.
        std::fs::write(a.join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::write(b.join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(b.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A directory of that name is not a program either.
        std::fs::create_dir_all(a.join("dir-tool")).unwrap();
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(on_path("tool", Some(&path)), b.join("tool"));
        assert_eq!(on_path("dir-tool", Some(&path)), PathBuf::from("dir-tool"));
        assert_eq!(on_path("missing", Some(&path)), PathBuf::from("missing"));
        assert_eq!(on_path("tool", None), PathBuf::from("tool"));
        assert_eq!(on_path("./tool", Some(&path)), PathBuf::from("./tool"));
        // A relative or empty entry before the match: left to the spawn's own search.
        for first in ["rel/dir", ""] {
            let path = std::env::join_paths([std::path::Path::new(first), &b]).unwrap();
            assert_eq!(on_path("tool", Some(&path)), PathBuf::from("tool"), "{first:?}");
        }
    }

    /// A temp dir with two empty directories for a PATH, `a` before `b`.
    fn two_path_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        (d, a, b)
    }

    /// An executable script at `f`.
    fn exe(f: &Path) {
        std::fs::write(f, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_program_found_is_remembered_until_it_is_gone() {
        let (_dir, a, b) = two_path_dirs();
        exe(&b.join("remembered-tool"));
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(on_path("remembered-tool", Some(&path)), b.join("remembered-tool"));
        // Installed later in an earlier directory: the remembered one still runs (bash's `hash`).
        exe(&a.join("remembered-tool"));
        assert_eq!(on_path("remembered-tool", Some(&path)), b.join("remembered-tool"));
        // Under another PATH the name is looked up on that PATH.
        let only_a = std::env::join_paths([&a]).unwrap();
        assert_eq!(on_path("remembered-tool", Some(&only_a)), a.join("remembered-tool"));
        // The remembered file no longer executable, then removed: found afresh each time.
        std::fs::set_permissions(b.join("remembered-tool"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(on_path("remembered-tool", Some(&path)), a.join("remembered-tool"));
        std::fs::remove_file(a.join("remembered-tool")).unwrap();
        assert_eq!(on_path("remembered-tool", Some(&path)), PathBuf::from("remembered-tool"));
    }

    #[test]
    fn the_engine_looks_up_every_roles_program_when_it_starts() {
        let (_dir, a, b) = two_path_dirs();
        exe(&b.join("started-tool"));
        let path = std::env::join_paths([&a, &b]).unwrap();
        let mut r = role(&["started-tool", "--flag"]);
        r.env.insert("PATH".into(), path.to_str().unwrap().to_owned());
        let roles = BTreeMap::from([("w".to_owned(), r.clone())]);
        resolve_programs(&roles);
        // Installed in an earlier directory afterwards: the run uses the one found at start.
        exe(&a.join("started-tool"));
        assert_eq!(program("started-tool", &r), b.join("started-tool"));
        // A reload forgets and looks up again: now the earlier directory's.
        forget_programs();
        resolve_programs(&roles);
        assert_eq!(program("started-tool", &r), a.join("started-tool"));
    }
}
