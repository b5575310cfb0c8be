//! The blueprints a daemon can run: the four of seed 001 built in, and those of
//! `[blueprints] dir`, which add to them or replace one by id. A built-in whose
//! roles are not configured is unavailable (a task naming it is refused with that
//! reason); a file in the configured directory that does not check is an error.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::{Blueprint, Known};
use crate::middleware::MiddlewareConfig;

/// Seed 001's four blueprints, as shipped in `config/blueprints/`.
pub const SHIPPED: &[(&str, &str)] = &[
    ("xiaohongshu_viral", include_str!("../../../config/blueprints/xiaohongshu_viral.json")),
    ("wechat_longform", include_str!("../../../config/blueprints/wechat_longform.json")),
    ("twitter_thread", include_str!("../../../config/blueprints/twitter_thread.json")),
    ("deep_analysis", include_str!("../../../config/blueprints/deep_analysis.json")),
];

/// Loaded blueprints and the middleware config they run with.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub blueprints: BTreeMap<String, Arc<Blueprint>>,
    /// Built-ins that cannot run here, with the reason.
    pub unavailable: BTreeMap<String, String>,
    pub middleware: Arc<MiddlewareConfig>,
    /// The role that replaces the built-in sensitive-word filter, if any.
    pub filter_role: Option<String>,
}

impl Catalog {
    /// The built-ins, then every `*.json` of `dir` (sorted by name).
    pub fn load(dir: Option<&Path>, middleware: MiddlewareConfig, known: &Known<'_>) -> Result<Catalog> {
        let mut c = Catalog { middleware: Arc::new(middleware), ..Catalog::default() };
        let any_role = |_: &str| true;
        let structural = Known { roles: &any_role, templates: known.templates };
        for (id, text) in SHIPPED {
            let file = format!("config/blueprints/{id}.json (built in)");
            // A built-in must always be well formed; only its roles may be missing here.
            Blueprint::parse(&file, text, &structural)?;
            match Blueprint::parse(&file, text, known) {
                Ok(bp) => {
                    c.blueprints.insert(bp.id.clone(), Arc::new(bp));
                }
                Err(e) => {
                    c.unavailable.insert((*id).to_owned(), e.to_string());
                }
            }
        }
        if let Some(dir) = dir {
            let shown = dir.display().to_string();
            let entries = std::fs::read_dir(dir).map_err(|source| Error::Io { path: shown.clone(), source })?;
            let mut files: Vec<_> = entries
                .filter_map(std::result::Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            for path in files {
                let bp = Blueprint::load(&path, known)?;
                c.unavailable.remove(&bp.id);
                c.blueprints.insert(bp.id.clone(), Arc::new(bp));
            }
        }
        Ok(c)
    }

    /// The blueprint `id`, or why it cannot run.
    pub fn get(&self, id: &str) -> std::result::Result<Arc<Blueprint>, String> {
        if let Some(bp) = self.blueprints.get(id) {
            return Ok(bp.clone());
        }
        match self.unavailable.get(id) {
            Some(why) => Err(format!("blueprint {id:?} cannot run here: {why}")),
            None => Err(format!("unknown blueprint {id:?} (known: {})", self.ids().join(", "))),
        }
    }

    /// Every loaded blueprint's warnings (a worker step over its ceiling …).
    pub fn warnings(&self) -> Vec<String> {
        self.blueprints.values().flat_map(|bp| bp.warnings.iter().cloned()).collect()
    }

    /// The blueprints that cannot run here, each with why.
    pub fn unavailable(&self) -> &BTreeMap<String, String> {
        &self.unavailable
    }

    /// The ids that can run.
    pub fn ids(&self) -> Vec<String> {
        self.blueprints.keys().cloned().collect()
    }
}
