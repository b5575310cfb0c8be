//! `[roles.ID.llm]`: a role answered by an OpenAI-compatible chat-completions
//! endpoint (OpenAI, vLLM, llama.cpp's server, Ollama), and its API key. The key is
//! never held by the config: it is read at run time from `api_key_env` or
//! `api_key_file` into an [`ApiKey`], whose `Debug` prints `***` (docs/LLM.md).

use std::path::PathBuf;
use std::time::Duration;

use clawboard_core::config::ConfigError;
use clawboard_core::duration::serde_str;
use clawboard_core::secret::{Secret, SecretError, SecretSource};
use serde::Deserialize;

/// `[roles.ID.llm]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// The provider (`[llm.providers.NAME]`) that gives the endpoint, the model,
    /// the key and the limits; the keys below override its model and limits.
    #[serde(default)]
    pub provider: Option<String>,
    /// The API's base, e.g. `http://127.0.0.1:11434/v1`; requests go to
    /// `{base_url}/chat/completions`. From the provider when one is named.
    #[serde(default)]
    pub base_url: String,
    /// From the provider when one is named and this is absent.
    #[serde(default)]
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
    /// `false`: ask for no JSON mode at all (`reply_format = "text"`), for a
    /// server that refuses `response_format`.
    #[serde(default = "LlmConfig::default_json_response")]
    pub json_response: bool,
    /// How the reply's shape is asked for; default the provider's, else `json_schema`.
    #[serde(default)]
    pub reply_format: Option<ReplyFormat>,
    /// The JSON Schema the reply must fit, instead of the one the step implies.
    #[serde(default)]
    pub reply_schema: Option<serde_json::Value>,
    /// The completion limit sent as `max_tokens`; default sized to the step's output.
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    /// Print `{"<output_key>": reply, "usage": …}` instead of the reply itself
    /// (`output` for a blueprint step).
    #[serde(default)]
    pub output_key: Option<String>,
    /// The longest `Retry-After` honoured; a longer one fails the attempt.
    #[serde(default, with = "serde_str::option")]
    pub max_wait: Option<Duration>,
    /// Re-sends after a 429 or 5xx within one attempt.
    #[serde(default)]
    pub http_retries: Option<u32>,
    /// Count a prompt in the model's own tokens (from the provider).
    #[serde(skip)]
    pub count_tokens: CountTokens,
}

/// How a reply's JSON shape is asked for (`response_format`), from the most
/// exact to the plainest (the order compares them: plainer is greater).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyFormat {
    /// `{"type": "json_schema", "json_schema": {"name", "schema"}}` with the
    /// step's own schema (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM); a server
    /// that refuses it is asked again with each plainer format in turn.
    #[default]
    JsonSchema,
    /// `{"type": "json_object", "schema": …}`: the step's schema beside JSON mode
    /// (llama-cpp-python's server, which refuses `json_schema`).
    JsonObjectSchema,
    /// `{"type": "json_object"}`.
    JsonObject,
    /// No `response_format`: the reply's JSON is found in its text.
    Text,
}

impl ReplyFormat {
    pub fn name(self) -> &'static str {
        match self {
            ReplyFormat::JsonSchema => "json_schema",
            ReplyFormat::JsonObjectSchema => "json_object_schema",
            ReplyFormat::JsonObject => "json_object",
            ReplyFormat::Text => "text",
        }
    }

    /// The next, plainer format to try when a server refuses this one.
    pub fn plainer(self) -> Option<ReplyFormat> {
        match self {
            ReplyFormat::JsonSchema => Some(ReplyFormat::JsonObjectSchema),
            ReplyFormat::JsonObjectSchema => Some(ReplyFormat::JsonObject),
            ReplyFormat::JsonObject => Some(ReplyFormat::Text),
            ReplyFormat::Text => None,
        }
    }

    /// Whether the format sends the step's schema (a step without one asks
    /// with the plainest format that needs none, `json_object`).
    pub fn sends_schema(self) -> bool {
        matches!(self, ReplyFormat::JsonSchema | ReplyFormat::JsonObjectSchema)
    }
}

