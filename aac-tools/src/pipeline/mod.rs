//! The path of one call: an [`Attempt`] owns a `tools/call` from the moment a transport
//! knows one may be in a request until its one audit record is handed to the sink.
//!
//! ```text
//! Server::begin(request) ──► Attempt ──► attempt.refuse(check, error)   (a transport refuses)
//!                                   └──► attempt.run()                 (the checks, the handler)
//!                                   └──► drop                          (abandoned)
//! ```
//!
//! Each of the three ends writes the record exactly once; nothing else builds one.
//! A transport that checked something already (the `/mcp` gate authenticates and checks
//! scopes to answer real 401s and 403s) leaves its verdict in the attempt, and
//! [`Attempt::run`] does not check it again.

pub(crate) mod commits;
pub(crate) mod limits;
pub(crate) mod listing;
mod owed;
mod record;

/// What a request the transports could not dispatch says (stdio's framing, the `/mcp`
/// gate).
#[cfg(feature = "mcp")]
pub(crate) mod probe;
#[cfg(any(feature = "mcp", feature = "jwt"))]
pub(crate) mod repeated;
pub(crate) use listing::Listing;
pub(crate) use owed::Owed;
pub(crate) use record::is_count_of_refusals;

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::access::AccessLevel;
use crate::audit::{AuditRecord, CallKind, Check};
use crate::confirm::{self, Asking, ConfirmPolicy, Confirmation, InputRequired};
use crate::context::{ClientPeer, Ctx, Transport};
use crate::error::{Status, ToolError};
use crate::principal::Principal;
use crate::registry::{OutputValidator, ToolEntry};
use crate::server::{CallRequest, CallResponse, Credentials, Server};
use crate::tool::{Call, Handler, ToolDef, ToolOutput};
use limits::Verdict;

/// One `tools/call` attempt in progress, from [`Server::begin`] to its audit record.
///
/// It ends in exactly one of three ways, each of which writes the attempt's one record:
/// [`Attempt::refuse`] (a transport refused it), [`Attempt::run`] (the pipeline's checks
/// and the handler), or being dropped unfinished (the client went away before the handler
/// started, or the MCP layer never handed the call on), which hands its record to the
/// sink as it drops.
pub struct Attempt {
    server: Server,
    request: CallRequest,
    started: Instant,
    /// When the attempt began; empty when the server keeps no audit trail.
    timestamp: String,
    /// Step 1's verdict, once known.
    principal: Option<Arc<Principal>>,
    /// The tool's position in the registry, once found.
    entry: Option<usize>,
    /// What a resource read, prompt or completion names, once found.
    target: Option<Target>,
    /// Steps 2 and 3 passed for `request.tool`.
    authorized: bool,
    /// The arguments as the record keeps them, computed before the handler took them.
    redacted: Option<Value>,
    /// How many calls the attempt's record stands for (1, or the rest of a batch that one
    /// record counts): what a rate counts when it refuses the record.
    calls: u64,
    /// Whether the handler started (then the attempt finishes on its own task).
    started_handler: bool,
    /// The handler's database transactions, once it started: if the attempt is dropped
    /// under it (the server stopped), none commits after, and the record says which did.
    commits: Option<Arc<commits::Commits>>,
    /// Whether the transport that began the attempt handed it to the pipeline's caller
    /// (always, except for an attempt the `/mcp` gate began that the MCP layer dropped).
    dispatched: bool,
    recorded: bool,
    /// Who confirmed a destructive call: `argument`, `user` or `argument_fallback`.
    confirmed_by: Option<&'static str>,
    /// A 2026-07-28 call that waits for the person's answer.
    input_required: Option<InputRequired>,
    /// Refused past a principal's rate and counted, not recorded on its own.
    counted: bool,
    /// The principal's own rate has seen this attempt.
    rated: bool,
    /// Its place in a batch refused whole, if it is one of its calls.
    in_batch: Option<InBatch>,
}

/// A call of a batch refused whole. A batch has one answer, and goes through a rate once,
/// with its first call, for every record it writes: within the rate, each of its calls
/// is recorded and the batch answered with its refusal; past it, the batch is answered
/// 429 and its calls counted, its first call recorded as that 429 when it is the first
/// refusal past the rate. So a batch grows the trail no faster than the rate allows, and
/// no call of a batch answered 400 is counted as answered 429 on its own.
#[derive(Debug)]
enum InBatch {
    /// Its first call, whose refusal writes `records` records in all.
    First { records: u64, rate: BatchRate },
    /// Another: recorded when the first's rate let the batch through, else counted.
    Rest(BatchRate),
}

/// Whether the rate a refused batch went through (with its first call) let its records
/// through: set by the first call's attempt, read by the others'.
#[derive(Debug, Clone, Default)]
pub(crate) struct BatchRate(Arc<std::sync::atomic::AtomicBool>);

impl BatchRate {
    fn let_through(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    fn through(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A refusal past a rate ([`Attempt::refusal_rate`]): answered 429 after `retry_after`;
/// `recorded`, as the first of a batch past its principal's rate since its last call
/// that went ahead, recorded as that 429; else only counted.
struct PastTheRate {
    retry_after: std::time::Duration,
    recorded: bool,
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("tool", &self.request.tool)
            .field("transport", &self.request.transport)
            .field("authorized", &self.authorized)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Begin an attempt for a request that arrived at `arrived`, before it could be read:
    /// its record says when it arrived (the time of day now, less the time since) and how
    /// long it took, not when its refusal was made.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn begin_arrived(&self, request: CallRequest, arrived: Instant) -> Attempt {
        let mut attempt = self.begin(request);
        attempt.started = arrived;
        if self.audit().is_some() {
            let at = time::OffsetDateTime::now_utc() - arrived.elapsed();
            attempt.timestamp = crate::audit::format_timestamp(at);
        }
        attempt
    }

    /// The error a request carrying calls that write `records` records gets at once,
    /// before anything reads it, when they are past its rate: the rate of `principal`,
    /// else (`None`) that of a stdio connection without a verified principal. The rate is
    /// checked first, for every call: a transport whose MCP layer would answer a malformed
    /// call with a protocol error answers this 429 instead, and records it as a 429 (the
    /// first refusal past the rate) or counts it.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn past_the_rate(
        &self,
        principal: Option<&Principal>,
        records: u64,
    ) -> Option<ToolError> {
        let limits = self.limits();
        let wait = match principal {
            Some(principal) => limits
                .principal
                .as_ref()?
                .refusing(&rate_key(principal), records)?,
            None => limits
                .stdio_unauthenticated
                .as_ref()?
                .refusing(&(), records)?,
        };
        Some(ToolError::rate_limited(wait))
    }

    /// Begin a `tools/call` attempt: from here on it leaves exactly one audit record,
    /// whichever way it ends.
    pub fn begin(&self, request: CallRequest) -> Attempt {
        let started = Instant::now();
        let principal = match &request.credentials {
            Credentials::Verified(principal) => Some(Arc::clone(principal)),
            _ => None,
        };
        Attempt {
            server: self.clone(),
            // Only a record needs the time of day.
            timestamp: if self.audit().is_some() {
                crate::audit::now_timestamp()
            } else {
                String::new()
            },
            request,
            started,
            principal,
            entry: None,
            target: None,
            authorized: false,
            redacted: None,
            calls: 1,
            started_handler: false,
            commits: None,
            dispatched: true,
            recorded: false,
            confirmed_by: None,
            input_required: None,
            counted: false,
            rated: false,
            in_batch: None,
        }
    }

    /// Run one `tools/call` attempt through every check, the handler and the audit trail:
    /// `self.begin(request).run()`.
    ///
    /// If the returned future is dropped before it completes (a transport whose client
    /// went away): before the handler started, the attempt is recorded as an `error` with
    /// reason `cancelled` and status 499; after, the handler finishes on a task of its own
    /// and the record says what it did.
    pub async fn call(&self, request: CallRequest) -> CallResponse {
        self.begin(request).run().await
    }
}

impl Server {
    /// Write the records owed by calls that ran while the audit sink could not write them
    /// (if it writes again), then record what the rate limits counted and did not
    /// record, one record per principal or peer (and one for those they had no room to
    /// track), so that a flood that stops still leaves its count. [`http::serve`](crate::http::serve)
    /// calls it every few seconds and when it stops.
    pub async fn flush_rate_limited(&self) {
        let Some(sink) = self.audit() else {
            return;
        };
        // First what calls that ran while the sink failed still owe the trail.
        let owed = self.owed();
        if !owed.is_empty() {
            owed.pay(sink).await;
            if !owed.is_empty() {
                tracing::error!(
                    owed = owed.len(),
                    "records of calls that ran while the audit sink failed are still not written"
                );
            }
        }
        // Principals past their rate (their own, or a tool's): one record each.
        let limits = self.limits();
        let tools = self.registry().tools();
        let per_tool = limits
            .per_tool
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((Some(tools.get(i)?.name()), l.as_ref()?)));
        for (tool, limiter) in limits.principal.iter().map(|l| (None, l)).chain(per_tool) {
            let taken = limiter.take_suppressed();
            let untracked = (!taken.overflow.is_empty())
                .then(|| (("(untracked principals)".to_owned(), None), taken.overflow));
            for ((subject, workspace), counts) in taken.by_key.into_iter().chain(untracked) {
                for (kind, count) in counts.by_kind() {
                    let record = record::suppressed_of(
                        &subject,
                        workspace.as_deref(),
                        tool,
                        count,
                        kind,
                        crate::context::Transport::InProcess,
                    );
                    if let Err(err) = sink.record(record).await {
                        let kept = owe(owed, err.clone());
                        tracing::error!(error = %err, count, kept, "the count of rate-limited calls could not be recorded");
                    }
                }
            }
        }
        if let Some(limiter) = &self.limits().stdio_unauthenticated {
            for ((), counts) in limiter.take_suppressed().by_key {
                for (kind, count) in counts.by_kind() {
                    let record = record::suppressed_on_stdio(count, kind);
                    if let Err(err) = sink.record(record).await {
                        let kept = owe(owed, err.clone());
                        tracing::error!(error = %err, count, kept, "the count of rate-limited refusals could not be recorded");
                    }
                }
            }
        }
        let Some(limiter) = &self.limits().unauthenticated else {
            return;
        };
        let taken = limiter.take_suppressed();
        let overflow = (!taken.overflow.is_empty()).then_some((None, taken.overflow));
        let counts = taken
            .by_key
            .into_iter()
            .map(|(peer, counts)| (Some(peer), counts))
            .chain(overflow);
        for (peer, counts) in counts {
            for (kind, count) in counts.by_kind() {
                let transport = crate::context::Transport::PlainHttp;
                let record = record::suppressed(peer, count, kind, transport);
                if let Err(err) = sink.record(record).await {
                    let kept = owe(owed, err.clone());
                    tracing::error!(error = %err, count, kept, "the count of rate-limited refusals could not be recorded");
                }
            }
        }
    }
}

