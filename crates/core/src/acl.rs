//! Access control (seed 002 "访问控制"): which principal may read or write which
//! path, from `config/acl.toml`, and why.
//!
//! A role maps to a principal by its id ([`Principal::of_role`]). A path is checked
//! as given by a role: relative, `/`-separated, no `..`, no NUL, no absolute path.
//! `[files]` entries (exact paths) come first, then the longest matching `[dirs]`
//! prefix. `human` and `daemon` may do anything. Principals in `scope.own_task_only`
//! reach `tasks/` only inside the task they run for.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The embedded default: the repository's `config/acl.toml`, the seed's matrix.
pub const DEFAULT_ACL: &str = include_str!("../../../config/acl.toml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Principal {
    Assistant,
    Gm,
    Validator,
    PlatformPm,
    Pm,
    Worker,
    Human,
    Daemon,
}

impl Principal {
    pub const ROLES: [Principal; 6] = [
        Principal::Assistant,
        Principal::Gm,
        Principal::Validator,
        Principal::PlatformPm,
        Principal::Pm,
        Principal::Worker,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Principal::Assistant => "assistant",
            Principal::Gm => "gm",
            Principal::Validator => "validator",
            Principal::PlatformPm => "platform-pm",
            Principal::Pm => "pm",
            Principal::Worker => "worker",
            Principal::Human => "human",
            Principal::Daemon => "daemon",
        }
    }

    fn parse(s: &str) -> Option<Principal> {
        Principal::ROLES.into_iter().chain([Principal::Human, Principal::Daemon]).find(|p| p.name() == s)
    }

    /// The principal of role `role`, and why.
    pub fn of_role(role: &str) -> (Principal, String) {
        match Principal::parse(role) {
            Some(p) => (p, format!("role {role:?} is the principal {}", p.name())),
            None if role.ends_with("-pm") => (Principal::Pm, format!("role {role:?} ends in -pm: principal pm")),
            None => (Principal::Worker, format!("role {role:?} is none of the named principals: principal worker")),
        }
    }
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
}

impl Op {
    fn letter(self) -> char {
        match self {
            Op::Read => 'R',
            Op::Write => 'W',
        }
    }
}

/// One cell: `"RW"`, `"R"`, `"W"` or `"-"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    pub read: bool,
    pub write: bool,
}

impl Access {
    fn parse(s: &str) -> Option<Access> {
        match s {
            "RW" => Some(Access { read: true, write: true }),
            "R" => Some(Access { read: true, write: false }),
            "W" => Some(Access { read: false, write: true }),
            "-" => Some(Access::default()),
            _ => None,
        }
    }

    fn allows(self, op: Op) -> bool {
        match op {
            Op::Read => self.read,
            Op::Write => self.write,
        }
    }

    fn text(self) -> &'static str {
        match (self.read, self.write) {
            (true, true) => "RW",
            (true, false) => "R",
            (false, true) => "W",
            (false, false) => "-",
        }
    }
}

/// A table of cells: principal → access, with where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    /// `[dirs."tasks/"]` or `[files."shared/risk-limits.json"]`.
    header: String,
    cells: BTreeMap<Principal, Access>,
}

/// The policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    dirs: Vec<(String, Row)>,
    files: Vec<(String, Row)>,
    own_task_only: Vec<Principal>,
    /// Seed 000's zone table: what each component type may do on a task's board.
    zones: BTreeMap<Component, ZoneRow>,
    /// Where the zone table came from (this file, or the seed's when it has none).
    zones_from: String,
}

/// A component type of the orchestration layer (seed 000). A role's type is its
/// config's `component`; the daemon is the orchestrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Component {
    Orchestrator,
    Worker,
    Skill,
    Middleware,
    Slicer,
}

impl Component {
    pub const ALL: [Component; 5] =
        [Component::Orchestrator, Component::Worker, Component::Skill, Component::Middleware, Component::Slicer];

