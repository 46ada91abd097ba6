//! The server: one transport-agnostic pipeline that stdio, Streamable HTTP and plain HTTP
//! all call, in the order of "the path of one call".

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::audit::{AuditRecord, AuditSink, Check, Outcome, redact_arguments};
use crate::context::{ClientPeer, Ctx, Transport};
use crate::error::{Status, ToolError};
use crate::principal::{Principal, TokenVerifier};
use crate::registry::{Registry, ToolEntry};
use crate::state::StateMap;
use crate::tool::{Call, ToolOutput};

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
    tool: String,
    arguments: Option<Value>,
    credentials: Credentials,
    transport: Transport,
    request_id: Option<String>,
    peer: Option<Arc<dyn ClientPeer>>,
    cancel: Option<CancellationToken>,
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
        }
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
}

impl CallResponse {
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

/// The MCP `CallToolResult` JSON of a refusal or failure: `isError: true` and one text
/// content holding `{"error", "reason", "status"}`, with **no `structuredContent`**.
///
/// Why no `structuredContent`: a client may validate `structuredContent` against the
/// tool's `outputSchema` even when `isError` is true (the TypeScript SDK 1.x does, and
/// with it the Inspector and most desktop hosts), so an error object there turns every
/// refusal of a tool with an output schema into a protocol error (`-32602 Structured
/// content does not match the tool's output schema`) and the model never reads the
/// message. The spec lets an error result leave `structuredContent` out; every client
/// shows text content. Machine readers parse the text: it is the same JSON as the REST
/// error body. This is the one rule for every transport and every refusal; the rmcp
/// conversion (`mcp::handler::call_tool_result`) writes the same JSON.
pub fn error_result_json(err: &ToolError) -> Value {
    serde_json::json!({
        "content": [{"type": "text", "text": err.to_json().to_string()}],
        "isError": true,
    })
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
}

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

    /// Share `value` with every tool that takes `State<T>` (or, for a database, a data
    /// handle).
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> ServerBuilder {
        self.state.insert(Arc::new(value));
        self
    }

    /// Build the server.
    pub fn build(self) -> Result<Server, BuildError> {
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
            tracing::warn!(
                "unauthenticated calls are ALLOWED on this server \
                 (`danger_allow_unauthenticated`): anyone who reaches it acts as the configured principal"
            );
        }
        if audit.is_none() {
            tracing::warn!("the audit trail is disabled on this server");
        }
        let visible: Vec<usize> = self
            .registry
            .tools()
            .iter()
            .enumerate()
            .filter(|(_, t)| !self.read_only_mode || t.def().is_read_only())
            .map(|(i, _)| i)
            .collect();
        let mut visible_scopes: Vec<&'static str> = visible
            .iter()
            .flat_map(|&i| self.registry.tools()[i].def().scopes().iter().copied())
            .collect();
        visible_scopes.sort_unstable();
        visible_scopes.dedup();
        let full_list = Arc::new(list_json(&self.registry, &visible));
        Ok(Server {
            inner: Arc::new(Inner {
                registry: self.registry,
                name: self.name,
                version: self.version,
                verifier: self.verifier,
                unauthenticated: self.unauthenticated,
                audit,
                read_only_mode: self.read_only_mode,
                filter_list_by_scope: self.filter_list_by_scope,
                state: self.state,
                visible,
                visible_scopes,
                full_list,
                filtered_lists: Mutex::new(HashMap::new()),
            }),
        })
    }
}

/// The `tools/list` result JSON of the tools at these positions.
fn list_json(registry: &Registry, positions: &[usize]) -> Value {
    let tools = registry.tools();
    serde_json::json!({ "tools": positions.iter().map(|&i| tools[i].json().clone()).collect::<Vec<_>>() })
}

/// How many distinct filtered lists [`Server::list_tools_json`] keeps.
const FILTERED_LISTS_KEPT: usize = 64;

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

