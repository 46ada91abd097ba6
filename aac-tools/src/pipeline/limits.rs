//! Rate limits: per peer address for refusals before authentication (so that a flood of
//! token-less requests costs a bounded amount of audit trail), and per principal for
//! authenticated calls.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A rate: `count` events per `per`, in bursts of up to `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: u32,
    per: Duration,
}

impl Rate {
    /// `count` events per `per` (at least one event, and a period of at least 1 ms).
    pub fn new(count: u32, per: Duration) -> Rate {
        Rate {
            count: count.max(1),
            per: per.max(Duration::from_millis(1)),
        }
    }

    /// `count` events a minute, in a `const`.
    pub const fn per_minute_const(count: u32) -> Rate {
        Rate {
            count: if count == 0 { 1 } else { count },
            per: Duration::from_secs(60),
        }
    }

    /// `count` events a second.
    pub fn per_second(count: u32) -> Rate {
        Rate::new(count, Duration::from_secs(1))
    }

    /// `count` events a minute.
    pub fn per_minute(count: u32) -> Rate {
        Rate::new(count, Duration::from_secs(60))
    }

    /// The number of events in a period.
    pub fn count(self) -> u32 {
        self.count
    }

    /// The period.
    pub fn per(self) -> Duration {
        self.per
    }

    /// How long one token takes to come back.
    fn refill(self) -> Duration {
        self.per / self.count
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}s", self.count, self.per.as_secs_f64())
    }
}

/// The most keys a limiter tracks; past it, the idle ones are forgotten.
const MAX_KEYS: usize = 10_000;

/// One key's token bucket, and what was refused since it was last reported.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    suppressed: u64,
}

/// Whether an event may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go ahead; `suppressed` events of this key were refused since the last one that went
    /// ahead (to report now).
    Allowed { suppressed: u64 },
    /// Refused: retry after this long.
    Limited { retry_after: Duration },
}

/// Token buckets by key.
#[derive(Debug)]
pub(crate) struct Limiter<K> {
    rate: Rate,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    pub(crate) fn new(rate: Rate) -> Limiter<K> {
        Limiter {
            rate,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one token for `key`, if there is one.
    pub(crate) fn check(&self, key: &K) -> Verdict {
        let now = Instant::now();
        let capacity = f64::from(self.rate.count);
        let per_token = self.rate.refill().as_secs_f64();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            // Forget the keys whose buckets are full again (idle for a whole period).
            buckets.retain(|_, b| now.duration_since(b.at) < self.rate.per || b.suppressed > 0);
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket {
            tokens: capacity,
            at: now,
            suppressed: 0,
        });
        let refilled = now.duration_since(bucket.at).as_secs_f64() / per_token;
        bucket.tokens = (bucket.tokens + refilled).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            let suppressed = std::mem::take(&mut bucket.suppressed);
            Verdict::Allowed { suppressed }
        } else {
            bucket.suppressed += 1;
            let wait = (1.0 - bucket.tokens) * per_token;
            Verdict::Limited {
                retry_after: Duration::from_secs_f64(wait),
            }
        }
    }
}

/// The server's rate limits.
#[derive(Debug)]
pub(crate) struct Limits {
    /// Refusals before authentication, by peer address (HTTP).
    pub(crate) unauthenticated: Option<Limiter<IpAddr>>,
    /// Calls by principal (subject and workspace).
    pub(crate) principal: Option<Limiter<PrincipalKey>>,
    /// Calls of one tool by principal, for the tools with a `rate`; same positions as
    /// `Registry::tools`.
    pub(crate) per_tool: Vec<Option<Limiter<PrincipalKey>>>,
}

/// A principal as a rate limit tells it apart: subject and workspace.
pub(crate) type PrincipalKey = (String, Option<String>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refuses_and_counts() {
        let limiter = Limiter::new(Rate::new(3, Duration::from_secs(3600)));
        for _ in 0..3 {
            assert_eq!(limiter.check(&"a"), Verdict::Allowed { suppressed: 0 });
        }
        for _ in 0..5 {
            assert!(matches!(limiter.check(&"a"), Verdict::Limited { .. }));
        }
        // Another key has its own bucket.
        assert_eq!(limiter.check(&"b"), Verdict::Allowed { suppressed: 0 });
    }

    #[test]
    fn what_was_refused_is_reported_with_the_next_allowed_event() {
        let limiter = Limiter::new(Rate::new(1, Duration::from_millis(50)));
        assert_eq!(limiter.check(&1), Verdict::Allowed { suppressed: 0 });
        assert!(matches!(limiter.check(&1), Verdict::Limited { .. }));
        assert!(matches!(limiter.check(&1), Verdict::Limited { .. }));
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(limiter.check(&1), Verdict::Allowed { suppressed: 2 });
    }
}
