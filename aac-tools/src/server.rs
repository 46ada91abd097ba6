//! The server: its configuration, and what a transport hands the pipeline
//! ([`CallRequest`]) and gets back ([`CallResponse`]). The path of one call itself is
//! in [`crate::pipeline`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::audit::{AuditSink, CallKind, Check};
use crate::confirm::{
    ConfirmPolicy, Confirmation, DEFAULT_CONFIRM_TIMEOUT, DEFAULT_STATE_TTL, InputRequired,
    MemoryLedger, RequestStateLedger,
};
use crate::context::{ClientPeer, Transport};
use crate::error::ToolError;
use crate::pipeline::Listing;
use crate::pipeline::limits::{Limiter, Limits, Rate};
use crate::pipeline::listing::list_json;
use crate::principal::{Principal, TokenVerifier};
use crate::registry::{Registry, ToolEntry};
use crate::state::{StateMap, StateNeed};
use crate::tool::{ToolOutput, error_result_json};

/// The credentials a transport hands the pipeline.
#[derive(Clone, Default)]
pub enum Credentials {
    /// None were presented.
    #[default]
    None,
    /// A bearer token, verified by the server's [`TokenVerifier`].
    Bearer(String),
    /// A principal the transport already verified (the HTTP layer verifies once per
    /// request, to answer 401 with `WWW-Authenticate`).
    Verified(Arc<Principal>),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Credentials::Verified(p) => write!(f, "Verified({p})"),
        }
    }
}

/// One `tools/call` attempt, as a transport hands it to [`Server::call`].
#[derive(Debug)]
pub struct CallRequest {
    pub(crate) tool: String,
    pub(crate) arguments: Option<Value>,
    pub(crate) credentials: Credentials,
    pub(crate) transport: Transport,
    pub(crate) request_id: Option<String>,
    pub(crate) peer: Option<Arc<dyn ClientPeer>>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) peer_addr: Option<std::net::IpAddr>,
    /// A 2026-07-28 retry: the echoed `requestState` and the client's `inputResponses`.
    pub(crate) resume: Option<(String, Value)>,
    pub(crate) kind: CallKind,
    /// A `resources/subscribe`: the read it performs says so in its record.
    pub(crate) subscription: bool,
    /// A `resources/unsubscribe`: the read it performs (checked as a subscription is)
    /// says so in its record.
    pub(crate) unsubscription: bool,
    /// Where the arguments, as sent, repeat a key (a JSON pointer): the call is refused.
    pub(crate) repeated_key: Option<String>,
    /// Where a retry's `inputResponses`, as sent, repeat a key: the answer is refused.
    pub(crate) repeated_answer_key: Option<String>,
    /// The credentials a transport verified before the attempt began (the `/mcp` gate's
    /// bearer token, behind [`Credentials::Verified`]): verified again after a person's
    /// answer, which may come long after.
    pub(crate) presented: Credentials,
    /// The size of the message as sent, when a transport read one (what holding the call
    /// while a person is asked costs).
    pub(crate) message_bytes: usize,
}

impl fmt::Debug for dyn ClientPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientPeer")
    }
}

impl CallRequest {
    /// A call of `tool` with these arguments (`None` for a call without `arguments`),
    /// in-process and without credentials until you add them.
    pub fn new(tool: impl Into<String>, arguments: Option<Value>) -> CallRequest {
        CallRequest {
            tool: tool.into(),
            arguments,
            credentials: Credentials::None,
            transport: Transport::InProcess,
            request_id: None,
            peer: None,
            cancel: None,
            peer_addr: None,
            resume: None,
            kind: CallKind::Tool,
            subscription: false,
            unsubscription: false,
            repeated_key: None,
            repeated_answer_key: None,
            presented: Credentials::None,
            message_bytes: 0,
        }
    }

    /// A `resources/read` of `uri`: its record's `tool` is the URI, its kind `resource`.
    pub fn resource(uri: impl Into<String>) -> CallRequest {
        CallRequest {
            kind: CallKind::Resource,
            ..CallRequest::new(uri, None)
        }
    }