struct Inner {
    registry: Registry,
    name: String,
    version: String,
    verifier: Option<Arc<dyn TokenVerifier>>,
    unauthenticated: Option<Arc<Principal>>,
    audit: Option<Arc<dyn AuditSink>>,
    read_only_mode: bool,
    filter_list_by_scope: bool,
    state: StateMap,
    visible: Vec<usize>,
    /// Every scope some listed tool requires.
    visible_scopes: Vec<&'static str>,
    /// `tools/list` of every listed tool, built once.
    full_list: Arc<Value>,
    /// `tools/list` of a subset (the scope filter), by the subset's positions as a bit set.
    filtered_lists: Mutex<HashMap<Vec<u64>, Arc<Value>>>,
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

/// What the pipeline learnt about an attempt, for its audit record.
struct Trace<'a> {
    principal: Option<Arc<Principal>>,
    entry: Option<&'a ToolEntry>,
    /// The redacted arguments, computed before the handler took the arguments.
    redacted: Option<Value>,
}

/// One attempt in progress. If it is dropped before its record was handed to the sink
/// (the caller's future was dropped: a client went away), it records the attempt as
/// abandoned, so that every attempt leaves exactly one record.
struct Attempt<'a> {
    server: &'a Server,
    tool: String,
    arguments: Option<Value>,
    timestamp: String,
    transport: Transport,
    request_id: Option<String>,
    started: Instant,
    trace: Trace<'a>,
    recorded: bool,
}

