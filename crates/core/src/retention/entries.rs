//! Which files of `entries/` the retention policy covers (the entries rule itself
//! is in the plan, beside the other rules).

use std::collections::{BTreeMap, BTreeSet};

use crate::{Error, Store, layout};

/// `entries/{project}/{id}.json` files, sorted; a symlinked directory is skipped
/// (and said so), never followed.
pub(super) fn files(store: &Store, skipped: &mut Vec<String>) -> Result<Vec<String>, Error> {
    let dir = store.root().join(layout::ENTRIES);
    let list = |path: &std::path::Path| -> Result<Vec<(String, std::fs::FileType)>, Error> {
        let read = match std::fs::read_dir(path) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(path, e)),
        };
        let mut out = Vec::new();
        for e in read {
            let e = e.map_err(|err| Error::io(path, err))?;
            let ty = e.file_type().map_err(|err| Error::io(e.path(), err))?;
            if let Some(name) = e.file_name().to_str() {
                out.push((name.to_owned(), ty));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    };
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
        skipped.push(format!("{}/: a symlink, not followed", layout::ENTRIES));
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for (project, ty) in list(&dir)? {
        if ty.is_symlink() {
            skipped.push(format!("{}/{project}/: a symlink, not followed", layout::ENTRIES));
            continue;
        }
        if !ty.is_dir() {
            continue;
        }
        for (name, ty) in list(&dir.join(&project))? {
            if ty.is_file() && name.ends_with(".json") && !crate::store::is_temp_name(&name) {
                files.push(format!("{}/{project}/{name}", layout::ENTRIES));
            }
        }
    }
    Ok(files)
}

/// The last entry of each id counter: of the files `entries/{project}/{stem}-{n}.json`,
/// the one with the highest `n` for its project and stem. Kept whatever its age: a
/// new entry's id is one past the highest of its counter still on the tree
/// (`clawboard_entries::new_id`), so with the last one gone the counter would hand
/// out a deleted entry's id again, and a lane's record of the deleted entry
/// (`.clawboard/lanes/{id}.json`, handled) would take the new one for handled.
pub(super) fn counter_tops(files: &[String]) -> BTreeSet<String> {
    let mut tops: BTreeMap<(&str, &str), (u64, &String)> = BTreeMap::new();
    for rel in files {
        let Some((dir, name)) = rel.rsplit_once('/') else { continue };
        let Some((stem, n)) = name
            .strip_suffix(".json")
            .and_then(|id| id.rsplit_once('-'))
            .and_then(|(stem, n)| Some((stem, n.parse::<u64>().ok()?)))
        else {
            continue;
        };
        let top = tops.entry((dir, stem)).or_insert((n, rel));
        if n > top.0 {
            *top = (n, rel);
        }
    }
    tops.into_values().map(|(_, rel)| rel.clone()).collect()
}