    /// The read a `resources/subscribe` performs: the subscription is granted only if it
    /// succeeds, and its record's arguments say `"$subscribe": true`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn subscription(mut self) -> CallRequest {
        self.subscription = true;
        self
    }

    /// The read a `resources/unsubscribe` performs: checked as a subscription is (the
    /// caller, the resource, its scopes, its handler), its record's arguments say
    /// `"$unsubscribe": true`.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn unsubscription(mut self) -> CallRequest {
        self.unsubscription = true;
        self
    }

    /// A `prompts/get` of `name` with its arguments (strings).
    pub fn prompt(name: impl Into<String>, arguments: Option<Value>) -> CallRequest {
        CallRequest {
            kind: CallKind::Prompt,
            ..CallRequest::new(name, arguments)
        }
    }

    /// A `completion/complete` of `argument` (typed so far: `value`) of the prompt
    /// `target` (`resource` false) or of the resource template `target` (`resource`
    /// true), the other arguments' values in `context`.
    pub fn completion(
        target: impl Into<String>,
        resource: bool,
        argument: impl Into<String>,
        value: impl Into<String>,
        context: serde_json::Map<String, Value>,
    ) -> CallRequest {
        let arguments = serde_json::json!({
            "ref": if resource { "resource" } else { "prompt" },
            "argument": argument.into(),
            "value": value.into(),
            "context": context,
        });
        CallRequest {
            kind: CallKind::Completion,
            ..CallRequest::new(target, Some(arguments))
        }
    }

    /// The record of a request whose message was refused unread (a body or a line over
    /// its limit): of the kind its `method` names (a transport reads it from a header or
    /// from the message's first bytes), named by `name` (the tool, the URI, the prompt, the
    /// completion's reference) when that could be read too. A method that names no call
    /// of ours is recorded as a call of a tool nobody can know, so that every refused
    /// message that may have carried one leaves a record of one.
    #[cfg(feature = "mcp")]
    pub(crate) fn unread(method: Option<&str>, name: Option<&str>) -> CallRequest {
        let name = name.unwrap_or(crate::pipeline::probe::UNKNOWN_TOOL);
        match method {
            Some("resources/read") => CallRequest::resource(name),
            Some("resources/subscribe") => CallRequest::resource(name).subscription(),
            Some("resources/unsubscribe") => CallRequest::resource(name).unsubscription(),
            Some("prompts/get") => CallRequest::prompt(name, None),
            Some("completion/complete") => {
                CallRequest::completion(name, false, "", "", serde_json::Map::new())
            }
            Some("tools/call") | None => CallRequest::new(name, None),
            Some(_) => CallRequest::new(crate::pipeline::probe::UNKNOWN_TOOL, None),
        }
    }

    /// What the call is of.
    pub fn kind(&self) -> CallKind {
        self.kind
    }

    /// Present a bearer token.
    pub fn bearer(mut self, token: impl Into<String>) -> CallRequest {
        self.credentials = Credentials::Bearer(token.into());
        self
    }

    /// Present these credentials.
    pub fn credentials(mut self, credentials: Credentials) -> CallRequest {
        self.credentials = credentials;
        self
    }

    /// The credentials the transport verified to give [`Credentials::Verified`], to be
    /// verified again after a person's answer.
    #[cfg(feature = "mcp")]
    pub(crate) fn presented(mut self, credentials: Credentials) -> CallRequest {
        self.presented = credentials;
        self
    }

    /// Say which transport the call came on.
    pub fn transport(mut self, transport: Transport) -> CallRequest {
        self.transport = transport;
        self
    }

    /// The request id, for the audit record.
    pub fn request_id(mut self, id: impl Into<String>) -> CallRequest {
        self.request_id = Some(id.into());
        self
    }

    /// The way back to the client (progress, logging, sampling, elicitation).
    pub fn peer(mut self, peer: Arc<dyn ClientPeer>) -> CallRequest {
        self.peer = Some(peer);
        self
    }

    /// Cancellation of the call by the client.
    pub fn cancellation(mut self, cancel: CancellationToken) -> CallRequest {
        self.cancel = Some(cancel);
        self
    }

    /// The network address the call came from (HTTP), for the rate limit of refusals
    /// before authentication.
    pub fn peer_addr(mut self, addr: std::net::IpAddr) -> CallRequest {
        self.peer_addr = Some(addr);
        self
    }

    /// A 2026-07-28 retry of a call answered with [`InputRequired`]: the `requestState`
    /// echoed back and the client's `inputResponses` (JSON object).
    pub fn resume(
        mut self,
        request_state: impl Into<String>,
        input_responses: Value,
    ) -> CallRequest {
        self.resume = Some((request_state.into(), input_responses));
        self
    }

    /// The tool named by the call.
    pub fn tool(&self) -> &str {
        &self.tool
    }
}