/// A count of rate-limited refusals the sink could not write, if it handed the record
/// back: owed as it is, written once the sink writes again, so that the refusals it
/// counts (each answered 429) are in the trail after all.
fn owe(owed: &Owed, mut err: crate::audit::AuditError) -> bool {
    err.take_record()
        .is_some_and(|record| owed.keep_as_is(record, false))
}

impl Attempt {
    /// The tool the call names.
    pub fn tool(&self) -> &str {
        &self.request.tool
    }

    /// Step 1: the caller's principal, or 401. Verified once per attempt: credentials a
    /// transport already verified ([`Credentials::Verified`]) are taken as they are.
    pub async fn authenticate(&mut self) -> Result<Arc<Principal>, ToolError> {
        if let Some(principal) = &self.principal {
            return Ok(Arc::clone(principal));
        }
        let principal = self.server.authenticate(&self.request.credentials).await?;
        self.principal = Some(Arc::clone(&principal));
        Ok(principal)
    }

    /// Steps 2 and 3, after [`Attempt::authenticate`]: find the tool (404 when unknown or
    /// hidden by read-only mode) and check the principal's scopes (403 naming every
    /// scope the tool needs). Checked once per attempt.
    pub fn authorize(&mut self) -> Result<(), (Check, ToolError)> {
        if self.authorized {
            return Ok(());
        }
        let Some(principal) = &self.principal else {
            return Err((Check::Authenticate, ToolError::missing_token()));
        };
        if self.request.kind != CallKind::Tool {
            let target = find_target(&self.server, &self.request)?;
            self.target = Some(target);
            if !principal.has_scopes(target.scopes) {
                return Err((
                    Check::Scope,
                    ToolError::insufficient_scope_of(self.request.kind.as_str(), target.scopes),
                ));
            }
            self.authorized = true;
            return Ok(());
        }
        let registry = self.server.registry();
        let position = registry.index(&self.request.tool);
        self.entry = position;
        let entry = position
            .map(|i| &registry.tools()[i])
            .ok_or_else(|| (Check::FindTool, ToolError::unknown_tool(&self.request.tool)))?;
        if !self
            .server
            .listing()
            .is_visible(position.unwrap_or(usize::MAX))
        {
            return Err((
                Check::ReadOnlyMode,
                ToolError::unknown_tool(&self.request.tool),
            ));
        }
        let scopes = entry.def().scopes();
        if !principal.has_scopes(scopes) {
            return Err((Check::Scope, ToolError::insufficient_scope(scopes)));
        }
        self.authorized = true;
        Ok(())
    }

    /// End the attempt with a refusal by the transport: write its record and hand back
    /// the error to answer (`error` itself, or 503 `audit_unavailable` if the record
    /// could not be written).
    pub async fn refuse(mut self, check: Check, error: ToolError) -> ToolError {
        match self.finish(Err(error), Some(check)).await.into_result() {
            Err(answer) => answer,
            Ok(_) => unreachable!("a refusal answers an error"),
        }
    }

