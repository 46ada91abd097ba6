//! Rate limits: per peer address for refusals before authentication (so that a flood of
//! token-less requests costs a bounded amount of audit trail), and per principal for
//! authenticated calls.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::audit::CallKind;

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

/// `COUNT/UNIT`, the unit `s`, `min`, `h` or `day`: `30/min`, `20/s` (as the
/// `rate = "…"` of `#[mcp_tool]`).
impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Rate, String> {
        let bad = || {
            format!(
                "`{text}` is not a rate: a count of at least 1, `/`, and a unit `s`, `min`, `h` or `day`, such as `20/s`"
            )
        };
        let (count, unit) = text.trim().split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "s" => 1,
            "min" => 60,
            "h" => 3600,
            "day" => 86_400,
            _ => return Err(bad()),
        };
        if count == 0 {
            return Err(bad());
        }
        Ok(Rate::new(count, Duration::from_secs(secs)))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}s", self.count, self.per.as_secs_f64())
    }
}

/// The most keys a limiter tracks; past it, the idle ones are forgotten.
const MAX_KEYS: usize = 10_000;

/// Refused events by the kind of call each was (a tool call, a read, a prompt, a
/// completion), past a rate limit or past the calls of a batch recorded one by one: a
/// count is recorded per kind, so that each is recorded as what it stands for (`audit --kind resource` finds the reads a limit refused, a dashboard of tool calls
/// does not count them).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Counts([u64; 4]);

impl Counts {
    const KINDS: [CallKind; 4] = [
        CallKind::Tool,
        CallKind::Resource,
        CallKind::Prompt,
        CallKind::Completion,
    ];

    fn slot(kind: CallKind) -> usize {
        match kind {
            CallKind::Tool => 0,
            CallKind::Resource => 1,
            CallKind::Prompt => 2,
            CallKind::Completion => 3,
        }
    }

    /// `count` events of `kind`.
    pub(crate) fn of(kind: CallKind, count: u64) -> Counts {
        let mut counts = Counts::default();
        counts.0[Counts::slot(kind)] = count;
        counts
    }

    /// One more event of `kind`.
    pub(crate) fn add(&mut self, kind: CallKind) {
        self.add_n(kind, 1);
    }

    /// `n` more events of `kind`.
    pub(crate) fn add_n(&mut self, kind: CallKind, n: u64) {
        let slot = &mut self.0[Counts::slot(kind)];
        *slot = slot.saturating_add(n);
    }

    /// Every event counted, whatever its kind.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.0.iter().fold(0, |sum, &n| sum.saturating_add(n))
    }

    /// Whether nothing was counted.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|&n| n == 0)
    }

    /// Every kind counted, with its count (the kinds that occurred only, in the order
    /// tool, resource, prompt, completion).
    pub(crate) fn by_kind(self) -> impl Iterator<Item = (CallKind, u64)> {
        Counts::KINDS
            .into_iter()
            .zip(self.0)
            .filter(|&(_, count)| count > 0)
    }
}

/// One key's token bucket, and what was refused since it was last reported.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
    suppressed: Counts,
    /// An event was refused since the last one that went ahead.
    refused: bool,
}

/// Whether an event may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go ahead; `suppressed` events of this key were refused since the last one that went
    /// ahead (to report now).
    Allowed { suppressed: Counts },
    /// Refused: retry after this long. `first`: the first refusal of this key since an
    /// event went ahead.
    Limited { retry_after: Duration, first: bool },
}

/// Token buckets by key.
#[derive(Debug)]
pub(crate) struct Limiter<K> {
    rate: Rate,
    buckets: Mutex<HashMap<K, Bucket>>,
    /// Events refused because every tracked key was busy, not yet reported.
    overflow: Mutex<Counts>,
}

/// What a limiter refused since it was last asked: by key, and the events of keys it had
/// no room to track.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Suppressed<K> {
    pub(crate) by_key: Vec<(K, Counts)>,
    pub(crate) overflow: Counts,
}

impl<K: Hash + Eq + Clone> Limiter<K> {
    pub(crate) fn new(rate: Rate) -> Limiter<K> {
        Limiter {
            rate,
            buckets: Mutex::new(HashMap::new()),
            overflow: Mutex::new(Counts::default()),
        }
    }

    /// Take every count of refused events not yet reported (they are reported once).
    pub(crate) fn take_suppressed(&self) -> Suppressed<K> {
        let by_key = {
            let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
            buckets
                .iter_mut()
                .filter(|(_, b)| !b.suppressed.is_empty())
                .map(|(k, b)| (k.clone(), std::mem::take(&mut b.suppressed)))
                .collect()
        };
        let overflow =
            std::mem::take(&mut *self.overflow.lock().unwrap_or_else(|e| e.into_inner()));
        Suppressed { by_key, overflow }
    }

