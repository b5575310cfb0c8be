//! Lanes, the roles contract of seed 004 (§1, §5.2): which role picks which
//! entries (by project, `to` and `kind`), which kinds each may write
//! (`allowed_kinds`), and what a role's output may change.
//!
//! `[lanes.NAME]` in the config file:
//!
//! ```toml
//! [lanes.doc_update]
//! marker = "blackboard:doc_update_v1"   # the comment marker of its entries
//! projects = ["vpm-mini"]               # empty or absent: every project
//! docs = "projects/{project_id}"        # where its target_docs live in the tree
//!
//! [lanes.doc_update.actors.Aya]
//! role = "aya"                                   # the [roles.aya] that acts as Aya
//! picks = ["doc_update_proposal_request"]        # kinds addressed to Aya it takes
//! allowed_kinds = ["doc_update_review_request"]  # kinds Aya may write
//! writes_docs = false                            # may change the entry's target_docs
//! ```
//!
//! An entry addressed to an actor no lane runs (`Human`, for one) waits for a
//! person: the review page lists it.

use std::collections::BTreeMap;

use clawboard_core::config::ConfigError;
use clawboard_core::formats::name_problem;
use clawboard_core::formats::{Entry, EntryStatus, Extra, TargetDoc};
use clawboard_core::{Id, RelPath};
use serde::{Deserialize, Serialize};

use crate::comment::DEFAULT_MARKER;

/// The longest chain of entries, each written by the run that handled the one
/// before: past it, two actors that keep answering each other (or one that
/// answers itself) would run forever.
pub const MAX_HOPS: u64 = 32;

/// The extra field that counts an entry's place in its chain.
pub const HOPS_FIELD: &str = "hops";

/// How many runs led to `entry` (0 for one a person or a comment wrote).
pub fn hops_of(entry: &Entry) -> u64 {
    entry.extra.get(HOPS_FIELD).and_then(serde_json::Value::as_u64).unwrap_or(0)
}
use crate::lifecycle::HUMAN;

/// `[lanes]`: lanes by name, as read.
pub type LanesSection = BTreeMap<String, LaneConfig>;

/// `[lanes.NAME]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LaneConfig {
    /// The comment marker of the lane's entries, without `<!--` and `-->`.
    #[serde(default = "default_marker")]
    pub marker: String,
    /// Projects the lane serves; empty: every project.
    #[serde(default)]
    pub projects: Vec<String>,
    /// The directory of the tree that `target_docs` paths are relative to;
    /// `{project_id}` is replaced by the entry's project.
    #[serde(default = "default_docs")]
    pub docs: String,
    /// The actors a role plays, by actor name (`Aya`).
    #[serde(default)]
    pub actors: BTreeMap<String, ActorConfig>,
}

fn default_marker() -> String {
    DEFAULT_MARKER.to_owned()
}

fn default_docs() -> String {
    "projects/{project_id}".to_owned()
}

/// `[lanes.NAME.actors.ACTOR]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ActorConfig {
    /// The role (`[roles.ID]`) run for the actor's entries.
    pub role: String,
    /// Kinds of the entries addressed to the actor that it picks; empty: every kind.
    #[serde(default)]
    pub picks: Vec<String>,
    /// Kinds of the entries it may write (seed 004 §5.2); empty: none.
    #[serde(default)]
    pub allowed_kinds: Vec<String>,
    /// Whether its output may replace the contents of the handled entry's target_docs.
    #[serde(default)]
    pub writes_docs: bool,
}

/// The lanes, checked.
#[derive(Debug, Clone, Default)]
pub struct Lanes {
    lanes: BTreeMap<String, LaneConfig>,
}

/// The lane and actor that pick an entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    pub lane: String,
    pub actor: String,
    pub config: ActorConfig,
    /// The entry's documents directory in the tree (`projects/vpm-mini`).
    pub docs: String,
}