    /// Run the attempt through every check not yet passed, the handler, and its record.
    ///
    /// Once the checks pass, a handler that waits (for its database, say) goes on with
    /// the record on a task of its own: if the caller goes away (a client that
    /// disconnects drops this future), the handler still finishes and the record says
    /// what it did (a delete that committed is a `success`), rather than a guess.
    pub async fn run(mut self) -> CallResponse {
        let prepared = match self.checks().await {
            Ok(prepared) => prepared,
            Err((check, err)) => {
                let input = self.input_required.take();
                let response = self.finish(Err(err), Some(check)).await;
                // Only a question that was recorded is asked.
                return match response.check() {
                    Some(Check::Confirm) => response.with_input_required(input),
                    _ => response,
                };
            }
        };
        // A call its client cancelled while it was checked (while a person was asked, say:
        // a `notifications/cancelled` read before the answer) does not run.
        if prepared.call.ctx.is_cancelled() {
            let err = ToolError::new(
                Status::ClientClosedRequest,
                "cancelled",
                "the call was cancelled by its client before its tool ran",
            );
            return self.finish(Err(err), None).await;
        }
        self.started_handler = true;
        let Prepared {
            name,
            handler,
            wrap,
            output: output_validator,
            call,
        } = prepared;
        let Some(handler) = handler else {
            // A completion with no completion function: no values.
            let output = crate::resource::completion_output(Vec::new());
            return self.finish(Ok(output), None).await;
        };
        let kind = self.request.kind;
        let level = call.level;
        // An HTTP call is abandoned with those still running when the HTTP server's
        // shutdown drain ends; a stdio call, with every other once `serve` is stopped at
        // once (a second signal), even one that begins after.
        let (stopped, ever) = match self.request.transport {
            Transport::StreamableHttp | Transport::PlainHttp => {
                (Some(Arc::clone(self.server.calls_stopped())), false)
            }
            Transport::Stdio => (Some(Arc::clone(self.server.stdio_calls_stopped())), true),
            Transport::InProcess => (None, false),
        };
        // An HTTP call's tool is dropped then too, however long it would run.
        let stop = matches!(
            self.request.transport,
            Transport::StreamableHttp | Transport::PlainHttp
        )
        .then(|| self.server.http_calls_stop());
        let commits = Arc::new(commits::Commits::of(self.principal.clone(), stopped, ever));
        self.commits = Some(Arc::clone(&commits));
        let mut handler = CatchUnwind(
            Handling::Start(handler, Some(call)),
            level,
            Arc::clone(&commits),
        );
        // The first poll, here: a handler that does not wait finishes in it, with no task
        // to spawn. Its parameters are extracted in it: arguments their type refuses
        // (past what the schema bounds) are a refusal of the validation, not the tool's.
        let max_output = self.server.max_output_bytes();
        crate::tool::take_arguments_refused();
        let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut handler).poll(cx))).await;
        if let Poll::Ready(output) = first {
            let refused = crate::tool::take_arguments_refused();
            let (result, check) = conclude(
                kind,
                name,
                wrap,
                output_validator.as_deref(),
                output,
                &commits,
                max_output,
            );
            let check = if refused && result.is_err() {
                Some(Check::Validate)
            } else {
                check
            };
            return self.finish(result, check).await;
        }
        crate::tool::take_arguments_refused();
        let finish = async move {
            let (result, check) = conclude(
                kind,
                name,
                wrap,
                output_validator.as_deref(),
                handler.await,
                &commits,
                max_output,
            );
            self.finish(result, check).await
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn(finish);
                let joined = match stop {
                    // An HTTP call still running when the shutdown's drain ends is
                    // dropped, and records itself as abandoned (with what committed),
                    // however long its tool would have run.
                    Some(stop) => {
                        let abort = task.abort_handle();
                        tokio::select! {
                            joined = task => joined,
                            () = stop.cancelled() => {
                                abort.abort();
                                return CallResponse::new(
                                    Err(ToolError::new(
                                        Status::Unavailable,
                                        "cancelled",
                                        "the server stopped while the tool ran: the call was \
                                         abandoned (its record says what it committed)",
                                    )),
                                    Some(Check::Handler),
                                );
                            }
                        }
                    }
                    None => task.await,
                };
                joined.unwrap_or_else(|err| {
                    // The task panicked outside the handler (the handler's own panics are
                    // caught): the attempt recorded itself when it was dropped.
                    CallResponse::new(
                        Err(ToolError::internal(format!("the call failed: {err}"))),
                        Some(Check::Handler),
                    )
                })
            }
            Err(_) => finish.await,
        }
    }

    /// The rate a refusal goes through before its record, when no check put it through
    /// one: a verified principal's own rate (the first refusal past it is recorded as it
    /// is, the rest counted), else its peer address's (over stdio, which has none, the
    /// connection's, at the per-principal rate when one is set: a revoked token would
    /// otherwise grow the trail as fast as it can send); a call of a batch, its batch's
    /// ([`InBatch`]). `Err`: past it, the refusal is answered 429 and only counted (to be
    /// recorded with a later record of the same principal or peer), or recorded as that
    /// 429 ([`PastTheRate`]); `Ok(counts)`: what was counted since, to record first (one
    /// record per kind of call counted). Synchronous, so that a record written on drop
    /// goes through it as well.
    fn refusal_rate(&mut self) -> Result<Vec<AuditRecord>, PastTheRate> {
        match self.in_batch.take() {
            None => self.rate_refusal(1, None),
            // The rest of a batch follows its first.
            Some(InBatch::Rest(rate)) if rate.through() => Ok(Vec::new()),
            Some(InBatch::Rest(_)) => {
                self.count_refusal();
                Err(PastTheRate {
                    retry_after: std::time::Duration::ZERO,
                    recorded: false,
                })
            }
            Some(InBatch::First { records, rate }) => self.rate_refusal(records, Some(&rate)),
        }
    }

    /// [`Attempt::refusal_rate`] of a refusal that writes `cost` records (its batch's):
    /// as many tokens. `batch`: of the first call of a batch, told whether the rate let
    /// the batch through; past the principal's rate, the batch is answered 429 and
    /// counted, and its first call, as the first refusal past the rate, recorded as that
    /// 429.
    fn rate_refusal(
        &mut self,
        cost: u64,
        batch: Option<&BatchRate>,
    ) -> Result<Vec<AuditRecord>, PastTheRate> {
        let through = |rate: Vec<AuditRecord>| {
            if let Some(batch) = batch {
                batch.let_through();
            }
            Ok(rate)
        };
        let server = self.server.clone();
        let limits = server.limits();
        let kind = self.request.kind;
        let counted = |retry_after| PastTheRate {
            retry_after,
            recorded: false,
        };
        if let Some(principal) = &self.principal {
            let Some(limiter) = limits.principal.as_ref().filter(|_| !self.rated) else {
                return through(Vec::new());
            };
            self.rated = true;
            return match limiter.check_calls_counting_after_first(
                &rate_key(principal),
                kind,
                self.calls,
                cost,
            ) {
                Verdict::Limited {
                    retry_after,
                    first: false,
                } => Err(counted(retry_after)),
                Verdict::Limited { retry_after, .. } if cost > 1 => Err(PastTheRate {
                    retry_after,
                    recorded: true,
                }),
                Verdict::Limited { first: true, .. } => Ok(Vec::new()),
                Verdict::Allowed { suppressed } => through(
                    suppressed
                        .by_kind()
                        .map(|(kind, count)| {
                            record::suppressed_of(
                                principal.subject(),
                                principal.workspace(),
                                None,
                                count,
                                kind,
                                self.request.transport,
                            )
                        })
                        .collect(),
                ),
            };
        }
        let (verdict, peer) = match self.request.peer_addr {
            Some(addr) => {
                let Some(limiter) = &limits.unauthenticated else {
                    return through(Vec::new());
                };
                let peer = limits::peer_key(addr);
                let verdict = limiter.check_calls(&peer, kind, self.calls, cost);
                (verdict, Some(peer))
            }
            None if matches!(self.request.transport, crate::context::Transport::Stdio) => {
                let Some(limiter) = &limits.stdio_unauthenticated else {
                    return through(Vec::new());
                };
                (limiter.check_calls(&(), kind, self.calls, cost), None)
            }
            None => return through(Vec::new()),
        };
        match verdict {
            Verdict::Limited { retry_after, .. } => Err(counted(retry_after)),
            Verdict::Allowed { suppressed } => through(
                suppressed
                    .by_kind()
                    .map(|(kind, count)| match peer {
                        Some(peer) => {
                            record::suppressed(Some(peer), count, kind, self.request.transport)
                        }
                        None => record::suppressed_on_stdio(count, kind),
                    })
                    .collect(),
            ),
        }
    }

    /// Count this refusal past the rate it would go through, taking no token: a call of
    /// a batch its first call's rate refused.
    fn count_refusal(&mut self) {
        let limits = self.server.limits();
        let (kind, calls) = (self.request.kind, self.calls);
        match (&self.principal, self.request.peer_addr) {
            (Some(principal), _) => {
                if let Some(limiter) = limits.principal.as_ref().filter(|_| !self.rated) {
                    limiter.count(&rate_key(principal), kind, calls);
                }
            }
            (None, Some(addr)) => {
                if let Some(limiter) = &limits.unauthenticated {
                    limiter.count(&limits::peer_key(addr), kind, calls);
                }
            }
            (None, None) if self.request.transport == Transport::Stdio => {
                if let Some(limiter) = &limits.stdio_unauthenticated {
                    limiter.count(&(), kind, calls);
                }
            }
            (None, None) => {}
        }
        self.rated = true;
    }

    /// A principal's rate (its own, or a tool's): past it, the first refusal since its
    /// last call that went ahead is recorded as any refusal; the rest are answered 429
    /// and only counted (a principal cannot grow the trail faster than its rate allows),
    /// their count recorded before its next call that goes ahead, and by
    /// [`Server::flush_rate_limited`].
    async fn rate_limited(
        &mut self,
        verdict: Verdict,
        principal: &Principal,
        tool: Option<&str>,
    ) -> Result<(), (Check, ToolError)> {
        match verdict {
            Verdict::Limited { retry_after, first } => {
                self.counted = !first;
                Err((Check::RateLimit, ToolError::rate_limited(retry_after)))
            }
            Verdict::Allowed { suppressed } => {
                let Some(sink) = self.server.audit() else {
                    return Ok(());
                };
                // One record per kind of call counted.
                for (kind, count) in suppressed.by_kind() {
                    let record = record::suppressed_of(
                        principal.subject(),
                        principal.workspace(),
                        tool,
                        count,
                        kind,
                        self.request.transport,
                    );
                    if let Err(err) = sink.record(record).await {
                        let kept = owe(self.server.owed(), err.clone());
                        tracing::error!(error = %err, count, kept, subject = principal.subject(), "the count of rate-limited calls could not be recorded");
                    }
                }
                Ok(())
            }
        }
    }

    /// Write the record (if the server keeps a trail) and make the answer.
    async fn finish(
        &mut self,
        mut result: Result<ToolOutput, ToolError>,
        mut check: Option<Check>,
    ) -> CallResponse {
        // Every refusal goes through a rate: a caller not authenticated (no token, a bad
        // one, or a request refused before its token could count) its peer's, a verified
        // principal whose rate has not seen it (a transport's refusal: a body that is not
        // JSON, a batch, a scope refused at the gate…) its own, or either could grow the
        // trail without bound.
        if check.is_some() {
            match self.refusal_rate() {
                Err(PastTheRate {
                    retry_after,
                    recorded: false,
                }) => {
                    self.recorded = true;
                    let limited = ToolError::rate_limited(retry_after);
                    return CallResponse::new(Err(limited), Some(Check::RateLimit));
                }
                Err(PastTheRate { retry_after, .. }) => {
                    result = Err(ToolError::rate_limited(retry_after));
                    check = Some(Check::RateLimit);
                }
                Ok(counts) => {
                    if let Some(sink) = self.server.audit() {
                        for count in counts {
                            let suppressed = count.arguments.clone();
                            if let Err(err) = sink.record(count).await {
                                // Owed as the refusals it counts would be: each was
                                // answered 429, and is in the trail only through this record.
                                let error = err.to_string();
                                let kept = owe(self.server.owed(), err);
                                tracing::error!(error, kept, %suppressed, "the count of rate-limited refusals could not be recorded");
                            }
                        }
                    }
                }
            }
        }
        // Past a principal's rate: counted, not recorded one by one (`rate_limited`).
        if self.counted {
            self.recorded = true;
            return CallResponse::new(result, check);
        }
        let Some(sink) = self.server.audit().cloned() else {
            self.recorded = true;
            return CallResponse::new(result, check);
        };
        // A client that cancelled the call (or went away) while its user was being asked
        // abandoned it: recorded as any abandoned call is, not as the user's refusal. So is
        // one whose cancellation is read once its checks passed (a yes and the cancel in
        // one write), before its tool ran.
        let abandoned = match (&result, check) {
            (Err(err), Some(Check::Confirm)) => err.reason() == "cancelled",
            (Err(err), None) => {
                err.reason() == "cancelled"
                    && err.status() == Status::ClientClosedRequest
                    && !self.started_handler
            }
            _ => false,
        };
        // Records of calls that ran while the sink failed go first, once it writes again.
        // Paid before this call's record is made, which takes the attempt's timestamp and
        // arguments: a call dropped while it waits here is recorded whole by `Drop`.
        if !self.server.owed().is_empty() {
            let owed = Arc::clone(self.server.owed());
            owed.pay(&sink).await;
        }
        // The server abandoned its running calls (its shutdown's drain ended) while this
        // one's handler ran: its answer will not be sent, and none of its transactions
        // committed after; recorded as a call abandoned so is, with what it committed.
        // (One atomic load a call: the server's count of abandonments.)
        let stopped = self
            .commits
            .as_ref()
            .filter(|c| self.started_handler && c.server_stopped())
            .map(|c| abandoned_error(true, Some(c.done())));
        // Either way 499, the status of an answer never sent, with whether what it wrote
        // stands.
        let (result, check, abandoned_as) = match stopped {
            Some((err, stands)) => (Err(err), None, Some(stands)),
            None => (result, check, abandoned.then_some(false)),
        };
        let mut record = self.record(&result, check.filter(|_| !abandoned));
        if let Some(stands) = abandoned_as {
            record.status = 499;
            record.outcome = if stands {
                crate::audit::Outcome::Success
            } else {
                crate::audit::Outcome::Error
            };
        }
        let owed = self.server.owed();
        let written = sink.record(record);
        self.recorded = true;
        match written.await {
            Ok(()) => CallResponse::new(result, check),
            Err(mut err) if self.started_handler => {
                // Not a refusal: the tool ran. Its result is withheld, and the answer says
                // so rather than that nothing happened; a tool that failed is said to have
                // failed, with its own error (a write it did not commit, a retry to make),
                // not to have done something that stands. Its record, if the sink handed
                // it back, is owed: written first once the sink writes again.
                // (A sink that keeps the record of a write in doubt settles it itself.)
                let kept = err.is_kept_by_sink()
                    || err
                        .take_record()
                        .is_some_and(|record| owed.keep(record, true));
                tracing::error!(tool = %self.request.tool, error = %err, kept, "the tool ran but its audit record could not be written; answering 503");
                let later = if kept {
                    "its record is kept and written once the audit sink writes again \
                     (unless the server stops first)"
                } else {
                    "unrecorded"
                };
                // (The sink's own words, `err`, are in the log line above, not the answer.)
                let message = match &result {
                    Ok(_) => format!(
                        "the tool ran, but its audit record could not be written, so its \
                         result is withheld; what it did stands, {later}; the server's log \
                         says why"
                    ),
                    Err(failed) => format!(
                        "the tool ran and failed ({} {}: {}), and its audit record could \
                         not be written; {later}; the server's log says why",
                        failed.status().code(),
                        failed.reason(),
                        failed.message()
                    ),
                };
                let err = ToolError::new(Status::Unavailable, "audit_unavailable", message);
                CallResponse::new(Err(err), Some(Check::Audit))
            }
            Err(mut err) => {
                // A refusal (nothing ran), answered 503: its record, if the sink handed it
                // back, is owed as well (past the bound, counted), so that a call refused
                // while the trail failed still leaves its trace.
                let kept = err.is_kept_by_sink()
                    || err
                        .take_record()
                        .is_some_and(|record| owed.keep(record, false));
                tracing::error!(tool = %self.request.tool, error = %err, kept, "audit record could not be written; answering 503");
                CallResponse::new(Err(ToolError::audit_unavailable(err)), Some(Check::Audit))
            }
        }
    }

    /// Steps 1 to 5 and the audit sink's readiness, skipping what a transport already
    /// checked; the handler's call, ready to run.
    async fn checks(&mut self) -> Result<Prepared, (Check, ToolError)> {
        // 1. authenticate, and the principal's rate
        let principal = self
            .authenticate()
            .await
            .map_err(|e| (Check::Authenticate, e))?;
        // A call a running tool makes in process (its handler holding the `Server`) is
        // made for that tool's caller: one that hands over another principal already
        // "verified" is refused, and its record names the caller it really ran for, not
        // the one it made up. (A token it presents is verified as any other.)
        if let Credentials::Verified(_) = &self.request.credentials
            && let Some(running) = commits::running_for()
            && *running != *principal
        {
            let err = ToolError::new(
                Status::Forbidden,
                "level_violation",
                format!(
                    "a tool running for `{running}` called `{}` in process as `{principal}`; a \
                     tool's calls in process are made for its own caller",
                    self.request.tool
                ),
            );
            self.principal = Some(running);
            return Err((Check::Authenticate, err));
        }
        if let Some(limiter) = &self.server.limits().principal {
            self.rated = true;
            let limited =
                limiter.check_counting_after_first(&rate_key(&principal), self.request.kind);
            self.rate_limited(limited, &principal, None).await?;
        }
        // 2. find the tool, 3. scopes
        self.authorize()?;
        if self.request.kind != CallKind::Tool {
            return self.other_checks(principal);
        }
        let server = self.server.clone();
        let entry = self.entry(&server).expect("authorized: the tool exists");
        // A call made in process by a running tool (its handler holding the `Server`)
        // reaches no further than that tool's level: a read-only tool cannot have a
        // destructive one run for it, whatever principal and `confirm` it writes.
        let level = entry.def().access_level();
        if let Some(running) = crate::__private0::extracting_for()
            && level > running
        {
            let err = ToolError::new(
                Status::Forbidden,
                "level_violation",
                format!(
                    "a tool at the `{running}` access level called `{}` (a `{level}` tool) in \
                     process; a tool's calls are at or below its level",
                    entry.name()
                ),
            );
            return Err((Check::Scope, err));
        }
        // The tool's own rate for this principal (`rate = "30/min"`), once it may call it.
        if let Some(Some(limiter)) = self.entry.map(|i| &server.limits().per_tool[i]) {
            let limited = limiter.check_counting_after_first(&rate_key(&principal), CallKind::Tool);
            self.rate_limited(limited, &principal, Some(entry.name()))
                .await?;
        }
        let def = entry.def();
        // Arguments that repeat a key say two things; which one is meant cannot be known
        // (`confirm` false and true, say), so they are refused before anything reads them.
        if let Some(pointer) = &self.request.repeated_key {
            // A destructive tool's `confirm` given twice is not the one JSON `true` the
            // guard asks for: the guard's own refusal, before validation, as for any other.
            if def.is_destructive() && pointer == "/confirm" {
                return Err((Check::Confirm, ToolError::confirm_required()));
            }
            return Err((Check::Validate, repeated_key_error(pointer)));
        }
        let arguments = &mut self.request.arguments;
        // 4. confirm guard
        if def.is_destructive()
            && !matches!(
                arguments.as_ref().and_then(|a| a.get("confirm")),
                Some(Value::Bool(true))
            )
        {
            return Err((Check::Confirm, ToolError::confirm_required()));
        }
        // 5. validate against the advertised schema, before deserialization (the
        // boolean check is the fast path; the first error is looked for only on failure)
        let empty = Value::Object(Map::new());
        let instance = arguments.as_ref().unwrap_or(&empty);
        // First: a schema's own message would quote the character.
        if let Some(pointer) = nul_pointer(instance) {
            return Err((Check::Validate, nul_error(&pointer)));
        }
        let validator = entry.validator().map_err(|err| {
            tracing::error!(tool = %entry.name(), error = %err, "the input schema does not compile");
            (
                Check::Validate,
                ToolError::internal("the tool's input schema cannot be checked"),
            )
        })?;
        if !validator.is_valid(instance)
            && let Err(err) = validator.validate(instance)
        {
            // A value outside a set of values names the set; any other value no branch
            // takes, the error of the branch it was meant for.
            let (pointer, why) = match allowed_values_error(&err, entry.input_schema()) {
                Some(why) => (argument_pointer(&err), why),
                None => {
                    let err = the_branch_meant(&err);
                    let why = allowed_values_error(err, entry.input_schema())
                        .unwrap_or_else(|| err.to_string());
                    (argument_pointer(err), why)
                }
            };
            return Err((Check::Validate, ToolError::invalid_arguments(&pointer, why)));
        }
        // The output's validator too (it compiled at start-up): a tool whose output could
        // not be checked does not run, rather than answer unchecked.
        let output = entry.output_validator().map_err(|err| {
            tracing::error!(tool = %entry.name(), error = %err, "the output schema does not compile");
            (
                Check::Validate,
                ToolError::internal("the tool's output schema cannot be checked"),
            )
        })?;
        // The record keeps the arguments redacted; the handler takes them as they are.
        if server.audit().is_some() {
            self.redacted = Some(record::redacted_arguments(
                Some(entry),
                self.request.arguments.as_ref(),
            ));
        }
        // 7 (before 4b and 6): fail closed if the audit trail cannot take the record, before
        // a person is asked
        if let Some(sink) = server.audit()
            && let Err(err) = sink.ready()
        {
            return Err((Check::Audit, ToolError::audit_unavailable(err)));
        }
        // 4b. a person confirms, when the tool's policy asks one
        if def.is_destructive() {
            self.confirmed_by = Some("argument");
            let policy = def.confirm_policy().unwrap_or(server.confirmation().policy);
            if policy.asks_user() {
                self.confirm_with_user(def, entry.title(), &principal, policy)
                    .await?;
                // The answer may come long after step 7: a sink that failed meanwhile
                // fails the call closed, as it would have before the question.
                if let Some(sink) = server.audit()
                    && let Err(err) = sink.ready()
                {
                    return Err((Check::Audit, ToolError::audit_unavailable(err)));
                }
            }
        }
        let mut handler_args = match self.request.arguments.take() {
            Some(Value::Object(map)) => Some(map),
            _ => None,
        };
        if def.is_destructive()
            && let Some(map) = &mut handler_args
        {
            map.remove("confirm");
        }
        // The handler's context (6. runs in `Attempt::run`)
        let ctx = Ctx::new(
            def.name(),
            principal,
            self.request.transport,
            self.request.request_id.clone(),
            self.request.peer.take(),
            self.request.cancel.take().unwrap_or_default(),
        )
        .announcing(server.resource_update_sender());
        Ok(Prepared {
            name: def.name(),
            handler: Some(def.handler()),
            wrap: entry.wrap_output(),
            output,
            call: Call {
                arguments: handler_args,
                ctx,
                state: server.state().clone(),
                resource_uri: None,
                level: Some(def.access_level()),
            },
        })
    }

    /// Steps 5 to 7 of a resource read, prompt or completion (found, in scope): a
    /// prompt's arguments validated, the audit sink ready, the handler's call.
    fn other_checks(&mut self, principal: Arc<Principal>) -> Result<Prepared, (Check, ToolError)> {
        let server = self.server.clone();
        let target = self.target.expect("authorized: the target exists");
        let arguments = if self.request.kind == CallKind::Resource {
            // A template's variables are the handler's arguments.
            server
                .registry()
                .find_resource(&self.request.tool)
                .map(|(_, vars)| Value::Object(vars))
        } else {
            self.request.arguments.take()
        };
        if target.undeclared {
            let argument = arguments
                .as_ref()
                .and_then(|a| a.get("argument"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let err = ToolError::invalid_arguments(
                "/argument",
                format!(
                    "`{}` is not an argument of `{}`",
                    crate::audit::bounded(argument, 256),
                    target.name
                ),
            );
            self.request.arguments = arguments;
            return Err((Check::Validate, err));
        }
        if self.request.kind == CallKind::Completion
            && let Some(value) = arguments
                .as_ref()
                .and_then(|a| a.get("value"))
                .and_then(Value::as_str)
            && value.len() > MAX_COMPLETION_VALUE_BYTES
        {
            let err = ToolError::invalid_arguments(
                "/argument/value",
                format!("the value to complete is limited to {MAX_COMPLETION_VALUE_BYTES} bytes"),
            );
            self.request.arguments = arguments;
            return Err((Check::Validate, err));
        }
        if let Some(pointer) = &self.request.repeated_key {
            let err = repeated_key_error(pointer);
            self.request.arguments = arguments;
            return Err((Check::Validate, err));
        }
        if let Some(pointer) = arguments.as_ref().and_then(nul_pointer) {
            self.request.arguments = arguments;
            return Err((Check::Validate, nul_error(&pointer)));
        }
        if let Some(position) = target.prompt {
            let empty = Value::Object(Map::new());
            let instance = arguments.as_ref().unwrap_or(&empty);
            let validator = server.registry().prompts()[position].validator();
            let invalid = match validator.validate(instance) {
                Err(err) if !validator.is_valid(instance) => {
                    Some(ToolError::invalid_arguments(&argument_pointer(&err), err))
                }
                _ => None,
            };
            if let Some(invalid) = invalid {
                self.request.arguments = arguments;
                return Err((Check::Validate, invalid));
            }
        }
        if server.audit().is_some() {
            self.redacted = Some(record::redacted_arguments(None, arguments.as_ref()));
        }
        if let Some(sink) = server.audit()
            && let Err(err) = sink.ready()
        {
            return Err((Check::Audit, ToolError::audit_unavailable(err)));
        }
        let resource_uri =
            (self.request.kind == CallKind::Resource).then(|| self.request.tool.clone());
        let ctx = Ctx::new(
            target.name,
            principal,
            self.request.transport,
            self.request.request_id.clone(),
            self.request.peer.take(),
            self.request.cancel.take().unwrap_or_default(),
        )
        .announcing(server.resource_update_sender());
        Ok(Prepared {
            name: target.name,
            handler: target.handler,
            wrap: false,
            output: None,
            call: Call {
                arguments: match arguments {
                    Some(Value::Object(map)) => Some(map),
                    _ => None,
                },
                ctx,
                state: server.state().clone(),
                resource_uri,
                // Resources, prompts and completions are read-only: while their handler
                // runs, a transaction above `Read` is refused as it is for a read-only
                // tool, whatever handle it comes from.
                level: Some(AccessLevel::Read),
            },
        })
    }

    fn entry<'s>(&self, server: &'s Server) -> Option<&'s ToolEntry> {
        self.entry.map(|i| &server.registry().tools()[i])
    }

    /// The attempt's one audit record.
    fn record(
        &mut self,
        result: &Result<ToolOutput, ToolError>,
        check: Option<Check>,
    ) -> AuditRecord {
        let server = self.server.clone();
        // A tool that was never looked up (a refusal before step 2) is found for the
        // record's access level and kept fields.
        let entry = match self.entry(&server) {
            Some(entry) => Some(entry),
            None => server.registry().get(&self.request.tool),
        };
        let mut arguments = match self.redacted.take() {
            Some(redacted) => redacted,
            None => record::redacted_arguments(entry, self.request.arguments.as_ref()),
        };
        if self.request.subscription
            && let Value::Object(map) = &mut arguments
        {
            // No URI template variable can be named so (RFC 6570 names have no `$`).
            map.insert(SUBSCRIBE_KEY.to_owned(), Value::Bool(true));
        }
        if self.request.unsubscription
            && let Value::Object(map) = &mut arguments
        {
            map.insert(UNSUBSCRIBE_KEY.to_owned(), Value::Bool(true));
        }
        // Arguments that repeat a key were read keeping its last value: the record says
        // which key was repeated, so that a reader does not take that value for the one
        // meant (`confirm` false then true reads as `true`).
        if let Some(pointer) = &self.request.repeated_key
            && let Value::Object(map) = &mut arguments
        {
            // A pointer names keys the caller chose, as long as its body allows: cut as a
            // name is (marked with its hash and length), so the record stays bounded.
            let pointer = crate::audit::bounded(pointer, crate::audit::MAX_KEPT_VALUE_BYTES);
            map.insert(REPEATED_KEY.to_owned(), Value::String(pointer.into_owned()));
        }
        let kind = self.request.kind;
        let level = if kind == CallKind::Tool {
            entry.map(|e| e.def().access_level())
        } else {
            // Found now if the attempt ended before step 2 (an unauthenticated read).
            let found = self.target.is_some() || find_target(&server, &self.request).is_ok();
            found.then_some(AccessLevel::Read)
        };
        record::build(record::Facts {
            kind,
            access_level: level,
            tool: &self.request.tool,
            result,
            check,
            principal: self.principal.as_deref(),
            timestamp: std::mem::take(&mut self.timestamp),
            transport: self.request.transport,
            request_id: self.request.request_id.clone(),
            arguments,
            started: self.started,
            confirmed_by: self.confirmed_by,
        })
    }

    /// Step 4b: ask the person behind the client (elicitation), or answer the question
    /// (2026-07-28), or read the answer of a retried call; refuse unless they accepted.
    async fn confirm_with_user(
        &mut self,
        def: &ToolDef,
        title: &str,
        principal: &Principal,
        policy: ConfirmPolicy,
    ) -> Result<(), (Check, ToolError)> {
        let refuse = |err: ToolError| (Check::Confirm, err);
        let confirmation = self.server.confirmation().clone();
        if let Some((state, responses)) = self.request.resume.take() {
            return self
                .redeem(def, principal, &confirmation, &state, &responses)
                .await
                .map_err(refuse);
        }
        let asking = match &self.request.peer {
            Some(peer) => peer.asking(),
            None => Asking::Unavailable(format!(
                "the {} transport has no way to ask the user",
                self.request.transport
            )),
        };
        let question = || {
            confirm::question(
                def.name(),
                Some(title),
                def.confirm_message(),
                self.request.arguments.as_ref(),
            )
        };
        match asking {
            Asking::Elicit => {
                let Some(peer) = self.request.peer.clone() else {
                    unreachable!("a peer said it can elicit");
                };
                // A bounded number of questions per principal: each holds its call, and
                // its request, until answered or timed out; and a bounded request.
                if self.request.message_bytes > confirm::MAX_HELD_BYTES {
                    return Err(refuse(ToolError::new(
                        Status::PayloadTooLarge,
                        "too_large_to_confirm",
                        format!(
                            "a call a person is asked to confirm is held until they answer: \
                             its message is limited to {} bytes (this one has {})",
                            confirm::MAX_HELD_BYTES,
                            self.request.message_bytes
                        ),
                    )));
                }
                let Some(_waiting) = confirmation.asked.take(principal_binding(principal)) else {
                    return Err(refuse(ToolError::new(
                        Status::TooManyRequests,
                        "too_many_questions_waiting",
                        format!(
                            "{} confirmations already wait for the user's answer; answer \
                             them (or let them time out) before asking again",
                            confirm::MAX_QUESTIONS_WAITING
                        ),
                    )));
                };
                let params = confirm::elicitation_params(&question());
                let answer = tokio::time::timeout(confirmation.timeout, peer.elicit(params));
                match answer.await {
                    Err(_) => Err(refuse(ToolError::new(
                        Status::RequestTimeout,
                        "user_confirmation_timeout",
                        format!(
                            "the user did not answer the confirmation within {} s",
                            confirmation.timeout.as_secs()
                        ),
                    ))),
                    Ok(Err(err))
                        if err.reason() == "cancelled" || err.reason() == AMBIGUOUS_ANSWER =>
                    {
                        Err(refuse(err))
                    }
                    Ok(Err(err)) => Err(refuse(ToolError::new(
                        Status::Forbidden,
                        "user_confirmation_unavailable",
                        format!("the client could not ask the user: {}", err.message()),
                    ))),
                    Ok(Ok(answer)) => {
                        self.accept(Some(&answer)).map_err(refuse)?;
                        self.still_allowed(def, principal).await
                    }
                }
            }
            Asking::InputRequired => {
                let question = question();
                let claims = confirm::seal::Claims {
                    n: confirm::nonce(),
                    p: principal_binding(principal),
                    t: def.name().to_owned(),
                    d: confirm::seal::arguments_digest(self.request.arguments.as_ref()),
                    e: confirm::unix_now().saturating_add(
                        i64::try_from(confirmation.ttl.as_secs()).unwrap_or(i64::MAX),
                    ),
                };
                let err = ToolError::new(
                    Status::Forbidden,
                    "user_confirmation_required",
                    format!("the user must confirm first: {question}"),
                );
                self.input_required = Some(InputRequired {
                    question,
                    request_state: confirmation.sealer.seal(&claims),
                });
                Err(refuse(err))
            }
            Asking::Unavailable(why) if policy == ConfirmPolicy::UserOrArgument => {
                tracing::debug!(tool = def.name(), %why, "confirmed by the argument: the user cannot be asked");
                self.confirmed_by = Some("argument_fallback");
                Ok(())
            }
            Asking::Unavailable(why) => Err(refuse(ToolError::new(
                Status::Forbidden,
                "user_confirmation_unavailable",
                format!("this tool needs the user's confirmation through the client, but {why}"),
            ))),
        }
    }

    /// After a person's answer, which may come minutes after step 1: the caller's
    /// credentials verified again (a token revoked or expired while the person was
    /// asked is refused 401, as at step 1), and still the same principal with the
    /// tool's scopes. Credentials a caller handed over already verified
    /// ([`Credentials::Verified`], in-process) are taken as they are.
    async fn still_allowed(
        &self,
        def: &ToolDef,
        principal: &Principal,
    ) -> Result<(), (Check, ToolError)> {
        let presented = match (&self.request.presented, &self.request.credentials) {
            (Credentials::None, credentials) => credentials,
            (presented, _) => presented,
        };
        if matches!(presented, Credentials::Verified(_)) {
            return Ok(());
        }
        let again = |why: &str| {
            ToolError::invalid_token(format!(
                "{why} (the token is verified again once the user has answered)"
            ))
        };
        let fresh = self
            .server
            .authenticate(presented)
            .await
            .map_err(|err| (Check::Authenticate, again(err.message())))?;
        if fresh.subject() != principal.subject() || fresh.workspace() != principal.workspace() {
            return Err((
                Check::Authenticate,
                again("the token no longer names the principal that made the call"),
            ));
        }
        if !fresh.has_scopes(def.scopes()) {
            return Err((Check::Scope, ToolError::insufficient_scope(def.scopes())));
        }
        Ok(())
    }

    /// A 2026-07-28 retry: the state must be one this server sealed for this principal,
    /// tool and arguments, unexpired and unused; then the person's answer decides.
    async fn redeem(
        &mut self,
        def: &ToolDef,
        principal: &Principal,
        confirmation: &Confirmation,
        state: &str,
        responses: &Value,
    ) -> Result<(), ToolError> {
        let invalid = |why: &str| ToolError::bad_request("invalid_request_state", why.to_owned());
        // An answer that says two things (`"action"` twice) is refused before the state is
        // used: the client may answer again, once.
        if let Some(pointer) = &self.request.repeated_answer_key {
            return Err(ToolError::bad_request(
                AMBIGUOUS_ANSWER,
                format!(
                    "the inputResponses repeat the key `{}`: which of its values is meant \
                     cannot be known",
                    crate::audit::bounded(pointer, 256)
                ),
            ));
        }
        let digest = confirm::seal::arguments_digest(self.request.arguments.as_ref());
        let claims = confirmation
            .sealer
            .open(
                state,
                &principal_binding(principal),
                def.name(),
                &digest,
                confirm::unix_now(),
            )
            .map_err(|broken| invalid(broken.describe()))?;
        match confirmation.ledger.redeem(&claims.n, claims.e).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(invalid(
                    "the requestState was already used (a replay); call the tool again",
                ));
            }
            Err(err) => {
                return Err(ToolError::new(
                    Status::Unavailable,
                    "request_state_ledger_unavailable",
                    err,
                ));
            }
        }
        self.accept(responses.get(confirm::INPUT_KEY))
    }

    /// The person's answer (an elicitation's result): `accept` confirms, anything else
    /// refuses. The form asks for nothing, so only an `accept` of the empty form (no
    /// `content`, `null` or `{}`) is a yes: one whose `content` is not an object
    /// (`"content": "yes"`) is no elicitation result, and one that fills in fields the
    /// form never asked for (`{"approved": false}`) says something the server cannot
    /// read as a yes. Either confirms nothing.
    fn accept(&mut self, answer: Option<&Value>) -> Result<(), ToolError> {
        let declined =
            |why: &str| ToolError::new(Status::Forbidden, "user_declined", why.to_owned());
        let action = answer.and_then(|a| a.get("action")).and_then(Value::as_str);
        let content = answer.and_then(|a| a.get("content"));
        let content_is_a_form = content.is_none_or(|c| c.is_object() || c.is_null());
        let content_is_empty =
            content.is_none_or(|c| c.is_null() || c.as_object().is_some_and(|o| o.is_empty()));
        match action {
            Some("accept") if !content_is_a_form => Err(declined(
                "the client's answer to the confirmation was `accept` with a `content` that \
                 is not an object: not an elicitation result",
            )),
            Some("accept") if !content_is_empty => Err(declined(
                "the client's answer to the confirmation was `accept` with fields the form \
                 did not ask for: only an accept of the empty form confirms",
            )),
            Some("accept") => {
                self.confirmed_by = Some("user");
                Ok(())
            }
            Some("decline") => Err(declined("the user declined the call")),
            Some("cancel") => Err(declined("the user dismissed the confirmation")),
            _ => Err(declined(
                "the client's answer to the confirmation was not `accept`",
            )),
        }
    }

    /// A 2026-07-28 retry of a call answered `InputRequiredResult`: the echoed
    /// `requestState` and the client's `inputResponses`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn resume(&mut self, request_state: String, input_responses: Value) {
        self.request.resume = Some((request_state, input_responses));
    }

    /// A transport that began the attempt before it had read the arguments sets them.
    #[cfg(feature = "mcp")]
    /// The arguments, as sent, repeat the key at `pointer`: the call is refused (step 4).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn arguments_repeat(&mut self, pointer: Option<String>) {
        self.request.repeated_key = pointer;
    }

    /// A retry's `inputResponses`, as sent, repeat the key at `pointer`: the person's
    /// answer is refused, not read.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn answer_repeats(&mut self, pointer: Option<String>) {
        self.request.repeated_answer_key = pointer;
    }

    /// What the record keeps as its arguments, as it is: the framework's own account of a
    /// refusal (how many calls of a batch one record counts), not a caller's values, so
    /// nothing to redact.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn account(&mut self, arguments: Value) {
        // A record that counts the rest of a batch stands for that many calls, which a
        // rate refusing it counts (`calls_named_unread` counts mentions, one record).
        self.calls = arguments
            .get("more_calls")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1);
        self.redacted = Some(arguments);
    }

    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn set_arguments(&mut self, arguments: Option<Value>) {
        self.request.arguments = arguments;
    }

    /// This attempt is the first call of a batch refused whole, whose refusal writes
    /// `records` records in all: its rate takes as many tokens, for the whole batch, or
    /// refuses the whole batch. The others' attempts are given what it returns
    /// ([`Attempt::rest_of_batch`]) and refused after it.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn first_of_batch(&mut self, records: u64) -> BatchRate {
        let rate = BatchRate::default();
        self.in_batch = Some(InBatch::First {
            records: records.max(1),
            rate: rate.clone(),
        });
        rate
    }

    /// This attempt is a call of a batch refused whole after its first, whose
    /// [`Attempt::first_of_batch`] returned `rate`: recorded when the first's rate let the
    /// batch through, else counted with it.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn rest_of_batch(&mut self, rate: &BatchRate) {
        self.in_batch = Some(InBatch::Rest(rate.clone()));
    }

    /// A transport verified the caller before the attempt began (the `/mcp` gate
    /// authenticates every request): step 1's verdict, carried.
    #[cfg(feature = "http")]
    pub(crate) fn authenticated(&mut self, principal: Arc<Principal>) {
        self.principal = Some(principal);
    }

    /// The credentials the transport verified for [`Attempt::authenticated`]: a person's
    /// answer may come long after, so they are verified again then.
    #[cfg(feature = "http")]
    pub(crate) fn presented(&mut self, credentials: Credentials) {
        self.request.presented = credentials;
    }

    /// Another attempt records this call (the MCP handler began its own): this one ends
    /// without a record.
    #[cfg(feature = "mcp")]
    pub(crate) fn forget(mut self) {
        self.recorded = true;
    }

    /// The `/mcp` gate (or the stdio framing) began this attempt; the MCP layer takes it up with the call as
    /// rmcp parsed it ([`Attempt::dispatch`]) or drops it.
    #[cfg(feature = "mcp")]
    pub(crate) fn undispatched(mut self) -> Attempt {
        self.dispatched = false;
        self
    }

    /// The size of the message the call came in, as sent.
    #[cfg(feature = "mcp")]
    pub(crate) fn message_bytes(&mut self, bytes: usize) {
        self.request.message_bytes = bytes;
    }

    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    /// The MCP layer hands on the call the gate began: the tool and arguments as rmcp
    /// parsed them (a different tool than the gate saw is checked again), the way back
    /// to the client and the cancellation.
    pub(crate) fn dispatch(
        &mut self,
        tool: String,
        arguments: Option<Value>,
        peer: Option<Arc<dyn ClientPeer>>,
        cancel: CancellationToken,
    ) {
        if tool != self.request.tool {
            self.authorized = false;
            self.entry = None;
            self.request.tool = tool;
        }
        self.request.arguments = arguments;
        self.request.peer = peer;
        self.request.cancel = Some(cancel);
        self.dispatched = true;
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.recorded {
            return;
        }
        // Dropped under a running handler: from here on none of its transactions commits
        // (whether or not there is a record to write).
        let commits = self
            .commits
            .take()
            .map(|c| c.abandon(commits::WAIT_FOR_COMMIT));
        let Some(sink) = self.server.audit().cloned() else {
            return;
        };
        // As in `finish`: a record its principal's (or peer's) rate has not seen goes
        // through it, or requests the MCP layer drops could grow the trail past any rate.
        match self.refusal_rate() {
            Err(_) => return,
            Ok(counts) => {
                for count in counts {
                    hand_off(
                        &sink,
                        Some((self.server.owed(), false)),
                        count,
                        "the count of rate-limited refusals",
                    );
                }
            }
        }
        let mut wrote = false;
        let (check, error, status) = if self.dispatched {
            // An error, with nginx's "client closed request" status. Once the handler
            // has started, the attempt finishes on its own task, so this happens only
            // before it (the client went away) or if the runtime itself stops under it
            // (the server stopped); then the reason says what its transactions did.
            let (err, stands) = abandoned_error(self.started_handler, commits);
            wrote = stands;
            (None, err, 499)
        } else {
            (
                Some(Check::Protocol),
                ToolError::bad_request(
                    "not_dispatched",
                    "the MCP layer did not hand the call to the tool (an invalid request, or the client went away first)",
                ),
                400,
            )
        };
        let mut record = self.record(&Err(error), check);
        record.status = status;
        if self.dispatched {
            record.outcome = if wrote {
                crate::audit::Outcome::Success
            } else {
                crate::audit::Outcome::Error
            };
        }
        let owed = self.server.owed();
        let ran = self.started_handler;
        hand_off(
            &sink,
            Some((owed, ran)),
            record,
            "the record of an abandoned call",
        );
    }
}