    /// Take one token for `key`, if there is one, for an event of `kind`; every refusal is
    /// counted under its kind (in [`Verdict::Allowed::suppressed`] and
    /// [`Limiter::take_suppressed`]).
    #[cfg(test)]
    pub(crate) fn check(&self, key: &K, kind: CallKind) -> Verdict {
        self.check_counting(key, kind, 1, 1, true)
    }

    /// Take `cost` tokens for `key` (one per record: a batch's first call pays for the
    /// records of the whole batch) for an event that stands for `calls` events of `kind`
    /// (the record that counts the rest of a batch): if refused, counted as that many.
    pub(crate) fn check_calls(&self, key: &K, kind: CallKind, calls: u64, cost: u64) -> Verdict {
        self.check_counting(key, kind, calls, cost, true)
    }

    /// Take one token for `key`, as `check` does, but the first refusal of a key since an
    /// event went ahead is not counted: its caller records it on its own, and counts only
    /// the rest.
    pub(crate) fn check_counting_after_first(&self, key: &K, kind: CallKind) -> Verdict {
        self.check_counting(key, kind, 1, 1, false)
    }

    /// [`Limiter::check_counting_after_first`] of an event that stands for `calls`.
    pub(crate) fn check_calls_counting_after_first(
        &self,
        key: &K,
        kind: CallKind,
        calls: u64,
        cost: u64,
    ) -> Verdict {
        self.check_counting(key, kind, calls, cost, false)
    }

    /// Whether `key`'s next event, of `cost` tokens, is past the rate, and how long until
    /// it would not be: taking no token, counting nothing. A transport that answers some
    /// refusals itself (an MCP layer's protocol errors) asks it first, so that past the
    /// rate it answers 429, as its record will say.
    pub(crate) fn refusing(&self, key: &K, cost: u64) -> Option<Duration> {
        let cost = cost.max(1) as f64;
        let buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let tokens = match buckets.get(key) {
            Some(bucket) => self.tokens_at(bucket, Instant::now()),
            None => f64::from(self.rate.count),
        };
        (tokens < cost).then(|| self.wait(cost, tokens))
    }

    /// The tokens `bucket` holds at `now`, refilled since it was last looked at.
    fn tokens_at(&self, bucket: &Bucket, now: Instant) -> f64 {
        let refilled =
            now.duration_since(bucket.at).as_secs_f64() / self.rate.refill().as_secs_f64();
        (bucket.tokens + refilled).min(f64::from(self.rate.count))
    }

    /// How long until a bucket of `tokens` holds `cost` (a cost over the burst never goes
    /// ahead: a whole period, as good as any).
    fn wait(&self, cost: f64, tokens: f64) -> Duration {
        match cost > f64::from(self.rate.count) {
            true => self.rate.per,
            false => Duration::from_secs_f64((cost - tokens) * self.rate.refill().as_secs_f64()),
        }
    }

    /// Count `calls` events of `kind` of `key` as refused, taking no token: the calls of a
    /// batch answered 429 with its first call.
    pub(crate) fn count(&self, key: &K, kind: CallKind, calls: u64) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        match buckets.get_mut(key) {
            Some(bucket) => bucket.suppressed.add_n(kind, calls),
            None => {
                drop(buckets);
                self.overflow
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .add_n(kind, calls);
            }
        }
    }

    fn check_counting(
        &self,
        key: &K,
        kind: CallKind,
        calls: u64,
        cost: u64,
        count_first: bool,
    ) -> Verdict {
        let now = Instant::now();
        let capacity = f64::from(self.rate.count);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(key) {
            // Forget the keys whose buckets are full again (idle for a whole period).
            buckets.retain(|_, b| {
                now.duration_since(b.at) < self.rate.per || !b.suppressed.is_empty()
            });
            if buckets.len() >= MAX_KEYS {
                // Every key is busy: a new one is refused and counted without a bucket of
                // its own, so that memory stays bounded whatever the number of keys.
                drop(buckets);
                self.overflow
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .add_n(kind, calls);
                return Verdict::Limited {
                    retry_after: self.rate.refill(),
                    first: false,
                };
            }
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket {
            tokens: capacity,
            at: now,
            suppressed: Counts::default(),
            refused: false,
        });
        bucket.tokens = self.tokens_at(bucket, now);
        bucket.at = now;
        let cost = cost.max(1) as f64;
        if bucket.tokens >= cost {
            bucket.tokens -= cost;
            bucket.refused = false;
            let suppressed = std::mem::take(&mut bucket.suppressed);
            Verdict::Allowed { suppressed }
        } else {
            let first = !std::mem::replace(&mut bucket.refused, true);
            if count_first || !first {
                bucket.suppressed.add_n(kind, calls);
            }
            Verdict::Limited {
                retry_after: self.wait(cost, bucket.tokens),
                first,
            }
        }
    }
}

