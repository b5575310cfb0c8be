//! What a thread's first `tokens::count` costs against its repeat: the
//! pre-tokenizer's lazy DFA and the count memo are per thread.
//!
//!     cargo run --release -p clawboard-board --example first-count -- BOARD_JSON
//!
//! (docs/BENCHMARKS.md, "Durable step overhead": why `clawboard run` drives its
//! task on one thread.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use clawboard_board::tokens;

/// How long `text` takes to count, the first time on this thread and again.
fn first_and_repeat(text: &str) -> (Duration, Duration) {
    let t = Instant::now();
    tokens::count(text);
    let first = t.elapsed();
    let t = Instant::now();
    tokens::count(text);
    (first, t.elapsed())
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: first-count BOARD_JSON");
    let board = std::fs::read_to_string(&path).expect("a readable file");
    let t = Instant::now();
    tokens::count("warm up");
    println!("tokenizer loaded: {:?}", t.elapsed());
    let (first, repeat) = first_and_repeat(&board);
    println!("main thread: first {first:?}, repeat {repeat:?}");
    for i in 1..=3 {
        let b = board.clone();
        let (first, repeat) = std::thread::spawn(move || first_and_repeat(&b)).join().unwrap();
        println!("new thread {i}: first {first:?}, repeat {repeat:?}");
    }
}
