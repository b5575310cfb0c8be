//! `[roles.ID.llm]`: a role answered by an OpenAI-compatible chat-completions
//! endpoint (OpenAI, vLLM, llama.cpp's server, Ollama), and its API key. The key is
//! never held by the config: it is read at run time from `api_key_env` or
//! `api_key_file` into an [`ApiKey`], whose `Debug` prints `***` (docs/LLM.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clawboard_core::config::ConfigError;
use clawboard_core::duration::serde_str;
use serde::Deserialize;

/// `[roles.ID.llm]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// The API's base, e.g. `http://127.0.0.1:11434/v1`; requests go to
    /// `{base_url}/chat/completions`.
    pub base_url: String,
    pub model: String,
    /// The API key from this environment variable.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Or from this file, which must be readable by its owner only (mode 600).
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Sampling temperature, 0 to 2; the server's default when absent.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The system message, sent before the context.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Ask for a JSON object (`response_format: {"type": "json_object"}`).
    #[serde(default = "LlmConfig::default_json_response")]
    pub json_response: bool,
    /// Print `{"<output_key>": reply, "usage": …}` instead of the reply itself
    /// (`output` for a blueprint step).
    #[serde(default)]
    pub output_key: Option<String>,
    /// The longest `Retry-After` honoured; a longer one fails the attempt.
    #[serde(default = "LlmConfig::default_max_wait", with = "serde_str")]
    pub max_wait: Duration,
    /// Re-sends after a 429 or 5xx within one attempt.
    #[serde(default = "LlmConfig::default_http_retries")]
    pub http_retries: u32,
}

/// The most `http_retries` accepted: beyond it the role's own retries are the tool.
pub const MAX_HTTP_RETRIES: u32 = 10;

impl LlmConfig {
    fn default_json_response() -> bool {
        true
    }
    fn default_max_wait() -> Duration {
        Duration::from_secs(60)
    }
    fn default_http_retries() -> u32 {
        3
    }

    /// `{base_url}/chat/completions`.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }

    /// Checks the section of role `id`; errors name the key (`roles.w.llm.model`).
    pub fn check(&self, id: &str) -> Result<(), ConfigError> {
        let key = |field: &str| format!("roles.{id}.llm.{field}");
        let rest = self.base_url.strip_prefix("https://").or_else(|| self.base_url.strip_prefix("http://"));
        let Some(rest) = rest else {
            return Err(ConfigError::new(
                key("base_url"),
                format!("{:?} is not an http:// or https:// URL", self.base_url),
            ));
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.is_empty() {
            return Err(ConfigError::new(key("base_url"), format!("{:?} has no host", self.base_url)));
        }
        if authority.contains('@') {
            // A URL shows up in errors and logs; a credential in it would too.
            return Err(ConfigError::new(
                key("base_url"),
                "carries credentials (user@host); give the key with api_key_env or api_key_file",
            ));
        }
        if rest.contains(['?', '#']) {
            // `{base_url}/chat/completions` would land inside the query; a key in it
            // (`?api-key=…`) would show up in errors and logs.
            return Err(ConfigError::new(
                key("base_url"),
                format!(
                    "{:?} has a query or fragment; give the API's base only (e.g. http://127.0.0.1:11434/v1) and the key with api_key_env or api_key_file",
                    self.base_url
                ),
            ));
        }
        if let Err(e) = reqwest::Url::parse(&self.endpoint()) {
            return Err(ConfigError::new(key("base_url"), format!("{:?} is not a valid URL: {e}", self.base_url)));
        }
        if self.base_url.trim_end_matches('/').ends_with("/chat/completions") {
            return Err(ConfigError::new(
                key("base_url"),
                format!(
                    "{:?} is the whole endpoint; give its base (without /chat/completions), which clawboard completes",
                    self.base_url
                ),
            ));
        }
        if self.model.trim().is_empty() {
            return Err(ConfigError::new(key("model"), "is empty; name the model, e.g. \"qwen2.5:7b\""));
        }
        if self.api_key_env.is_some() && self.api_key_file.is_some() {
            return Err(ConfigError::new(key("api_key_file"), "set api_key_env or api_key_file, not both"));
        }
        if self.api_key_env.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ConfigError::new(key("api_key_env"), "is empty; name an environment variable"));
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ConfigError::new(key("temperature"), format!("{t} is out of range 0..=2")));
        }
        if self.output_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err(ConfigError::new(key("output_key"), "is empty; e.g. \"output\""));
        }
        if self.max_wait.is_zero() {
            // Every re-send after a 429 would go at once.
            return Err(ConfigError::new(key("max_wait"), "must be more than 0 (e.g. \"60s\")"));
        }
        if self.http_retries > MAX_HTTP_RETRIES {
            return Err(ConfigError::new(
                key("http_retries"),
                format!("{} is out of range 0..={MAX_HTTP_RETRIES}", self.http_retries),
            ));
        }
        Ok(())
    }

    /// The API key, read now from the process environment or the key file; `None`
    /// when neither is configured (local servers need none). `role` names the key
    /// in errors.
    pub fn api_key(&self, role: &str) -> Result<Option<ApiKey>, KeyError> {
        self.api_key_from(role, |name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// [`LlmConfig::api_key`] with the environment given.
    pub fn api_key_from(&self, role: &str, env: impl Fn(&str) -> Option<String>) -> Result<Option<ApiKey>, KeyError> {
        let key = match (&self.api_key_env, &self.api_key_file) {
            (Some(var), _) => {
                let value = env(var).unwrap_or_default();
                if value.trim().is_empty() {
                    return Err(KeyError::EnvUnset { var: var.clone(), key: format!("roles.{role}.llm.api_key_env") });
                }
                value
            }
            (None, Some(path)) => read_key_file(path, role)?,
            (None, None) => return Ok(None),
        };
        let key = key.trim().to_owned();
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError::Malformed { source_name: self.key_source() });
        }
        Ok(Some(ApiKey(key)))
    }

    fn key_source(&self) -> String {
        match (&self.api_key_env, &self.api_key_file) {
            (Some(var), _) => format!("${var}"),
            (None, Some(path)) => path.display().to_string(),
            (None, None) => String::new(),
        }
    }
}