/// The key of a peer address in the limit of refusals before authentication: an IPv4
/// address, or the /64 of an IPv6 one (a single host usually holds a whole /64, so keying
/// by address would let it take as many buckets as it likes).
pub(crate) fn peer_key(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
        v4 => v4,
    }
}

/// The server's rate limits.
#[derive(Debug)]
pub(crate) struct Limits {
    /// Refusals before authentication, by peer address (HTTP).
    pub(crate) unauthenticated: Option<Limiter<IpAddr>>,
    /// Refusals of a stdio connection without a verified principal (its token revoked,
    /// expired, unknown), which has no peer address: at the per-principal rate, when one
    /// is set (a revoked token would otherwise grow the trail as fast as it can send).
    pub(crate) stdio_unauthenticated: Option<Limiter<()>>,
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

    const T: CallKind = CallKind::Tool;
    const NONE: Counts = Counts([0; 4]);

    #[test]
    fn a_bucket_allows_its_burst_then_refuses_and_counts() {
        let limiter = Limiter::new(Rate::new(3, Duration::from_secs(3600)));
        for _ in 0..3 {
            assert_eq!(
                limiter.check(&"a", T),
                Verdict::Allowed { suppressed: NONE }
            );
        }
        for _ in 0..5 {
            assert!(matches!(limiter.check(&"a", T), Verdict::Limited { .. }));
        }
        // Another key has its own bucket.
        assert_eq!(
            limiter.check(&"b", T),
            Verdict::Allowed { suppressed: NONE }
        );
    }

    #[test]
    fn a_batch_costs_a_token_a_record_and_its_rest_is_counted_without_one() {
        let limiter = Limiter::new(Rate::new(5, Duration::from_secs(3600)));
        assert_eq!(
            limiter.check_calls_counting_after_first(&"a", T, 1, 3),
            Verdict::Allowed { suppressed: NONE }
        );
        // Two tokens left: a batch of three records is past the rate, one of two is not.
        assert!(matches!(
            limiter.check_calls_counting_after_first(&"a", T, 1, 3),
            Verdict::Limited { first: true, .. }
        ));
        assert_eq!(
            limiter.check_calls(&"a", T, 1, 2),
            Verdict::Allowed { suppressed: NONE }
        );
        // A cost over the burst never goes ahead, even from a full bucket.
        let Verdict::Limited { retry_after, .. } = limiter.check_calls(&"b", T, 1, 9) else {
            panic!("a batch of nine records went ahead at a rate of five");
        };
        assert_eq!(retry_after, Duration::from_secs(3600));
        // Counted without a token: reported with the next event that goes ahead.
        limiter.count(&"a", CallKind::Resource, 4);
        let mut suppressed = limiter.take_suppressed().by_key;
        suppressed.sort();
        assert_eq!(
            suppressed,
            [
                ("a", Counts::of(CallKind::Resource, 4)),
                ("b", Counts::of(T, 1))
            ]
        );
        // A key the limiter never saw is counted apart.
        limiter.count(&"c", T, 2);
        assert_eq!(limiter.refusing(&"c", 1), None);
        assert_eq!(limiter.refusing(&"c", 9), Some(Duration::from_secs(3600)));
        assert_eq!(limiter.take_suppressed().overflow, Counts::of(T, 2));
    }

    #[test]
    fn refusing_says_what_the_next_event_gets_and_changes_nothing() {
        let limiter = Limiter::new(Rate::new(2, Duration::from_millis(400)));
        assert_eq!(limiter.refusing(&1, 1), None);
        assert_eq!(limiter.refusing(&1, 2), None);
        assert_eq!(limiter.check(&1, T), Verdict::Allowed { suppressed: NONE });
        // One token: a batch of two would be refused, one event would not.
        assert!(limiter.refusing(&1, 2).is_some());
        assert_eq!(limiter.refusing(&1, 1), None);
        assert_eq!(limiter.check(&1, T), Verdict::Allowed { suppressed: NONE });
        let wait = limiter.refusing(&1, 1).expect("no token left");
        assert!(wait <= Duration::from_millis(200), "{wait:?}");
        // Asking took nothing and counted nothing.
        assert_eq!(limiter.take_suppressed().by_key, []);
        assert!(matches!(
            limiter.check_counting_after_first(&1, T),
            Verdict::Limited { first: true, .. }
        ));
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(limiter.refusing(&1, 1), None);
        assert_eq!(limiter.check(&1, T), Verdict::Allowed { suppressed: NONE });
    }