impl Lanes {
    /// Checks `section`; `has_role` says whether a `[roles.ID]` exists.
    pub fn resolve(section: LanesSection, has_role: impl Fn(&str) -> bool) -> Result<Lanes, ConfigError> {
        let mut seen: BTreeMap<&str, Vec<(&str, &[String])>> = BTreeMap::new();
        for (name, lane) in &section {
            let key = |k: &str| format!("lanes.{name}{k}");
            Id::new(name).map_err(|e| ConfigError::new(key(""), format!("{name:?} is not a lane name: {e}")))?;
            let marker_ok = lane.marker.starts_with("blackboard:")
                && lane.marker.len() > "blackboard:".len()
                && lane.marker.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-' | '.'));
            if !marker_ok {
                return Err(ConfigError::new(
                    key(".marker"),
                    format!("{:?}: a marker is `blackboard:NAME` (letters, digits, `_`, `-`, `.`)", lane.marker),
                ));
            }
            for p in &lane.projects {
                Id::new(p).map_err(|e| ConfigError::new(key(".projects"), format!("{p:?}: {e}")))?;
            }
            let sample = lane.docs.replace("{project_id}", "p");
            RelPath::new(&sample).map_err(|e| ConfigError::new(key(".docs"), format!("{:?}: {e}", lane.docs)))?;
            for (actor, a) in &lane.actors {
                let akey = |k: &str| key(&format!(".actors.{actor}{k}"));
                if let Some(p) = name_problem(actor) {
                    return Err(ConfigError::new(akey(""), format!("the actor name {p}")));
                }
                if actor == HUMAN {
                    return Err(ConfigError::new(
                        akey(""),
                        "Human is a person, not a role: entries to Human wait on the review page",
                    ));
                }
                if !has_role(&a.role) {
                    return Err(ConfigError::new(
                        akey(".role"),
                        format!("{:?} is not configured under [roles]", a.role),
                    ));
                }
                for k in a.picks.iter().chain(&a.allowed_kinds) {
                    if let Some(p) = name_problem(k) {
                        return Err(ConfigError::new(akey(""), format!("the kind {p}")));
                    }
                }
                if let Some((other, _)) = seen
                    .get(actor.as_str())
                    .and_then(|lanes| lanes.iter().find(|(_, projects)| overlap(projects, &lane.projects)))
                {
                    return Err(ConfigError::new(
                        akey(""),
                        format!(
                            "{actor} is also an actor of lane {other} for the same projects: one lane picks an actor's entries"
                        ),
                    ));
                }
                // Every lane the actor is in, not only the last: a third lane may
                // overlap the first while the second does not.
                seen.entry(actor).or_default().push((name, &lane.projects));
            }
        }
        Ok(Lanes { lanes: section })
    }

    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &LaneConfig)> {
        self.lanes.iter()
    }

    /// The lane and actor that take `entry`, if a role does.
    pub fn pick(&self, entry: &Entry) -> Option<Pick> {
        self.lanes.iter().filter(|(_, l)| serves(l, entry.project_id.as_str())).find_map(|(name, l)| {
            let a = l.actors.get(&entry.to)?;
            (a.picks.is_empty() || a.picks.contains(&entry.kind)).then(|| Pick {
                lane: name.clone(),
                actor: entry.to.clone(),
                config: a.clone(),
                docs: l.docs.replace("{project_id}", entry.project_id.as_str()),
            })
        })
    }

    /// The actor `role` plays for `project` (a role writing entries through the API).
    pub fn actor_of_role(&self, role: &str, project: &str) -> Option<Pick> {
        self.lanes.iter().filter(|(_, l)| serves(l, project)).find_map(|(name, l)| {
            let (actor, a) = l.actors.iter().find(|(_, a)| a.role == role)?;
            Some(Pick {
                lane: name.clone(),
                actor: actor.clone(),
                config: a.clone(),
                docs: l.docs.replace("{project_id}", project),
            })
        })
    }

    /// The comment marker of `entry`: its lane's (the lane of its project that names
    /// its kind), else the default.
    pub fn marker_of(&self, entry: &Entry) -> &str {
        self.lanes
            .values()
            .filter(|l| serves(l, entry.project_id.as_str()))
            .find(|l| {
                l.actors.values().any(|a| a.picks.contains(&entry.kind) || a.allowed_kinds.contains(&entry.kind))
                    || l.actors.contains_key(&entry.to)
            })
            .map_or(DEFAULT_MARKER, |l| l.marker.as_str())
    }
}

fn serves(lane: &LaneConfig, project: &str) -> bool {
    lane.projects.is_empty() || lane.projects.iter().any(|p| p == project)
}

fn overlap(a: &[String], b: &[String]) -> bool {
    a.is_empty() || b.is_empty() || a.iter().any(|p| b.contains(p))
}

/// What a role prints on stdout after handling an entry.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LaneOutput {
    /// The handled entry's new status: `done` (the default), `error` or `canceled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EntryStatus>,
    /// Put into the handled entry's `note`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// New entries; their `from` is the actor, their project the handled entry's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<NewEntry>,
    /// New contents of the handled entry's target_docs (actors with `writes_docs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub docs: Vec<DocWrite>,
    /// The tokens a model role reports having spent (OpenAI's `usage`, which the
    /// `llm` runner adds to every reply); kept with the recorded output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<serde_json::Value>,
}