/// The longest key file read: keys are well under a kilobyte.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

impl LlmConfig {
    /// Resolves `api_key_file` (`~`, or relative to the config file's directory).
    pub fn resolve_key_file(&mut self, resolve: impl Fn(&str) -> PathBuf) {
        if let Some(p) = &self.api_key_file {
            self.api_key_file = Some(resolve(&p.to_string_lossy()));
        }
    }

    /// At load, before any task: `api_key_file` names a regular file its owner alone
    /// may read (its content is read at each run). Errors name the key.
    pub fn check_key_file(&self, id: &str) -> Result<(), ConfigError> {
        let Some(path) = &self.api_key_file else { return Ok(()) };
        key_file_mode(path, id).map_err(|e| {
            let key = format!("roles.{id}.llm.api_key_file");
            // The error names the key already, as the run-time one does not.
            ConfigError::new(&key, e.to_string().replace(&format!(" ({key})"), ""))
        })
    }
}

/// Checks the key file is a regular file without group or other bits.
fn key_file_mode(path: &Path, role: &str) -> Result<(), KeyError> {
    use std::os::unix::fs::PermissionsExt;

    let key = format!("roles.{role}.llm.api_key_file");
    let meta =
        std::fs::metadata(path).map_err(|e| KeyError::Io { path: path.to_owned(), key: key.clone(), source: e })?;
    if !meta.is_file() {
        // A FIFO would block the read; a directory has no key.
        return Err(KeyError::NotAFile { path: path.to_owned(), key });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::FileMode { path: path.to_owned(), key, mode });
    }
    Ok(())
}

fn read_key_file(path: &Path, role: &str) -> Result<String, KeyError> {
    use std::io::Read;

    key_file_mode(path, role)?;
    let key = format!("roles.{role}.llm.api_key_file");
    let io = |e: std::io::Error| KeyError::Io { path: path.to_owned(), key: key.clone(), source: e };
    let mut text = String::new();
    std::fs::File::open(path).map_err(io)?.take(MAX_KEY_FILE_BYTES + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(KeyError::FileTooLarge { path: path.to_owned(), key, limit: MAX_KEY_FILE_BYTES });
    }
    if text.trim().is_empty() {
        return Err(KeyError::FileEmpty { path: path.to_owned(), key });
    }
    Ok(text)
}

