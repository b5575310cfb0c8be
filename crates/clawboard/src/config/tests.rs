//! The config tests: precedence, `~`, errors naming the file and the key, the examples.

use super::*;
use clap::Parser;

fn args(argv: &[&str]) -> GlobalArgs {
    let mut full = vec!["clawboard"];
    full.extend_from_slice(argv);
    full.push("status");
    crate::cli::Cli::parse_from(full).global
}

fn write_config(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(&p, text).unwrap();
    let s = p.display().to_string();
    (dir, s)
}

/// `text` (after `root = "/r"`) as the config file `dir/c.toml`, resolved with
/// HOME=/home/u: the same directory for two versions of a file, as a reload sees.
pub(crate) fn resolve_at(dir: &Path, text: &str) -> Settings {
    let p = dir.join("c.toml");
    std::fs::write(&p, format!("root = \"/r\"\n{text}")).unwrap();
    resolve(&args(&["--config", p.to_str().unwrap()]), &Env::from_pairs(&[("HOME", "/home/u")])).unwrap()
}

#[test]
fn cli_beats_env_beats_file_beats_default() {
    let (_d, cfg) = write_config("root = \"/from/file\"\n[limits]\nmax_file_size = \"1 MiB\"\n");
    let env = Env::from_pairs(&[("HOME", "/home/u"), ("CLAWBOARD_ROOT", "/from/env")]);
    let s = resolve(&args(&["--config", &cfg, "--root", "/from/cli"]), &env).unwrap();
    assert_eq!(s.root, PathBuf::from("/from/cli"));
    let s = resolve(&args(&["--config", &cfg]), &env).unwrap();
    assert_eq!(s.root, PathBuf::from("/from/env"));
    assert_eq!(s.max_file_bytes, 1 << 20);
    let env = Env::from_pairs(&[("HOME", "/home/u"), ("CLAWBOARD_MAX_FILE_SIZE", "2048")]);
    let s = resolve(&args(&["--config", &cfg]), &env).unwrap();
    assert_eq!(s.root, PathBuf::from("/from/file"));
    assert_eq!(s.max_file_bytes, 2048);
    let s = resolve(&args(&[]), &Env::from_pairs(&[("HOME", "/home/u")])).unwrap();
    assert_eq!(s.root, PathBuf::from("/home/u/clawos/blackboard"));
    assert_eq!(s.max_file_bytes, DEFAULT_MAX_FILE_BYTES);
    assert_eq!(s.log_filter, "warn");
}

#[test]
fn tilde_expands() {
    let (_d, cfg) = write_config("root = \"~/bb\"\n");
    let s = resolve(&args(&["--config", &cfg]), &Env::from_pairs(&[("HOME", "/h")])).unwrap();
    assert_eq!(s.root, PathBuf::from("/h/bb"));
}

#[test]
fn flags_set_log_level() {
    let env = Env::from_pairs(&[("HOME", "/h"), ("CLAWBOARD_LOG", "info")]);
    assert_eq!(resolve(&args(&[]), &env).unwrap().log_filter, "info");
    assert_eq!(resolve(&args(&["-v"]), &env).unwrap().log_filter, "debug");
    assert_eq!(resolve(&args(&["-vv"]), &env).unwrap().log_filter, "trace");
    assert_eq!(resolve(&args(&["-q"]), &env).unwrap().log_filter, "error");
}

#[test]
fn bad_config_names_the_key_in_one_line() {
    let cases = [
        ("[limits]\nmax_file_size = \"16 parsecs\"\n", "key limits.max_file_size: unknown unit"),
        ("[limits]\nmax_size = 3\n", "key limits.max_size: unknown field `max_size`"),
        ("rooot = \"/x\"\n", "key rooot: unknown field `rooot`"),
        ("[log]\nformat = \"xml\"\n", "key log.format: unknown variant `xml`"),
        ("root = \n", "line 1 (`root =`): "),
        ("[log]\nfilter = \"a\"\nfilter = \"b\"\n", "line 3 (`filter = \"b\"`): duplicate key"),
    ];
    for (text, want) in cases {
        let err = parse_file(Path::new("c.toml"), text).unwrap_err().0;
        assert!(err.starts_with("c.toml: "), "{err}");
        assert!(err.contains(want), "{text:?} gave {err:?}");
        assert!(!err.contains('\n'), "more than one line: {err:?}");
    }
}