/// The answer to one attempt: the output or the error, and which check refused it.
#[derive(Debug, Clone)]
pub struct CallResponse {
    result: Result<ToolOutput, ToolError>,
    check: Option<Check>,
    input_required: Option<InputRequired>,
}

impl CallResponse {
    pub(crate) fn new(result: Result<ToolOutput, ToolError>, check: Option<Check>) -> CallResponse {
        CallResponse {
            result,
            check,
            input_required: None,
        }
    }

    pub(crate) fn with_input_required(mut self, input: Option<InputRequired>) -> CallResponse {
        self.input_required = input;
        self
    }

    /// A 2026-07-28 call that waits for the person's answer: the question and the sealed
    /// `requestState` to answer as an `InputRequiredResult` (the result is then the
    /// refusal the other transports would see, `user_confirmation_required`).
    pub fn input_required(&self) -> Option<&InputRequired> {
        self.input_required.as_ref()
    }

    /// The output, or the error that refused or failed the call.
    pub fn result(&self) -> Result<&ToolOutput, &ToolError> {
        self.result.as_ref()
    }

    /// Take the result.
    pub fn into_result(self) -> Result<ToolOutput, ToolError> {
        self.result
    }

    /// The error, if the call did not succeed.
    pub fn error(&self) -> Option<&ToolError> {
        self.result.as_ref().err()
    }

    /// The check that refused the call (`Check::Handler` for a handler error); `None`
    /// on success.
    pub fn check(&self) -> Option<Check> {
        self.check
    }

    /// The MCP `CallToolResult` JSON: the output, or for an error a result with
    /// `isError: true` whose one text content is `{"error", "reason", "status"}` (see
    /// [`error_result_json`]).
    pub fn to_mcp_json(&self) -> Value {
        match &self.result {
            Ok(output) => output.to_json(),
            Err(err) => error_result_json(err),
        }
    }
}

/// Why a [`ServerBuilder`] could not build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

/// Configures a [`Server`].
pub struct ServerBuilder {
    registry: Registry,
    name: String,
    version: String,
    verifier: Option<Arc<dyn TokenVerifier>>,
    unauthenticated: Option<Arc<Principal>>,
    audit: Option<Arc<dyn AuditSink>>,
    audit_disabled: bool,
    read_only_mode: bool,
    filter_list_by_scope: bool,
    state: StateMap,
    /// The first state registered that wraps a framework storage handle: its type and
    /// the handle's.
    storage_in_state: Option<(&'static str, &'static str)>,
    unauthenticated_rate: Option<Rate>,
    principal_rate: Option<Rate>,
    confirmation: ConfirmPolicy,
    confirm_timeout: Duration,
    state_keys: Vec<Vec<u8>>,
    state_ttl: Duration,
    state_ledger: Option<Arc<dyn RequestStateLedger>>,
    max_output_bytes: usize,
}

/// The default bound of one result's content: 8 MiB ([`ServerBuilder::max_output_bytes`]).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 8 << 20;

/// The default rate of recorded refusals before authentication, per peer address: 60 a
/// minute.
pub const DEFAULT_UNAUTHENTICATED_RATE: Rate = Rate::per_minute_const(60);

