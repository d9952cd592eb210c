//! Waiting for eventual state with a deadline: tests never sleep a fixed time and hope.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

/// Default deadline for state the control plane reaches by itself (a controller reconciled,
/// gardener-resource-manager applied a bundle).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Polls `check` every 200 ms until it returns `Ok(value)`, then returns the value. When
/// the deadline passes, fails the test with `what` and the last `Err` the check returned, which
/// should describe the state observed so the failure says what was wrong.
pub async fn until<T, E, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Debug,
{
    until_every(what, timeout, Duration::from_millis(200), check).await
}

/// [`until`] with a poll interval of its own, for checks too costly to repeat five times a
/// second (lists of thousands of objects in a benchmark).
pub async fn until_every<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Debug,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) => {
                if tokio::time::Instant::now() >= deadline {
                    panic!(
                        "timed out after {timeout:?} waiting for {what}; last observed: {last:?}"
                    );
                }
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// Asserts that `check` keeps returning `Ok` for the whole `window`: used to show that
/// something does NOT happen (no reconcile, no write) within a bounded time.
pub async fn stays<E, F, Fut>(what: &str, window: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Debug,
{
    let interval = Duration::from_millis(200);
    let deadline = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < deadline {
        if let Err(e) = check().await {
            panic!("{what} did not hold: {e:?}");
        }
        tokio::time::sleep(interval).await;
    }
}