/// An entry a role writes.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NewEntry {
    pub to: String,
    pub kind: String,
    #[serde(default)]
    pub payload: Extra,
    /// Default: the handled entry's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_docs: Option<Vec<TargetDoc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The new content of one target doc.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DocWrite {
    pub path: String,
    pub content: String,
}

impl LaneOutput {
    /// Parses a role's stdout; the error names the field.
    pub fn parse(stdout: &[u8]) -> Result<LaneOutput, String> {
        let de = &mut serde_json::Deserializer::from_slice(stdout);
        serde_path_to_error::deserialize(de).map_err(|e| match e.path().to_string().as_str() {
            "." => e.inner().to_string(),
            p => format!("{p}: {}", e.inner()),
        })
    }

    /// The handled entry's final status.
    pub fn final_status(&self) -> EntryStatus {
        self.status.unwrap_or(EntryStatus::Done)
    }

    /// Checks the output against the actor's rights, and that all of it can be
    /// written (an output that fails only when applied would be run again and
    /// again); the error names the field.
    pub fn check(&self, handled: &Entry, pick: &Pick) -> Result<(), String> {
        if !self.final_status().is_final() {
            return Err(format!("status: {}: a handled entry ends done, error or canceled", self.final_status()));
        }
        let hops = hops_of(handled) + 1;
        if !self.entries.is_empty() && hops > MAX_HOPS {
            return Err(format!(
                "entries: they would be {hops} runs from the first entry of their chain, past {MAX_HOPS}; actors that keep answering each other stop here"
            ));
        }
        for (i, e) in self.entries.iter().enumerate() {
            if let Some(p) = name_problem(&e.to) {
                return Err(format!("entries[{i}].to: {p}"));
            }
            if let Some(p) = name_problem(&e.kind) {
                return Err(format!("entries[{i}].kind: {p}"));
            }
            if !pick.config.allowed_kinds.contains(&e.kind) {
                return Err(format!(
                    "entries[{i}].kind: {} may not write {:?} entries (allowed_kinds of lanes.{}.actors.{}: {})",
                    pick.actor,
                    e.kind,
                    pick.lane,
                    pick.actor,
                    if pick.config.allowed_kinds.is_empty() {
                        "none".to_owned()
                    } else {
                        pick.config.allowed_kinds.join(", ")
                    }
                ));
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            // As `handling::plan` will write it (an id of the same project; the
            // real one is picked then).
            let provisional = self.new_entry(e, handled, &pick.actor, handled.id.clone(), handled.updated_at.clone());
            crate::board::check(&provisional).map_err(|err| format!("entries[{i}]: {err}"))?;
        }
        if self.note.is_some() {
            let mut after = handled.clone();
            after.status = self.final_status();
            after.note.clone_from(&self.note);
            crate::board::check(&after).map_err(|err| format!("note: {err}"))?;
        }
        for (i, d) in self.docs.iter().enumerate() {
            if !pick.config.writes_docs {
                return Err(format!("docs[{i}]: {} may not change documents (writes_docs is off)", pick.actor));
            }
            if !handled.target_docs.iter().any(|t| t.path() == d.path) {
                return Err(format!("docs[{i}].path: {:?} is not one of the entry's target_docs", d.path));
            }
            doc_path(&pick.docs, &d.path).map_err(|e| format!("docs[{i}].path: {e}"))?;
        }
        Ok(())
    }
}

impl LaneOutput {
    /// The entry `e` of this output becomes, written by `actor` while handling
    /// `handled`, with `id` at `now`: one hop further down its chain.
    pub fn new_entry(
        &self,
        e: &NewEntry,
        handled: &Entry,
        actor: &str,
        id: Id,
        now: clawboard_core::Timestamp,
    ) -> Entry {
        let mut extra = Extra::new();
        extra.insert(HOPS_FIELD.into(), (hops_of(handled) + 1).into());
        Entry {
            id,
            from: actor.to_owned(),
            to: e.to.clone(),
            project_id: handled.project_id.clone(),
            kind: e.kind.clone(),
            status: EntryStatus::Open,
            payload: e.payload.clone(),
            target_docs: e.target_docs.clone().unwrap_or_else(|| handled.target_docs.clone()),
            created_at: now.clone(),
            updated_at: now,
            source_issue: handled.source_issue.clone(),
            source_comment_id: None,
            source_run_id: handled.source_run_id.clone(),
            note: e.note.clone(),
            extra,
        }
    }
}

/// Where target doc `path` lives in the tree.
pub fn doc_path(docs: &str, path: &str) -> Result<RelPath, String> {
    if path.starts_with('/') {
        return Err(format!("{path:?}: a target doc is relative to the lane's docs directory"));
    }
    let joined = format!("{}/{}", docs.trim_end_matches('/'), path.trim_start_matches("./"));
    RelPath::new(&joined).map_err(|e| format!("{path:?}: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn section(toml_text: &str) -> LanesSection {
        #[derive(Deserialize)]
        struct F {
            lanes: LanesSection,
        }
        toml::from_str::<F>(toml_text).unwrap().lanes
    }

    const DOC_UPDATE: &str = r#"
[lanes.doc_update]
projects = ["vpm-mini"]
[lanes.doc_update.actors.Aya]
role = "aya"
picks = ["doc_update_proposal_request"]
allowed_kinds = ["doc_update_review_request"]
[lanes.doc_update.actors.Tsugu]
role = "tsugu"
allowed_kinds = []
writes_docs = true
"#;

    fn entry(to: &str, kind: &str, project: &str) -> Entry {
        let mut e: Entry = serde_json::from_str(include_str!(
            "../../../tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"
        ))
        .unwrap();
        e.to = to.into();
        e.kind = kind.into();
        e.project_id = Id::new(project).unwrap();
        e
    }

    #[test]
    fn picks_by_project_to_and_kind() {
        let lanes = Lanes::resolve(section(DOC_UPDATE), |_| true).unwrap();
        let p = lanes.pick(&entry("Aya", "doc_update_proposal_request", "vpm-mini")).unwrap();
        assert_eq!((p.lane.as_str(), p.actor.as_str(), p.docs.as_str()), ("doc_update", "Aya", "projects/vpm-mini"));
        assert!(lanes.pick(&entry("Aya", "other_kind", "vpm-mini")).is_none(), "not a kind Aya picks");
        assert!(
            lanes.pick(&entry("Aya", "doc_update_proposal_request", "hakone-e2")).is_none(),
            "not the lane's project"
        );
        assert!(lanes.pick(&entry("Human", "doc_update_proposal_request", "vpm-mini")).is_none());
        assert!(lanes.pick(&entry("Tsugu", "anything", "vpm-mini")).is_some(), "empty picks take every kind");
        assert_eq!(lanes.actor_of_role("aya", "vpm-mini").unwrap().actor, "Aya");
        assert!(lanes.actor_of_role("aya", "elsewhere").is_none());
    }

    #[test]
    fn bad_config_names_the_key() {
        let err = |text: &str| Lanes::resolve(section(text), |r| r != "ghost").unwrap_err().to_string();
        assert_eq!(
            err("[lanes.l.actors.A]\nrole = \"ghost\""),
            "lanes.l.actors.A.role: \"ghost\" is not configured under [roles]"
        );
        assert!(err("[lanes.l]\nmarker = \"doc\"").starts_with("lanes.l.marker: \"doc\": a marker is"));
        assert!(err("[lanes.l]\ndocs = \"../x\"").starts_with("lanes.l.docs: "));
        assert!(err("[lanes.l]\nprojects = [\"a/b\"]").starts_with("lanes.l.projects: "));
        assert!(err("[lanes.l.actors.Human]\nrole = \"r\"").starts_with("lanes.l.actors.Human: Human is a person"));
        assert!(
            err("[lanes.a.actors.X]\nrole = \"r\"\n[lanes.b.actors.X]\nrole = \"r\"")
                .contains("is also an actor of lane a")
        );
        // A third lane that overlaps the first, not the second (the one seen last).
        let three = "[lanes.a]\nprojects = [\"p1\"]\n[lanes.a.actors.X]\nrole = \"r\"\n\
                     [lanes.b]\nprojects = [\"p2\"]\n[lanes.b.actors.X]\nrole = \"r\"\n\
                     [lanes.c]\nprojects = [\"p1\"]\n[lanes.c.actors.X]\nrole = \"r\"";
        assert!(err(three).contains("X is also an actor of lane a for the same projects"), "{}", err(three));
        let e = toml::from_str::<toml::Value>("[lanes.l.actors.A]\nrole = \"r\"\nwho = 1").unwrap();
        let typed: Result<LanesSection, _> = e.get("lanes").unwrap().clone().try_into();
        assert!(typed.unwrap_err().to_string().contains("unknown field `who`"));
    }

    #[test]
    fn output_is_checked_against_the_actors_rights() {
        let lanes = Lanes::resolve(section(DOC_UPDATE), |_| true).unwrap();
        let handled = entry("Aya", "doc_update_proposal_request", "vpm-mini");
        let aya = lanes.pick(&handled).unwrap();
        let out = |json: &str| LaneOutput::parse(json.as_bytes());
        let ok =
            out(r#"{"entries":[{"to":"Sho","kind":"doc_update_review_request","payload":{"summary":"s"}}]}"#).unwrap();
        assert_eq!(ok.check(&handled, &aya), Ok(()));
        assert_eq!(ok.final_status(), EntryStatus::Done);
        let wrong_kind = out(r#"{"entries":[{"to":"Sho","kind":"doc_update_apply_request"}]}"#).unwrap();
        assert!(wrong_kind.check(&handled, &aya).unwrap_err().starts_with("entries[0].kind: Aya may not write"));
        let docs = out(r#"{"docs":[{"path":"STATE/current_state.md","content":"x"}]}"#).unwrap();
        assert!(docs.check(&handled, &aya).unwrap_err().contains("writes_docs is off"));
        let mut tsugu = aya.clone();
        tsugu.config.writes_docs = true;
        assert_eq!(docs.check(&handled, &tsugu), Ok(()));
        let elsewhere = out(r#"{"docs":[{"path":"other.md","content":"x"}]}"#).unwrap();
        assert!(elsewhere.check(&handled, &tsugu).unwrap_err().contains("not one of the entry's target_docs"));
        let open = out(r#"{"status":"in_progress"}"#).unwrap();
        assert!(open.check(&handled, &aya).unwrap_err().starts_with("status: in_progress"));
        assert!(out(r#"{"entries":[{"to":"Sho"}]}"#).unwrap_err().starts_with("entries[0]: missing field `kind`"));
        assert!(out(r#"{"from":"Gen"}"#).unwrap_err().contains("unknown field `from`"), "a role never names its from");
        assert!(out("not json").is_err());

        // What only applying would have refused is refused here (else the run is
        // repeated for ever): an entry over the size limit, an empty target doc, a
        // note that makes the handled entry too large.
        let big = format!(
            r#"{{"entries":[{{"to":"Sho","kind":"doc_update_review_request","payload":{{"summary":"{}"}}}}]}}"#,
            "x".repeat(70_000)
        );
        let e = out(&big).unwrap().check(&handled, &aya).unwrap_err();
        assert!(e.starts_with("entries[0]: "), "{e}");
        let empty_doc =
            out(r#"{"entries":[{"to":"Sho","kind":"doc_update_review_request","target_docs":[""]}]}"#).unwrap();
        assert!(empty_doc.check(&handled, &aya).unwrap_err().starts_with("entries[0]: "));
        let long_note = format!(r#"{{"note":"{}"}}"#, "n".repeat(70_000));
        assert!(out(&long_note).unwrap().check(&handled, &aya).unwrap_err().starts_with("note: "));
    }

    #[test]
    fn a_chain_of_entries_ends_at_max_hops() {
        let lanes = Lanes::resolve(section(DOC_UPDATE), |_| true).unwrap();
        let mut handled = entry("Aya", "doc_update_proposal_request", "vpm-mini");
        let aya = lanes.pick(&handled).unwrap();
        let answer = LaneOutput::parse(br#"{"entries":[{"to":"Sho","kind":"doc_update_review_request"}]}"#).unwrap();
        // Each new entry is one hop further than the one handled.
        let next =
            answer.new_entry(&answer.entries[0], &handled, "Aya", handled.id.clone(), handled.updated_at.clone());
        assert_eq!(hops_of(&handled), 0);
        assert_eq!(hops_of(&next), 1);
        handled.extra.insert(HOPS_FIELD.into(), (MAX_HOPS - 1).into());
        assert_eq!(answer.check(&handled, &aya), Ok(()), "the last hop allowed");
        handled.extra.insert(HOPS_FIELD.into(), MAX_HOPS.into());
        let e = answer.check(&handled, &aya).unwrap_err();
        assert!(e.starts_with("entries: they would be 33 runs from the first entry of their chain, past 32"), "{e}");
        // Ending the chain is always allowed.
        assert_eq!(LaneOutput::parse(br#"{"note":"done"}"#).unwrap().check(&handled, &aya), Ok(()));
    }

    #[test]
    fn doc_paths_stay_in_the_docs_directory() {
        assert_eq!(doc_path("projects/p", "STATE/a.md").unwrap().to_string(), "projects/p/STATE/a.md");
        assert!(doc_path("projects/p", "../../etc/passwd").is_err());
        assert!(doc_path("projects/p", "/etc/passwd").unwrap_err().contains("relative to the lane's docs"));
    }
}
