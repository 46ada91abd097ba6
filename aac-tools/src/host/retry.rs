//! Retrying what is safe to retry, with exponential backoff.

use std::future::Future;
use std::time::Duration;

use super::policy::Retry;

/// How long to wait between attempts, and how many retries at most.
///
/// The delay before retry `n` (counting from 0) is `first × 2ⁿ`, capped at `max`.
///
/// ```
/// use std::time::Duration;
/// use aac_tools::host::Backoff;
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(300), 3);
/// assert_eq!(backoff.delay(0), Duration::from_millis(100));
/// assert_eq!(backoff.delay(1), Duration::from_millis(200));
/// assert_eq!(backoff.delay(2), Duration::from_millis(300));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    retries: u32,
}

impl Backoff {
    /// A backoff starting at `first`, doubling up to `max`, for at most `retries` retries
    /// (so at most `retries + 1` attempts).
    pub const fn new(first: Duration, max: Duration, retries: u32) -> Backoff {
        Backoff {
            first,
            max,
            retries,
        }
    }

    /// The delay before retry `n` (0 for the first retry).
    pub fn delay(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n).unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.max)
    }

    /// The most retries after the first attempt.
    pub const fn retries(&self) -> u32 {
        self.retries
    }
}

impl Default for Backoff {
    /// 250 ms, doubling up to 4 s, three retries.
    fn default() -> Backoff {
        Backoff::new(Duration::from_millis(250), Duration::from_secs(4), 3)
    }
}

/// The result of [`call_with_retry`] and how many attempts it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted<T, E> {
    /// The last attempt's result.
    pub result: Result<T, E>,
    /// How many attempts were made (at least 1).
    pub attempts: u32,
}

/// Run `attempt` once, and again after each transport failure only if `retry` is
/// [`Retry::Safe`], waiting as `backoff` says.
///
/// `attempt` receives the attempt number (1 for the first). `is_transport_failure` tells a
/// failure whose delivery is unknown (retryable) from an answer of the server (never
/// retried, whatever the tool). With [`Retry::Never`] the first result is final.
///
/// ```
/// use std::time::Duration;
/// use aac_tools::host::{Backoff, Retry, call_with_retry};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(1), 5);
/// let flaky = |n: u32| async move { if n < 3 { Err("connection reset") } else { Ok(n) } };
/// let done = call_with_retry(Retry::Safe, &backoff, |_| true, flaky).await;
/// assert_eq!((done.result, done.attempts), (Ok(3), 3));
///
/// let done = call_with_retry(Retry::Never, &backoff, |_| true, flaky).await;
/// assert_eq!((done.result, done.attempts), (Err("connection reset"), 1));
/// # });
/// ```
pub async fn call_with_retry<T, E, F, Fut>(
    retry: Retry,
    backoff: &Backoff,
    is_transport_failure: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Attempted<T, E>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempts = 1;
    loop {
        let result = attempt(attempts).await;
        let retryable = match &result {
            Err(err) => retry == Retry::Safe && is_transport_failure(err),
            Ok(_) => false,
        };
        if !retryable || attempts > backoff.retries() {
            return Attempted { result, attempts };
        }
        tokio::time::sleep(backoff.delay(attempts - 1)).await;
        attempts += 1;
    }
}