/// The error of a call abandoned (its client went away before the tool ran, or the server
/// stopped under it, with what its transactions did), and whether what it wrote stands
/// (its record then says `success`, with the status of an answer never sent).
fn abandoned_error(
    started_handler: bool,
    commits: Option<commits::Abandoned>,
) -> (ToolError, bool) {
    let (reason, message, stands) = match commits {
        _ if !started_handler => (
            "cancelled",
            "the call was abandoned before the tool ran (the client went away)",
            false,
        ),
        Some(commits::Abandoned { in_doubt: true, .. }) => (
            "cancelled_commit_in_doubt",
            "the call was abandoned while the tool ran (the server stopped), with a database \
             commit in flight: whether it took is unknown",
            false,
        ),
        Some(commits::Abandoned { committed: 0, .. }) => (
            "cancelled",
            "the call was abandoned while the tool ran (the server stopped); none of its \
             database transactions committed, and none commits after",
            false,
        ),
        Some(commits::Abandoned { .. }) => (
            "cancelled_after_commit",
            "the call was abandoned while the tool ran (the server stopped), after its \
             database writes committed: what they wrote stands, nothing commits after, and \
             its answer was not sent",
            true,
        ),
        None => (
            "cancelled",
            "the call was abandoned while the tool ran (the server stopped)",
            false,
        ),
    };
    (ToolError::new(Status::Internal, reason, message), stands)
}

