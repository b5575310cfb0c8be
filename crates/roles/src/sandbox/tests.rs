use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::*;

/// A tree like a deployment's: `base/root` is the blackboard (with
/// `.clawboard/person-token` and a task file), `base/other` a neighbour with a
/// file, `base/link` a symlink into the root.
struct Tree {
    _dir: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("root");
    std::fs::create_dir_all(root.join(".clawboard")).unwrap();
    std::fs::create_dir_all(root.join("tasks/t1")).unwrap();
    std::fs::write(root.join(".clawboard/person-token"), "secret").unwrap();
    std::fs::write(root.join("tasks/t1/task.json"), "{}").unwrap();
    std::fs::create_dir_all(base.join("other")).unwrap();
    std::fs::write(base.join("other/notes.txt"), "notes").unwrap();
    std::os::unix::fs::symlink(root.join(".clawboard/person-token"), base.join("link")).unwrap();
    Tree { _dir: dir, base, root }
}

/// Runs `f` on a thread of its own restricted by `denied` (Landlock binds a
/// thread, so the test's other threads stay free).
fn sandboxed<T: Send + 'static>(denied: Denied, f: impl FnOnce() -> T + Send + 'static) -> T {
    check_supported().expect("these tests need a kernel that enforces Landlock");
    std::thread::spawn(move || {
        restrict_self(&denied).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// Refused by Landlock: EACCES, or EXDEV for a link or rename it will not let
/// cross from one hierarchy to another (so that `mv` falls back to a copy, which
/// it then refuses on its own terms).
fn refused<T: std::fmt::Debug>(r: std::io::Result<T>) -> bool {
    matches!(r, Err(e) if matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::CrossesDevices))
}

#[test]
fn a_bad_denied_path_is_named_with_its_reason() {
    for (path, reason) in [
        ("relative/root", "is not an absolute path"),
        ("/srv/../etc", "has a `..` component"),
        ("/", "would deny the whole file system"),
    ] {
        let e = Denied::new([PathBuf::from(path)]).unwrap_err().to_string();
        assert_eq!(e, format!("{path:?}: {reason}"));
    }
}

#[test]
fn a_denied_path_is_resolved_through_links_and_one_beneath_another_adds_nothing() {
    let t = tree();
    std::os::unix::fs::symlink(&t.root, t.base.join("root-link")).unwrap();
    let d = Denied::new([t.base.join("root-link/tasks"), t.root.clone(), t.base.join("root/not-yet/x")]).unwrap();
    assert_eq!(d.paths().collect::<Vec<_>>(), vec![t.root.as_path()]);
}

#[test]
fn grants_are_everything_beside_the_way_down_to_a_denied_path() {
    let t = tree();
    let d = Denied::new([t.root.clone()]).unwrap();
    let grants = d.grants().unwrap();
    let has = |p: &Path| grants.iter().any(|g| g.path == p);
    assert!(has(&t.base.join("other")), "{grants:?}");
    assert!(grants.iter().any(|g| g.path == Path::new("/usr") && g.dir));
    // Neither the root, nor a link (into it), nor any ancestor on the way.
    for p in [t.root.clone(), t.base.join("link"), t.base.clone(), PathBuf::from("/")] {
        assert!(!has(&p), "{p:?} granted: {grants:?}");
    }
    for a in t.base.ancestors() {
        assert!(!has(a), "{a:?} granted");
    }
}

#[test]
fn a_sandboxed_thread_can_neither_read_list_nor_write_the_root() {
    let t = tree();
    let (root, base) = (t.root.clone(), t.base.clone());
    let d = Denied::new([root.clone()]).unwrap();
    let results = sandboxed(d, move || {
        vec![
            ("read the person token", refused(std::fs::read(root.join(".clawboard/person-token")))),
            ("read a task file", refused(std::fs::read(root.join("tasks/t1/task.json")))),
            ("read it through a link", refused(std::fs::read(base.join("link")))),
            ("list the root", refused(std::fs::read_dir(&root))),
            ("overwrite a task file", refused(std::fs::write(root.join("tasks/t1/task.json"), "x"))),
            ("create a file in the root", refused(std::fs::write(root.join("tasks/t1/new"), "x"))),
            ("remove a task file", refused(std::fs::remove_file(root.join("tasks/t1/task.json")))),
            ("move a file in", refused(std::fs::rename(base.join("other/notes.txt"), root.join("notes.txt")))),
            (
                "link a task file out",
                refused(std::fs::hard_link(root.join("tasks/t1/task.json"), base.join("other/t"))),
            ),
            ("create a file beside the root", refused(std::fs::write(base.join("new"), "x"))),
        ]
    });
    let allowed: Vec<_> = results.iter().filter(|(_, refused)| !refused).map(|(what, _)| what).collect();
    assert!(allowed.is_empty(), "the sandbox allowed: {allowed:?}");
    // Nothing changed underneath.
    assert_eq!(std::fs::read_to_string(t.root.join("tasks/t1/task.json")).unwrap(), "{}");
    assert!(t.base.join("other/notes.txt").exists() && !t.base.join("new").exists());
    assert!(!t.base.join("other/t").exists() && !t.root.join("notes.txt").exists());
}

#[test]
fn a_sandboxed_thread_keeps_the_rest_of_the_machine() {
    let t = tree();
    let (root, base) = (t.root.clone(), t.base.clone());
    let d = Denied::new([root]).unwrap();
    let r = sandboxed(d, move || -> std::io::Result<(String, String, bool)> {
        let notes = std::fs::read_to_string(base.join("other/notes.txt"))?;
        std::fs::write(base.join("other/out.txt"), "written")?;
        std::fs::create_dir(base.join("other/sub"))?;
        std::fs::rename(base.join("other/out.txt"), base.join("other/sub/out.txt"))?;
        let out = std::fs::read_to_string(base.join("other/sub/out.txt"))?;
        let listed = std::fs::read_dir("/usr/bin")?.next().is_some();
        Ok((notes, out, listed))
    });
    assert_eq!(r.unwrap(), ("notes".to_owned(), "written".to_owned(), true));
}

#[test]
fn a_sandboxed_process_cannot_signal_one_outside_its_sandbox() {
    let mut outside = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(outside.id()).unwrap());
    let t = tree();
    let d = Denied::new([t.root.clone()]).unwrap();
    let r = sandboxed(d, move || nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM));
    assert_eq!(r, Err(nix::errno::Errno::EPERM));
    assert!(outside.try_wait().unwrap().is_none(), "the process outside was signalled");
    outside.kill().unwrap();
    outside.wait().unwrap();
}