impl fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("registry", &self.registry)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// The name and version the server gives in `initialize` (defaults: `aac-tools` and
    /// this crate's version).
    pub fn name(mut self, name: impl Into<String>, version: impl Into<String>) -> ServerBuilder {
        self.name = name.into();
        self.version = version.into();
        self
    }

    /// Verify bearer tokens with `verifier`. Without one, every token is refused.
    pub fn verifier(mut self, verifier: impl TokenVerifier) -> ServerBuilder {
        self.verifier = Some(Arc::new(verifier));
        self
    }

    /// **Insecure.** Run calls that carry no credentials as `principal`.
    ///
    /// Deny by default is the rule on every transport, stdio included; this opt-in
    /// exists for local experiments, and the server logs a warning when it is on.
    /// Scopes still apply: the principal's scopes are all an anonymous caller gets.
    pub fn danger_allow_unauthenticated(mut self, principal: Principal) -> ServerBuilder {
        self.unauthenticated = Some(Arc::new(principal));
        self
    }

    /// Write audit records to `sink`.
    pub fn audit(mut self, sink: impl AuditSink) -> ServerBuilder {
        self.audit = Some(Arc::new(sink));
        self
    }

    /// Keep no audit trail (benchmarks and tests only). Without this or
    /// [`ServerBuilder::audit`], [`ServerBuilder::build`] refuses to build.
    pub fn audit_disabled(mut self) -> ServerBuilder {
        self.audit_disabled = true;
        self
    }

    /// Read-only mode: tools that are not `read_only` are neither listed nor callable.
    pub fn read_only_mode(mut self, on: bool) -> ServerBuilder {
        self.read_only_mode = on;
        self
    }

    /// List only the tools the caller has every scope for. Off by default: a hidden
    /// tool cannot trigger a scope step-up.
    pub fn filter_list_by_scope(mut self, on: bool) -> ServerBuilder {
        self.filter_list_by_scope = on;
        self
    }

    /// Refusals of `tools/call` before authentication (no token, a bad one) from one peer
    /// address (HTTP) are recorded at most at this rate; past it they are answered 429
    /// `rate_limited` (with `Retry-After`) without a record of their own, and the next
    /// recorded refusal of that peer is preceded by one record that counts them. So a
    /// flood of token-less requests costs a bounded amount of audit trail. Default
    /// [`DEFAULT_UNAUTHENTICATED_RATE`]; `None` records every refusal.
    pub fn rate_limit_unauthenticated(mut self, rate: Option<Rate>) -> ServerBuilder {
        self.unauthenticated_rate = rate;
        self
    }

    /// Calls of one principal (subject and workspace) past this rate are refused with 429
    /// `rate_limited` (check `rate_limit`), recorded, before any other check. Off by
    /// default.
    pub fn rate_limit_per_principal(mut self, rate: Option<Rate>) -> ServerBuilder {
        self.principal_rate = rate;
        self
    }

    /// Who confirms destructive calls, for tools that do not say
    /// (`#[mcp_tool(confirm = "…")]`): [`ConfirmPolicy::Argument`] by default.
    pub fn confirmation(mut self, policy: ConfirmPolicy) -> ServerBuilder {
        self.confirmation = policy;
        self
    }

    /// How long a person has to answer an elicitation before the call is refused
    /// (`user_confirmation_timeout`). Default [`DEFAULT_CONFIRM_TIMEOUT`].
    pub fn confirmation_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.confirm_timeout = timeout;
        self
    }

    /// The keys that seal 2026-07-28 `requestState`s (each at least 32 bytes): the first
    /// signs, any verifies, so a key is rotated by putting the new one first and dropping
    /// the old one after [`ServerBuilder::request_state_ttl`]. Replicas behind one balancer
    /// share them. Without keys, a random key is made at start-up (one replica only).
    pub fn request_state_keys(mut self, keys: Vec<Vec<u8>>) -> ServerBuilder {
        self.state_keys = keys;
        self
    }

    /// How long a `requestState` stays valid. Default [`DEFAULT_STATE_TTL`].
    pub fn request_state_ttl(mut self, ttl: Duration) -> ServerBuilder {
        self.state_ttl = ttl;
        self
    }

    /// Where redeemed `requestState`s are kept, so each is honoured once
    /// ([`SqliteLedger`](crate::confirm::SqliteLedger): the audit database). Default: in
    /// memory ([`MemoryLedger`]), single use within this process only.
    pub fn request_state_ledger(mut self, ledger: impl RequestStateLedger) -> ServerBuilder {
        self.state_ledger = Some(Arc::new(ledger));
        self
    }

    /// The most one result of a tool, resource or prompt may hold, counted over its content
    /// (its text, or the JSON text of its structured value, its data): past it the call
    /// fails 500 `output_too_large`, recorded, and nothing of the output is sent. Default
    /// [`DEFAULT_MAX_OUTPUT_BYTES`]. An answer carries its content about twice over MCP
    /// (`structuredContent` and the same JSON as text) and escaped once more, so this
    /// bounds each answer's memory and what a client that does not read it can hold.
    pub fn max_output_bytes(mut self, bytes: usize) -> ServerBuilder {
        self.max_output_bytes = bytes;
        self
    }

    /// Share `value` with every tool that takes `State<T>` (or, for a database, a data
    /// handle). [`build`](Self::build) logs a warning for each tool, resource or prompt
    /// that takes a `State<T>` (or a data handle) it was not given: each of its calls
    /// would fail with a 500 naming the registration.
    ///
    /// State that wraps one of the framework's storage handles (`Arc<Database>`,
    /// `Option<Db<Delete>>`, a tuple holding one…) makes [`build`](Self::build) fail: a tool
    /// taking it would reach the database past its access level. Register the `Database`
    /// itself, which tools reach only through data handles at their level.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> ServerBuilder {
        if let Some(storage) = crate::state::framework_storage_inside::<T>() {
            self.storage_in_state
                .get_or_insert((std::any::type_name::<T>(), storage));
        }
        self.state.insert(Arc::new(value));
        self
    }

    /// Build the server.
    pub fn build(self) -> Result<Server, BuildError> {
        if let Some((held, storage)) = self.storage_in_state {
            return Err(BuildError(format!(
                "the shared state `{held}` holds the framework's storage (`{storage}`): a \
                 tool, resource or prompt taking it would reach the database past its access \
                 level; register the `Database` itself with `ServerBuilder::state`, and give \
                 tools data handles at their level (`Db<Read>`, `Db<Write>`, `Db<Delete>`)"
            )));
        }
        let audit: Option<Arc<dyn AuditSink>> = match (self.audit, self.audit_disabled) {
            (Some(sink), false) => Some(sink),
            (None, true) => None,
            (Some(_), true) => {
                return Err(BuildError(
                    "both an audit sink and `audit_disabled` were set; choose one".to_owned(),
                ));
            }
            (None, false) => {
                return Err(BuildError(
                    "no audit sink: every call must leave a record, so choose one with \
                     `ServerBuilder::audit` (or, for benchmarks, `audit_disabled`)"
                        .to_owned(),
                ));
            }
        };
        if self.unauthenticated.is_some() {
            warn_at_build(
                "unauthenticated calls are ALLOWED on this server \
                 (`danger_allow_unauthenticated`): anyone who reaches it acts as the configured principal",
            );
        }
        if audit.is_none() {
            warn_at_build("the audit trail is disabled on this server");
        }
        if self.registry.is_empty()
            && self.registry.resources().is_empty()
            && self.registry.prompts().is_empty()
        {
            warn_at_build(
                "this server has no tools, resources or prompts: a `#[mcp_tool]` in a \
                 library is served only if the binary links that library (use something \
                 of it, or `use the_crate as _;`)",
            );
        }
        for entry in self.registry.tools() {
            let def = entry.def();
            if !def.is_read_only()
                && !def.scopes().is_empty()
                && def.scopes().iter().all(|scope| scope.ends_with(":read"))
            {
                warn_at_build(&format!(
                    "tool `{}` ({}) may {} yet every scope it needs reads as a read scope \
                     ({}): a token meant only to read may call it",
                    def.name(),
                    def.location(),
                    if def.is_destructive() {
                        "delete"
                    } else {
                        "write"
                    },
                    def.scopes().join(", ")
                ));
            }
        }
        if let Some(short) = self.state_keys.iter().position(|k| k.len() < 32) {
            return Err(BuildError(format!(
                "request-state key {} is {} bytes; each key must be at least 32 bytes",
                short + 1,
                self.state_keys[short].len()
            )));
        }
        let keys = if self.state_keys.is_empty() {
            let mut key = vec![0u8; 32];
            getrandom::fill(&mut key)
                .map_err(|e| BuildError(format!("no random key for request states: {e}")))?;
            vec![key]
        } else {
            self.state_keys
        };
        let confirmation = Confirmation {
            policy: self.confirmation,
            timeout: self.confirm_timeout,
            ttl: self.state_ttl,
            sealer: crate::confirm::seal::Sealer::new(keys),
            ledger: self
                .state_ledger
                .unwrap_or_else(|| Arc::new(MemoryLedger::new())),
            asked: Arc::default(),
        };
        for missing in missing_state(&self.registry, &self.state) {
            warn_at_build(&missing);
        }
        let registry = self.registry.with_confirmation(self.confirmation);
        let listing = Listing::new(&registry, self.read_only_mode, self.filter_list_by_scope);
        let per_tool = registry
            .tools()
            .iter()
            .map(|entry| entry.def().rate().map(Limiter::new))
            .collect();
        Ok(Server {
            inner: Arc::new(Inner {
                registry,
                confirmation,
                name: self.name,
                version: self.version,
                verifier: self.verifier,
                unauthenticated: self.unauthenticated,
                audit,
                read_only_mode: self.read_only_mode,
                state: self.state,
                max_output_bytes: self.max_output_bytes,
                listing,
                limits: Limits {
                    unauthenticated: self.unauthenticated_rate.map(Limiter::new),
                    stdio_unauthenticated: self.principal_rate.map(Limiter::new),
                    principal: self.principal_rate.map(Limiter::new),
                    per_tool,
                },
                resource_updates: tokio::sync::broadcast::channel(RESOURCE_UPDATES).0,
                owed: Arc::default(),
                calls_stopped: Arc::default(),
                stop_http_calls: std::sync::Mutex::default(),
                stdio_calls_stopped: Arc::default(),
                update_checks: tokio::sync::Semaphore::new(UPDATE_CHECKS),
            }),
        })
    }
}