/// Hand `record` to the sink without waiting for it: the sink takes the record before it
/// returns the future (the contract of `AuditSink::record`), so it is handed off on
/// whatever thread runs this, runtime or not; its durability is the sink's to report (the
/// built-in sinks log a record they could not write).
/// A record the sink refuses at once and hands back is owed (`owed`, and whether its
/// call ran), as in `finish`.
fn hand_off(
    sink: &Arc<dyn crate::audit::AuditSink>,
    owed: Option<(&Arc<Owed>, bool)>,
    record: AuditRecord,
    what: &str,
) {
    let mut written = sink.record(record);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    if let Poll::Ready(Err(mut err)) = written.as_mut().poll(&mut cx) {
        let kept = owed
            .is_some_and(|(owed, ran)| err.take_record().is_some_and(|r| owed.keep_as_is(r, ran)));
        tracing::error!(error = %err, kept, "{what} could not be written");
    }
}

/// A principal as its rates count it: its subject in its workspace.
fn rate_key(principal: &Principal) -> (String, Option<String>) {
    (
        principal.subject().to_owned(),
        principal.workspace().map(str::to_owned),
    )
}

/// What a `requestState` binds of the principal: subject and workspace, as a JSON array,
/// which no two pairs share (joined by a separator, `a\nb` in `c` and `a` in `b\nc` did).
fn principal_binding(principal: &Principal) -> String {
    serde_json::json!([principal.subject(), principal.workspace()]).to_string()
}