    pub fn name(self) -> &'static str {
        match self {
            Component::Orchestrator => "orchestrator",
            Component::Worker => "worker",
            Component::Skill => "skill",
            Component::Middleware => "middleware",
            Component::Slicer => "slicer",
        }
    }

    pub fn parse(s: &str) -> Option<Component> {
        Component::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The type a role has when its config names none: PMs (and gm, platform-pm)
    /// steer, so orchestrator; the validator checks, so middleware; every other
    /// role works, so worker.
    pub fn default_for_role(role: &str) -> (Component, String) {
        let (p, _) = Principal::of_role(role);
        let c = match p {
            Principal::Pm | Principal::PlatformPm | Principal::Gm => Component::Orchestrator,
            Principal::Validator => Component::Middleware,
            _ => Component::Worker,
        };
        (c, format!("role {role:?} names no component (roles.ID.component): principal {} → {}", p.name(), c.name()))
    }
}

/// What a component does on the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BoardOp {
    /// A direct read (`read_meta`, `read_content`, `read_control`, `snapshot`).
    Read,
    /// `write_meta`, `write_content`, `write_control`, `update_step_status`.
    Write,
    /// `append_error`.
    AppendError,
}

/// One zone cell: `"RW"`, `"R"`, `"W"`, `"S"` (read through its slice only) or `"-"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct ZoneCell {
    read: bool,
    slice: bool,
    write: bool,
}

impl ZoneCell {
    fn parse(s: &str) -> Option<ZoneCell> {
        let c = |read, slice, write| Some(ZoneCell { read, slice, write });
        match s {
            "RW" => c(true, false, true),
            "R" => c(true, false, false),
            "W" => c(false, false, true),
            "S" => c(false, true, false),
            "-" => c(false, false, false),
            _ => None,
        }
    }