    #[test]
    fn what_was_refused_is_reported_with_the_next_allowed_event() {
        let limiter = Limiter::new(Rate::new(1, Duration::from_millis(50)));
        assert_eq!(limiter.check(&1, T), Verdict::Allowed { suppressed: NONE });
        assert!(matches!(limiter.check(&1, T), Verdict::Limited { .. }));
        assert!(matches!(limiter.check(&1, T), Verdict::Limited { .. }));
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(
            limiter.check(&1, T),
            Verdict::Allowed {
                suppressed: Counts::of(T, 2)
            }
        );
    }

    #[test]
    fn an_ipv6_peer_is_keyed_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(peer_key(a), peer_key(b));
        assert_ne!(peer_key(a), peer_key(other));
        assert_eq!(peer_key(a).to_string(), "2001:db8:1:2::");
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(peer_key(mapped).to_string(), "10.0.0.7");
        let v4: IpAddr = "10.0.0.7".parse().unwrap();
        assert_eq!(peer_key(v4), v4);
    }

    #[test]
    fn counts_are_taken_once_and_not_reported_again() {
        let limiter = Limiter::new(Rate::new(1, Duration::from_secs(3600)));
        for key in [1, 2] {
            assert_eq!(
                limiter.check(&key, T),
                Verdict::Allowed { suppressed: NONE }
            );
        }
        for _ in 0..3 {
            assert!(matches!(limiter.check(&1, T), Verdict::Limited { .. }));
        }
        assert!(matches!(limiter.check(&2, T), Verdict::Limited { .. }));
        let mut taken = limiter.take_suppressed();
        taken.by_key.sort();
        assert_eq!(
            taken,
            Suppressed {
                by_key: vec![(1, Counts::of(T, 3)), (2, Counts::of(T, 1))],
                overflow: NONE
            }
        );
        assert_eq!(limiter.take_suppressed(), Suppressed::default());
    }

    #[test]
    fn memory_stays_bounded_when_every_key_is_busy() {
        let limiter = Limiter::new(Rate::new(1, Duration::from_secs(3600)));
        for key in 0..MAX_KEYS + 500 {
            let _ = limiter.check(&key, T);
        }
        assert_eq!(limiter.buckets.lock().unwrap().len(), MAX_KEYS);
        assert_eq!(limiter.take_suppressed().overflow, Counts::of(T, 500));
    }

    /// A caller that records the first refusal itself: the first of a run is not counted,
    /// the rest are, and an event that goes ahead reports them and starts a new run.
    #[test]
    fn the_first_refusal_of_a_run_can_be_left_uncounted() {
        let limiter = Limiter::new(Rate::new(1, Duration::from_secs(3600)));
        assert_eq!(
            limiter.check_counting_after_first(&1, T),
            Verdict::Allowed { suppressed: NONE }
        );
        assert!(matches!(
            limiter.check_counting_after_first(&1, T),
            Verdict::Limited { first: true, .. }
        ));
        for _ in 0..3 {
            assert!(matches!(
                limiter.check_counting_after_first(&1, T),
                Verdict::Limited { first: false, .. }
            ));
        }
        assert_eq!(
            limiter.take_suppressed(),
            Suppressed {
                by_key: vec![(1, Counts::of(T, 3))],
                overflow: NONE
            }
        );
        // `check` counts every refusal, the first included.
        assert!(matches!(limiter.check(&2, T), Verdict::Allowed { .. }));
        assert!(matches!(
            limiter.check(&2, T),
            Verdict::Limited { first: true, .. }
        ));
        assert_eq!(
            limiter.take_suppressed().by_key,
            vec![(2, Counts::of(T, 1))]
        );
    }

    /// Refusals are counted by the kind of call each was, and reported per kind (only
    /// the kinds that occurred).
    #[test]
    fn refusals_are_counted_by_kind() {
        let limiter = Limiter::new(Rate::new(1, Duration::from_secs(3600)));
        assert_eq!(limiter.check(&1, T), Verdict::Allowed { suppressed: NONE });
        for kind in [CallKind::Resource, CallKind::Resource, CallKind::Prompt] {
            assert!(matches!(limiter.check(&1, kind), Verdict::Limited { .. }));
        }
        let taken = limiter.take_suppressed();
        let counts = taken.by_key[0].1;
        assert_eq!(
            counts.by_kind().collect::<Vec<_>>(),
            [(CallKind::Resource, 2), (CallKind::Prompt, 1)]
        );
    }
}