/// What the tools, resources and prompts of `registry` take that `state` does not hold:
/// one sentence each, for the warning at start-up (each of their calls would fail with a
/// 500 naming the missing registration).
fn missing_state(registry: &Registry, state: &StateMap) -> Vec<String> {
    let tools = registry.tools().iter().map(|t| {
        let def = t.def();
        let needs: Vec<StateNeed> = def.state_needs().iter().flatten().copied().collect();
        ("tool", def.name(), def.location(), needs)
    });
    let resources = registry
        .resources()
        .iter()
        .map(|r| ("resource", r.uri(), r.location(), r.state_needs().collect()));
    let prompts = registry.prompts().iter().map(|p| {
        let def = p.def();
        (
            "prompt",
            def.name(),
            def.location(),
            def.state_needs().collect(),
        )
    });
    let mut missing = Vec::new();
    for (kind, name, location, needs) in tools.chain(resources).chain(prompts) {
        // A completion function may take what its item takes: each is named once.
        let mut named = std::collections::HashSet::new();
        for need in needs {
            let what = (need.what)();
            if !(need.present)(state) && named.insert(what.clone()) {
                missing.push(format!(
                    "{kind} `{name}` at {location} takes {what}, which this server was not \
                     given: every call of it will fail (500) until it is registered with \
                     `ServerBuilder::state`"
                ));
            }
        }
    }
    missing
}