/// How a provider counts tokens in its model's own tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountTokens {
    /// Found out: the server is asked llama.cpp's `/tokenize` once; when it
    /// answers, slices are counted there, else in o200k alone (remembered per
    /// server for the process's life, said once in the log).
    #[default]
    Auto,
    /// It cannot: budgets hold in o200k, the slicer's count.
    None,
    /// llama.cpp's server: `POST {base_url without /v1}/tokenize`.
    LlamaCpp,
}

/// `[llm.providers.NAME]`: an endpoint and a model, named once, that roles point at
/// with `[roles.ID.llm] provider = "NAME"`. `CLAWBOARD_LLM_{NAME}_BASE_URL`,
/// `_MODEL`, `_API_KEY_FILE` and `_API_KEY_ENV` override its keys of those names
/// (a key source given there replaces the file's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmProvider {
    pub base_url: String,
    pub model: String,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    #[serde(default)]
    pub reply_format: ReplyFormat,
    #[serde(default)]
    pub count_tokens: CountTokens,
    #[serde(default, with = "serde_str::option")]
    pub max_wait: Option<Duration>,
    #[serde(default)]
    pub http_retries: Option<u32>,
    /// The keys the environment set: key → variable (errors about them name the variable).
    #[serde(skip)]
    pub from_env: std::collections::BTreeMap<&'static str, String>,
}

/// The provider keys a `CLAWBOARD_LLM_{NAME}_{KEY}` variable overrides.
pub const PROVIDER_ENV_KEYS: [&str; 4] = ["base_url", "model", "api_key_file", "api_key_env"];

/// `[llm]`: the providers.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSection {
    #[serde(default)]
    pub providers: std::collections::BTreeMap<String, LlmProvider>,
}

/// The most `http_retries` accepted: beyond it the role's own retries are the tool.
pub const MAX_HTTP_RETRIES: u32 = 10;
/// The largest completion limit accepted.
pub const MAX_COMPLETION_TOKENS: u32 = 1 << 20;

/// The environment variable that overrides a provider's `key` (`base_url`, `model`).
pub fn provider_env_var(provider: &str, key: &str) -> String {
    let name: String =
        provider.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("CLAWBOARD_LLM_{name}_{}", key.to_ascii_uppercase())
}

impl LlmSection {
    /// Applies the environment's overrides to each provider and checks it; errors
    /// name the key (`llm.providers.local.base_url`).
    pub fn resolve(mut self, env: impl Fn(&str) -> Option<String>) -> Result<LlmSection, ConfigError> {
        for (name, p) in &mut self.providers {
            clawboard_core::check_id(name)
                .map_err(|e| ConfigError::new(format!("llm.providers.{name}"), format!("the provider name {e}")))?;
            for key in PROVIDER_ENV_KEYS {
                let var = provider_env_var(name, key);
                let Some(v) = env(&var).filter(|v| !v.trim().is_empty()) else { continue };
                match key {
                    "base_url" => p.base_url = v,
                    "model" => p.model = v,
                    "api_key_file" => (p.api_key_file, p.api_key_env) = (Some(PathBuf::from(v)), None),
                    _ => (p.api_key_env, p.api_key_file) = (Some(v), None),
                }
                p.from_env.insert(key, var);
            }
            let as_role = p.as_role(name);
            as_role.check_as(&format!("llm.providers.{name}")).map_err(|e| p.blame(name, e))?;
        }
        Ok(self)
    }
}

impl LlmProvider {
    /// An error about a key the environment set names the variable, not the file's key:
    /// `CLAWBOARD_LLM_LOCAL_BASE_URL: … (it overrides llm.providers.local.base_url)`.
    pub fn blame(&self, name: &str, e: ConfigError) -> ConfigError {
        let prefix = format!("llm.providers.{name}.");
        let Some(field) = e.key.strip_prefix(&prefix) else { return e };
        match self.from_env.get(field) {
            Some(var) => ConfigError::new(var.clone(), format!("{} (it overrides {})", e.reason, e.key)),
            None => e,
        }
    }
}

