//! tracing to stderr: a filter from -v/-q, CLAWBOARD_LOG or the config, and text or
//! JSON lines.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, Settings};

pub fn init(s: &Settings) {
    let filter = EnvFilter::try_new(&s.log_filter).unwrap_or_else(|e| {
        eprintln!("warning: log filter {:?} is not valid ({e}); using \"warn\"", s.log_filter);
        EnvFilter::new("warn")
    });
    // Colours only for a person at a terminal, never into files or journald.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr);
    // A second init (only possible in tests) keeps the first subscriber.
    let _ = match s.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
