//! Keys and tokens: where each is kept ([`SecretSource`]: an environment
//! variable or a file only its owner may read), read each time it is used, so a
//! key rotated in its file needs no restart. Every crate that holds a secret
//! (the LLM key, the GitHub token, the git token, the bucket's keys) takes it
//! from here, and every secret file reaches the sandbox's deny list through
//! [`SecretSource::file`]. A [`Secret`] never prints itself.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::config::ConfigError;

/// The longest secret file read: keys and token files are well under a kilobyte.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Where a secret is kept, with the config key that says so (named in errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of this process.
    Env { var: String, key: String },
    /// A file holding the secret alone, mode 600 or stricter.
    File { path: PathBuf, key: String },
}

impl SecretSource {
    pub fn env(var: impl Into<String>, key: impl Into<String>) -> SecretSource {
        SecretSource::Env { var: var.into(), key: key.into() }
    }

    pub fn file(path: impl Into<PathBuf>, key: impl Into<String>) -> SecretSource {
        SecretSource::File { path: path.into(), key: key.into() }
    }

    /// The secret now, from this process's environment or the file.
    pub fn read(&self) -> Result<Secret, SecretError> {
        self.read_with(|var| std::env::var_os(var).map(|v| v.to_string_lossy().into_owned()))
    }

    /// [`SecretSource::read`] with the environment given.
    pub fn read_with(&self, env: impl Fn(&str) -> Option<String>) -> Result<Secret, SecretError> {
        let text = match self {
            SecretSource::Env { var, key } => env(var)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| SecretError::EnvUnset { var: var.clone(), key: key.clone() })?,
            SecretSource::File { path, key } => read_file(path, key)?,
        };
        let secret = text.trim();
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(SecretError::Malformed { source_name: self.describe(), key: self.key().to_owned() });
        }
        Ok(Secret(secret.to_owned()))
    }

    /// The file, if the secret is kept in one: what a sandboxed role is denied.
    pub fn path(&self) -> Option<&Path> {
        match self {
            SecretSource::File { path, .. } => Some(path),
            SecretSource::Env { .. } => None,
        }
    }

    /// `$VAR` or the file's path, for messages.
    pub fn describe(&self) -> String {
        match self {
            SecretSource::Env { var, .. } => format!("${var}"),
            SecretSource::File { path, .. } => path.display().to_string(),
        }
    }

    /// The config key that names this source.
    pub fn key(&self) -> &str {
        match self {
            SecretSource::Env { key, .. } | SecretSource::File { key, .. } => key,
        }
    }
}

/// A key or token. Its `Debug` prints `***`; it has no `Display`, so it cannot
/// slip into a message by accident: [`Secret::expose`] is the one way to the text.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    /// The secret itself, for a request's header or a credential callback, and for redacting.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Why a secret could not be read. Never carries the secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the environment variable {var} ({key}) is not set or empty")]
    EnvUnset { var: String, key: String },
    #[error("{} ({key}): {source}", path.display())]
    Io { path: PathBuf, key: String, source: std::io::Error },
    #[error("{} ({key}) is not a regular file", path.display())]
    NotAFile { path: PathBuf, key: String },
    #[error(
        "{} ({key}): group or others have access to it (mode {mode:o}); run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    FileMode { path: PathBuf, key: String, mode: u32 },
    #[error("{} ({key}) is empty", path.display())]
    FileEmpty { path: PathBuf, key: String },
    #[error("{} ({key}) is over {limit} bytes; does it hold the secret alone?", path.display())]
    FileTooLarge { path: PathBuf, key: String, limit: u64 },
    #[error(
        "the secret from {source_name} ({key}) has spaces or control characters inside it; it must hold the secret alone"
    )]
    Malformed { source_name: String, key: String },
}

impl SecretError {
    /// The config key the error is about.
    pub fn key(&self) -> &str {
        match self {
            SecretError::EnvUnset { key, .. }
            | SecretError::Io { key, .. }
            | SecretError::NotAFile { key, .. }
            | SecretError::FileMode { key, .. }
            | SecretError::FileEmpty { key, .. }
            | SecretError::FileTooLarge { key, .. }
            | SecretError::Malformed { key, .. } => key,
        }
    }