    fn text(self) -> &'static str {
        match (self.read, self.slice, self.write) {
            (true, _, true) => "RW",
            (true, _, false) => "R",
            (false, _, true) => "W",
            (false, true, false) => "S",
            (false, false, false) => "-",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ZoneRow {
    /// meta, content, control (the order of [`crate::formats::Zone::ALL`]).
    cells: [ZoneCell; 3],
    errors: bool,
}

/// An `acl.toml` that cannot be used, naming the file, the key and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {key}: {reason}")]
pub struct AclError {
    pub file: String,
    pub key: String,
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAcl {
    #[serde(default)]
    dirs: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    files: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    scope: Scope,
    #[serde(default)]
    zones: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Scope {
    #[serde(default)]
    own_task_only: Vec<String>,
}

/// The decision on one request, and the rule that made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub allowed: bool,
    pub principal: Principal,
    /// For a board request: the component type the decision was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<Component>,
    /// The rule that decided, as written in the file (`[dirs."tasks/"] worker = "W"`).
    pub rule: String,
    /// The reasoning, one step per line: how the role mapped, which rule matched, scope.
    pub why: Vec<String>,
}

/// Why a path is refused before any rule is looked at.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the path is empty".into());
    }
    if path.contains('\0') {
        return Err("the path contains a NUL byte".into());
    }
    if path.starts_with('/') {
        return Err("the path is absolute; give it relative to the blackboard root".into());
    }
    if path.contains('\\') {
        return Err("the path contains a backslash".into());
    }
    if path.ends_with('/') {
        return Err("the path ends in /; name a file".into());
    }
    for part in path.split('/') {
        if part.is_empty() {
            return Err("the path has an empty component (//)".into());
        }
        if part == ".." {
            return Err("the path climbs out with ..".into());
        }
        if part == "." {
            return Err("the path has a . component".into());
        }
    }
    if path.split('/').next() == Some(".clawboard") {
        return Err(".clawboard/ is the daemon's own state".into());
    }
    Ok(())
}

impl Acl {
    /// Parses `acl.toml` (`file` names it in errors): every cell must be RW, R, W or
    /// -, every principal known, every role principal present in every row.
    pub fn parse(file: &str, text: &str) -> Result<Acl, AclError> {
        let err = |key: String, reason: String| AclError { file: file.to_owned(), key, reason };
        let raw: FileAcl = toml::from_str(text).map_err(|e| {
            let key = e.span().map_or("(syntax)".to_owned(), |s| {
                format!("line {}", text[..s.start.min(text.len())].matches('\n').count() + 1)
            });
            err(key, e.message().to_owned())
        })?;
        let row = |kind: &str, name: &str, cells: &BTreeMap<String, String>| -> Result<Row, AclError> {
            let header = format!("[{kind}.{name:?}]");
            let mut out = BTreeMap::new();
            for (who, value) in cells {
                let key = format!("{kind}.{name:?}.{who}");
                let p = Principal::parse(who).ok_or_else(|| {
                    err(
                        key.clone(),
                        "unknown principal; use assistant, gm, validator, platform-pm, pm or worker".into(),
                    )
                })?;
                if matches!(p, Principal::Human | Principal::Daemon) {
                    return Err(err(key, format!("{who} may always do anything; it has no cell")));
                }
                let a = Access::parse(value)
                    .ok_or_else(|| err(key.clone(), format!("{value:?} is not one of \"RW\", \"R\", \"W\", \"-\"")))?;
                out.insert(p, a);
            }
            for p in Principal::ROLES {
                if !out.contains_key(&p) {
                    return Err(err(
                        format!("{kind}.{name:?}"),
                        format!("has no cell for {}; write \"-\" to deny", p.name()),
                    ));
                }
            }
            Ok(Row { header, cells: out })
        };
        let mut dirs = Vec::new();
        for (prefix, cells) in &raw.dirs {
            let key = format!("dirs.{prefix:?}");
            let dir = match prefix.strip_suffix('/') {
                None => Err("it does not end in /".to_owned()),
                // `gm//` would need a path with an empty component, which is refused.
                Some(d) if d.ends_with('/') => Err("the path has an empty component (//)".to_owned()),
                Some(d) => check_path(d),
            };
            if let Err(why) = dir {
                return Err(err(key, format!("is not a relative directory ending in /: {why}")));
            }
            if let Some(why) = pattern_in(prefix) {
                return Err(err(key, why));
            }
            dirs.push((prefix.clone(), row("dirs", prefix, cells)?));
        }
        // Longest prefix first.
        dirs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let mut files = Vec::new();
        for (path, cells) in &raw.files {
            if let Some(why) = check_path(path).err().or_else(|| pattern_in(path)) {
                return Err(err(format!("files.{path:?}"), why));
            }
            files.push((path.clone(), row("files", path, cells)?));
        }
        let mut own_task_only = Vec::new();
        for who in &raw.scope.own_task_only {
            let p = Principal::parse(who)
                .filter(|p| Principal::ROLES.contains(p))
                .ok_or_else(|| err("scope.own_task_only".into(), format!("{who:?} is not a role principal")))?;
            own_task_only.push(p);
        }
        let (zones, zones_from) = if raw.zones.is_empty() && text != DEFAULT_ACL {
            let seed = Acl::parse("config/acl.toml (embedded)", DEFAULT_ACL)?;
            (seed.zones, format!("{file} has no [zones]: the seed's zone table (embedded config/acl.toml)"))
        } else {
            (parse_zones(&raw.zones, &err)?, file.to_owned())
        };
        Ok(Acl { dirs, files, own_task_only, zones, zones_from })
    }

