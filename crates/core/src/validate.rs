//! The one path from bytes to a checked value: size limit, encoding, JSON syntax
//! (with a nesting limit, so hostile input cannot overflow the stack), the kind's
//! schema, then its type and path rules. Every problem is reported, each with the
//! JSON pointer of its field.

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::json::JsonError;
use crate::kind::{FileKind, Format, PathContext};
use crate::schema::{self, Problem};

/// Files larger than this are refused before they are parsed (config `limits.max_file_size`).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// How deep JSON may nest (serde_json's own limit, which it enforces without recursion blow-up).
pub const MAX_DEPTH: usize = 128;

/// A file that failed its checks, with every problem found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Invalid {
    /// The file as the user named it (or `<stdin>`).
    pub file: String,
    pub kind: Option<&'static str>,
    pub problems: Vec<Problem>,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {p}", self.file)?;
        }
        Ok(())
    }
}

impl std::error::Error for Invalid {}

/// Describes a byte count the way people write it (`16 MiB`, `1.5 KiB`, `12 bytes`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut x = n as f64 / 1024.0;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if x.fract() == 0.0 { format!("{x} {}", UNITS[unit]) } else { format!("{x:.1} {}", UNITS[unit]) }
}

fn json_problem(e: &serde_json::Error) -> Problem {
    let (line, col) = (e.line(), e.column());
    let text = e.to_string();
    let message = if text.starts_with("recursion limit exceeded") {
        format!("JSON nested deeper than {MAX_DEPTH} levels (line {line}, column {col})")
    } else if text.starts_with("trailing characters") {
        format!("unexpected text after the JSON value at line {line}, column {col}")
    } else if e.is_eof() {
        format!("the JSON ends too early at line {line}, column {col}: a bracket, brace or string is not closed")
    } else {
        format!("not valid JSON: {text}")
    };
    Problem::new("", message)
}

/// Checks `bytes` as a file of `kind`; returns the parsed value or every problem.
pub fn check_bytes(bytes: &[u8], kind: FileKind, ctx: &PathContext) -> Result<Value, Vec<Problem>> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(vec![Problem::new(
            "",
            "the file starts with a UTF-8 byte-order mark (BOM); save it as UTF-8 without BOM",
        )]);
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(vec![Problem::new("", "the file is empty; it must hold one JSON object")]);
    }
    let value = crate::json::parse_value(bytes).map_err(|e| {
        vec![match e {
            JsonError::Syntax(e) => json_problem(&e),
            JsonError::DuplicateKey { pointer, key, line, column } => Problem::new(
                pointer,
                format!(
                    "the key {key:?} appears twice in this object (line {line}, column {column}); \
                     JSON readers disagree on which one counts, so remove one"
                ),
            ),
            JsonError::BigInteger { pointer, literal, line, column } => Problem::new(
                pointer,
                format!(
                    "the integer {literal} (line {line}, column {column}) does not fit in 64 bits; \
                     JSON readers would round it, so write it as a string"
                ),
            ),
        }]
    })?;
    let problems = schema::validate(kind.schema(), &value);
    if !problems.is_empty() {
        return Err(problems);
    }
    let problems = kind.check_typed(&value, ctx);
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(value)
}

/// The file at `path` refused without being read: [`Error::Invalid`] naming it as
/// the user gave it (a caller that names it otherwise replaces `file`).
fn refused(path: &Path, problem: Problem) -> Error {
    Invalid { file: path.display().to_string(), kind: None, problems: vec![problem] }.into()
}

/// Reads at most `max_bytes` from `path` (a file the user named: links are followed,
/// a pipe is read); a larger file is [`Error::Invalid`], not a read.
pub fn read_limited(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound { path: path.display().to_string() },
        _ => Error::io(path, e),
    })?;
    read_opened(file, path, max_bytes)
}

/// [`read_limited`] for a file in the tree, which must be a regular file: a symbolic
/// link at `path` is not followed and a FIFO, socket or device is not opened for
/// reading (so it cannot block); both are [`Error::Invalid`] naming what the file is.
pub fn read_tree_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotFound { path: path.display().to_string() });
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refused(
                path,
                Problem::new(
                    "",
                    "the file is a symbolic link; clawboard does not follow links here (put the file itself in the tree)",
                ),
            ));
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let ft = file.metadata().map_err(|e| Error::io(path, e))?.file_type();
    if !ft.is_file() {
        let what = if ft.is_fifo() {
            "a FIFO (named pipe)"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_dir() {
            "a directory"
        } else {
            "a device"
        };
        return Err(refused(path, Problem::new("", format!("the file is {what}, not a regular file; it is not read"))));
    }
    read_opened(file, path, max_bytes)
}

fn read_opened(file: std::fs::File, path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let too_large = |size: u64| {
        Problem::new(
            "",
            format!(
                "the file is {} ({size} bytes), over the {} limit (config limits.max_file_size)",
                human_bytes(size),
                human_bytes(max_bytes)
            ),
        )
    };
    if size > max_bytes {
        return Err(refused(path, too_large(size)));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // Take one byte more than allowed, in case the file grew since the stat.
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(refused(path, too_large(bytes.len() as u64)));
    }
    Ok(bytes)
}

