//! Human output (short aligned tables) and `--json` output.

use std::io::Write;

use serde::Serialize;

/// Prints `value` as pretty JSON on stdout.
pub fn json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// `s` with control characters (terminal escape sequences in text a role wrote)
/// shown as `�`; newlines and tabs stay.
pub fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() && c != '\n' && c != '\t' { '\u{FFFD}' } else { c }).collect()
}

/// `s` percent-encoded for a URL query value (RFC 3986 unreserved bytes kept).
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Shortens `s` to `max` characters on one line, marking the cut with `…`; control
/// characters are replaced as by [`printable`].
pub fn truncate(s: &str, max: usize) -> String {
    let one_line = printable(&s.split_whitespace().collect::<Vec<_>>().join(" "));
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut t: String = one_line.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// A table with a header row; columns are padded to their widest cell.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { rows: vec![header.iter().map(|h| h.to_string()).collect()] }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["ID", "STATUS"]);
        t.row(vec!["task-1".into(), "pending".into()]);
        assert_eq!(t.render(), "ID      STATUS\ntask-1  pending\n");
    }

    #[test]
    fn truncates_on_chars() {
        assert_eq!(truncate("任务描述任务描述", 5), "任务描述…");
        assert_eq!(truncate("ok\u{1b}[2Jgone", 20), "ok\u{FFFD}[2Jgone");
        assert_eq!(printable("a\nb\u{7}"), "a\nb\u{FFFD}");
        assert_eq!(truncate("a\nb", 10), "a b");
    }
}