    /// May a role of component type `component` (and why it has that type: `how`)
    /// do `op` on `zone` of a task's board? `role` is `human` or `daemon` for those,
    /// who may do anything. A step's own slice is not asked for here: the slicer
    /// (which reads everything) builds it from the scope the step declares.
    pub fn check_board(
        &self,
        role: &str,
        component: Component,
        how: &str,
        op: BoardOp,
        zone: crate::formats::Zone,
    ) -> Decision {
        let (principal, mapped) = Principal::of_role(role);
        if matches!(principal, Principal::Human | Principal::Daemon) && (role == "human" || role == "daemon") {
            return Decision {
                allowed: true,
                principal,
                component: None,
                rule: format!("{} (built in)", principal.name()),
                why: vec![mapped, format!("{} may read and write every zone", principal.name())],
            };
        }
        let mut why = vec![how.to_owned()];
        let row = self.zones.get(&component);
        let index = crate::formats::Zone::ALL.iter().position(|z| *z == zone).unwrap_or(0);
        let cell = row.map(|r| r.cells[index]).unwrap_or_default();
        let (allowed, rule) = match op {
            BoardOp::AppendError => {
                let a = row.is_some_and(|r| r.errors);
                (a, format!("[zones.{}] errors = {:?}", component.name(), if a { "A" } else { "-" }))
            }
            BoardOp::Read => (cell.read, format!("[zones.{}] {} = {:?}", component.name(), zone.name(), cell.text())),
            BoardOp::Write => (cell.write, format!("[zones.{}] {} = {:?}", component.name(), zone.name(), cell.text())),
        };
        let what = match op {
            BoardOp::Read => "R",
            BoardOp::Write => "W",
            BoardOp::AppendError => "append_error",
        };
        why.push(if allowed {
            format!("{rule}: {what} allowed")
        } else if op == BoardOp::Read && cell.slice {
            format!("{rule}: a {} reads {} only through the slice its step declares", component.name(), zone.name())
        } else {
            format!("{rule}: no {what}")
        });
        why.push(format!("zone table: {}", self.zones_from));
        Decision { allowed, principal, component: Some(component), rule, why }
    }

    /// A policy that lets roles do nothing (human and daemon still may).
    pub fn empty() -> Acl {
        Acl {
            dirs: Vec::new(),
            files: Vec::new(),
            own_task_only: Vec::new(),
            zones: BTreeMap::new(),
            zones_from: "an empty policy".into(),
        }
    }

    /// The seed's matrix (the embedded `config/acl.toml`).
    pub fn seed() -> Result<Acl, AclError> {
        Acl::parse("config/acl.toml (embedded)", DEFAULT_ACL)
    }

    /// May a running role instance of `role` do `op` on `path`? Like [`Acl::check`],
    /// except that a role is never `human` or `daemon`, whatever its id.
    pub fn check_instance(&self, role: &str, task: &str, op: Op, path: &str) -> Decision {
        let (principal, _) = Principal::of_role(role);
        if matches!(principal, Principal::Human | Principal::Daemon) {
            let mut d = self.check("worker", Some(task), op, path);
            d.why[0] = format!("role {role:?} is a role instance, never {}: principal worker", principal.name());
            return d;
        }
        self.check(role, Some(task), op, path)
    }

