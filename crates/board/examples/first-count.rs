//! What a thread's first `tokens::count` costs against its repeat: the
//! pre-tokenizer's lazy DFA and the count memo are per thread.
//!
//!     cargo run --release -p clawboard-board --example first-count -- BOARD_JSON
//!
//! (docs/BENCHMARKS.md, "Durable step overhead": why `clawboard run` drives its
//! task on one thread.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use clawboard_board::tokens;

fn main() {
    let path = std::env::args().nth(1).expect("usage: first-count BOARD_JSON");
    let board = std::fs::read_to_string(&path).expect("a readable file");
    let t = Instant::now();
    tokens::count("warm up");
    println!("tokenizer loaded: {:?}", t.elapsed());
    let t = Instant::now();
    tokens::count(&board);
    let first = t.elapsed();
    let t = Instant::now();
    tokens::count(&board);
    println!("main thread: first {first:?}, repeat {:?}", t.elapsed());
    for i in 1..=3 {
        let b = board.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            tokens::count(&b);
            let first = t.elapsed();
            let t = Instant::now();
            tokens::count(&b);
            println!("new thread {i}: first {first:?}, repeat {:?}", t.elapsed());
        })
        .join()
        .unwrap();
    }
}
