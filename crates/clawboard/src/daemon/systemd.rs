//! systemd integration: READY=1 once intake is live, WATCHDOG=1 pings at half the
//! configured interval, RELOADING=1 / STOPPING=1. Outside systemd all of this is a
//! no-op (no NOTIFY_SOCKET), and nothing wakes up periodically.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn reloading() {
    send(&[NotifyState::Reloading]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Pings the watchdog until `stop` fires, if systemd asked for pings.
pub async fn watchdog(mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut usec = 0;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        clawboard_roles::runner::fired(&mut stop).await;
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_micros(usec / 2));
    loop {
        tokio::select! {
            _ = tick.tick() => send(&[NotifyState::Watchdog]),
            _ = clawboard_roles::runner::fired(&mut stop) => return,
        }
    }
}
