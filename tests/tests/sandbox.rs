//! The Landlock sandbox of command roles (`[sandbox]`, docs/SANDBOX.md), through
//! the real daemon and real role processes: a sandboxed worker cannot read the
//! person token, list the tree, write it directly, read a `sandbox.deny` path or
//! signal the daemon, yet writes through the API and outside the root; the same
//! worker with `sandbox = false` can do all of it. Bad `[sandbox]` keys are named.

use clawboard_tests::{LIFECYCLE_HEAD, Tree, wait_until};

/// `keys/api-key` (to be named in `sandbox.deny`) and `keys/llm.key` (an LLM
/// role's key, mode 600) beside the root; returns the first.
fn secrets(t: &Tree) -> std::path::PathBuf {
    let keys = t.dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let secret = keys.join("api-key");
    std::fs::write(&secret, "sk-secret").unwrap();
    let llm = llm_key(&secret);
    std::fs::write(&llm, "sk-llm").unwrap();
    std::fs::set_permissions(&llm, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    secret
}

/// The API key file of an LLM role, beside the `sandbox.deny` secret (not in
/// `sandbox.deny`): denied because it is the daemon's own.
fn llm_key(secret: &std::path::Path) -> std::path::PathBuf {
    secret.with_file_name("llm.key")
}

/// Where the daemon points a sandboxed role's TMPDIR when the root is under the
/// temporary directory (as every test tree is).
fn private_tmp() -> std::path::PathBuf {
    let me = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    std::env::temp_dir().join(format!("clawboard-roles-{me}"))
}

/// A worker that tries each thing and prints the exit codes in its summary,
/// `name=code` in order; `probe` is a directory beside the root it may write.
fn prober(probe: &std::path::Path, secret: &std::path::Path) -> String {
    let steps = [
        ("token", "cat \\\"$CLAWBOARD_ROOT/.clawboard/person-token\\\""),
        ("list", "ls \\\"$CLAWBOARD_ROOT/tasks\\\""),
        ("read", "cat \\\"$CLAWBOARD_ROOT/tasks/$CLAWBOARD_TASK_ID/task.json\\\""),
        ("direct", "echo forged > \\\"$CLAWBOARD_ROOT/tasks/$CLAWBOARD_TASK_ID/direct.md\\\""),
        ("secret", &format!("cat {}", secret.display())),
        ("key", &format!("cat {}", llm_key(secret).display())),
        ("probe", &format!("echo written > {}/out-$CLAWBOARD_TASK_ID.txt", probe.display())),
        ("tmp", "rm \\\"$(mktemp)\\\""),
        ("tmpdir", &format!("test \\\"$TMPDIR\\\" = {}", private_tmp().display())),
        ("api", "printf mine | \\\"$CLAWBOARD_EXE\\\" write tasks/$CLAWBOARD_TASK_ID/notes.md"),
        ("signal", "kill -0 $PPID"),
    ];
    let tries: String = steps
        .iter()
        .map(|(name, cmd)| {
            format!(
                "{{ {cmd}; }} >/dev/null 2>>{}/err-$CLAWBOARD_TASK_ID.log; c=\\\"$c {name}=$?\\\"; ",
                probe.display()
            )
        })
        .collect();
    format!("cat >/dev/null; c=; {tries}printf '{{\\\"summary\\\":\\\"codes%s\\\"}}' \\\"$c\\\"")
}

fn config(sandbox: &str, probe: &std::path::Path, secret: &std::path::Path) -> String {
    let ok = |out: &str| format!("[\"sh\", \"-c\", \"cat >/dev/null; printf '{out}'\"]");
    format!(
        r#"{LIFECYCLE_HEAD}
{sandbox}

[roles.pm]
command = ["sh", "-c", "ctx=$(cat); r=w; case \"$ctx\" in *use-free*) r=free;; esac; printf '{{\"team\":[{{\"role\":\"%s\",\"priority\":1}}]}}' $r"]

[roles.w]
command = ["sh", "-c", "{prober}"]

[roles.free]
command = ["sh", "-c", "{prober}"]
sandbox = false

[roles.llmx]
llm = {{ base_url = "http://127.0.0.1:9/v1", model = "m", api_key_file = "{key}" }}

[roles.validator]
command = {validator}

[roles.harvester]
command = {harvester}
"#,
        prober = prober(probe, secret),
        key = llm_key(secret).display(),
        validator = ok(r#"{\"score\":9,\"pass\":true}"#),
        harvester = ok(r#"{\"experiences\":[]}"#),
    )
}

fn summary(t: &Tree, task: &str) -> String {
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join(format!("tasks/{task}/result.json"))).unwrap()).unwrap();
    result["summary"].as_str().unwrap().to_owned()
}

#[test]
fn a_sandboxed_role_reaches_the_tree_only_through_the_daemon() {
    let t = Tree::init();
    let probe = t.dir.path().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    let secret = secrets(&t);
    // The secret by name; the LLM key beside it only because it is the daemon's.
    let sandbox = format!("[sandbox]\nmode = \"landlock\"\ndeny = [\"{}\"]", secret.display());
    t.config(&config(&sandbox, &probe, &secret));
    let d = t.daemon();
    t.drop_task("t1.json", r#"{"taskId":"t1","type":"coding","description":"probe the sandbox"}"#);
    t.drop_task("t2.json", r#"{"taskId":"t2","type":"coding","description":"use-free: probe without it"}"#);
    wait_until(30, "both tasks to end", || {
        ["t1", "t2"].iter().all(|id| matches!(t.status_of(id).as_str(), "completed" | "failed"))
    });
    let err = |task: &str| std::fs::read_to_string(probe.join(format!("err-{task}.log"))).unwrap_or_default();
    assert_eq!(t.status_of("t1"), "completed", "{}", d.output());
    // Sandboxed: the root and the denied key refused, the rest of the machine
    // and the API open; `kill -0` on the daemon refused (1).
    assert_eq!(
        summary(&t, "t1"),
        "w: codes token=1 list=2 read=1 direct=2 secret=1 key=1 probe=0 tmp=0 tmpdir=0 api=0 signal=1",
        "{}",
        err("t1")
    );
    assert!(err("t1").contains("Permission denied"), "{}", err("t1"));
    assert!(!t.root.join("tasks/t1/direct.md").exists());
    assert_eq!(std::fs::read_to_string(t.root.join("tasks/t1/notes.md")).unwrap(), "mine");
    assert_eq!(std::fs::read_to_string(probe.join("out-t1.txt")).unwrap(), "written\n");
    // The root is under /tmp here, so the sandboxed role's TMPDIR (tmpdir=0) is
    // the daemon's private directory beside it, only its user's.
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(private_tmp()).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
    // The same program with `sandbox = false`: everything the daemon's user may do.
    assert_eq!(
        summary(&t, "t2"),
        "free: codes token=0 list=0 read=0 direct=0 secret=0 key=0 probe=0 tmp=0 tmpdir=1 api=0 signal=0",
        "{}",
        err("t2")
    );
    assert_eq!(std::fs::read_to_string(t.root.join("tasks/t2/direct.md")).unwrap(), "forged\n");
    assert_eq!(d.stop(), 0);
}

#[test]
fn bad_sandbox_settings_stop_the_daemon_from_starting_and_name_the_key() {
    let t = Tree::init();
    let probe = t.dir.path().join("probe");
    let secret = secrets(&t);
    for (sandbox, want) in [
        ("[sandbox]\nmode = \"on\"", "unknown variant `on`, expected `off` or `landlock`"),
        ("[sandbox]\nmode = \"landlock\"\ndeny = [\"keys\"]", "key sandbox.deny[0]: \"keys\": is not an absolute path"),
        ("[sandbox]\ndeny = [\"/\"]", "key sandbox.deny[0]: \"/\": would deny the whole file system"),
        ("[sandbox]\nmod = \"landlock\"", "unknown field `mod`"),
    ] {
        let cfg = t.config(&config(sandbox, &probe, &secret));
        let before = t.snapshot();
        let r = t.run(&["--config", cfg.to_str().unwrap(), "daemon"]);
        r.expect_code(2);
        assert!(r.stderr.contains(&cfg.display().to_string()) && r.stderr.contains(want), "{want}: {}", r.stderr);
        assert_eq!(t.snapshot(), before, "{sandbox}: the tree changed");
    }
    let http = config("", &probe, &secret).replace(
        "[roles.harvester]",
        "[roles.reviewer]\nhttp = { url = \"http://127.0.0.1:9/\" }\nsandbox = true\n\n[roles.harvester]",
    );
    let cfg = t.config(&http);
    let r = t.run(&["--config", cfg.to_str().unwrap(), "daemon"]);
    r.expect_code(2);
    assert!(r.stderr.contains("key roles.reviewer.sandbox: only a `command` role runs as a process"), "{}", r.stderr);
}

/// The sandbox denies the root the daemon serves. A SIGHUP whose config names
/// another root (here `root` in the file, the daemon started without `--root`)
/// is refused, so the deny list cannot move off the served tree.
#[test]
fn a_reload_that_names_another_root_is_refused_and_the_served_root_stays_denied() {
    let t = Tree::init();
    let probe = t.dir.path().join("probe");
    std::fs::create_dir_all(&probe).unwrap();
    let secret = secrets(&t);
    let other = t.dir.path().join("other-root");
    let text = |root: &std::path::Path| {
        format!("root = \"{}\"\n{}", root.display(), config("[sandbox]\nmode = \"landlock\"", &probe, &secret))
    };
    let cfg = t.config(&text(&t.root));
    let log = t.dir.path().join("daemon.log");
    let f = std::fs::File::create(&log).unwrap();
    let child = t
        .command_no_root(&["--config", cfg.to_str().unwrap(), "daemon"])
        .stdin(std::process::Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let d = clawboard_tests::Daemon { child, log };
    wait_until(20, "the daemon's API", || t.daemon_status().is_some());
    std::fs::write(&cfg, text(&other)).unwrap();
    d.signal("HUP");
    wait_until(10, "the reload's refusal", || d.output().contains("restart it to change the root"));
    t.drop_task("t1.json", r#"{"taskId":"t1","type":"coding","description":"probe after the reload"}"#);
    wait_until(30, "the task to end", || matches!(t.status_of("t1").as_str(), "completed" | "failed"));
    assert!(summary(&t, "t1").starts_with("w: codes token=1 list=2 read=1 direct=2"), "{}", d.output());
    assert!(!other.exists(), "nothing was made at the other root");
    assert_eq!(d.stop(), 0);
}

/// A role that hunts for the daemon's secrets: the values of every key the
/// daemon holds (in its environment and in its files) and the files that hold
/// them. It reports how many values its environment carries, how many of the
/// files it could read, and the two variables its config passes and does not.
fn hunter(dir: &std::path::Path, values: &[&str], files: &[std::path::PathBuf]) -> std::path::PathBuf {
    let script = dir.join("hunt.sh");
    let values: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
    let files: Vec<String> = files.iter().map(|f| format!("'{}'", f.display())).collect();
    std::fs::write(
        &script,
        format!(
            "cat >/dev/null\n\
             e=0; for v in {}; do env | grep -qF -- \"$v\" && e=$((e+1)); done\n\
             f=0; for p in {}; do cat \"$p\" >/dev/null 2>&1 && f=$((f+1)); done\n\
             printf '{{\"summary\":\"env=%s files=%s passed=%s unnamed=%s\"}}' $e $f \"${{PASSED_ON:-none}}\" \"${{HARMLESS:-none}}\"\n",
            values.join(" "),
            files.join(" ")
        ),
    )
    .unwrap();
    script
}

#[test]
fn a_role_finds_none_of_the_daemons_secrets_in_its_environment_nor_sandboxed_in_its_files() {
    use clawboard_tests::s3::{Bucket, Kind};
    let t = Tree::init();
    let keys = t.dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let private = |name: &str, text: &str| {
        let p = keys.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        p
    };
    let llm_key = private("llm.key", "sk-hunted-file");
    let github_token = private("github.token", "ghp_hunted_file");
    let git_token = private("git.token", "hunted-git-file");
    // Sync on a real S3 server, its keys in a credentials file beside the root.
    let bucket = Bucket::new(Kind::S3s, t.dir.path());
    let sync = bucket.sync_config(t.dir.path(), "schedule = \"0 0 0 1 1 *\"");
    let s3_file = t.dir.path().join(format!("{}.env", bucket.name));
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIAHUNTEDKEY"),
        ("AWS_SECRET_ACCESS_KEY", "hunted-aws-secret"),
        ("GITHUB_TOKEN", "ghp_hunted_env"),
        ("CLAWBOARD_GIT_TOKEN", "hunted-git-env"),
        ("MODEL_KEY", "sk-hunted-env"),
        ("PASSED_ON", "yes"),
        ("HARMLESS", "yes"),
    ];
    let values: Vec<&str> =
        env[..5].iter().map(|(_, v)| *v).chain([bucket.key.as_str(), bucket.secret.as_str()]).collect();
    let files = [s3_file, llm_key.clone(), github_token.clone(), git_token.clone()];
    let script = hunter(t.dir.path(), &values, &files);
    let ok = |out: &str| format!("[\"sh\", \"-c\", \"cat >/dev/null; printf '{out}'\"]");
    t.config(&format!(
        r#"{LIFECYCLE_HEAD}
[sandbox]
mode = "landlock"

[roles.pm]
command = ["sh", "-c", "ctx=$(cat); r=w; case \"$ctx\" in *use-free*) r=free;; esac; printf '{{\"team\":[{{\"role\":\"%s\",\"priority\":1}}]}}' $r"]

[roles.w]
command = ["sh", "{script}"]
pass_env = ["PASSED_ON"]

[roles.free]
command = ["sh", "{script}"]
pass_env = ["PASSED_ON"]
sandbox = false

[roles.by-file]
llm = {{ base_url = "http://127.0.0.1:9/v1", model = "m", api_key_file = "{llm_key}" }}

[roles.by-env]
llm = {{ base_url = "http://127.0.0.1:9/v1", model = "m", api_key_env = "MODEL_KEY" }}

[roles.validator]
command = {validator}

[roles.harvester]
command = {harvester}

[github]
token_file = "{github_token}"

[archive]
token_file = "{git_token}"

{sync}"#,
        script = script.display(),
        llm_key = llm_key.display(),
        github_token = github_token.display(),
        git_token = git_token.display(),
        validator = ok(r#"{\"score\":9,\"pass\":true}"#),
        harvester = ok(r#"{\"experiences\":[]}"#),
    ));
    let d = t.daemon_with_env(&env);
    t.drop_task("t1.json", r#"{"taskId":"t1","type":"coding","description":"hunt sandboxed"}"#);
    t.drop_task("t2.json", r#"{"taskId":"t2","type":"coding","description":"use-free: hunt without it"}"#);
    wait_until(60, "both tasks to end", || {
        ["t1", "t2"].iter().all(|id| matches!(t.status_of(id).as_str(), "completed" | "failed"))
    });
    assert_eq!(t.status_of("t1"), "completed", "{}", d.output());
    assert_eq!(t.status_of("t2"), "completed", "{}", d.output());
    // Neither run finds a key in its environment; the one variable its config
    // passes is there, the other is not. Sandboxed, none of the four files
    // holding keys can be read; without the sandbox a role is a process of the
    // daemon's user, and reads them.
    assert_eq!(summary(&t, "t1"), "w: env=0 files=0 passed=yes unnamed=none");
    assert_eq!(summary(&t, "t2"), "free: env=0 files=4 passed=yes unnamed=none");
    assert_eq!(d.stop(), 0);
}

/// Chowns `path` and everything under it to `uid`:`uid`.
fn chown_tree(path: &std::path::Path, uid: u32) {
    let ok = std::process::Command::new("chown").arg("-R").arg(format!("{uid}:{uid}")).arg(path).status().unwrap();
    assert!(ok.success(), "chown -R {}", path.display());
}

/// A role without the sandbox runs as the daemon's user, and such a process
/// could read the daemon's `/proc/PID/environ` (its keys included) were the
/// daemon dumpable. Run as an unprivileged user (root may read any process's).
#[test]
fn a_role_without_the_sandbox_cannot_read_the_daemons_environ() {
    const NOBODY: u32 = 65534;
    let t = Tree::init();
    let ok = |out: &str| format!("[\"sh\", \"-c\", \"cat >/dev/null; printf '{out}'\"]");
    t.config(&format!(
        r#"{LIFECYCLE_HEAD}
[roles.pm]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"team\":[{{\"role\":\"w\",\"priority\":1}}]}}'"]

[roles.w]
command = ["sh", "-c", "cat >/dev/null; if cat /proc/$PPID/environ >/dev/null 2>&1; then r=readable; else r=closed; fi; printf '{{\"summary\":\"environ=%s own=%s\"}}' $r $(test -r /proc/$$/environ && echo readable)"]

[roles.validator]
command = {validator}

[roles.harvester]
command = {harvester}
"#,
        validator = ok(r#"{\"score\":9,\"pass\":true}"#),
        harvester = ok(r#"{\"experiences\":[]}"#),
    ));
    chown_tree(t.dir.path(), NOBODY);
    let cfg = t.dir.path().join("clawboard.toml");
    let log = t.dir.path().join("daemon.log");
    let f = std::fs::File::create(&log).unwrap();
    let c = t.command(&["--config", cfg.to_str().unwrap(), "daemon"]);
    let (program, args): (std::ffi::OsString, Vec<std::ffi::OsString>) =
        (c.get_program().to_owned(), c.get_args().map(ToOwned::to_owned).collect());
    let envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)> =
        c.get_envs().map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned))).collect();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups", "--"]);
    cmd.arg(program).args(args).env("SECRET_IN_DAEMON_ENV", "s3cr3t");
    for (k, v) in envs {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(dir) = c.get_current_dir() {
        cmd.current_dir(dir);
    }
    let child = cmd.stdin(std::process::Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f).spawn().unwrap();
    let d = clawboard_tests::Daemon { child, log };
    let body = t.dir.path().join("t1.json");
    std::fs::write(&body, r#"{"taskId":"t1","type":"coding","description":"read the daemon's environ"}"#).unwrap();
    chown_tree(&body, NOBODY);
    std::fs::rename(&body, t.root.join("inbox/t1.json")).unwrap();
    wait_until(30, "the task to end", || matches!(t.status_of("t1").as_str(), "completed" | "failed"));
    assert_eq!(t.status_of("t1"), "completed", "{}", d.output());
    // Its own /proc files stay its own.
    assert_eq!(summary(&t, "t1"), "w: environ=closed own=readable", "{}", d.output());
    assert_eq!(d.stop(), 0);
}
