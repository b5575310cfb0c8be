use std::os::unix::fs::PermissionsExt;

use super::*;

#[test]
fn only_a_role_runs_processes_are_orphans_not_a_shell_with_the_root_exported() {
    let d = tempfile::tempdir().unwrap();
    let proc_entry = |pid: &str, env: &[&str]| {
        let dir = d.path().join(pid);
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = Vec::new();
        for kv in env {
            bytes.extend_from_slice(kv.as_bytes());
            bytes.push(0);
        }
        std::fs::write(dir.join("environ"), bytes).unwrap();
    };
    proc_entry("101", &["HOME=/h", "CLAWBOARD_ROOT=/bb", "CLAWBOARD_INSTANCE_ID=inst-a1b2c3", "CLAWBOARD_TOKEN=t"]);
    proc_entry("102", &["HOME=/h", "CLAWBOARD_ROOT=/bb"]); // a person's shell
    proc_entry("103", &["CLAWBOARD_ROOT=/other", "CLAWBOARD_INSTANCE_ID=inst-ffffff"]); // another tree
    proc_entry("104", &["CLAWBOARD_ROOT=/bb", "CLAWBOARD_INSTANCE_ID="]); // emptied
    proc_entry("105", &["CLAWBOARD_ROOT=/bbx", "CLAWBOARD_INSTANCE_ID=inst-1"]); // a root that only starts alike
    proc_entry("self", &["CLAWBOARD_ROOT=/bb", "CLAWBOARD_INSTANCE_ID=inst-1"]); // not a pid
    assert_eq!(orphans_in(d.path(), "/bb"), [101]);
}

fn role(argv: &[&str]) -> RoleConfig {
    let mut r: RoleConfig = serde_json::from_value(serde_json::json!({"command": argv})).unwrap();
    r.timeout = Duration::from_secs(5);
    r
}

fn who() -> RunIdentity {
    RunIdentity {
        root: "/tmp/x".into(),
        task_id: "t1".into(),
        role: "w".into(),
        instance_id: "inst-1".into(),
        token: "tok".into(),
        sandbox: None,
        trace: None,
    }
}

#[tokio::test]
async fn argv0_stays_as_configured_and_a_role_path_is_used() {
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("whoami-tool");
    std::fs::write(&script, "#!/bin/sh\nprintf '%s' \"$0\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut r = role(&["whoami-tool"]);
    r.env.insert("PATH".into(), format!("{}:/usr/bin:/bin", d.path().display()));
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&r, b"{}", &who(), &mut rx).await;
    // Found on the role's own PATH (a script's $0 is the file the kernel ran).
    assert_eq!(out.status, RunStatus::Exited, "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), script.display().to_string());
    // argv[0] is the name as configured, not the file it resolved to.
    let argv = run(&role(&["sh", "-c", "tr '\\0' ' ' < /proc/$$/cmdline"]), b"{}", &who(), &mut rx).await;
    assert_eq!(argv.status, RunStatus::Exited, "{argv:?}");
    assert!(String::from_utf8_lossy(&argv.stdout).starts_with("sh -c "), "{argv:?}");
    // A program found nowhere still fails to start, naming it.
    let missing = run(&role(&["no-such-program-here"]), b"{}", &who(), &mut rx).await;
    assert_eq!(missing.status, RunStatus::Failed);
    assert!(missing.error.unwrap().contains("no-such-program-here"));
}

#[tokio::test]
async fn passes_context_and_env_and_reads_stdout() {
    let r = role(&["sh", "-c", "cat; printf ' %s' \"$CLAWBOARD_TASK_ID\"; echo oops >&2"]);
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&r, b"{\"a\":1}", &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::Exited);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "{\"a\":1} t1");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
}

