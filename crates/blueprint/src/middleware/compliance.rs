//! `platform_compliance`: the final parts of one platform's version against that
//! platform's limits. What can be cut without losing meaning (a title, the last
//! hashtags) is cut; what cannot (a body, a tweet, a thread) fails, so the step
//! is retried.

use serde::{Deserialize, Serialize};

use super::MiddlewareConfig;

/// The parts of one platform's version that have limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parts {
    /// Cut to `title_max_chars`.
    pub title: String,
    /// Fails over `body_max_chars` (and over `tweet_max_chars` without a thread).
    pub body: String,
    /// The last ones dropped beyond `hashtags_max`.
    #[serde(default)]
    pub hashtags: Vec<String>,
    /// The tweets of a thread; `None`: the body is posted as one tweet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<Vec<String>>,
}

/// What [`platform_compliance`] made of the parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// The parts, the title and hashtags cut to the limits.
    pub parts: Parts,
    /// What was cut: `title cut to 20 chars for xiaohongshu (was 27)`.
    pub adjustments: Vec<String>,
    /// What is over a limit and was left: `body is 1234 chars; xiaohongshu allows 1000`.
    pub failures: Vec<String>,
}

impl Checked {
    /// Within every limit (after the cuts).
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Checks `parts` against `[blueprints.platforms.{platform}]` (a platform with
/// no section has no limits): a title over `title_max_chars` is cut to it, the
/// hashtags beyond `hashtags_max` are dropped from the end; a body over
/// `body_max_chars`, a thread of more than `thread_max` tweets, or a tweet over
/// `tweet_max_chars` is a failure. Without a `thread`, the body is one tweet.
/// Lengths are in characters (Unicode scalar values), not bytes; a title is cut
/// between user-perceived characters (never inside an emoji or a flag), so it
/// may come out shorter than the limit. A tweet is counted as Twitter counts it
/// ([`tweet_length`]).
pub fn platform_compliance(cfg: &MiddlewareConfig, platform: &str, parts: &Parts) -> Checked {
    let limits = cfg.limits(platform);
    let mut out = Checked { parts: parts.clone(), ..Checked::default() };
    let p = &mut out.parts;
    if let Some(max) = limits.title_max_chars {
        let n = p.title.chars().count();
        if n > max {
            p.title = cut(&p.title, max);
            out.adjustments.push(format!("title cut to {max} chars for {platform} (was {n})"));
        }
    }
    if let Some(max) = limits.hashtags_max
        && p.hashtags.len() > max
    {
        let dropped = p.hashtags.split_off(max);
        out.adjustments.push(format!(
            "hashtags cut to {max} for {platform} (dropped {})",
            dropped.iter().map(|h| format!("{h:?}")).collect::<Vec<_>>().join(", ")
        ));
    }
    let over = |what: &str, n: usize, max: Option<usize>| {
        max.filter(|m| n > *m).map(|m| format!("{what} is {n} chars; {platform} allows {m}"))
    };
    out.failures.extend(over("body", p.body.chars().count(), limits.body_max_chars));
    let tweet_over = |what: &str, text: &str| {
        let n = tweet_length(text);
        limits
            .tweet_max_chars
            .filter(|m| n > *m)
            .map(|m| format!("{what} weighs {n} as Twitter counts (CJK and emoji 2, a link 23); {platform} allows {m}"))
    };
    match &p.thread {
        Some(tweets) => {
            if let Some(max) = limits.thread_max
                && tweets.len() > max
            {
                out.failures.push(format!("thread has {} tweets; {platform} allows {max}", tweets.len()));
            }
            for (i, tweet) in tweets.iter().enumerate() {
                out.failures.extend(tweet_over(&format!("tweet {}", i + 1), tweet));
            }
        }
        None => {
            if let Some(f) = tweet_over("body", &p.body) {
                out.failures.push(format!("{f} in one tweet"));
            }
        }
    }
    out
}

/// The longest start of `text` of at most `max` characters that ends between
/// two user-perceived characters (grapheme clusters).
pub fn cut(text: &str, max: usize) -> String {
    use unicode_segmentation::UnicodeSegmentation;

    let mut out = String::new();
    let mut n = 0;
    for g in text.graphemes(true) {
        let c = g.chars().count();
        if n + c > max {
            break;
        }
        out.push_str(g);
        n += c;
    }
    out
}

/// A tweet's length as Twitter counts it (twitter-text's configuration v3):
/// a character in U+0000–U+10FF, U+2000–U+200D, U+2010–U+201F or
/// U+2032–U+2037 counts 1, any other (Chinese, Japanese, Korean …) 2; an emoji,
/// however many code points it is made of, 2; a link (`http://`, `https://`), 23
/// whatever its length.
pub fn tweet_length(text: &str) -> usize {
    use unicode_segmentation::UnicodeSegmentation;

    let light = |c: char| matches!(u32::from(c), 0..=0x10FF | 0x2000..=0x200D | 0x2010..=0x201F | 0x2032..=0x2037);
    let emoji = |g: &str| {
        g.chars().any(|c| matches!(u32::from(c), 0x1F000..=0x1FAFF))
            || (g.contains('\u{FE0F}') && g.chars().any(|c| matches!(u32::from(c), 0x2190..=0x2BFF | 0x3030 | 0x303D)))
    };
    let mut n = 0;
    for piece in pieces(text) {
        match piece {
            Piece::Link => n += 23,
            Piece::Text(t) => {
                for g in t.graphemes(true) {
                    n += if emoji(g) { 2 } else { g.chars().map(|c| if light(c) { 1 } else { 2 }).sum() };
                }
            }
        }
    }
    n
}

/// A piece of a tweet: text, or a link.
enum Piece<'a> {
    Text(&'a str),
    Link,
}

/// `text` cut into its links (`http://` or `https://` and more, up to white
/// space) and the text between them.
fn pieces(text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = [rest.find("http://"), rest.find("https://")].into_iter().flatten().min() {
        let (before, link) = rest.split_at(at);
        let end = link.find(char::is_whitespace).unwrap_or(link.len());
        let scheme = if link.starts_with("https://") { 8 } else { 7 };
        out.push(Piece::Text(before));
        out.push(if end > scheme { Piece::Link } else { Piece::Text(&link[..end]) });
        rest = &link[end..];
    }
    out.push(Piece::Text(rest));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn cfg() -> MiddlewareConfig {
        MiddlewareConfig::from_toml(
            "t.toml",
            r#"
[blueprints.platforms.xiaohongshu]
title_max_chars = 20
body_max_chars = 1000
hashtags_max = 3
[blueprints.platforms.twitter]
tweet_max_chars = 280
thread_max = 3
"#,
        )
        .unwrap()
    }

    fn parts(title: &str, body: &str, hashtags: &[&str]) -> Parts {
        Parts {
            title: title.into(),
            body: body.into(),
            hashtags: hashtags.iter().map(|h| (*h).to_owned()).collect(),
            thread: None,
        }
    }

    #[test]
    fn within_the_limits_nothing_changes() {
        let p = parts("秋冬护肤", &"字".repeat(1000), &["护肤", "秋冬", "好物"]);
        let c = platform_compliance(&cfg(), "xiaohongshu", &p);
        assert_eq!(c, Checked { parts: p, adjustments: vec![], failures: vec![] });
        assert!(c.passed());
    }

    #[test]
    fn a_chinese_title_is_cut_at_20_characters_not_bytes() {
        // 27 characters, 81 bytes.
        let title = "秋冬护肤一定要知道的九个保湿小技巧，干皮油皮都适用哦！";
        assert_eq!(title.chars().count(), 27);
        let c = platform_compliance(&cfg(), "xiaohongshu", &parts(title, "正文", &[]));
        assert_eq!(c.parts.title, "秋冬护肤一定要知道的九个保湿小技巧，干皮");
        assert_eq!(c.parts.title.chars().count(), 20);
        assert_eq!(c.adjustments, ["title cut to 20 chars for xiaohongshu (was 27)"]);
        assert!(c.passed());
    }

    #[test]
    fn a_title_of_exactly_the_limit_stays() {
        let title = "字".repeat(20);
        let c = platform_compliance(&cfg(), "xiaohongshu", &parts(&title, "", &[]));
        assert_eq!(c.parts.title, title);
        assert!(c.adjustments.is_empty());
    }

    #[test]
    fn extra_hashtags_are_dropped_from_the_end() {
        let c = platform_compliance(&cfg(), "xiaohongshu", &parts("t", "b", &["a", "b", "c", "d", "e"]));
        assert_eq!(c.parts.hashtags, ["a", "b", "c"]);
        assert_eq!(c.adjustments, ["hashtags cut to 3 for xiaohongshu (dropped \"d\", \"e\")"]);
        assert!(c.passed());
    }

    #[test]
    fn a_long_body_fails_and_is_not_cut() {
        let body = "字".repeat(1001);
        let c = platform_compliance(&cfg(), "xiaohongshu", &parts("t", &body, &[]));
        assert_eq!(c.parts.body, body);
        assert_eq!(c.failures, ["body is 1001 chars; xiaohongshu allows 1000"]);
        assert!(!c.passed());
    }

    #[test]
    fn a_thread_too_long_and_a_tweet_too_long_fail() {
        let mut p = parts("", "", &[]);
        p.thread = Some(vec!["一".into(), "a".repeat(281), "三".into(), "字".repeat(140)]);
        let c = platform_compliance(&cfg(), "twitter", &p);
        assert_eq!(
            c.failures,
            [
                "thread has 4 tweets; twitter allows 3",
                "tweet 2 weighs 281 as Twitter counts (CJK and emoji 2, a link 23); twitter allows 280"
            ]
        );
        assert_eq!(c.parts, p, "nothing is cut");
    }

    #[test]
    fn without_a_thread_the_body_is_one_tweet() {
        let c = platform_compliance(&cfg(), "twitter", &parts("", &"a".repeat(280), &[]));
        assert!(c.passed());
        let c = platform_compliance(&cfg(), "twitter", &parts("", &"字".repeat(141), &[]));
        assert_eq!(
            c.failures,
            ["body weighs 282 as Twitter counts (CJK and emoji 2, a link 23); twitter allows 280 in one tweet"]
        );
    }

    #[test]
    fn a_platform_without_limits_passes_anything() {
        let p = parts(&"t".repeat(500), &"b".repeat(100_000), &["x"; 50]);
        let c = platform_compliance(&cfg(), "wechat", &p);
        assert_eq!(c, Checked { parts: p, adjustments: vec![], failures: vec![] });
    }

    #[test]
    fn cuts_and_failures_together() {
        let mut p = parts(&"题".repeat(25), &"字".repeat(1200), &["a", "b", "c", "d"]);
        p.thread = Some(vec![]);
        let c = platform_compliance(&cfg(), "xiaohongshu", &p);
        assert_eq!(c.adjustments.len(), 2);
        assert_eq!(c.failures, ["body is 1200 chars; xiaohongshu allows 1000"]);
    }

    #[test]
    fn the_shipped_limits() {
        let cfg = MiddlewareConfig::shipped().unwrap();
        let c = platform_compliance(&cfg, "wechat", &parts(&"题".repeat(65), &"字".repeat(20_001), &[]));
        assert_eq!(c.adjustments, ["title cut to 64 chars for wechat (was 65)"]);
        assert_eq!(c.failures, ["body is 20001 chars; wechat allows 20000"]);
    }

    #[test]
    fn a_tweet_is_weighed_as_twitter_weighs_it() {
        assert_eq!(tweet_length("hello"), 5);
        assert_eq!(tweet_length("秋冬护肤"), 8);
        assert_eq!(tweet_length("café — “ok”"), 11, "Latin, the dash and curly quotes weigh 1");
        assert_eq!(tweet_length("👍"), 2);
        assert_eq!(tweet_length("👨\u{200d}👩\u{200d}👧"), 2, "a family is one emoji");
        assert_eq!(tweet_length("🇨🇳"), 2);
        assert_eq!(tweet_length("see https://example.com/a/very/long/path?x=1 now"), 4 + 23 + 4);
        assert_eq!(tweet_length("http:// alone"), 13, "a scheme with nothing after it is text");
        // 140 Chinese characters fill a tweet; 141 are over.
        assert_eq!(tweet_length(&"字".repeat(140)), 280);
    }

    #[test]
    fn a_title_is_cut_between_characters_a_reader_sees() {
        let mut cfg = cfg();
        cfg.platforms.get_mut("xiaohongshu").unwrap().title_max_chars = Some(3);
        for (title, want) in [
            ("ab🇨🇳秋冬", "ab"),                 // not half a flag
            ("ab👨\u{200d}👩\u{200d}👧", "ab"), // not a piece of a family
            ("abe\u{301}x", "ab"),              // not e without its accent
            ("abcd", "abc"),
        ] {
            let c = platform_compliance(&cfg, "xiaohongshu", &parts(title, "", &[]));
            assert_eq!(c.parts.title, want, "{title:?}");
        }
    }

    #[test]
    fn parts_round_trip_as_json() {
        let mut p = parts("t", "b", &["h"]);
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v, serde_json::json!({"title": "t", "body": "b", "hashtags": ["h"]}));
        p.thread = Some(vec!["1".into()]);
        assert_eq!(serde_json::from_value::<Parts>(serde_json::to_value(&p).unwrap()).unwrap(), p);
    }
}
