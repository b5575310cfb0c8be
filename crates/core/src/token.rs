//! Secret tokens (a role instance's `CLAWBOARD_TOKEN`, the web page's token): made
//! only from the OS's random source, and compared in time that does not depend on
//! where two tokens differ.

/// `n` random bytes as lowercase hex for a secret: only from the OS's random source,
/// `None` without one (no predictable fallback).
pub fn secret_hex(n: usize) -> Option<String> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).ok()?;
    Some(hex(&buf))
}

/// Equal byte strings, in time that does not depend on where they differ (for tokens).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
