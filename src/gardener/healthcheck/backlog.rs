//! Health checks give way to a backlog of lifecycle work (see
//! [`crate::gardener::extension::backlog`]): a check during a first wave reads the
//! shoot-access secret and writes conditions that are about to change again, and each of those
//! requests delays a reconcile gardenlet is waiting for. So while the backlog lasts, a check
//! waits, without a request, for at most [`MAX_YIELD`].

use std::time::{Duration, Instant};

use crate::gardener::extension::backlog::MAX_YIELD;

/// How soon a check that gave way looks again.
pub(crate) const YIELD_RECHECK: Duration = Duration::from_secs(5);

/// What a check that is due does about the backlog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// No backlog (or none this controller gives way to): check.
    Check,
    /// Check: it has waited [`MAX_YIELD`] already.
    CheckAfterWaiting,
    /// Wait for the backlog, [`YIELD_RECHECK`] at a time.
    Wait,
}

/// Whether a check gives way: while the lifecycle controller has a queue (`busy`), and for less
/// than [`MAX_YIELD`] since `waiting_since`.
pub(crate) fn turn(busy: bool, waiting_since: Option<Instant>, now: Instant) -> Turn {
    if !busy {
        return Turn::Check;
    }
    match waiting_since {
        Some(since) if now.saturating_duration_since(since) >= MAX_YIELD => Turn::CheckAfterWaiting,
        _ => Turn::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_waits_only_for_a_queue_and_only_so_long() {
        let now = Instant::now();
        assert_eq!(turn(false, None, now), Turn::Check, "no queue");
        assert_eq!(turn(true, None, now), Turn::Wait);
        let recently = now.checked_sub(Duration::from_secs(60)).unwrap_or(now);
        assert_eq!(turn(true, Some(recently), now), Turn::Wait);
        if let Some(long_ago) = now.checked_sub(MAX_YIELD) {
            assert_eq!(turn(true, Some(long_ago), now), Turn::CheckAfterWaiting);
        }
    }
}
