//! `[sandbox]` (docs/SANDBOX.md): which command roles run under Landlock and
//! what they are denied, and the checks [`RolesConfig::check_sandbox`] makes
//! where the sandbox will run. The sandbox itself is [`crate::sandbox`].

use std::path::PathBuf;

use clawboard_core::config::ConfigError;
use serde::Deserialize;

use super::{RoleConfig, RolesConfig};

/// `[sandbox]` as written: whether command roles run under Landlock.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `off` (the default) or `landlock`: for every command role without its own `sandbox`.
    #[serde(default)]
    pub mode: SandboxMode,
    /// Paths a sandboxed role may not touch besides the blackboard root (absolute, `~` expands).
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `sandbox.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    #[default]
    Off,
    Landlock,
}

/// `[sandbox]` resolved: the mode, and every path denied (the root first).
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    pub mode: SandboxMode,
    pub denied: std::sync::Arc<Vec<PathBuf>>,
}

impl Sandbox {
    /// `c` for the blackboard at `root`; `expand` turns a `deny` entry into a
    /// path (`~`). An entry that is not absolute, has `..` or is `/` is refused
    /// with its index.
    pub fn resolve(
        c: SandboxConfig,
        root: &std::path::Path,
        expand: impl Fn(&str) -> PathBuf,
    ) -> Result<Sandbox, ConfigError> {
        // Through its links and `..` as far as it exists; checked at start (check_sandbox).
        let mut denied = vec![crate::sandbox::resolve(root)];
        for (i, d) in c.deny.iter().enumerate() {
            let path = expand(d);
            crate::sandbox::Denied::new([path.clone()])
                .map_err(|e| ConfigError::new(format!("sandbox.deny[{i}]"), e.to_string()))?;
            denied.push(path);
        }
        Ok(Sandbox { mode: c.mode, denied: std::sync::Arc::new(denied) })
    }

    /// Denies `paths` too (made absolute), but for those already beneath a
    /// denied path: the daemon's own key and token files and its local bucket.
    pub fn deny_also(&mut self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut denied = (*self.denied).clone();
        for p in paths {
            let p = crate::sandbox::resolve(&std::path::absolute(&p).unwrap_or(p));
            if !denied.iter().any(|d| p.starts_with(d)) {
                denied.push(p);
            }
        }
        self.denied = std::sync::Arc::new(denied);
    }

    /// The paths `role`'s process may not touch, when it runs sandboxed: a
    /// command role, by its own `sandbox` or else by `sandbox.mode`.
    pub fn for_role(&self, role: &RoleConfig) -> Option<std::sync::Arc<Vec<PathBuf>>> {
        let on = role.command.is_some() && role.sandbox.unwrap_or(self.mode == SandboxMode::Landlock);
        on.then(|| self.denied.clone())
    }
}

impl RolesConfig {
    /// What the daemon and `clawboard run` check before they start, when some
    /// command role is to run sandboxed, so that they do not start rather than
    /// fail each of that role's runs: the kernel enforces Landlock (the error
    /// names the key that asks for the sandbox), every denied path is one
    /// (absolute, no `..`) and the way down to it can be listed, and no
    /// sandboxed role's program or script is under a denied path
    /// ([`RolesConfig::check_sandbox_paths`], relative to `cwd`).
    pub fn check_sandbox(&self, cwd: &std::path::Path) -> Result<(), ConfigError> {
        let Some((id, role)) = self.roles.iter().find(|(_, r)| self.sandbox.for_role(r).is_some()) else {
            return Ok(());
        };
        crate::sandbox::check_supported().map_err(|e| {
            let key =
                if role.sandbox == Some(true) { format!("roles.{id}.sandbox") } else { "sandbox.mode".to_owned() };
            ConfigError::new(key, e.to_string())
        })?;
        crate::sandbox::Denied::new(self.sandbox.denied.iter().cloned())
            .and_then(|d| d.grants())
            .map_err(|e| ConfigError::new("sandbox", e.to_string()))?;
        self.check_sandbox_paths(cwd)
    }

    /// Refuses a sandboxed command role whose program or an argument is a file
    /// under a denied path (say, a script kept in the tree's `roles/`): the
    /// sandbox would refuse its every run. An argument counts when it names a
    /// file that exists, absolute or relative to the role's `cwd` (else `cwd`,
    /// the daemon's directory). The runs' own refusal stays the rule; this
    /// only says so at start.
    pub fn check_sandbox_paths(&self, cwd: &std::path::Path) -> Result<(), ConfigError> {
        let denied: Vec<PathBuf> = self.sandbox.denied.iter().map(|d| crate::sandbox::resolve(d)).collect();
        for (id, r) in &self.roles {
            let (Some(argv), Some(_)) = (&r.command, self.sandbox.for_role(r)) else { continue };
            let dir = r.cwd.as_deref().map_or_else(|| cwd.to_path_buf(), |d| cwd.join(d));
            // The program as found on PATH, and each argument written as a path
            // (`/` in it, after a `--flag=` if any): a bare word like `tasks` (a
            // module, a subcommand) is not taken for one.
            let program = crate::runner::program(&argv[0], r);
            let paths = std::iter::once((0, program.as_os_str().to_string_lossy().into_owned())).chain(
                argv.iter().enumerate().skip(1).filter_map(|(i, a)| {
                    let path =
                        a.split_once('=').filter(|(flag, _)| flag.starts_with('-')).map_or(a.as_str(), |(_, p)| p);
                    path.contains('/').then(|| (i, path.to_owned()))
                }),
            );
            for (i, path) in paths {
                let arg = &argv[i];
                let Ok(file) = dir.join(&path).canonicalize() else { continue };
                if let Some(d) = denied.iter().find(|d| file.starts_with(d)) {
                    return Err(ConfigError::new(
                        format!("roles.{id}.command[{i}]"),
                        format!(
                            "{arg:?} is {} under {}, which a sandboxed role may not read; keep it elsewhere, or set roles.{id}.sandbox = false",
                            file.display(),
                            d.display()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::config::LifecycleConfig;

    #[test]
    fn the_sandbox_applies_to_command_roles_by_mode_unless_a_role_says_otherwise() {
        let role = |v: serde_json::Value| serde_json::from_value::<RoleConfig>(v).unwrap();
        let cfg = |mode: &str, deny: &[&str]| SandboxConfig {
            mode: serde_json::from_value(json!(mode)).unwrap(),
            deny: deny.iter().map(|d| (*d).to_owned()).collect(),
        };
        let home = |d: &str| PathBuf::from(d.replace('~', "/home/u"));
        let on = Sandbox::resolve(cfg("landlock", &["~/keys", "/etc/clawboard"]), Path::new("/srv/bb"), home).unwrap();
        let denied = vec![PathBuf::from("/srv/bb"), PathBuf::from("/home/u/keys"), PathBuf::from("/etc/clawboard")];
        assert_eq!(*on.denied, denied, "the root first, then sandbox.deny");
        let plain = role(json!({"command": ["x"]}));
        let out = role(json!({"command": ["x"], "sandbox": false}));
        let forced = role(json!({"command": ["x"], "sandbox": true}));
        let http = role(json!({"http": {"url": "http://h/"}}));
        assert_eq!(on.for_role(&plain).as_deref(), Some(&denied));
        assert_eq!(on.for_role(&out), None);
        assert_eq!(on.for_role(&http), None, "nothing to sandbox");
        let off = Sandbox::resolve(cfg("off", &[]), Path::new("/srv/bb"), home).unwrap();
        assert_eq!(off.for_role(&plain), None);
        assert_eq!(off.for_role(&forced).as_deref(), Some(&vec![PathBuf::from("/srv/bb")]));
    }

    #[test]
    fn bad_sandbox_settings_are_refused_naming_the_key() {
        let bad = |deny: &str| {
            let c = SandboxConfig { mode: SandboxMode::Landlock, deny: vec!["/ok".into(), deny.into()] };
            Sandbox::resolve(c, Path::new("/srv/bb"), |d: &str| PathBuf::from(d)).unwrap_err().to_string()
        };
        assert_eq!(bad("keys"), "sandbox.deny[1]: \"keys\": is not an absolute path");
        assert_eq!(bad("/"), "sandbox.deny[1]: \"/\": would deny the whole file system");
        assert_eq!(bad("/a/../b"), "sandbox.deny[1]: \"/a/../b\": has a `..` component");
        let mode = serde_json::from_value::<SandboxConfig>(json!({"mode": "on"})).unwrap_err().to_string();
        assert!(mode.contains("unknown variant `on`, expected `off` or `landlock`"), "{mode}");
        let typo = serde_json::from_value::<SandboxConfig>(json!({"denny": []})).unwrap_err().to_string();
        assert!(typo.contains("unknown field `denny`"), "{typo}");
        let role: RoleConfig = serde_json::from_value(json!({"http": {"url": "http://h/"}, "sandbox": true})).unwrap();
        let err = RolesConfig::resolve(LifecycleConfig::default(), BTreeMap::from([("w".to_owned(), role)]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("roles.w.sandbox: only a `command` role runs as a process"), "{err}");
    }

    #[test]
    fn a_sandboxed_role_whose_script_is_under_the_root_is_refused_at_start() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap().join("bb");
        std::fs::create_dir_all(root.join("roles")).unwrap();
        std::fs::create_dir_all(root.join("tasks")).unwrap();
        std::fs::write(root.join("roles/x.py"), "").unwrap();
        let sandbox =
            Sandbox::resolve(SandboxConfig { mode: SandboxMode::Landlock, deny: vec![] }, &root, |s: &str| {
                PathBuf::from(s)
            })
            .unwrap();
        let check = |argv: serde_json::Value, extra: serde_json::Value, cwd: &Path| {
            let mut role = json!({"command": argv});
            role.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let role: RoleConfig = serde_json::from_value(role).unwrap();
            let c = RolesConfig {
                roles: BTreeMap::from([("w".to_owned(), role)]),
                sandbox: sandbox.clone(),
                ..Default::default()
            };
            c.check_sandbox_paths(cwd).map_err(|e| e.to_string())
        };
        let script = root.join("roles/x.py");
        let err = check(json!(["python3", script]), json!({}), Path::new("/")).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "roles.w.command[1]: {:?} is {} under {}",
                script,
                script.display(),
                root.display()
            )),
            "{err}"
        );
        assert!(err.ends_with("or set roles.w.sandbox = false"), "{err}");
        // Relative to the role's cwd, or to the daemon's.
        let rel = check(json!(["python3", "roles/x.py"]), json!({"cwd": root}), Path::new("/")).unwrap_err();
        assert!(rel.starts_with("roles.w.command[1]: \"roles/x.py\""), "{rel}");
        assert!(check(json!(["python3", "./roles/x.py"]), json!({}), &root).is_err());
        // Unsandboxed, a bare word, a file elsewhere: fine.
        check(json!(["python3", script]), json!({"sandbox": false}), Path::new("/")).unwrap();
        check(json!(["python3", "-m", "tasks"]), json!({}), &root).unwrap();
        check(json!(["sh", "-c", "true"]), json!({}), &root).unwrap();
    }

    #[test]
    fn the_daemons_own_files_are_denied_too_and_bad_denied_paths_stop_the_start() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let root = base.join("bb");
        std::fs::create_dir_all(&root).unwrap();
        let on = SandboxConfig { mode: SandboxMode::Landlock, deny: vec![] };
        let mut sandbox = Sandbox::resolve(on.clone(), &root, |s: &str| PathBuf::from(s)).unwrap();
        // A key beside the root is added; the web token inside the root is already denied.
        sandbox.deny_also([base.join("keys/openai.key"), root.join(".clawboard/web-token")]);
        assert_eq!(*sandbox.denied, vec![root.clone(), base.join("keys/openai.key")]);
        let roles = |sandbox: Sandbox| RolesConfig {
            roles: BTreeMap::from([("w".to_owned(), serde_json::from_value(json!({"command": ["sh"]})).unwrap())]),
            sandbox,
            ..Default::default()
        };
        roles(sandbox).check_sandbox(&base).unwrap();
        // A root given with `..` through a part that does not exist cannot be denied.
        let odd = Sandbox::resolve(on, &base.join("gone/../bb"), |s: &str| PathBuf::from(s)).unwrap();
        let err = roles(odd).check_sandbox(&base).unwrap_err().to_string();
        assert!(err.starts_with("sandbox: ") && err.ends_with("has a `..` component"), "{err}");
    }
}