    /// As a config error: the key in front, not repeated in the reason.
    pub fn into_config_error(self) -> ConfigError {
        let key = self.key().to_owned();
        ConfigError::new(&key, self.to_string().replace(&format!(" ({key})"), ""))
    }
}

/// Checks a secret file as [`read_file`] does, without reading it: a regular
/// file without group or other bits. For checks at load, before any task.
pub fn check_file(path: &Path, key: &str) -> Result<(), SecretError> {
    let meta = std::fs::metadata(path).map_err(|e| SecretError::Io {
        path: path.to_owned(),
        key: key.to_owned(),
        source: e,
    })?;
    if !meta.is_file() {
        // A FIFO would block the read; a directory holds no secret.
        return Err(SecretError::NotAFile { path: path.to_owned(), key: key.to_owned() });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::FileMode { path: path.to_owned(), key: key.to_owned(), mode });
    }
    Ok(())
}

/// The text of a secret file (a key, or lines of `NAME=VALUE`), checked by
/// [`check_file`], at most [`MAX_FILE_BYTES`], not blank. `key` names it in errors.
pub fn read_file(path: &Path, key: &str) -> Result<String, SecretError> {
    check_file(path, key)?;
    let io = |e: std::io::Error| SecretError::Io { path: path.to_owned(), key: key.to_owned(), source: e };
    let mut text = String::new();
    std::fs::File::open(path).map_err(io)?.take(MAX_FILE_BYTES + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(SecretError::FileTooLarge { path: path.to_owned(), key: key.to_owned(), limit: MAX_FILE_BYTES });
    }
    if text.trim().is_empty() {
        return Err(SecretError::FileEmpty { path: path.to_owned(), key: key.to_owned() });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn an_env_secret_is_read_trimmed_and_an_unset_one_names_its_key() {
        let s = SecretSource::env("K", "roles.w.llm.api_key_env");
        assert_eq!(s.read_with(|v| (v == "K").then(|| "sk-1\n".to_owned())).unwrap().expose(), "sk-1");
        let e = s.read_with(|_| Some("  ".into())).unwrap_err().to_string();
        assert_eq!(e, "the environment variable K (roles.w.llm.api_key_env) is not set or empty");
        let e = s.read_with(|_| Some("two words".into())).unwrap_err().to_string();
        assert!(e.contains("$K (roles.w.llm.api_key_env) has spaces"), "{e}");
        assert!(!e.contains("two"), "never the secret: {e}");
        assert_eq!(s.path(), None);
    }

    #[test]
    fn a_file_secret_is_read_at_every_use_so_a_rotated_one_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let p = private(dir.path(), "k", "first\n", 0o600);
        let s = SecretSource::file(&p, "github.token_file");
        assert_eq!(s.read().unwrap().expose(), "first");
        std::fs::write(&p, "second").unwrap();
        assert_eq!(s.read().unwrap().expose(), "second");
        assert_eq!(s.path(), Some(p.as_path()));
    }

    #[test]
    fn a_bad_secret_file_is_refused_naming_the_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let open = private(dir.path(), "open", "k", 0o644);
        let empty = private(dir.path(), "empty", " \n", 0o600);
        let big = private(dir.path(), "big", &"k".repeat(MAX_FILE_BYTES as usize + 1), 0o600);
        let cases = [
            (open.clone(), "group or others have access to it (mode 644); run `chmod 600"),
            (empty, "is empty"),
            (big, "is over 65536 bytes"),
            (dir.path().to_owned(), "is not a regular file"),
            (dir.path().join("none"), "No such file"),
        ];
        for (path, want) in cases {
            let e = SecretSource::file(&path, "archive.token_file").read().unwrap_err().to_string();
            assert!(e.starts_with(&format!("{} (archive.token_file)", path.display())), "{e}");
            assert!(e.contains(want), "{path:?}: {e}");
        }
        let e = check_file(&open, "sync.s3.credentials_file").unwrap_err().into_config_error().to_string();
        assert!(e.starts_with(&format!("sync.s3.credentials_file: {}: group or others", open.display())), "{e}");
    }

    #[test]
    fn a_secret_never_prints_itself() {
        let s = Secret::new("sk-hidden");
        assert_eq!(format!("{s:?}"), "***");
    }
}