#[tokio::test]
async fn nonzero_exit_fails() {
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&role(&["sh", "-c", "exit 3"]), b"", &who(), &mut rx).await;
    assert_eq!((out.status, out.exit_code), (RunStatus::Failed, Some(3)));
    let out = run(&role(&["/nonexistent/role"]), b"", &who(), &mut rx).await;
    assert!(out.error.unwrap().starts_with("cannot start"));
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("survived");
    let script = format!("(sleep 2; touch {}) & sleep 30", marker.display());
    let mut r = role(&["sh", "-c", &script]);
    r.timeout = Duration::from_millis(300);
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&r, b"", &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::TimedOut);
    assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!marker.exists(), "a grandchild outlived the timeout");
}

#[tokio::test]
async fn a_stdout_held_open_after_exit_fails_the_run_instead_of_emptying_it() {
    // The role prints and exits 0; a process it started keeps stdout open.
    let mut r = role(&["sh", "-c", "echo '{\"output\": 1}'; sleep 30 &"]);
    r.timeout = Duration::from_secs(60);
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&r, b"", &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::Failed, "{out:?}");
    assert!(out.error.as_deref().is_some_and(|e| e.contains("stdout was still open 10 s after it exited")), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(15), "{:?}", out.elapsed);
}

#[tokio::test]
async fn output_over_the_limit_fails() {
    let mut r = role(&["sh", "-c", "head -c 5000 /dev/zero"]);
    r.max_output_bytes = 1000;
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&r, b"", &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out.error.unwrap().contains("more than 1000 bytes"));
}

/// A role that writes more to stderr than is read fails on the closed pipe:
/// the error says so, not only its exit code.
#[tokio::test]
async fn stderr_over_the_limit_is_named_in_the_error() {
    let mut r = role(&["sh", "-c", "head -c 100000 /dev/zero >&2 || exit 3; echo '{}'"]);
    r.max_output_bytes = 1000;
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&r, b"", &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::Failed, "{out:?}");
    let e = out.error.unwrap();
    assert!(e.contains("exited with code 3") && e.contains("more than 1000 bytes to stderr"), "{e}");
    assert_eq!(out.stderr.len(), 1000);
}

#[tokio::test]
async fn kill_signal_interrupts() {
    let (tx, mut rx) = watch::channel(false);
    let r = role(&["sleep", "30"]);
    let h = tokio::spawn(async move { run(&r, b"", &who(), &mut rx).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    tx.send(true).unwrap();
    let out = h.await.unwrap();
    assert_eq!(out.status, RunStatus::Interrupted);
}

#[tokio::test]
async fn a_role_gets_path_home_the_locale_its_env_and_pass_env_but_nothing_else_of_the_daemons() {
    // This process's own environment stands for the daemon's: the test runner
    // sets CARGO_MANIFEST_DIR and CARGO_PKG_NAME, which no role should see
    // unless it names them.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some() && std::env::var_os("PATH").is_some());
    let mut r = role(&["sh", "-c", "cat >/dev/null; env"]);
    r.env.insert("OWN".into(), "set by the role's env".into());
    r.pass_env = vec!["CARGO_MANIFEST_DIR".into(), "NOT_SET_ANYWHERE_4711".into()];
    let (_tx, mut kill) = watch::channel(false);
    let out = run(&r, b"{}", &who(), &mut kill).await;
    assert_eq!(out.status, RunStatus::Exited, "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let names: std::collections::BTreeSet<&str> =
        text.lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
    let ours = ["OWN", "CARGO_MANIFEST_DIR", "CLAWBOARD_EXE"];
    for name in &names {
        let allowed = INHERITED.contains(name)
            || name.starts_with("LC_")
            || name.starts_with("CLAWBOARD_")
            || ours.contains(name)
            // What sh itself sets.
            || ["PWD", "OLDPWD", "SHLVL", "_"].contains(name);
        assert!(allowed, "{name} reached the role:\n{text}");
    }
    assert!(names.contains("PATH") && names.contains("OWN") && names.contains("CARGO_MANIFEST_DIR"), "{text}");
    assert!(!names.contains("CARGO_PKG_NAME") && !names.contains("NOT_SET_ANYWHERE_4711"), "{text}");
    assert!(text.contains("CLAWBOARD_TASK_ID=t1\n") && text.contains("CLAWBOARD_TOKEN=tok\n"), "{text}");
}