    /// May `role` (running for `task`, if any) do `op` on `path`?
    pub fn check(&self, role: &str, task: Option<&str>, op: Op, path: &str) -> Decision {
        let (principal, mapped) = Principal::of_role(role);
        let mut why = vec![mapped];
        let refuse =
            |why: Vec<String>, rule: String| Decision { allowed: false, principal, component: None, rule, why };
        if let Err(e) = check_path(path) {
            why.push(format!("{path:?}: {e}"));
            return refuse(why, "path rules (before any table)".into());
        }
        if matches!(principal, Principal::Human | Principal::Daemon) {
            why.push(format!("{} may read and write everything", principal.name()));
            return Decision {
                allowed: true,
                principal,
                component: None,
                rule: format!("{} (built in)", principal.name()),
                why,
            };
        }
        let found = self
            .files
            .iter()
            .find(|(p, _)| p == path)
            .or_else(|| self.dirs.iter().find(|(prefix, _)| path.starts_with(prefix.as_str())));
        let Some((_, row)) = found else {
            why.push(format!("no [files] or [dirs] entry covers {path:?}: denied by default"));
            return refuse(why, "default deny".into());
        };
        let access = row.cells.get(&principal).copied().unwrap_or_default();
        let rule = format!("{} {} = {:?}", row.header, principal.name(), access.text());
        if !access.allows(op) {
            why.push(format!("{rule}: no {}", op.letter()));
            return refuse(why, rule);
        }
        why.push(format!("{rule}: {} allowed", op.letter()));
        if self.own_task_only.contains(&principal)
            && let Some(rest) = path.strip_prefix("tasks/")
        {
            let target = rest.split('/').next().unwrap_or_default();
            match task {
                Some(t) if t == target && rest.contains('/') => {
                    why.push(format!("scope.own_task_only: inside its own task {t}"));
                }
                Some(t) => {
                    why.push(format!("scope.own_task_only: {path} is outside its own task tasks/{t}/"));
                    return refuse(why, format!("[scope] own_task_only = [\"{}\"]", principal.name()));
                }
                None => {
                    why.push("scope.own_task_only: no task given (--task), so no task is its own".into());
                    return refuse(why, format!("[scope] own_task_only = [\"{}\"]", principal.name()));
                }
            }
        }
        Decision { allowed: true, principal, component: None, rule, why }
    }
}

/// Why `key` (of `[dirs]` or `[files]`) looks like a pattern, if it does: keys are
/// literal, and a glob character (which no task id has) would make a rule that never
/// matches.
fn pattern_in(key: &str) -> Option<String> {
    let c = key.chars().find(|c| matches!(c, '*' | '?' | '['))?;
    Some(format!(
        "contains {c:?}: rules are literal ([dirs] keys are path prefixes, [files] keys whole paths), not patterns, \
         so this rule would never match; name the directory or file itself"
    ))
}

/// `[zones.COMPONENT]` tables: every component present, every cell known.
fn parse_zones(
    raw: &BTreeMap<String, BTreeMap<String, String>>,
    err: &dyn Fn(String, String) -> AclError,
) -> Result<BTreeMap<Component, ZoneRow>, AclError> {
    let mut out = BTreeMap::new();
    for (name, cells) in raw {
        let c = Component::parse(name).ok_or_else(|| {
            err(
                format!("zones.{name}"),
                "unknown component; use orchestrator, worker, skill, middleware or slicer".into(),
            )
        })?;
        let mut row = ZoneRow { cells: [ZoneCell::default(); 3], errors: false };
        let mut seen = [false; 3];
        let mut seen_errors = false;
        for (key, value) in cells {
            let at = format!("zones.{name}.{key}");
            if key == "errors" {
                row.errors = match value.as_str() {
                    "A" => true,
                    "-" => false,
                    _ => return Err(err(at, format!("{value:?} is not \"A\" (may append) or \"-\""))),
                };
                seen_errors = true;
                continue;
            }
            let zone = crate::formats::Zone::parse(key)
                .ok_or_else(|| err(at.clone(), "unknown zone; use meta, content, control or errors".into()))?;
            let i = crate::formats::Zone::ALL.iter().position(|z| *z == zone).unwrap_or(0);
            row.cells[i] = ZoneCell::parse(value)
                .ok_or_else(|| err(at, format!("{value:?} is not one of \"RW\", \"R\", \"W\", \"S\", \"-\"")))?;
            seen[i] = true;
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            let z = crate::formats::Zone::ALL[i].name();
            return Err(err(format!("zones.{name}"), format!("has no cell for {z}; write \"-\" to deny")));
        }
        if !seen_errors {
            return Err(err(format!("zones.{name}"), "has no cell for errors; write \"-\" to deny".into()));
        }
        out.insert(c, row);
    }
    if let Some(missing) = Component::ALL.iter().find(|c| !out.contains_key(c)) {
        return Err(err("zones".into(), format!("has no [zones.{}] table; every component needs one", missing.name())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