/// An API key. Its `Debug` prints `***`; it has no `Display`, so it cannot slip
/// into a message by accident: [`ApiKey::expose`] is the one way to the text.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The key itself, for the `Authorization` header and for redacting.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// Why the API key could not be read. Never carries the key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the environment variable {var} ({key}) is not set or empty")]
    EnvUnset { var: String, key: String },
    #[error("API key file {} ({key}): {source}", path.display())]
    Io { path: PathBuf, key: String, source: std::io::Error },
    #[error("API key file {} ({key}) is not a regular file", path.display())]
    NotAFile { path: PathBuf, key: String },
    #[error(
        "API key file {} ({key}): group or others have access to it (mode {mode:o}); run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    FileMode { path: PathBuf, key: String, mode: u32 },
    #[error("API key file {} ({key}) is empty", path.display())]
    FileEmpty { path: PathBuf, key: String },
    #[error("API key file {} ({key}) is over {limit} bytes; is it the key?", path.display())]
    FileTooLarge { path: PathBuf, key: String, limit: u64 },
    #[error("the API key from {source_name} has spaces or control characters inside it")]
    Malformed { source_name: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llm(extra: serde_json::Value) -> LlmConfig {
        let mut v = serde_json::json!({"base_url": "http://127.0.0.1:1/v1", "model": "m"});
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_and_endpoint() {
        let c = llm(serde_json::json!({"base_url": "http://h:8000/v1/"}));
        assert_eq!(c.endpoint(), "http://h:8000/v1/chat/completions");
        assert!(c.json_response);
        assert_eq!((c.max_wait, c.http_retries), (Duration::from_secs(60), 3));
        assert!(c.check("w").is_ok());
        let c = llm(serde_json::json!({"max_wait": "5s"}));
        assert_eq!(c.max_wait, Duration::from_secs(5));
    }

    #[test]
    fn the_key_comes_from_the_named_variable_or_a_private_file() {
        let c = llm(serde_json::json!({"api_key_env": "K"}));
        let got = c.api_key_from("w", |n| (n == "K").then(|| "sk-test-1\n".to_owned())).unwrap();
        assert_eq!(got.as_ref().map(ApiKey::expose), Some("sk-test-1"));
        let err = c.api_key_from("w", |_| None).unwrap_err().to_string();
        assert_eq!(err, "the environment variable K (roles.w.llm.api_key_env) is not set or empty");
        assert!(llm(serde_json::json!({})).api_key_from("w", |_| None).unwrap().is_none());

        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("key");
        std::fs::write(&f, "sk-file-2\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = llm(serde_json::json!({"api_key_file": f}));
        assert_eq!(c.api_key("w").unwrap().unwrap().expose(), "sk-file-2");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = c.api_key("w").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&f.display().to_string()) && msg.contains("mode 644"), "{msg}");
        assert!(msg.contains("(roles.w.llm.api_key_file)"), "{msg}");
        assert!(!msg.contains("sk-file-2") && !format!("{err:?}").contains("sk-file-2"));
        std::fs::write(&f, "sk bad").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400)).unwrap();
        let err = c.api_key("w").unwrap_err();
        assert!(!format!("{err} {err:?}").contains("sk bad"), "{err}");
    }

    #[test]
    fn a_key_file_is_checked_at_load_and_resolved_like_other_paths() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("key");
        std::fs::write(&f, "sk-4\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Relative to the config's directory, as the caller resolves it.
        let mut c = llm(serde_json::json!({"api_key_file": "key"}));
        c.resolve_key_file(|p| d.path().join(p));
        assert_eq!(c.api_key_file.as_deref(), Some(f.as_path()));
        assert!(c.check_key_file("w").is_ok());
        assert_eq!(c.api_key("w").unwrap().unwrap().expose(), "sk-4");

        // Group-writable only is refused too, and said so.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o620)).unwrap();
        let err = c.check_key_file("w").unwrap_err().to_string();
        assert!(
            err.starts_with("roles.w.llm.api_key_file: ")
                && err.contains("group or others have access to it (mode 620)"),
            "{err}"
        );

        let missing = llm(serde_json::json!({"api_key_file": d.path().join("nope")}));
        let err = missing.check_key_file("w").unwrap_err().to_string();
        assert!(err.starts_with("roles.w.llm.api_key_file: ") && err.contains("No such file"), "{err}");

        // A FIFO (whose read would block) and a directory are not key files.
        let fifo = d.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").args(["-m", "600"]).arg(&fifo).status().unwrap().success());
        let c = llm(serde_json::json!({"api_key_file": fifo}));
        assert!(c.check_key_file("w").unwrap_err().to_string().contains("is not a regular file"));
        assert!(c.api_key("w").unwrap_err().to_string().contains("is not a regular file"));
        let c = llm(serde_json::json!({"api_key_file": d.path()}));
        assert!(c.check_key_file("w").unwrap_err().to_string().contains("is not a regular file"));

        // A huge file is not read whole.
        let big = d.path().join("big");
        std::fs::write(&big, vec![b'k'; 100_000]).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = llm(serde_json::json!({"api_key_file": big}));
        assert!(c.api_key("w").unwrap_err().to_string().contains("is over 65536 bytes"));
    }

    #[test]
    fn a_key_debugs_as_stars() {
        let k = ApiKey::new("sk-secret-3");
        assert_eq!(format!("{k:?}"), "ApiKey(***)");
        assert_eq!(format!("{:?}", Some(k)), "Some(ApiKey(***))");
    }
}