impl LlmProvider {
    /// The provider's settings as a role's section that names it and sets nothing else.
    pub(crate) fn as_role(&self, name: &str) -> LlmConfig {
        LlmConfig {
            provider: Some(name.to_owned()),
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key_env: self.api_key_env.clone(),
            api_key_file: self.api_key_file.clone(),
            temperature: None,
            system_prompt: None,
            json_response: true,
            reply_format: Some(self.reply_format),
            reply_schema: None,
            max_completion_tokens: None,
            output_key: None,
            max_wait: self.max_wait,
            http_retries: self.http_retries,
            count_tokens: self.count_tokens,
        }
    }
}

impl LlmConfig {
    /// The section a role that names `provider` and sets nothing else would have.
    pub fn from_provider(name: &str, provider: &LlmProvider) -> LlmConfig {
        provider.as_role(name)
    }

    fn default_json_response() -> bool {
        true
    }

    /// The longest `Retry-After` honoured (default 60 s).
    pub fn max_wait(&self) -> Duration {
        self.max_wait.unwrap_or(Duration::from_secs(60))
    }

    /// Re-sends after a 429 or 5xx within one attempt (default 3).
    pub fn http_retries(&self) -> u32 {
        self.http_retries.unwrap_or(3)
    }

    /// How the reply's shape is asked for: `text` when `json_response = false`.
    pub fn reply_format(&self) -> ReplyFormat {
        if !self.json_response {
            return ReplyFormat::Text;
        }
        self.reply_format.unwrap_or_default()
    }

    /// `{base_url}/chat/completions`.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }

    /// `{base_url}/models`.
    pub fn models_endpoint(&self) -> String {
        format!("{}/models", self.base_url.trim_end_matches('/'))
    }