/// Checks the file at `path`; `kind` is inferred from the path when not given.
pub fn check_file(path: &Path, kind: Option<FileKind>, max_bytes: u64) -> Result<(FileKind, Value)> {
    let inferred = FileKind::infer(path);
    let (kind, ctx) = match (kind, inferred) {
        (Some(k), Some((_, ctx))) => (k, ctx),
        (Some(k), None) => (k, PathContext::default()),
        (None, Some(found)) => found,
        (None, None) => {
            return Err(Error::UnknownKind { path: path.to_owned() });
        }
    };
    let invalid = |problems| Invalid { file: path.display().to_string(), kind: Some(kind.name()), problems };
    let bytes = read_limited(path, max_bytes).map_err(|e| match e {
        Error::Invalid(refused) => invalid(refused.problems).into(),
        other => other,
    })?;
    check_bytes(&bytes, kind, &ctx).map(|v| (kind, v)).map_err(|p| invalid(p).into())
}

/// Parses `bytes` (named `file` in messages) into a checked value of type `T`.
pub fn parse<T: Format>(file: &str, bytes: &[u8], ctx: &PathContext) -> Result<T> {
    let invalid = |problems| Invalid { file: file.to_owned(), kind: Some(T::KIND.name()), problems };
    let value = check_bytes(bytes, T::KIND, ctx).map_err(invalid)?;
    serde_json::from_value(value).map_err(|e| invalid(vec![Problem::new("", e.to_string())]).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::TaskSubmission;

    fn problems(bytes: &[u8]) -> Vec<String> {
        match check_bytes(bytes, FileKind::TaskSubmission, &PathContext::default()) {
            Ok(_) => Vec::new(),
            Err(p) => p.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn good_submission_passes() {
        assert!(problems(br#"{"type":"coding","description":"x"}"#).is_empty());
    }

    #[test]
    fn bad_inputs_name_the_field() {
        assert_eq!(problems(br#"{"type":"coding"}"#), vec!["/description: is required but missing"]);
        assert_eq!(
            problems(br#"{"type":"coding","description":"x","priority":"urgent"}"#),
            vec!["/priority: \"urgent\" is not one of high, normal, low"]
        );
        assert_eq!(
            problems(br#"{"type":"coding","description":7}"#),
            vec!["/description: expected a string, found the number 7"]
        );
        assert_eq!(problems(b""), vec!["/: the file is empty; it must hold one JSON object"]);
        assert!(problems(b"\xEF\xBB\xBF{}")[0].contains("byte-order mark"));
        assert!(problems(br#"{"type":"coding","description":"x"} x"#)[0].contains("unexpected text after"));
        assert!(problems(br#"{"type":"coding""#)[0].contains("ends too early"));
        assert!(problems(br#"[1]"#)[0].contains("expected an object, found an array"));
        assert_eq!(
            problems(br#"{"type":"coding","description":"x","type":"writing"}"#),
            vec![
                "/: the key \"type\" appears twice in this object (line 1, column 41); \
                 JSON readers disagree on which one counts, so remove one"
            ]
        );
        assert!(
            problems(br#"{"type":"coding","description":"x","status":"running"}"#)[0]
                .starts_with("/status: a new task must be \"pending\"")
        );
    }

    #[test]
    fn deep_nesting_is_refused_without_overflow() {
        let mut deep = "[".repeat(100_000);
        deep.push_str(&"]".repeat(100_000));
        let p = problems(deep.as_bytes());
        assert!(p[0].contains("nested deeper than 128"), "{p:?}");
    }

    #[test]
    fn parse_gives_typed_value_or_invalid() {
        let t: TaskSubmission =
            parse("x.json", br#"{"type":"quant","description":"d"}"#, &PathContext::default()).unwrap();
        assert_eq!(t.description, "d");
        let e = parse::<TaskSubmission>("x.json", b"{}", &PathContext::default()).unwrap_err();
        assert!(e.to_string().starts_with("x.json: /type: is required"), "{e}");
    }

    #[test]
    fn numbers_in_extra_fields_survive_a_rewrite_exactly() {
        // Found by the task_parser fuzz target: without float_roundtrip, serde_json read
        // 1.2222222222222221e+30 one bit off, so every rewrite of task.json moved it.
        let text = r#"{"type":"research","description":"x","extra":[1.2222222222222221e+30,0.1,5e-324]}"#;
        let a: crate::formats::TaskSubmission =
            parse("inbox/x.json", text.as_bytes(), &PathContext::default()).unwrap();
        let written = crate::store::to_pretty_json(&a);
        let b: crate::formats::TaskSubmission =
            parse("inbox/x.json", written.as_bytes(), &PathContext::default()).unwrap();
        assert_eq!(a, b);
        assert!(written.contains("1.2222222222222221e30") || written.contains("1.2222222222222221e+30"), "{written}");
    }

    #[test]
    fn size_limit_applies_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.json");
        std::fs::write(&p, vec![b' '; 2048]).unwrap();
        let e = check_file(&p, Some(FileKind::TaskSubmission), 1024).unwrap_err();
        assert!(e.to_string().contains("over the 1 KiB limit"), "{e}");
    }

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(16 * 1024 * 1024), "16 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 bytes");
    }
}