/// The middleware's errors name their own key once, and say when the table at
/// fault is the shipped one.
#[test]
fn bad_middleware_config_names_its_key_and_which_table() {
    let env = Env::from_pairs(&[("HOME", "/h")]);
    // A word list of one's own is enough: the shipped replacements of words it
    // does not hold are dropped, not refused.
    let (_d, cfg) = write_config("[blueprints.sensitive_words]\nall = [\"国家级\", \"最好\"]\n");
    let s = resolve(&args(&["--config", &cfg]), &env).unwrap();
    let replaced: Vec<&String> = s.blueprints.middleware.replacements.keys().collect();
    assert_eq!(replaced, ["最好"]);
    // One that makes a shipped replacement hold a listed word (最好 → 很好).
    let (_d, cfg) = write_config("[blueprints.sensitive_words]\nall = [\"最好\", \"很好\"]\n");
    let err = resolve(&args(&["--config", &cfg]), &env).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{cfg}: key blueprints.replacements.")), "{err}");
    assert!(!err.contains("[blueprints]:"), "the section is named once: {err}");
    assert!(err.contains("contains the listed word \"很好\""), "{err}");
    assert!(err.contains("(the shipped [blueprints.replacements] of config/blueprints/middleware.toml"), "{err}");
    // One's own table at fault: no note.
    let (_d, cfg) =
        write_config("[blueprints.sensitive_words]\nall = [\"x\"]\n[blueprints.replacements]\nx = \"xx\"\n");
    let err = resolve(&args(&["--config", &cfg]), &env).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{cfg}: key blueprints.replacements.x: the replacement \"xx\"")), "{err}");
    assert!(!err.contains("shipped"), "{err}");
}

/// `retention.file` is taken from the config file's directory, like every path
/// of the config, and must be there.
#[test]
fn a_relative_retention_file_is_the_config_directorys() {
    let env = Env::from_pairs(&[("HOME", "/h")]);
    let (d, cfg) = write_config("[retention]\nfile = \"policy.yaml\"\n");
    let err = resolve(&args(&["--config", &cfg]), &env).unwrap_err().to_string();
    let want = d.path().join("policy.yaml");
    assert!(err.contains(&format!("key retention.file: {} is not a file", want.display())), "{err}");
    std::fs::write(&want, "retention:\n  tasks:\n    failed: 1 day\n").unwrap();
    let s = resolve(&args(&["--config", &cfg]), &env).unwrap();
    assert_eq!(s.retention.file.as_deref(), Some(want.as_path()));
    let (_d, cfg) = write_config("[retention]\nfile = \"\"\n");
    let err = resolve(&args(&["--config", &cfg]), &env).unwrap_err().to_string();
    assert!(err.contains("key retention.file: is empty"), "{err}");
}