impl Attempt<'_> {
    fn record(
        &mut self,
        result: &Result<ToolOutput, ToolError>,
        check: Option<Check>,
    ) -> AuditRecord {
        let arguments = match self.trace.redacted.take() {
            Some(redacted) => redacted,
            None => redacted_arguments(self.trace.entry, self.arguments.as_ref()),
        };
        build_record(
            &self.tool,
            result,
            check,
            &self.trace,
            std::mem::take(&mut self.timestamp),
            self.transport,
            self.request_id.clone(),
            arguments,
            self.started,
        )
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.recorded {
            return;
        }
        let Some(sink) = self.server.inner.audit.clone() else {
            return;
        };
        let abandoned = ToolError::new(
            Status::Internal,
            "cancelled",
            "the call was abandoned before it finished (the client went away)",
        );
        let mut record = self.record(&Err(abandoned), None);
        // Whether the handler finished is unknown: an error, with nginx's
        // "client closed request" status.
        record.outcome = Outcome::Error;
        record.status = 499;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(err) = sink.record(record).await {
                        tracing::error!(error = %err, "the record of an abandoned call could not be written");
                    }
                });
            }
            Err(_) => tracing::error!(
                record = %serde_json::to_string(&record).unwrap_or_default(),
                "a call was abandoned outside a tokio runtime; its audit record could not be written"
            ),
        }
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
        let filter = self.inner.filter_list_by_scope;
        self.inner
            .visible
            .iter()
            .map(move |&i| (i, &tools[i]))
            .filter(move |(_, t)| {
                !filter || principal.is_some_and(|p| p.has_scopes(t.def().scopes()))
            })
    }

    /// Whether `tools/list` depends on the caller
    /// ([`ServerBuilder::filter_list_by_scope`]).
    pub fn filters_list_by_scope(&self) -> bool {
        self.inner.filter_list_by_scope
    }

    /// The `tools/list` result JSON for `principal`: `{"tools": [...]}`, shared.
    ///
    /// The list of every listed tool is built once, when the server is built; with
    /// [`ServerBuilder::filter_list_by_scope`], a principal that lacks some scope gets a
    /// list built for its subset of tools, kept for the next principal with the same
    /// subset (up to 64 subsets).
    pub fn list_tools_json(&self, principal: Option<&Principal>) -> Arc<Value> {
        let inner = &self.inner;
        if !inner.filter_list_by_scope
            || principal.is_some_and(|p| p.has_scopes(&inner.visible_scopes))
        {
            return Arc::clone(&inner.full_list);
        }
        let positions: Vec<usize> = self.listed_tools(principal).map(|(i, _)| i).collect();
        if positions.len() == inner.visible.len() {
            return Arc::clone(&inner.full_list);
        }
        let mut key = vec![0u64; inner.registry.len().div_ceil(64)];
        for &i in &positions {
            key[i / 64] |= 1 << (i % 64);
        }
        let mut lists = inner
            .filtered_lists
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(list) = lists.get(&key) {
            return Arc::clone(list);
        }
        let list = Arc::new(list_json(&inner.registry, &positions));
        if lists.len() >= FILTERED_LISTS_KEPT {
            lists.clear();
        }
        lists.insert(key, Arc::clone(&list));
        list
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

    /// Steps 2 and 3: find the tool (404 when unknown or hidden by read-only mode) and
    /// check the principal's scopes (403 naming every scope the tool needs).
    ///
    /// The HTTP layer calls this before handing a request to the MCP layer, to answer a
    /// real 403 that makes clients step up.
    pub fn authorize(
        &self,
        principal: &Principal,
        tool: &str,
    ) -> Result<&ToolEntry, (Check, ToolError)> {
        let entry = self
            .inner
            .registry
            .get(tool)
            .ok_or_else(|| (Check::FindTool, ToolError::unknown_tool(tool)))?;
        if self.inner.read_only_mode && !entry.def().is_read_only() {
            return Err((Check::ReadOnlyMode, ToolError::unknown_tool(tool)));
        }
        let scopes = entry.def().scopes();
        if !principal.has_scopes(scopes) {
            return Err((Check::Scope, ToolError::insufficient_scope(scopes)));
        }
        Ok(entry)
    }

    /// Run one `tools/call` attempt through every check, the handler and the audit trail.
    ///
    /// If the returned future is dropped before it completes (a transport whose client
    /// went away), the attempt is still recorded, in the background, as an `error` with
    /// reason `cancelled` and status 499.
    pub async fn call(&self, request: CallRequest) -> CallResponse {
        let started = Instant::now();
        let CallRequest {
            tool,
            arguments,
            credentials,
            transport,
            request_id,
            peer,
            cancel,
        } = request;
        let mut attempt = Attempt {
            server: self,
            tool,
            arguments,
            // Only a record needs the time of day.
            timestamp: if self.inner.audit.is_some() {
                now_rfc3339()
            } else {
                String::new()
            },
            transport,
            request_id,
            started,
            trace: Trace {
                principal: None,
                entry: None,
                redacted: None,
            },
            recorded: false,
        };

        let result = self
            .run(
                &attempt.tool,
                &mut attempt.arguments,
                &credentials,
                transport,
                attempt.request_id.clone(),
                peer,
                cancel,
                &mut attempt.trace,
            )
            .await;

        let (result, check) = match result {
            Ok(output) => (Ok(output), None),
            Err((check, err)) => (Err(err), Some(check)),
        };
        match &self.inner.audit {
            None => {
                attempt.recorded = true;
                CallResponse { result, check }
            }
            Some(sink) => {
                let record = attempt.record(&result, check);
                let written = sink.record(record);
                attempt.recorded = true;
                match written.await {
                    Ok(()) => CallResponse { result, check },
                    Err(err) => {
                        tracing::error!(tool = %attempt.tool, error = %err, "audit record could not be written; answering 503");
                        CallResponse {
                            result: Err(ToolError::audit_unavailable(err)),
                            check: Some(Check::Audit),
                        }
                    }
                }
            }
        }
    }

    /// Record an attempt that a transport refused before it reached [`Server::call`]
    /// (for example the HTTP layer's 401 and 403). Returns the error to answer: `error`
    /// itself, or 503 `audit_unavailable` if the record could not be written.
    #[allow(clippy::too_many_arguments)]
    pub async fn record_refusal(
        &self,
        tool: &str,
        arguments: Option<&Value>,
        principal: Option<&Arc<Principal>>,
        transport: Transport,
        request_id: Option<String>,
        check: Check,
        error: ToolError,
    ) -> ToolError {
        let started = Instant::now();
        let trace = Trace {
            principal: principal.cloned(),
            entry: self.inner.registry.get(tool),
            redacted: None,
        };
        let result = Err(error);
        let record = build_record(
            tool,
            &result,
            Some(check),
            &trace,
            now_rfc3339(),
            transport,
            request_id,
            redacted_arguments(trace.entry, arguments),
            started,
        );
        let Err(error) = result else { unreachable!() };
        match &self.inner.audit {
            Some(sink) => match sink.record(record).await {
                Ok(()) => error,
                Err(err) => ToolError::audit_unavailable(err),
            },
            None => error,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run<'a>(
        &'a self,
        tool: &str,
        arguments: &mut Option<Value>,
        credentials: &Credentials,
        transport: Transport,
        request_id: Option<String>,
        peer: Option<Arc<dyn ClientPeer>>,
        cancel: Option<CancellationToken>,
        trace: &mut Trace<'a>,
    ) -> Result<ToolOutput, (Check, ToolError)> {
        // 1. authenticate
        let principal = self
            .authenticate(credentials)
            .await
            .map_err(|e| (Check::Authenticate, e))?;
        trace.principal = Some(Arc::clone(&principal));
        // 2. find the tool, 3. scopes
        trace.entry = self.inner.registry.get(tool);
        let entry = self.authorize(&principal, tool)?;
        let def = entry.def();
        // 4. confirm guard
        if def.is_destructive() {
            let confirmed = matches!(
                arguments.as_ref().and_then(|a| a.get("confirm")),
                Some(Value::Bool(true))
            );
            if !confirmed {
                return Err((Check::Confirm, ToolError::confirm_required()));
            }
        }
        // 5. validate against the advertised schema, before deserialization (the
        // boolean check is the fast path; the first error is looked for only on failure)
        let empty = Value::Object(Map::new());
        let instance = arguments.as_ref().unwrap_or(&empty);
        if !entry.validator().is_valid(instance)
            && let Err(err) = entry.validator().validate(instance)
        {
            let pointer = argument_pointer(&err);
            return Err((Check::Validate, ToolError::invalid_arguments(&pointer, err)));
        }
        // The record keeps the arguments redacted; the handler takes them as they are.
        if self.inner.audit.is_some() {
            trace.redacted = Some(redacted_arguments(trace.entry, arguments.as_ref()));
        }
        let mut handler_args = match arguments.take() {
            Some(Value::Object(map)) => Some(map),
            _ => None,
        };
        if def.is_destructive()
            && let Some(map) = &mut handler_args
        {
            map.remove("confirm");
        }
        // 7 (before 6): fail closed if the audit trail cannot take the record
        if let Some(sink) = &self.inner.audit
            && let Err(err) = sink.ready()
        {
            return Err((Check::Audit, ToolError::audit_unavailable(err)));
        }
        // 6. run
        let ctx = Ctx::new(
            def.name(),
            principal,
            transport,
            request_id,
            peer,
            cancel.unwrap_or_default(),
        );
        let call = Call {
            arguments: handler_args,
            ctx,
            state: self.inner.state.clone(),
        };
        let output = CatchUnwind((def.handler())(call))
            .await
            .unwrap_or_else(|| {
                Err(ToolError::internal(format!(
                    "the tool `{}` panicked",
                    def.name()
                )))
            })
            .map_err(|e| (Check::Handler, e))?;
        Ok(output.finish(entry.wrap_output()))
    }
}

#[allow(clippy::too_many_arguments)]
fn build_record(
    tool: &str,
    result: &Result<ToolOutput, ToolError>,
    check: Option<Check>,
    trace: &Trace<'_>,
    timestamp: String,
    transport: Transport,
    request_id: Option<String>,
    arguments: Value,
    started: Instant,
) -> AuditRecord {
    let (outcome, reason, status) = match result {
        Ok(_) => (Outcome::Success, None, 200),
        Err(err) => {
            let refused = check != Some(Check::Handler)
                || matches!(err.status(), Status::Unauthorized | Status::Forbidden);
            let outcome = if refused {
                Outcome::Denied
            } else {
                Outcome::Error
            };
            (outcome, Some(err.reason().to_owned()), err.status().code())
        }
    };
    AuditRecord {
        tool: tool.to_owned(),
        outcome,
        reason,
        check,
        status,
        scopes_provided: trace
            .principal
            .as_ref()
            .map(|p| p.scopes().map(str::to_owned).collect())
            .unwrap_or_default(),
        timestamp,
        principal: trace.principal.as_ref().map(|p| p.subject().to_owned()),
        workspace: trace
            .principal
            .as_ref()
            .and_then(|p| p.workspace().map(str::to_owned)),
        transport: transport.as_str().to_owned(),
        request_id,
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        access_level: trace.entry.map(|e| e.def().access_level()),
        arguments,
    }
}

/// The arguments as an audit record keeps them: redacted but for the tool's audit fields.
fn redacted_arguments(entry: Option<&ToolEntry>, arguments: Option<&Value>) -> Value {
    let keep = entry.map_or(&[][..], |e| e.def().audit_fields());
    match arguments {
        Some(Value::Object(map)) => redact_arguments(Some(map), keep),
        Some(other) => redact_arguments(
            Some(&Map::from_iter([("$".to_owned(), other.clone())])),
            &[],
        ),
        None => redact_arguments(None, keep),
    }
}

/// The JSON pointer of a validation error: where the offending value is, or for a missing
/// or unexpected property, where that property is (or would be).
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

/// Now, RFC 3339 in UTC with microseconds: `2025-06-22T15:30:00.123456Z`.
pub(crate) fn now_rfc3339() -> String {
    rfc3339_micros(time::OffsetDateTime::now_utc())
}

/// `at` in UTC, RFC 3339 with microseconds. Written digit by digit: this runs for every
/// audit record, and `time`'s general formatter costs several times more.
fn rfc3339_micros(at: time::OffsetDateTime) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
    );
    let at = at.to_offset(time::UtcOffset::UTC);
    let Ok(year) = u32::try_from(at.year()) else {
        return at
            .format(FORMAT)
            .unwrap_or_else(|_| "1970-01-01T00:00:00.000000Z".to_owned());
    };
    if year > 9999 {
        return at
            .format(FORMAT)
            .unwrap_or_else(|_| "1970-01-01T00:00:00.000000Z".to_owned());
    }
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |start: usize, width: usize, mut value: u32| {
        for i in (start..start + width).rev() {
            text[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, u32::from(u8::from(at.month())));
    put(8, 2, u32::from(at.day()));
    put(11, 2, u32::from(at.hour()));
    put(14, 2, u32::from(at.minute()));
    put(17, 2, u32::from(at.second()));
    put(20, 6, at.microsecond());
    text.iter().map(|&b| char::from(b)).collect()
}

/// Polls a future, turning a panic into `None` so that a panicking handler still leaves
/// its audit record and the server keeps serving.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Some(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339_micros;

    #[test]
    fn timestamps_are_rfc3339_with_microseconds() {
        use time::macros::datetime;
        assert_eq!(
            rfc3339_micros(datetime!(2025-06-22 15:30:00.123456 UTC)),
            "2025-06-22T15:30:00.123456Z"
        );
        assert_eq!(
            rfc3339_micros(datetime!(0987-01-02 03:04:05.000007 UTC)),
            "0987-01-02T03:04:05.000007Z"
        );
        assert_eq!(
            rfc3339_micros(datetime!(2025-12-31 23:59:59.999999 -01:00)),
            "2026-01-01T00:59:59.999999Z"
        );
    }
}