/// An MCP server's core: the registry, the checks and the audit trail, independent of
/// any transport. Cheap to clone.
///
/// Transports (stdio, Streamable HTTP, plain HTTP) hand every `tools/call` to
/// [`Server::call`], which runs, in order: authenticate, find the tool, check scopes,
/// the confirm guard, validate the arguments, run the handler, and write exactly one
/// audit record.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

/// How many resource updates a slow session may lag behind before it skips some.
const RESOURCE_UPDATES: usize = 256;

struct Inner {
    registry: Registry,
    name: String,
    version: String,
    verifier: Option<Arc<dyn TokenVerifier>>,
    unauthenticated: Option<Arc<Principal>>,
    audit: Option<Arc<dyn AuditSink>>,
    read_only_mode: bool,
    state: StateMap,
    max_output_bytes: usize,
    /// What every transport shows of the tools, computed once.
    listing: Listing,
    limits: Limits,
    confirmation: Confirmation,
    /// URIs of resources that changed, for the sessions subscribed to them.
    resource_updates: tokio::sync::broadcast::Sender<String>,
    /// Records of calls that ran while the sink could not write them.
    owed: Arc<crate::pipeline::Owed>,
    /// How many times the HTTP calls then running were abandoned (a shutdown's drain
    /// ended): none of their transactions commits from then on.
    calls_stopped: Arc<std::sync::atomic::AtomicU64>,
    /// Cancelled (and replaced) at the same time: an HTTP call whose tool is still
    /// running then is dropped, and recorded as abandoned, rather than waited for (a tool
    /// that never returns held the HTTP server's end, unrecorded).
    stop_http_calls: std::sync::Mutex<tokio_util::sync::CancellationToken>,
    /// How many times the stdio calls were abandoned (`serve` stopped at once).
    stdio_calls_stopped: Arc<std::sync::atomic::AtomicU64>,
    /// The subscriptions' checks of their tokens before an update, at most
    /// [`UPDATE_CHECKS`] at once: one change reaches every subscribed session at the same
    /// moment, and each check may read the token store on a blocking thread (384
    /// subscribed sessions took 176 threads and a database connection each, past the
    /// pool, and every other caller waited behind them).
    update_checks: tokio::sync::Semaphore,
}

/// How many subscriptions check their token at once before an update ([`Inner`]).
const UPDATE_CHECKS: usize = 4;

