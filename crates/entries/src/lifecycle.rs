//! An entry's status changes (seed 004 §3) and who may make them (§3.2).
//!
//! Allowed: `open → in_progress → done`, `open → error`, `in_progress → error`,
//! `open → canceled`, `in_progress → canceled`, and also `open → done`: the seed
//! makes `in_progress` optional in v1 ("v1 では必須ではない") and its Doc Update
//! lane has a role set `done` when it finishes, so a role that finishes at once
//! need not pass through `in_progress`. `done`, `error` and `canceled` are final.

use clawboard_core::formats::{Entry, EntryStatus};

/// The actor name of a person (the seed's `"Human"`): may change any entry.
pub const HUMAN: &str = "Human";

/// Whether `from → to` is a transition the seed allows; the reason if not.
pub fn check_transition(from: EntryStatus, to: EntryStatus) -> Result<(), String> {
    use EntryStatus::*;
    match (from, to) {
        (Open, InProgress | Done | Error | Canceled) | (InProgress, Done | Error | Canceled) => Ok(()),
        (a, b) if a == b => Err(format!("it is already {a}")),
        (a, _) if a.is_final() => Err(format!("{a} is final")),
        (_, Open) => Err("an entry never goes back to open".to_owned()),
        (a, b) => Err(format!("{a} does not lead to {b}")),
    }
}

/// Whether `actor` may change `entry`'s status: its writer, its addressee, or a human.
pub fn may_change(entry: &Entry, actor: &str) -> bool {
    actor == entry.from || actor == entry.to || actor == HUMAN
}

#[cfg(test)]
mod tests {
    use super::*;
    use EntryStatus::*;

    #[test]
    fn exactly_the_seeds_transitions_and_open_to_done_are_allowed() {
        let allowed = [
            (Open, InProgress),
            (InProgress, Done),
            (Open, Error),
            (InProgress, Error),
            (Open, Canceled),
            (InProgress, Canceled),
            (Open, Done),
        ];
        for from in EntryStatus::ALL {
            for to in EntryStatus::ALL {
                let ok = check_transition(*from, *to).is_ok();
                assert_eq!(ok, allowed.contains(&(*from, *to)), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(check_transition(Done, Done).unwrap_err(), "it is already done");
        assert_eq!(check_transition(Canceled, InProgress).unwrap_err(), "canceled is final");
        assert_eq!(check_transition(InProgress, Open).unwrap_err(), "an entry never goes back to open");
    }
}
