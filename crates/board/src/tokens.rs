//! Counting tokens: OpenAI's o200k_base BPE (`bpe-openai`, whose vocabulary ships
//! inside the crate: nothing is downloaded). Counts are labelled `o200k` wherever
//! they are shown; a provider's own `usage` is recorded beside them, since other
//! models' tokenizers differ.

/// The name the counts carry.
pub const TOKENIZER: &str = "o200k_base";

/// The tokenizer (loaded once per process, on first use).
pub fn bpe() -> &'static bpe_openai::Tokenizer {
    bpe_openai::o200k_base()
}

/// Most pre-tokenized pieces a thread remembers the count of (see [`count`]).
const MEMO_PIECES: usize = 1 << 16;

thread_local! {
    static MEMO: std::cell::RefCell<std::collections::HashMap<Box<str>, u32>> = Default::default();
}

/// Tokens in `text`: the sum over its pre-tokenized pieces (words, numbers,
/// punctuation runs) of each piece's BPE count, exactly as the tokenizer counts.
/// A thread remembers each piece's count, so text that mostly repeats what it
/// counted before (the whole board, counted at every step) costs little more
/// than splitting it.
pub fn count(text: &str) -> u64 {
    let t = bpe();
    let text = t.normalize(text);
    MEMO.with_borrow_mut(|memo| {
        if memo.len() > MEMO_PIECES {
            memo.clear();
        }
        t.split(text.as_str())
            .map(|piece| match memo.get(piece) {
                Some(&n) => u64::from(n),
                None => {
                    let n = t.bpe.count(piece.as_bytes());
                    memo.insert(piece.into(), u32::try_from(n).unwrap_or(u32::MAX));
                    n as u64
                }
            })
            .sum()
    })
}

/// Tokens in `text` if at most `limit`, else `None` (stops counting early).
pub fn count_till_limit(text: &str, limit: u64) -> Option<u64> {
    bpe().count_till_limit(&bpe().normalize(text), usize::try_from(limit).unwrap_or(usize::MAX)).map(|n| n as u64)
}

/// The longest prefix of `text` of at most `n` tokens that ends on a character
/// boundary (tokens can split a multi-byte character).
pub fn truncate(text: &str, n: u64) -> &str {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    // Only a window proportional to n is encoded, so cutting a 1 MB text to 100
    // tokens costs what 100 tokens cost; the cut is checked against the whole rule.
    let mut window = text.len().min(n.saturating_mul(64).max(256));
    while !text.is_char_boundary(window) {
        window -= 1;
    }
    let tokens = bpe().encode(&text[..window]);
    if tokens.len() <= n {
        return &text[..window];
    }
    let mut k = n;
    while k > 0 {
        let bytes: usize = tokens[..k].iter().map(|t| bpe().bpe.token_len(*t)).sum();
        let mut end = bytes.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if count_till_limit(&text[..end], n as u64).is_some() {
            return &text[..end];
        }
        k -= 1;
    }
    ""
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn counts_and_truncates() {
        assert_eq!(count("Hello, world!"), 4);
        assert!(count("写一篇关于AI的小红书文章") > 3);
        assert_eq!(count_till_limit("Hello, world!", 3), None);
        assert_eq!(count_till_limit("Hello, world!", 4), Some(4));
        let text = "五个AI工具让你效率翻倍，".repeat(20);
        let cut = truncate(&text, 10);
        assert!(count(cut) <= 10 && !cut.is_empty() && text.starts_with(cut), "{cut}");
        assert_eq!(truncate("short", 10), "short");
    }

    #[test]
    fn remembered_pieces_count_as_the_tokenizer_does() {
        let texts = [
            r#"{"meta":{"topic":"AI 工具","platform":"xiaohongshu"},"control":{"step_status":{"s1":"completed"}}}"#,
            r#"{"meta":{"topic":"AI 工具","platform":"xiaohongshu"},"control":{"step_status":{"s1":"completed","s2":"running"}}}"#,
            "五个AI工具让你效率翻倍，第二个太好用了！！！ 12345678 tokens\n\n  indented",
            "",
        ];
        // Twice over: the second pass is served from the memo.
        for _ in 0..2 {
            for t in texts {
                assert_eq!(count(t), bpe().count(t) as u64, "{t}");
            }
        }
    }
}