/// A handler's call that passed every check.
struct Prepared {
    name: &'static str,
    /// `None`: a completion without a completion function (it answers no values).
    handler: Option<Handler>,
    wrap: bool,
    /// The tool's output validator, when it declares an output schema.
    output: Option<OutputValidator>,
    call: Call,
}

/// What a resource read, prompt or completion names, found in the registry.
#[derive(Clone, Copy)]
struct Target {
    name: &'static str,
    scopes: &'static [&'static str],
    handler: Option<Handler>,
    /// The prompt's position, whose arguments are validated.
    prompt: Option<usize>,
    /// A completion of an argument its prompt (or a variable its template) does not
    /// declare: refused once the caller is known to be in scope.
    undeclared: bool,
}

/// The longest resource URI read: a longer one is refused before it is matched against
/// the templates (a template's variables are the handler's arguments).
const MAX_URI_BYTES: usize = 4096;

/// The longest value a completion completes (what the user typed so far): a longer one
/// is refused before the handler sees it.
const MAX_COMPLETION_VALUE_BYTES: usize = 1024;

/// The key a subscription's record adds to its arguments (`"$subscribe": true`): the read
/// a `resources/subscribe` performs, told apart from a `resources/read`.
pub(crate) const SUBSCRIBE_KEY: &str = "$subscribe";

