//! Which files of `entries/` the retention policy covers (the entries rule itself
//! is in the plan, beside the other rules).

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