impl Drop for Inner {
    /// The server is gone (the process stops): what is still owed is handed to the sink
    /// one last time, after the records of the calls abandoned as it stopped (which the
    /// sink may have written once it wrote again). The sink's own end waits for what it
    /// was handed; a record it cannot take is in the error log, as before.
    fn drop(&mut self) {
        if let Some(sink) = &self.audit {
            self.owed.hand_off_all(sink);
        }
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.inner.name)
            .field("registry", &self.inner.registry)
            .field("read_only_mode", &self.inner.read_only_mode)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Start configuring a server for these tools.
    pub fn builder(registry: Registry) -> ServerBuilder {
        ServerBuilder {
            registry,
            name: "aac-tools".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            verifier: None,
            unauthenticated: None,
            audit: None,
            audit_disabled: false,
            read_only_mode: false,
            filter_list_by_scope: false,
            state: StateMap::default(),
            storage_in_state: None,
            unauthenticated_rate: Some(DEFAULT_UNAUTHENTICATED_RATE),
            principal_rate: None,
            confirmation: ConfirmPolicy::Argument,
            confirm_timeout: DEFAULT_CONFIRM_TIMEOUT,
            state_keys: Vec::new(),
            state_ttl: DEFAULT_STATE_TTL,
            state_ledger: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// The tools.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The server's name, for `initialize`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The server's version, for `initialize`.
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// Whether read-only mode is on.
    pub fn is_read_only_mode(&self) -> bool {
        self.inner.read_only_mode
    }

    /// The bound of one result's content ([`ServerBuilder::max_output_bytes`]).
    pub fn max_output_bytes(&self) -> usize {
        self.inner.max_output_bytes
    }

    /// The shared state.
    pub fn state(&self) -> &StateMap {
        &self.inner.state
    }

    /// The tools `tools/list` shows to `principal`, with their positions in
    /// [`Registry::tools`]: every tool, less those hidden by read-only mode, less (when
    /// [`ServerBuilder::filter_list_by_scope`] is on) those the principal lacks scopes for.
    pub fn listed_tools<'a>(
        &'a self,
        principal: Option<&'a Principal>,
    ) -> impl Iterator<Item = (usize, &'a ToolEntry)> + 'a {
        let tools = self.inner.registry.tools();
        let listing = &self.inner.listing;
        let positions: std::borrow::Cow<'a, [usize]> = match listing.subset(principal) {
            None => std::borrow::Cow::Borrowed(listing.positions()),
            Some(subset) => std::borrow::Cow::Owned(subset),
        };
        (0..positions.len()).map(move |n| (positions[n], &tools[positions[n]]))
    }

    /// Every tool the server shows (all of them, less those hidden by read-only mode),
    /// whatever the caller's scopes.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) fn visible_tools(&self) -> impl Iterator<Item = &ToolEntry> + '_ {
        let tools = self.inner.registry.tools();
        self.inner
            .listing
            .positions()
            .iter()
            .map(move |&i| &tools[i])
    }

    /// Whether `tools/list` depends on the caller
    /// ([`ServerBuilder::filter_list_by_scope`]).
    pub fn filters_list_by_scope(&self) -> bool {
        self.inner.listing.filters_by_scope()
    }

    /// The `tools/list` result JSON for `principal`: `{"tools": [...]}`.
    ///
    /// The list of every listed tool is built once, on the first call, and shared;
    /// with [`ServerBuilder::filter_list_by_scope`], a principal that lacks some scope
    /// gets a list built for its subset of tools.
    pub fn list_tools_json(&self, principal: Option<&Principal>) -> Arc<Value> {
        let listing = &self.inner.listing;
        match listing.subset(principal) {
            None => Arc::clone(listing.tools_list(&self.inner.registry)),
            Some(subset) => Arc::new(list_json(&self.inner.registry, &subset)),
        }
    }

    /// The listing every transport reads.
    /// Tell every MCP session subscribed to `uri` (`resources/subscribe`) that the
    /// resource changed: each gets `notifications/resources/updated`, and reads it again
    /// (through the pipeline: scope-checked and recorded) if it wants. Call it from
    /// whatever changes the data; sessions not subscribed to `uri` get nothing.
    pub fn notify_resource_updated(&self, uri: impl Into<String>) {
        // No receiver (no session subscribed to anything) is not an error.
        let _ = self.inner.resource_updates.send(uri.into());
    }

    /// How many MCP sessions (or stdio connections) forward resource updates to their
    /// client: those with a subscription, until the session ends. A gauge for operators;
    /// a session that ended no longer counts, whether or not its resources changed since.
    pub fn subscribed_sessions(&self) -> usize {
        self.inner.resource_updates.receiver_count()
    }