/// The key an unsubscription's record adds to its arguments (`"$unsubscribe": true`): the
/// read a `resources/unsubscribe` performs, checked and recorded as a subscription's is.
pub(crate) const UNSUBSCRIBE_KEY: &str = "$unsubscribe";

/// The reason of a call refused because the person's answer to its confirmation repeats a
/// key, and the `data` marker of the JSON-RPC error with which a transport replaces such
/// an answer: read as rmcp reads JSON, the last value would win (`"action":"decline",
/// "action":"accept"` confirms), where a host or proxy reading the first saw a no.
pub(crate) const AMBIGUOUS_ANSWER: &str = "ambiguous_answer";

/// The key a record of arguments that repeat a key adds (`"$repeated_key": "/confirm"`, a
/// JSON pointer): the arguments it keeps hold only the last of the repeated values.
pub(crate) const REPEATED_KEY: &str = "$repeated_key";

/// Step 2 for a resource read (the resource or template `request.tool` names, its
/// variables becoming the call's arguments), a prompt, or a completion (of a prompt's
/// argument or a template's variable: `arguments.ref` says which).
fn find_target(server: &Server, request: &CallRequest) -> Result<Target, (Check, ToolError)> {
    let registry = server.registry();
    let name = request.tool.as_str();
    let unknown_resource = || {
        (
            Check::FindTool,
            ToolError::new(
                Status::NotFound,
                "unknown_resource",
                format!("unknown resource `{}`", crate::audit::bounded(name, 256)),
            ),
        )
    };
    let unknown_prompt = || {
        (
            Check::FindTool,
            ToolError::new(
                Status::NotFound,
                "unknown_prompt",
                format!("unknown prompt `{}`", crate::audit::bounded(name, 256)),
            ),
        )
    };
    match request.kind {
        CallKind::Resource => {
            if name.len() > MAX_URI_BYTES {
                return Err((
                    Check::Validate,
                    ToolError::invalid_arguments(
                        "/uri",
                        format!("a resource URI is limited to {MAX_URI_BYTES} bytes"),
                    ),
                ));
            }
            let (i, _) = registry.find_resource(name).ok_or_else(unknown_resource)?;
            let def = registry.resources()[i];
            Ok(Target {
                name: def.name(),
                scopes: def.scopes(),
                handler: Some(def.handler()),
                prompt: None,
                undeclared: false,
            })
        }
        CallKind::Prompt => {
            let i = registry.prompt_index(name).ok_or_else(unknown_prompt)?;
            let def = registry.prompts()[i].def();
            Ok(Target {
                name: def.name(),
                scopes: def.scopes(),
                handler: Some(def.handler()),
                prompt: Some(i),
                undeclared: false,
            })
        }
        CallKind::Completion => {
            let field = |key: &str| {
                request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .and_then(Value::as_str)
            };
            let argument = field("argument").unwrap_or_default();
            if field("ref") == Some("resource") {
                let def = registry
                    .resources()
                    .iter()
                    .find(|r| r.uri() == name)
                    .ok_or_else(unknown_resource)?;
                Ok(Target {
                    name: def.name(),
                    scopes: def.scopes(),
                    handler: def.completion(),
                    prompt: None,
                    undeclared: !crate::resource::is_template_variable(def.uri(), argument),
                })
            } else {
                let i = registry.prompt_index(name).ok_or_else(unknown_prompt)?;
                let prompt = &registry.prompts()[i];
                let declared = prompt
                    .json()
                    .get("arguments")
                    .and_then(Value::as_array)
                    .is_some_and(|args| {
                        args.iter()
                            .any(|a| a.get("name").and_then(Value::as_str) == Some(argument))
                    });
                Ok(Target {
                    name: prompt.def().name(),
                    scopes: prompt.def().scopes(),
                    handler: prompt.def().completion(),
                    prompt: None,
                    undeclared: !declared,
                })
            }
        }
        CallKind::Tool => unreachable!("tools are found in `Attempt::authorize`"),
    }
}

/// The refusal of arguments that repeat a key at `pointer`: they say two things, and which
/// one is meant cannot be known (`confirm` false and true, say).
fn repeated_key_error(pointer: &str) -> ToolError {
    ToolError::invalid_arguments(
        pointer,
        "this key appears more than once in its object; arguments that repeat a key are ambiguous",
    )
}

/// The JSON pointer of the first string or key in `value` that holds U+0000, if any.
///
/// Refused on every backend alike: PostgreSQL cannot store it in text (a tool would fail
/// there and succeed on SQLite), and C strings, logs and terminals end a string at it.
fn nul_pointer(value: &Value) -> Option<String> {
    fn escape(key: &str) -> String {
        key.replace('~', "~0").replace('/', "~1")
    }
    match value {
        Value::String(text) => text.contains('\0').then(String::new),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_pointer(item).map(|rest| format!("/{i}{rest}"))),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                return Some(format!("/{}", escape(key)));
            }
            nul_pointer(item).map(|rest| format!("/{}{rest}", escape(key)))
        }),
        _ => None,
    }
}

