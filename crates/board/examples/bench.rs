//! Benchmark (docs/BENCHMARKS.md): o200k counting speed of bpe-openai (clawboard's
//! tokenizer) against tiktoken-rs (the baseline), same vocabulary, same run, on
//! English, Chinese and mixed text of 1 KB to 1 MB (the counts must agree); and
//! the time to build, count and compress one slice from boards of 100 KB and 1 MB,
//! p50 and p99.
//!
//!   cargo run --release -p clawboard-board --example bench
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use clawboard_board::slice::{self, Source, Spec};
use clawboard_board::{Scope, tokens};
use clawboard_core::formats::BoardFile;
use serde_json::json;

fn text(kind: &str, bytes: usize) -> String {
    let unit = match kind {
        "english" => "The quick brown fox jumps over the lazy dog while five AI tools double your output. ",
        "chinese" => "写一篇关于AI的小红书文章，介绍五个提升效率的工具，让你每天多出两个小时。",
        _ => "五个AI tools让你效率翻倍: double your output, 每天多出 2 hours. ",
    };
    let mut s = String::with_capacity(bytes + unit.len());
    while s.len() < bytes {
        s.push_str(unit);
    }
    let mut end = bytes.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let t0 = Instant::now();
    tokens::count("warm up");
    println!("bpe-openai o200k first use (lazy load): {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    let t0 = Instant::now();
    let tik = tiktoken_rs::o200k_base_singleton();
    tik.encode_ordinary("warm up");
    println!("tiktoken-rs o200k first use (lazy load): {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
    println!("\n| text | size | tokens | bpe-openai MB/s | bpe-openai tokens/s | tiktoken-rs MB/s | ratio |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for kind in ["english", "chinese", "mixed"] {
        for size in [1 << 10, 10 << 10, 100 << 10, 1 << 20] {
            let s = text(kind, size);
            let reps = ((4 << 20) / size.max(1)).max(3);
            let time = |f: &dyn Fn() -> usize| {
                let start = Instant::now();
                let mut n = 0;
                for _ in 0..reps {
                    n = f();
                }
                (n, start.elapsed().as_secs_f64() / reps as f64)
            };
            // The tokenizer itself: `tokens::count` would serve every repeat from its
            // per-thread memo of pieces (measured below).
            let (n, ours) = time(&|| tokens::bpe().count(s.as_str()));
            let (m, base) = time(&|| tik.encode_ordinary(&s).len());
            assert_eq!(n, m, "{kind} {size}: bpe-openai and tiktoken-rs disagree");
            println!(
                "| {kind} | {} KB | {n} | {:.1} | {:.0} | {:.1} | {:.2}x |",
                size >> 10,
                size as f64 / ours / 1e6,
                n as f64 / ours,
                size as f64 / base / 1e6,
                base / ours
            );
        }
    }
    // clawboard's `tokens::count` remembers each pre-tokenized piece's count per
    // thread: a text's first count pays for filling the memo, a repeat is served from it.
    println!("\n| text | size | tokenizer ms | tokens::count, first (empty memo) ms | tokens::count, repeat ms |");
    println!("| --- | --- | --- | --- | --- |");
    for kind in ["english", "chinese", "mixed"] {
        for size in [10 << 10, 100 << 10, 1 << 20] {
            let s = text(kind, size);
            let ms = |f: &dyn Fn() -> u64| {
                let mut v: Vec<f64> = (0..7)
                    .map(|_| {
                        let start = Instant::now();
                        std::hint::black_box(f());
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let bare = ms(&|| tokens::bpe().count(s.as_str()) as u64);
            // A new thread each time: its memo starts empty.
            let first = ms(&|| std::thread::scope(|t| t.spawn(|| tokens::count(&s)).join().unwrap()));
            tokens::count(&s);
            let repeat = ms(&|| tokens::count(&s));
            assert_eq!(
                tokens::count(&s),
                tokens::bpe().count(s.as_str()) as u64,
                "{kind} {size}: the memo's count differs"
            );
            println!("| {kind} | {} KB | {bare:.2} | {first:.2} | {repeat:.2} |", size >> 10);
        }
    }
    println!(
        "\n| board | scope | budget | tokens | rungs | p50 µs | p99 µs |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for board_kb in [100usize, 1024] {
        let mut b = BoardFile::empty(clawboard_core::Id::new("bench").unwrap());
        b.meta_zone.insert("intent".into(), json!(text("mixed", 2000)));
        b.meta_zone.insert("platform".into(), json!("xiaohongshu"));
        b.meta_zone.insert("style".into(), json!("casual"));
        let variants: Vec<_> =
            (0..3).map(|i| json!({"type": "t", "content": text("chinese", 300), "score": 80 - i})).collect();
        b.content_zone.insert("hook".into(), json!({"variants": variants, "selected": text("chinese", 60)}));
        b.content_zone.insert("body".into(), json!({"content": text("mixed", board_kb << 10)}));
        let cases: [(&[&str], Option<u64>); 3] = [
            (&["meta.intent", "meta.platform", "meta.style"], Some(800)),
            (&["meta.intent", "content.hook.variants", "content.hook.selected"], Some(300)),
            (&["meta.intent", "content.body.content"], Some(1500)),
        ];
        for (items, budget) in cases {
            let scope = Scope::parse(&items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
            let spec =
                Spec { step: "bench".into(), source: Source::Scope(&scope), max_tokens: budget, truncate_tokens: 100 };
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..200 {
                let start = Instant::now();
                last = Some(slice::build(&b, &spec).unwrap());
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
            times.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let s = last.unwrap();
            println!(
                "| {board_kb} KB | {} | {} | {} | {} | {:.0} | {:.0} |",
                items.join(", "),
                budget.unwrap_or(0),
                s.tokens,
                if s.rungs.is_empty() { "-".into() } else { s.rungs.join(",") },
                percentile(&times, 0.5),
                percentile(&times, 0.99)
            );
        }
    }
}