#[test]
fn roles_named_anywhere_must_be_configured() {
    let cases = [
        ("[lifecycle]\nvalidator = \"checker\"\n", "key lifecycle.validator: role \"checker\" is not configured"),
        ("[roles.w]\ntimeout = \"5s\"\n", "key roles.w: needs `command`, `http` or `llm`"),
        ("[roles.w]\ncommand = []\n", "key roles.w.command: is empty"),
        ("[roles.w]\ncommand = [\"x\"]\nfallback = \"nope\"\n", "key roles.w.fallback: role \"nope\""),
        ("[roles.w]\ncommand = [\"x\"]\ntimeout = \"soon\"\n", "key roles.w.timeout: \"soon\" is not a duration"),
        ("[roles.w]\nhttp = { url = \"ftp://x\" }\n", "key roles.w.http.url: \"ftp://x\" is not an http"),
        ("[roles.w.llm]\nbase_url = \"http://h\"\nmodel = \"m\"\nmodle = 1\n", "key roles.w.llm.modle: unknown field"),
        ("[roles.w.llm]\nbase_url = \"http://h\"\nmodel = \"m\"\nmax_wait = \"soon\"\n", "key roles.w.llm.max_wait: "),
        ("[roles.w.llm]\nbase_url = \"http://h\"\nmodel = \"m\"\ntemperature = 3.0\n", "llm.temperature: 3 is"),
        ("[lifecycle.pm_for_type]\ncooking = \"pm\"\n", "key lifecycle.pm_for_type: unknown variant `cooking`"),
        ("[sync]\nschedule = \"hourly\"\n", "key sync.schedule: \"hourly\": a cron schedule has 5 fields"),
        ("[sync]\nconcurrency = 0\n", "key sync.concurrency: 0 is out of range"),
        ("[sync]\nretry_base = \"soon\"\n", "key sync.retry_base: \"soon\" is not a duration"),
        ("[sync]\nmultipart_threshold = \"1 MiB\"\n", "key sync.multipart_threshold: 1048576 is less than"),
        ("[sync]\ndir = \"/b\"\n[sync.s3]\nbucket = \"x\"\n", "key sync.dir: set either"),
        ("[sync.s3]\nbucket = \"\"\n", "key sync.s3.bucket: is empty"),
        ("[sync.s3]\nbucket = \"b\"\nendpoint = \"r2.example\"\n", "key sync.s3.endpoint: \"r2.example\" is not"),
        ("[sync.s3]\nbucket = \"b\"\nprofile = \"p\"\ncredentials_file = \"f\"\n", "key sync.s3.profile: set either"),
        ("[node]\nid = \"../x\"\n", "key node.id: \"../x\""),
        ("[archive]\nremote = \"github.com/o/r\"\n", "key archive.remote: \"github.com/o/r\" is not an https://"),
        ("[archive]\nremote = \"ftp://u:secret@h/r\"\n", "key archive.remote: \"ftp://h/r\" is not"),
        ("[archive]\nbranch = \"a..b\"\n", "key archive.branch: \"a..b\" is not a valid branch name"),
        ("[archive]\nschedule = \"often\"\n", "key archive.schedule: \"often\": a cron schedule has 5 fields"),
        ("[archive]\nauthor_email = \"<x>\"\n", "key archive.author_email: \"<x>\" is empty or has"),
        ("[archive]\nmax_file_size = \"200 MiB\"\n", "key archive.max_file_size: 209715200 is not within"),
        ("[archive]\npush_attempts = 0\n", "key archive.push_attempts: 0 is out of range"),
        ("[archive]\nretry = \"later\"\n", "key archive.retry: \"later\" is not a duration"),
        ("[archive]\nremot = \"x\"\n", "key archive.remot: unknown field"),
        ("[harvest]\ntop_per_role = 0\n", "key harvest.top_per_role: 0 is out of range"),
        ("[harvest]\nschedule = \"* *\"\n", "key harvest.schedule: \"* *\": a cron schedule has 5 fields"),
    ];
    for (text, want) in cases {
        let (_d, cfg) = write_config(text);
        let err = resolve(&args(&["--config", &cfg]), &Env::from_pairs(&[("HOME", "/h")])).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?} gave {err:?}");
        assert!(!err.contains('\n'), "{err}");
    }
}

#[test]
fn bad_env_names_the_variable() {
    let env = Env::from_pairs(&[("HOME", "/h"), ("CLAWBOARD_MAX_FILE_SIZE", "lots")]);
    let err = resolve(&args(&[]), &env).unwrap_err().to_string();
    assert!(err.starts_with("environment variable CLAWBOARD_MAX_FILE_SIZE: "), "{err}");
    // The edges: 0 (every file refused) and u64::MAX (a size plus one wraps to 0).
    for v in ["0", "18446744073709551615"] {
        let env = Env::from_pairs(&[("HOME", "/h"), ("CLAWBOARD_MAX_FILE_SIZE", v)]);
        let err = resolve(&args(&[]), &env).unwrap_err().to_string();
        assert!(err.contains("is out of range; give 1 byte to 1024 GiB"), "{v}: {err}");
        let (_d, cfg) = write_config(&format!("[limits]\nmax_file_size = \"{v}\"\n"));
        let err = resolve(&args(&["--config", &cfg]), &Env::from_pairs(&[("HOME", "/h")])).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{cfg}: key limits.max_file_size: {v} bytes is out of range")), "{v}: {err}");
    }
    let env = Env::from_pairs(&[("HOME", "/h"), ("CLAWBOARD_MAX_FILE_SIZE", "1024 GiB")]);
    assert_eq!(resolve(&args(&[]), &env).unwrap().max_file_bytes, 1 << 40);
}

#[test]
fn every_example_config_parses() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let mut n = 0;
    let files = std::fs::read_dir(&dir).unwrap().chain(std::fs::read_dir(dir.join("examples")).unwrap());
    for entry in files {
        let path = entry.unwrap().path();
        // acl.toml is the access-control policy, not a clawboard config.
        if path.extension().is_some_and(|e| e == "toml") && !path.ends_with("acl.toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = parse_file(&path, &text) {
                panic!("{e}");
            }
            n += 1;
        }
    }
    assert!(n >= 3, "example configs missing in {}", dir.display());
}