/// The refusal of arguments holding U+0000 at `pointer` ([`nul_pointer`]).
fn nul_error(pointer: &str) -> ToolError {
    // The key itself may hold the character: the pointer is shown with it visible.
    ToolError::invalid_arguments(
        &pointer.replace('\0', "\u{2400}"),
        "U+0000 (NUL) is not accepted in a string or a key",
    )
}

/// Step 6's end: the handler's output as the call's result. A panic (`None`) is a 500,
/// and the server keeps serving; an error is the handler's.
fn conclude(
    kind: CallKind,
    name: &str,
    wrap: bool,
    output_validator: Option<&std::sync::OnceLock<Result<jsonschema::Validator, String>>>,
    output: Option<Result<ToolOutput, ToolError>>,
    commits: &commits::Commits,
    max_output_bytes: usize,
) -> (Result<ToolOutput, ToolError>, Option<Check>) {
    // A refusal of the call's level (a handle above it, set-up code, an action its
    // database refused) ends the call, whatever the handler made of the error.
    if let Some(violation) = commits.take_violation() {
        return (Err(violation), Some(Check::Handler));
    }
    let output = output.unwrap_or_else(|| {
        Err(ToolError::internal(format!(
            "the {} `{name}` panicked",
            kind.as_str()
        )))
    });
    match output {
        Ok(output) => {
            let output = output.finish(wrap);
            // Bounded as its input is: an answer of hundreds of megabytes (a list without
            // a page) would be held whole, by each transport, for as long as its client
            // takes to read it.
            let bytes = output.content_bytes();
            if bytes > max_output_bytes {
                tracing::error!(tool = %name, bytes, max_output_bytes,
                    "a result over the server's bound: refused");
                return (
                    Err(ToolError::new(
                        crate::error::Status::Internal,
                        "output_too_large",
                        format!(
                            "the {}'s result holds {bytes} bytes, over this server's bound of \
                             {max_output_bytes} (`max_output_bytes`): ask for less (a page, a \
                             filter)",
                            kind.as_str()
                        ),
                    )),
                    Some(Check::Handler),
                );
            }
            // What the tool advertises is what it sends: an output its schema refuses (a
            // NaN written as `null`, a `serialize_with` of another type) would be refused
            // by every host that checks `structuredContent` against `outputSchema` (the
            // TypeScript and Python SDKs) while the trail said `success`.
            // (A validator that did not compile refused the call before its handler ran.)
            if let Some(validator) = output_validator.and_then(|v| v.get()?.as_ref().ok())
                && let Some(value) = output.structured_value()
                && !validator.is_valid(value)
                && let Err(err) = validator.validate(value)
            {
                let pointer = err.instance_path().as_str().to_owned();
                let at = if pointer.is_empty() {
                    "/".to_owned()
                } else {
                    pointer
                };
                tracing::error!(tool = %name, at = %at, error = %err,
                    "a tool's output does not match its output schema");
                return (
                    Err(ToolError::new(
                        crate::error::Status::Internal,
                        "invalid_output",
                        format!(
                            "the tool's output does not match its outputSchema at `{at}`: {}",
                            bounded_text(&err.to_string())
                        ),
                    )),
                    Some(Check::Handler),
                );
            }
            (Ok(output), None)
        }
        Err(err) => (Err(err), Some(Check::Handler)),
    }
}

/// An error message cut at 200 bytes.
fn bounded_text(text: &str) -> String {
    if text.len() <= 200 {
        return text.to_owned();
    }
    let mut end = 200;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// For a value outside a closed set (an enum's variants, in `anyOf`/`oneOf` of `const`s,
/// `enum`, perhaps with `null`): the message naming the values it may take, which is what
/// a model needs to correct itself (the validator's own says only "not valid under any of
/// the schemas listed in the 'anyOf' keyword"). `None` for any other error.
fn allowed_values_error(err: &jsonschema::ValidationError<'_>, root: &Value) -> Option<String> {
    use jsonschema::error::ValidationErrorKind as Kind;
    if !matches!(
        err.kind(),
        Kind::AnyOf { .. } | Kind::OneOfNotValid { .. } | Kind::Enum { .. } | Kind::Constant { .. }
    ) {
        return None;
    }
    // The schema of the failing keyword: its location without the keyword, followed
    // through `$ref`s as the validator went.
    let path = err.schema_path().as_str();
    let (node, _keyword) = path.rsplit_once('/')?;
    let mut at = root;
    for segment in node.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        at = if segment == "$ref" {
            resolve_local_ref(root, at.get("$ref")?.as_str()?)?
        } else {
            match at {
                Value::Object(map) => map.get(&segment)?,
                Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
                _ => return None,
            }
        };
    }
    let mut values = Vec::new();
    closed_set(root, at, &mut values, 0)?;
    let listed: Vec<String> = values.iter().map(Value::to_string).collect();
    let value = bounded_json(err.instance());
    Some(format!("{value} is not one of: {}", listed.join(", ")))
}

/// The values `schema` allows, when it allows only listed ones; `None` when it allows
/// others (a type, a pattern) or nests too deep.
fn closed_set(root: &Value, schema: &Value, values: &mut Vec<Value>, depth: usize) -> Option<()> {
    if depth > 8 || values.len() > 64 {
        return None;
    }
    let map = schema.as_object()?;
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        return closed_set(root, resolve_local_ref(root, reference)?, values, depth + 1);
    }
    if let Some(value) = map.get("const") {
        values.push(value.clone());
        return Some(());
    }
    if let Some(listed) = map.get("enum").and_then(Value::as_array) {
        values.extend(listed.iter().cloned());
        return Some(());
    }
    if let Some(branches) = map
        .get("anyOf")
        .or_else(|| map.get("oneOf"))
        .and_then(Value::as_array)
    {
        for branch in branches {
            closed_set(root, branch, values, depth + 1)?;
        }
        return Some(());
    }
    if map.get("type").and_then(Value::as_str) == Some("null") {
        values.push(Value::Null);
        return Some(());
    }
    None
}

/// A `$ref` within the schema itself (`#/$defs/IssueStatus`).
fn resolve_local_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

/// A value as an error message quotes it: JSON, cut at 200 bytes.
fn bounded_json(value: &Value) -> String {
    bounded_text(&value.to_string())
}

/// The JSON pointer of a validation error: where the offending value is, or for a missing
/// or unexpected property, where that property is (or would be).
/// For a value no branch of an `anyOf`/`oneOf` takes (an `Option<Inner>`, an enum of
/// structs), the error of the branch the caller evidently meant, when one stands out: of
/// the branches whose type the value has, the one with the fewest errors (a struct with
/// one unknown field, rather than the `null` of an `Option` or another variant missing
/// its fields), so that the refusal points at the field (`/opt/bogus`), not at the whole
/// value. Otherwise `err` itself.
fn the_branch_meant<'a>(
    err: &'a jsonschema::ValidationError<'a>,
) -> &'a jsonschema::ValidationError<'a> {
    use jsonschema::error::ValidationErrorKind;
    let mut err = err;
    for _ in 0..16 {
        let (ValidationErrorKind::AnyOf { context }
        | ValidationErrorKind::OneOfNotValid { context }) = err.kind()
        else {
            break;
        };
        let here = err.instance_path().as_str();
        let candidates: Vec<&Vec<jsonschema::ValidationError<'static>>> = context
            .iter()
            .filter(|errors| {
                !errors.is_empty()
                    && !errors.iter().any(|e| {
                        e.instance_path().as_str() == here
                            && matches!(e.kind(), ValidationErrorKind::Type { .. })
                    })
            })
            .collect();
        let fewest = candidates.iter().map(|errors| errors.len()).min();
        let mut best = candidates
            .iter()
            .filter(|errors| Some(errors.len()) == fewest);
        match (best.next(), best.next()) {
            (Some(errors), None) => err = &errors[0],
            _ => break,
        }
    }
    err
}

fn argument_pointer(err: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind;
    let mut pointer = err.instance_path().as_str().to_owned();
    let property = match err.kind() {
        ValidationErrorKind::Required { property } => property.as_str(),
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            unexpected.first().map(String::as_str)
        }
        _ => None,
    };
    if let Some(property) = property {
        pointer.push('/');
        pointer.push_str(&property.replace('~', "~0").replace('/', "~1"));
    }
    pointer
}

/// Polls a future, turning a panic into `None` so that a panicking handler still leaves
/// its audit record and the server keeps serving.
/// While polled, the handler of a tool at this level runs on the polling thread
/// (`__private0::ExtractScope`): a data transaction it opens above its level, through a
/// handle of shared state, is refused.
/// Its database transactions are counted in the call's [`commits::Commits`].
struct CatchUnwind(
    Handling,
    Option<crate::access::AccessLevel>,
    Arc<commits::Commits>,
);

/// A handler not called yet, then the future it gave. It is called at the first poll,
/// inside the call's level and `catch_unwind` as every poll is: what a handler function
/// does before it returns its future (one built by hand rather than by `#[mcp_tool]`) is
/// held to the call's level, and a panic there is the tool's panic, answered and recorded.
enum Handling {
    Start(Handler, Option<Call>),
    Running(crate::tool::HandlerFuture),
}

impl Future for CatchUnwind {
    type Output = Option<Result<ToolOutput, ToolError>>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let _running = self.1.map(crate::__private0::ExtractScope::enter);
        let _commits = commits::Polling::enter(&self.2);
        let handling = &mut self.0;
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            if let Handling::Start(handler, call) = handling {
                let call = call.take().expect("a handler is called once");
                *handling = Handling::Running(handler(call));
            }
            match handling {
                Handling::Running(future) => future.as_mut().poll(cx),
                Handling::Start(..) => unreachable!("called above"),
            }
        }));
        match polled {
            Ok(Poll::Ready(output)) => Poll::Ready(Some(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    }
}