    /// llama.cpp's `/tokenize`, beside its `/v1`.
    pub fn tokenize_endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        format!("{}/tokenize", base.strip_suffix("/v1").unwrap_or(base))
    }

    /// Who answers, for errors: `provider local (gemma-3-270m)` or `gemma-3-270m`.
    pub fn who(&self) -> String {
        match &self.provider {
            Some(p) => format!("provider {p} ({})", self.model),
            None => self.model.clone(),
        }
    }

    /// `provider local (gemma-3-270m): ` before a run's error, for a role that
    /// names a provider (an endpoint of its own is in the error already).
    pub fn prefix(&self) -> String {
        match &self.provider {
            Some(_) => format!("{}: ", self.who()),
            None => String::new(),
        }
    }

    /// Fills what the role leaves to its provider (`[llm.providers.NAME]`):
    /// the endpoint, the key, the model and the limits the role does not set.
    pub fn apply_provider(&mut self, id: &str, providers: &LlmSection) -> Result<(), ConfigError> {
        let Some(name) = self.provider.clone() else { return Ok(()) };
        let Some(p) = providers.providers.get(&name) else {
            let known: Vec<&str> = providers.providers.keys().map(String::as_str).collect();
            return Err(ConfigError::new(
                format!("roles.{id}.llm.provider"),
                format!(
                    "{name:?} is not a provider; define [llm.providers.{name}] (defined: {})",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
            ));
        };
        for (key, set) in [
            ("base_url", !self.base_url.is_empty()),
            ("api_key_env", self.api_key_env.is_some()),
            ("api_key_file", self.api_key_file.is_some()),
        ] {
            if set {
                return Err(ConfigError::new(
                    format!("roles.{id}.llm.{key}"),
                    format!("is the provider's; set it in [llm.providers.{name}], or drop `provider`"),
                ));
            }
        }
        self.base_url = p.base_url.clone();
        if self.model.is_empty() {
            self.model = p.model.clone();
        }
        self.api_key_env = p.api_key_env.clone();
        self.api_key_file = p.api_key_file.clone();
        self.reply_format = self.reply_format.or(Some(p.reply_format));
        self.max_wait = self.max_wait.or(p.max_wait);
        self.http_retries = self.http_retries.or(p.http_retries);
        self.count_tokens = p.count_tokens;
        Ok(())
    }

    /// Checks the section of role `id`; errors name the key (`roles.w.llm.model`).
    pub fn check(&self, id: &str) -> Result<(), ConfigError> {
        self.check_as(&format!("roles.{id}.llm"))
    }

    /// [`LlmConfig::check`] for the section at `section`.
    fn check_as(&self, section: &str) -> Result<(), ConfigError> {
        let key = |field: &str| format!("{section}.{field}");
        if self.base_url.is_empty() {
            return Err(ConfigError::new(
                key("base_url"),
                "is required: the API's base (e.g. http://127.0.0.1:8080/v1), or name a provider with `provider`",
            ));
        }
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
        if self.max_wait.is_some_and(|w| w.is_zero()) {
            // Every re-send after a 429 would go at once.
            return Err(ConfigError::new(key("max_wait"), "must be more than 0 (e.g. \"60s\")"));
        }
        if let Some(n) = self.http_retries
            && n > MAX_HTTP_RETRIES
        {
            return Err(ConfigError::new(key("http_retries"), format!("{n} is out of range 0..={MAX_HTTP_RETRIES}")));
        }
        if let Some(n) = self.max_completion_tokens
            && !(1..=MAX_COMPLETION_TOKENS).contains(&n)
        {
            return Err(ConfigError::new(
                key("max_completion_tokens"),
                format!("{n} is out of range 1..={MAX_COMPLETION_TOKENS}"),
            ));
        }
        if let Some(schema) = &self.reply_schema
            && !schema.is_object()
        {
            return Err(ConfigError::new(key("reply_schema"), "must be a table (a JSON Schema object)"));
        }
        if self.reply_schema.is_some() && !self.reply_format().sends_schema() {
            return Err(ConfigError::new(
                key("reply_schema"),
                format!(
                    "is sent only with reply_format = \"json_schema\" or \"json_object_schema\", not {:?}",
                    self.reply_format().name()
                ),
            ));
        }
        Ok(())
    }

    /// Where the API key is kept (`api_key_env` or `api_key_file`); `None`
    /// when neither is configured (local servers need none). `role` names the key
    /// in errors.
    pub fn api_key_source(&self, role: &str) -> Option<SecretSource> {
        match (&self.api_key_env, &self.api_key_file) {
            (Some(var), _) => Some(SecretSource::env(var, self.key_section(role, "api_key_env"))),
            (None, Some(path)) => Some(SecretSource::file(path, self.key_section(role, "api_key_file"))),
            (None, None) => None,
        }
    }

    /// The API key, read now from the process environment or the key file.
    pub fn api_key(&self, role: &str) -> Result<Option<ApiKey>, KeyError> {
        self.api_key_source(role).map(|s| s.read()).transpose()
    }

    /// [`LlmConfig::api_key`] with the environment given.
    pub fn api_key_from(&self, role: &str, env: impl Fn(&str) -> Option<String>) -> Result<Option<ApiKey>, KeyError> {
        self.api_key_source(role).map(|s| s.read_with(env)).transpose()
    }

    /// Where `field` of the key is set: the provider's section, or the role's.
    fn key_section(&self, role: &str, field: &str) -> String {
        match &self.provider {
            Some(p) => format!("llm.providers.{p}.{field}"),
            None => format!("roles.{role}.llm.{field}"),
        }
    }
}

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
        let key = self.key_section(id, "api_key_file");
        clawboard_core::secret::check_file(path, &key).map_err(SecretError::into_config_error)
    }
}

/// An API key: a [`Secret`], whose `Debug` prints `***`.
pub type ApiKey = Secret;

/// Why the API key could not be read. Never carries the key.
pub type KeyError = SecretError;

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
        assert_eq!((c.max_wait(), c.http_retries()), (Duration::from_secs(60), 3));
        assert!(c.check("w").is_ok());
        let c = llm(serde_json::json!({"max_wait": "5s"}));
        assert_eq!(c.max_wait(), Duration::from_secs(5));
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
        assert_eq!(format!("{k:?}"), "***");
        assert_eq!(format!("{:?}", Some(k)), "Some(***)");
    }
}