/// The reference config, `config/clawboard.toml`.
fn reference() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/clawboard.toml")).unwrap()
}

/// A commented line that is a sample key (`# key = value`) or table header
/// (`# [a.b]`); an indented comment is prose or a continuation.
fn sample_line(line: &str) -> Option<&str> {
    let body = line.strip_prefix("# ").or_else(|| line.strip_prefix('#'))?;
    if body.starts_with(' ') {
        return None;
    }
    let code = body.split(" #").next().unwrap_or(body).trim_end();
    let is_header = code.starts_with('[') && code.ends_with(']');
    let is_key = code.split_once('=').is_some_and(|(k, v)| {
        let k = k.trim();
        !k.is_empty()
            && !v.trim().is_empty()
            && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"'))
    });
    (is_header || is_key).then_some(body)
}

#[test]
fn every_commented_sample_in_the_reference_config_loads_when_uncommented() {
    let text = reference();
    let lines: Vec<&str> = text.lines().collect();
    // Each run of commented lines is one sample (alternatives are separate runs).
    let mut runs = Vec::new();
    let mut start = None;
    for (i, l) in lines.iter().enumerate() {
        match (l.starts_with('#'), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                runs.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    let mut tried = 0;
    for run in runs {
        if !run.clone().any(|i| sample_line(lines[i]).is_some()) {
            continue;
        }
        tried += 1;
        let mut edited: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        for i in run.clone() {
            if let Some(body) = sample_line(lines[i]) {
                edited[i] = body.to_owned();
            }
        }
        let edited = edited.join("\n");
        if let Err(e) = parse_file(Path::new("config/clawboard.toml"), &edited) {
            panic!("lines {}–{} uncommented: {e}", run.start + 1, run.end);
        }
    }
    assert!(tried >= 15, "only {tried} samples found");
}

/// The fields `path`'s table takes, as serde names them when refusing an unknown one.
fn fields_of(prefix: &str, path: &str) -> Vec<String> {
    let doc = format!("{prefix}\n[{path}]\nzz_not_a_key = 1\n");
    let doc = if path.is_empty() { format!("{prefix}\nzz_not_a_key = 1\n") } else { doc };
    let err = parse_file(Path::new("probe.toml"), &doc).unwrap_err().to_string();
    let Some((_, listed)) = err.split_once("expected one of ").or_else(|| err.split_once("expected ")) else {
        panic!("[{path}]: no field list in {err:?}")
    };
    listed
        .split(", ")
        .flat_map(|f| f.split(" or "))
        .map(|f| f.trim().trim_matches('`').to_owned())
        .filter(|f| !f.is_empty())
        .collect()
}

#[test]
fn the_reference_config_names_every_key_the_config_takes() {
    let text = reference();
    let tables = [
        ("", ""),
        ("", "limits"),
        ("", "log"),
        ("", "daemon"),
        ("", "lifecycle"),
        ("", "roles.r"),
        ("[roles.r]\ncommand = [\"x\"]", "roles.r.http"),
        ("", "roles.r.llm"),
        ("", "llm.providers.p"),
        ("", "node"),
        ("", "sync"),
        ("", "sync.s3"),
        ("", "archive"),
        ("", "harvest"),
        ("", "reports"),
        ("", "web"),
        ("", "notify"),
        ("", "retention"),
        ("", "board"),
        ("", "lanes.l"),
        ("", "lanes.l.actors.A"),
        ("", "github"),
        ("", "blueprints"),
        ("", "blueprints.platforms.p"),
        ("", "sandbox"),
    ];
    let mut missing = Vec::new();
    for (prefix, table) in tables {
        for field in fields_of(prefix, table) {
            let named = text.lines().any(|l| {
                let l = l.trim_start_matches('#').trim_start();
                l.starts_with(&format!("{field} ="))
                    || l.starts_with(&format!("{field}="))
                    || l.contains(&format!("{{ {field} = "))
                    || l.contains(&format!(", {field} = "))
                    || l.starts_with('[') && (l.contains(&format!(".{field}]")) || l.contains(&format!(".{field}.")))
                    || l.starts_with(&format!("[{field}]"))
                    || l.starts_with(&format!("[{field}."))
            });
            if !named {
                missing.push(format!("[{table}] {field}"));
            }
        }
    }
    assert!(missing.is_empty(), "config/clawboard.toml does not document: {}", missing.join(", "));
}

/// `c.toml` naming `env_file = "c.env"` beside it, with `env` as the env file's text.
fn with_env_file(toml: &str, env: &str, process: &[(&str, &str)]) -> anyhow::Result<Settings> {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, format!("root = \"/r\"\nenv_file = \"c.env\"\n{toml}")).unwrap();
    std::fs::write(dir.path().join("c.env"), env).unwrap();
    let mut pairs = vec![("HOME", "/home/u")];
    pairs.extend_from_slice(process);
    resolve(&args(&["--config", cfg.to_str().unwrap()]), &Env::from_pairs(&pairs))
}

const PROVIDER: &str = "[llm.providers.model]\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"default\"\n";

#[test]
fn the_env_file_sets_what_the_environment_does_not() {
    let env = "# the model server\n\nexport CLAWBOARD_LLM_MODEL_BASE_URL=\"http://10.0.0.5:8000/v1\"\nCLAWBOARD_LLM_MODEL_MODEL='qwen'\nCLAWBOARD_LOG=info\n";
    let s = with_env_file(PROVIDER, env, &[]).unwrap();
    let p = &s.roles.llm.providers["model"];
    assert_eq!((p.base_url.as_str(), p.model.as_str()), ("http://10.0.0.5:8000/v1", "qwen"));
    assert_eq!(s.log_filter, "info");
    assert!(s.env_file.as_ref().is_some_and(|f| f.ends_with("c.env")));
    // The process's own environment wins over the file.
    let s = with_env_file(PROVIDER, env, &[("CLAWBOARD_LLM_MODEL_MODEL", "llama")]).unwrap();
    assert_eq!(s.roles.llm.providers["model"].model, "llama");
}

#[test]
fn a_bad_env_file_or_a_bad_value_in_it_is_named_by_file_and_line() {
    for (text, says) in [
        ("CLAWBOARD_LOG\n", "c.env line 1: \"CLAWBOARD_LOG\" is not NAME=value"),
        ("# keys\nOPENAI_API_KEY=sk-1\n", "c.env line 2: \"OPENAI_API_KEY\" is not a CLAWBOARD_* variable"),
        ("clawboard_log=info\n", "c.env line 1: \"clawboard_log\" is not a CLAWBOARD_* variable"),
        (
            "CLAWBOARD_CONFIG=/etc/other.toml\n",
            "c.env line 1: CLAWBOARD_CONFIG cannot be set by the config's own env_file",
        ),
        (
            "\nCLAWBOARD_LLM_MODEL_BASE_URL=127.0.0.1:8080\n",
            "c.env line 2: CLAWBOARD_LLM_MODEL_BASE_URL: \"127.0.0.1:8080\" is not an http:// or https:// URL (it overrides llm.providers.model.base_url)",
        ),
        ("CLAWBOARD_MAX_FILE_SIZE=lots\n", "c.env line 1: CLAWBOARD_MAX_FILE_SIZE: "),
    ] {
        let err = format!("{:#}", with_env_file(PROVIDER, text, &[]).unwrap_err());
        assert!(err.contains(says), "{text:?}: {err}");
    }
    // The same value from the process's environment is blamed on the variable there.
    let err = format!(
        "{:#}",
        with_env_file(PROVIDER, "", &[("CLAWBOARD_LLM_MODEL_BASE_URL", "127.0.0.1:8080")]).unwrap_err()
    );
    assert!(err.starts_with("environment variable CLAWBOARD_LLM_MODEL_BASE_URL: \"127.0.0.1:8080\" is not"), "{err}");
    // A missing env file is named.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "env_file = \"absent.env\"\n").unwrap();
    let err = format!(
        "{:#}",
        resolve(&args(&["--config", cfg.to_str().unwrap()]), &Env::from_pairs(&[("HOME", "/h")])).unwrap_err()
    );
    assert!(err.contains("absent.env: cannot read the env_file: "), "{err}");
}

#[test]
fn pass_score_is_within_the_validators_scale() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[lifecycle]\npass_score = 11\n").unwrap();
    let err = format!(
        "{:#}",
        resolve(&args(&["--config", cfg.to_str().unwrap()]), &Env::from_pairs(&[("HOME", "/h")])).unwrap_err()
    );
    assert!(err.ends_with("key lifecycle.pass_score: 11 is not within 0 and 10"), "{err}");
}
