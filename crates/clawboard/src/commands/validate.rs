use std::path::PathBuf;

use clap::Args;
use clawboard_core::validate::check_file;
use clawboard_core::{Error, FileKind, Problem};
use serde::Serialize;

use crate::cli::{EXIT_BAD_INPUT, EXIT_OK};
use crate::config::Settings;
use crate::output;

/// Check files against their format; print every problem with its field
#[derive(Debug, Args)]
#[command(after_help = "The kind of each file comes from its path (tasks/{id}/task.json is a task,
harvest/daily/{date}.json a daily harvest, inbox/*.json and any other task.json a
submission) unless --kind names it. Exit code 2 when any file is invalid.

Examples:
  clawboard validate ~/clawos/blackboard/tasks/*/task.json
  clawboard validate --kind escalation draft.json
  clawboard validate --json inbox/*.json")]
pub struct ValidateArgs {
    /// Files to check
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// The kind of every file, instead of inferring it from the path
    #[arg(long, value_parser = parse_kind, value_name = "KIND")]
    pub kind: Option<FileKind>,
}

fn parse_kind(s: &str) -> Result<FileKind, String> {
    s.parse()
}

#[derive(Serialize)]
struct Checked {
    file: String,
    kind: Option<&'static str>,
    valid: bool,
    problems: Vec<Problem>,
}

fn check(path: &std::path::Path, kind: Option<FileKind>, max: u64) -> Checked {
    let file = path.display().to_string();
    let bad = |kind, problems| Checked { file: file.clone(), kind, valid: false, problems };
    if let Err(e) = std::fs::symlink_metadata(path) {
        // Said before the kind is guessed from a name that is not there.
        return bad(None, vec![Problem::new("", format!("cannot be read: {e}"))]);
    }
    match check_file(path, kind, max) {
        Ok((kind, _)) => Checked { file: file.clone(), kind: Some(kind.name()), valid: true, problems: vec![] },
        Err(Error::Invalid(inv)) => bad(inv.kind, inv.problems),
        // One file that cannot be read (a directory, no permission) is that file's
        // problem; the others are still checked.
        Err(e) => {
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            let msg = msg.strip_prefix(&format!("{file}: ")).unwrap_or(&msg).to_owned();
            bad(None, vec![Problem::new("", msg)])
        }
    }
}

pub fn run(a: ValidateArgs, s: &Settings) -> anyhow::Result<u8> {
    let results: Vec<Checked> = a.files.iter().map(|f| check(f, a.kind, s.max_file_bytes)).collect();
    let invalid = results.iter().filter(|r| !r.valid).count();
    if s.json {
        output::json(&results)?;
    } else {
        for r in &results {
            if r.valid {
                outln!("{}: ok ({})", r.file, r.kind.unwrap_or("?"))?;
            }
            for p in &r.problems {
                outln!("{}: {p}", r.file)?;
            }
        }
        if results.len() > 1 || invalid > 0 {
            let problems: usize = results.iter().map(|r| r.problems.len()).sum();
            let plural = if problems == 1 { "problem" } else { "problems" };
            outln!(
                "{} checked, {} valid, {invalid} invalid ({problems} {plural})",
                results.len(),
                results.len() - invalid
            )?;
        }
    }
    Ok(if invalid > 0 { EXIT_BAD_INPUT } else { EXIT_OK })
}