#[test]
fn roles_get_a_private_temporary_directory_only_when_the_root_is_under_the_usual_one() {
    use std::os::unix::fs::PermissionsExt;
    let t = tree();
    let uid = nix::unistd::getuid().as_raw();
    let mine = t.base.join(format!("clawboard-roles-{uid}"));
    // The root beside the temporary directory: nothing to do.
    assert_eq!(private_tmp_in(&t.base.join("other"), std::slice::from_ref(&t.root)).unwrap(), None);
    assert!(!mine.exists());
    // Under it: made, mode 700, and found again the next time.
    for _ in 0..2 {
        assert_eq!(private_tmp_in(&t.base, std::slice::from_ref(&t.root)).unwrap(), Some(mine.clone()));
        assert_eq!(std::fs::metadata(&mine).unwrap().permissions().mode() & 0o777, 0o700);
    }
    // One that others may use, or a link, is refused rather than used.
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = private_tmp_in(&t.base, std::slice::from_ref(&t.root)).unwrap_err().to_string();
    assert!(e.ends_with(&format!("is not a directory of uid {uid} that only it may use (mode 700); remove it")), "{e}");
    std::fs::remove_dir(&mine).unwrap();
    std::os::unix::fs::symlink(t.base.join("other"), &mine).unwrap();
    assert!(private_tmp_in(&t.base, std::slice::from_ref(&t.root)).is_err());
}
