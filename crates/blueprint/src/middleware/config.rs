//! `[blueprints.sensitive_words]`, `[blueprints.replacements]` and
//! `[blueprints.platforms.NAME]`: what the middleware looks for and allows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The platform names a word list or a limit may be given for.
pub const PLATFORMS: [&str; 4] = ["xiaohongshu", "wechat", "twitter", "general"];
/// The word-list key that applies to every platform.
pub const ALL_PLATFORMS: &str = "all";
/// The shipped defaults (`config/blueprints/middleware.toml`), a `[blueprints]` section.
pub const SHIPPED_TOML: &str = include_str!("../../../../config/blueprints/middleware.toml");

/// The name errors of [`MiddlewareConfig::check`] give as the file.
pub const SECTION: &str = "[blueprints]";

/// The middleware's part of the `[blueprints]` config section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiddlewareConfig {
    /// Platform (or `all`) → words that must not appear.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sensitive_words: BTreeMap<String, Vec<String>>,
    /// Word → what replaces it; a listed word without one fails the attempt.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replacements: BTreeMap<String, String>,
    /// Platform → its limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub platforms: BTreeMap<String, PlatformLimits>,
}

/// `[blueprints.platforms.NAME]`: each limit is optional; absent means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformLimits {
    /// A longer title is cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title_max_chars: Option<usize>,
    /// A longer body fails the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_max_chars: Option<usize>,
    /// Hashtags beyond this many are dropped from the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashtags_max: Option<usize>,
    /// A longer tweet fails the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tweet_max_chars: Option<usize>,
    /// A thread of more tweets fails the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_max: Option<usize>,
}

impl PlatformLimits {
    /// Each limit by its config key.
    pub fn named(&self) -> [(&'static str, Option<usize>); 5] {
        [
            ("title_max_chars", self.title_max_chars),
            ("body_max_chars", self.body_max_chars),
            ("hashtags_max", self.hashtags_max),
            ("tweet_max_chars", self.tweet_max_chars),
            ("thread_max", self.thread_max),
        ]
    }
}

/// The document form of the shipped file: only a `[blueprints]` section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    blueprints: MiddlewareConfig,
}

impl MiddlewareConfig {
    /// Parses a TOML document holding only a `[blueprints]` section (as
    /// `config/blueprints/middleware.toml`) and checks it; errors name `file`
    /// and the key.
    pub fn from_toml(file: &str, text: &str) -> Result<MiddlewareConfig> {
        let de = toml::Deserializer::parse(text)
            .map_err(|e| Error::invalid(file, None, "blueprints", e.message().trim_end().to_owned()))?;
        let doc: Document = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string().replace(".?", "");
            Error::invalid(file, None, key, e.inner().message().trim_end().to_owned())
        })?;
        doc.blueprints.check_in(file)?;
        Ok(doc.blueprints)
    }

    /// The shipped defaults ([`SHIPPED_TOML`]).
    pub fn shipped() -> Result<MiddlewareConfig> {
        MiddlewareConfig::from_toml("config/blueprints/middleware.toml", SHIPPED_TOML)
    }

    /// Checks what the types cannot; the error names the key
    /// (`blueprints.replacements.最好`) and its file is `[blueprints]`.
    pub fn check(&self) -> Result<()> {
        self.check_in(SECTION)
    }

    /// [`check`](Self::check), with `file` as the file errors name.
    ///
    /// Refused: a platform other than the four (or `all` for word lists), an
    /// empty word (or one of invisible characters only), a replacement for a
    /// word on no list, a replacement that contains a listed word (it would be
    /// found again; compared folded, as the filter compares), a limit of 0.
    pub fn check_in(&self, file: &str) -> Result<()> {
        let bad = |key: String, reason: String| Err(Error::invalid(file, None, key, reason));
        for (platform, words) in &self.sensitive_words {
            let key = format!("blueprints.sensitive_words.{platform}");
            if platform != ALL_PLATFORMS && !PLATFORMS.contains(&platform.as_str()) {
                return bad(key, format!("unknown platform; use {ALL_PLATFORMS} or one of {}", PLATFORMS.join(", ")));
            }
            if let Some(i) = words.iter().position(|w| w.trim().is_empty()) {
                return bad(key, format!("word {} is empty", i + 1));
            }
            if let Some(i) = words.iter().position(|w| super::filter::fold(w).chars.iter().all(|c| c.is_whitespace())) {
                return bad(key, format!("word {} ({:?}) is invisible characters only", i + 1, words[i]));
            }
        }
        // Built once: folded, for the replacement check below.
        let listed: Vec<(&str, String)> =
            self.all_words().into_iter().map(|w| (w, super::filter::fold(w).chars.into_iter().collect())).collect();
        for (word, replacement) in &self.replacements {
            let key = format!("blueprints.replacements.{word}");
            if word.trim().is_empty() {
                return bad(key, "an empty word cannot be replaced".into());
            }
            if !listed.iter().any(|(w, _)| w == word) {
                return bad(key, format!("{word:?} is on no list of [blueprints.sensitive_words]; it is never found"));
            }
            let folded: String = super::filter::fold(replacement).chars.into_iter().collect();
            if let Some((w, _)) = listed.iter().find(|(_, f)| folded.contains(f.as_str())) {
                return bad(
                    key,
                    format!("the replacement {replacement:?} contains the listed word {w:?}; it would be found again"),
                );
            }
        }
        for (platform, limits) in &self.platforms {
            if !PLATFORMS.contains(&platform.as_str()) {
                return bad(
                    format!("blueprints.platforms.{platform}"),
                    format!("unknown platform; use one of {}", PLATFORMS.join(", ")),
                );
            }
            if let Some((name, _)) = limits.named().into_iter().find(|(_, v)| *v == Some(0)) {
                return bad(format!("blueprints.platforms.{platform}.{name}"), "must be at least 1".into());
            }
        }
        Ok(())
    }

    /// The words looked for on `platform` (its list and `all`'s), each once,
    /// longest first (so `最好` is found before `最`), then in string order.
    pub fn words_for(&self, platform: &str) -> Vec<&str> {
        let lists = [ALL_PLATFORMS, platform].into_iter().filter_map(|p| self.sensitive_words.get(p));
        sorted(lists.flatten().map(String::as_str).filter(|w| !w.is_empty()).collect())
    }

    /// The limits of `platform` (none when it has no section).
    pub fn limits(&self, platform: &str) -> PlatformLimits {
        self.platforms.get(platform).copied().unwrap_or_default()
    }

    /// Every listed word of every platform, for the replacement check.
    fn all_words(&self) -> Vec<&str> {
        sorted(self.sensitive_words.values().flatten().map(String::as_str).filter(|w| !w.is_empty()).collect())
    }
}