    /// Where [`Server::notify_resource_updated`] announces a change, for a call's `Ctx`.
    pub(crate) fn resource_update_sender(&self) -> tokio::sync::broadcast::Sender<String> {
        self.inner.resource_updates.clone()
    }

    /// The changed resources, as [`Server::notify_resource_updated`] announces them.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.inner.resource_updates.subscribe()
    }

    /// Whether `credentials` still name a principal with the scopes of the resource `uri`
    /// (a subscription's check before each update: the token may have been revoked or
    /// have expired since the read that granted it).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) async fn may_still_read(&self, credentials: &Credentials, uri: &str) -> bool {
        // Never closed: a permit always comes.
        let _permit = self.inner.update_checks.acquire().await;
        let Ok(principal) = self.authenticate(credentials).await else {
            return false;
        };
        self.registry()
            .find_resource(uri)
            .is_some_and(|(i, _)| principal.has_scopes(self.registry().resources()[i].scopes()))
    }

    pub(crate) fn listing(&self) -> &Listing {
        &self.inner.listing
    }

    /// The rate limits.
    pub(crate) fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Who confirms destructive calls, and how a person is asked.
    pub(crate) fn confirmation(&self) -> &Confirmation {
        &self.inner.confirmation
    }

    /// Records of calls that ran while the sink could not write them.
    pub(crate) fn owed(&self) -> &Arc<crate::pipeline::Owed> {
        &self.inner.owed
    }

    /// Abandon every HTTP call still running (the HTTP server's shutdown drain ended and
    /// their answers can no longer be sent): a transaction of theirs that has not begun
    /// its `COMMIT` rolls back, and each is recorded as abandoned (499), with what
    /// committed before. Calls that begin later, and calls of other transports, go on.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn stop_running_calls(&self) {
        self.inner
            .calls_stopped
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut stop = self
            .inner
            .stop_http_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *stop).cancel();
    }

    /// Cancelled when the HTTP calls running then are abandoned
    /// ([`Server::stop_running_calls`]).
    pub(crate) fn http_calls_stop(&self) -> tokio_util::sync::CancellationToken {
        self.inner
            .stop_http_calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Abandon every stdio call, running or to come (`serve` over stdio stopped at once by
    /// a second signal: the process exits within moments): a transaction of theirs that
    /// has not begun its `COMMIT` rolls back, and each ends recorded as abandoned (499),
    /// with what committed before, so that what the process still writes before it exits
    /// is their records, not work without one.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) fn stop_stdio_calls(&self) {
        self.inner
            .stdio_calls_stopped
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// How many times the stdio calls were abandoned ([`Server::stop_stdio_calls`]).
    pub(crate) fn stdio_calls_stopped(&self) -> &Arc<std::sync::atomic::AtomicU64> {
        &self.inner.stdio_calls_stopped
    }

    /// How many times the running HTTP calls were abandoned
    /// ([`Server::stop_running_calls`]).
    pub(crate) fn calls_stopped(&self) -> &Arc<std::sync::atomic::AtomicU64> {
        &self.inner.calls_stopped
    }

    /// The audit sink, unless the trail is off.
    pub(crate) fn audit(&self) -> Option<&Arc<dyn AuditSink>> {
        self.inner.audit.as_ref()
    }

    /// Step 1: turn credentials into a principal, or refuse with 401.
    pub async fn authenticate(
        &self,
        credentials: &Credentials,
    ) -> Result<Arc<Principal>, ToolError> {
        match credentials {
            Credentials::Verified(principal) => Ok(Arc::clone(principal)),
            Credentials::Bearer(token) => match &self.inner.verifier {
                Some(verifier) => verifier.verify_shared(token).await,
                None => Err(ToolError::invalid_token(
                    "this server is configured to accept no tokens",
                )),
            },
            Credentials::None => match &self.inner.unauthenticated {
                Some(principal) => Ok(Arc::clone(principal)),
                None => Err(ToolError::missing_token()),
            },
        }
    }
}

/// A warning about how a server was built (authentication or the audit trail off, a
/// tool's state missing): a `tracing` warning where a subscriber is installed (the CLI's),
/// and on stderr where none is, so that a server built by hand, without a subscriber,
/// still says it (before, it said nothing).
fn warn_at_build(message: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::warn!("{message}");
    } else {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "aac-tools: WARNING: {message}");
    }
}