fn sorted(mut words: Vec<&str>) -> Vec<&str> {
    words.sort_by(|a, b| b.chars().count().cmp(&a.chars().count()).then_with(|| a.cmp(b)));
    words.dedup();
    words
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use rstest::rstest;

    use super::*;

    fn parse(text: &str) -> Result<MiddlewareConfig> {
        MiddlewareConfig::from_toml("mw.toml", text)
    }

    #[test]
    fn the_shipped_defaults_parse_and_pass() {
        let cfg = MiddlewareConfig::shipped().unwrap();
        for w in ["最好", "第一", "国家级", "绝对", "顶级", "100%"] {
            assert!(cfg.words_for("general").contains(&w), "{w} not in the shipped list");
        }
        assert!(!cfg.replacements.contains_key("国家级"), "国家级 is left without a replacement on purpose");
        assert_eq!(cfg.limits("xiaohongshu").title_max_chars, Some(20));
        assert_eq!(cfg.limits("xiaohongshu").body_max_chars, Some(1000));
        assert_eq!(cfg.limits("wechat").title_max_chars, Some(64));
        assert_eq!(cfg.limits("wechat").body_max_chars, Some(20000));
        assert_eq!(cfg.limits("twitter").tweet_max_chars, Some(280));
        assert!(cfg.platforms.contains_key("general"));
    }

    #[test]
    fn the_briefs_example_parses() {
        let cfg = parse(
            r#"
[blueprints.sensitive_words]
all = ["最好", "第一", "国家级", "绝对"]
xiaohongshu = ["微信", "加V"]
[blueprints.replacements]
"最好" = "很好"
[blueprints.platforms.xiaohongshu]
title_max_chars = 20
[blueprints.platforms.twitter]
tweet_max_chars = 280
thread_max = 25
"#,
        )
        .unwrap();
        assert_eq!(cfg.replacements["最好"], "很好");
        assert_eq!(cfg.limits("twitter").thread_max, Some(25));
        assert_eq!(cfg.limits("wechat"), PlatformLimits::default());
    }

    #[test]
    fn an_empty_document_is_the_default() {
        assert_eq!(parse("").unwrap(), MiddlewareConfig::default());
        MiddlewareConfig::default().check().unwrap();
    }

    #[test]
    fn words_longest_first_each_once_with_all() {
        let cfg = parse(
            "[blueprints.sensitive_words]\nall = [\"最\", \"最好\", \"b\", \"a\"]\nwechat = [\"最好\", \"微信号\"]",
        )
        .unwrap();
        assert_eq!(cfg.words_for("wechat"), ["微信号", "最好", "a", "b", "最"]);
        assert_eq!(cfg.words_for("twitter"), ["最好", "a", "b", "最"]);
    }

    #[rstest]
    #[case::unknown_platform(
        "[blueprints.sensitive_words]\ntiktok = [\"x\"]",
        "blueprints.sensitive_words.tiktok",
        "unknown platform; use all or one of xiaohongshu, wechat, twitter, general"
    )]
    #[case::empty_word(
        "[blueprints.sensitive_words]\nall = [\"x\", \" \"]",
        "blueprints.sensitive_words.all",
        "word 2 is empty"
    )]
    #[case::empty_replaced_word(
        "[blueprints.replacements]\n\"\" = \"x\"",
        "blueprints.replacements.",
        "an empty word cannot be replaced"
    )]
    #[case::looping_replacement(
        "[blueprints.sensitive_words]\nall = [\"最好\"]\n[blueprints.replacements]\n\"最好\" = \"最好的\"",
        "blueprints.replacements.最好",
        "the replacement \"最好的\" contains the listed word \"最好\"; it would be found again"
    )]
    #[case::replacement_with_another_platforms_word(
        "[blueprints.sensitive_words]\nall = [\"第一\"]\nwechat = [\"微信\"]\n[blueprints.replacements]\n\"第一\" = \"加微信\"",
        "blueprints.replacements.第一",
        "the replacement \"加微信\" contains the listed word \"微信\"; it would be found again"
    )]
    #[case::invisible_word(
        "[blueprints.sensitive_words]\nall = [\"x\", \"\\u200b\\u200b\"]",
        "blueprints.sensitive_words.all",
        "word 2 (\"\\u{200b}\\u{200b}\") is invisible characters only"
    )]
    #[case::replacement_of_an_unlisted_word(
        "[blueprints.sensitive_words]\nall = [\"第一\"]\n[blueprints.replacements]\n\"最佳\" = \"很好\"",
        "blueprints.replacements.最佳",
        "\"最佳\" is on no list of [blueprints.sensitive_words]; it is never found"
    )]
    #[case::replacement_with_a_listed_word_in_another_form(
        "[blueprints.sensitive_words]\nall = [\"第一\", \"加V\"]\n[blueprints.replacements]\n\"第一\" = \"加ｖ\"",
        "blueprints.replacements.第一",
        "the replacement \"加ｖ\" contains the listed word \"加V\"; it would be found again"
    )]
    #[case::limits_platform(
        "[blueprints.platforms.all]\ntitle_max_chars = 3",
        "blueprints.platforms.all",
        "unknown platform; use one of xiaohongshu, wechat, twitter, general"
    )]
    #[case::zero_limit(
        "[blueprints.platforms.twitter]\nthread_max = 0",
        "blueprints.platforms.twitter.thread_max",
        "must be at least 1"
    )]
    #[case::zero_title(
        "[blueprints.platforms.wechat]\ntitle_max_chars = 0",
        "blueprints.platforms.wechat.title_max_chars",
        "must be at least 1"
    )]
    fn refused(#[case] text: &str, #[case] key: &str, #[case] reason: &str) {
        match parse(text) {
            Err(Error::Invalid { file, field, reason: why, .. }) => {
                assert_eq!((file.as_str(), field.as_str(), why.as_str()), ("mw.toml", key, reason));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn check_names_the_section_when_no_file_is_known() {
        let mut cfg = MiddlewareConfig::default();
        cfg.sensitive_words.insert("all".into(), vec!["绝对".into()]);
        cfg.replacements.insert("绝对".into(), "绝对地".into());
        let e = cfg.check().unwrap_err();
        assert_eq!(
            e.to_string(),
            "[blueprints]: blueprints.replacements.绝对: the replacement \"绝对地\" contains the listed word \"绝对\"; it would be found again"
        );
    }

    #[rstest]
    #[case::unknown_key("[blueprints]\nsensitive = 1", "blueprints.sensitive")]
    #[case::unknown_limit("[blueprints.platforms.twitter]\ntweet_max = 1", "blueprints.platforms.twitter.tweet_max")]
    #[case::wrong_type(
        "[blueprints.platforms.twitter]\nthread_max = \"25\"",
        "blueprints.platforms.twitter.thread_max"
    )]
    #[case::negative("[blueprints.platforms.twitter]\nthread_max = -1", "blueprints.platforms.twitter.thread_max")]
    #[case::other_section("[roles]\nx = 1", "roles")]
    fn type_errors_name_the_key(#[case] text: &str, #[case] key: &str) {
        match parse(text) {
            Err(Error::Invalid { field, .. }) => assert_eq!(field, key),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn toml_syntax_errors_are_refused() {
        assert!(matches!(parse("[blueprints"), Err(Error::Invalid { .. })));
    }
}
