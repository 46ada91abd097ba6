//! The pipeline alone, in process and without I/O: what one `tools/call` costs in
//! [`Server::call`] (authenticate, find the tool, scopes, confirm guard, validation,
//! dispatch, audit record), next to the same call dispatched by rmcp's macros and to the
//! bare handler. Shared by `cargo bench -p aac-bench` (divan) and `bench-all`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aac_tools::audit::{AuditError, AuditRecord, AuditSink};
use aac_tools::{BoxFuture, CallRequest, Credentials, Principal, Server, StaticTokens};
use rmcp::ServerHandler;
use rmcp::model::{CallToolRequestParams, CallToolResponse, NumberOrString};
use rmcp::service::{Peer, RequestContext, RoleServer, RunningService, serve_directly};
use serde_json::{Map, Value};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

use crate::aac_flavour::{self, SCOPE_READ, SCOPE_WRITE};
use crate::rmcp_flavour::{PerCallRouter, StoredRouter};
use crate::tools::{TOOL_COUNT, tool_name};
use crate::work::{BenchArgs, call_arguments, work};

/// The bearer token every aac-tools benchmark server accepts.
pub const BENCH_TOKEN: &str = "aac_bench_token";

/// The principal the benchmark token stands for: every scope the tools need.
pub fn bench_principal() -> Principal {
    Principal::new("bench", [SCOPE_READ, SCOPE_WRITE]).in_workspace("bench")
}

/// The token verifier of the aac-tools benchmark servers.
pub fn bench_verifier() -> StaticTokens {
    StaticTokens::new().with(BENCH_TOKEN, bench_principal())
}

/// An audit sink that keeps nothing and counts records: the pipeline's own cost of
/// building and handing over a record, without any storage behind it.
#[derive(Debug, Default, Clone)]
pub struct CountingSink {
    count: Arc<AtomicU64>,
}

impl CountingSink {
    /// The number of records received.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl AuditSink for CountingSink {
    fn ready(&self) -> Result<(), AuditError> {
        Ok(())
    }
    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        std::hint::black_box(&record);
        self.count.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { Ok(()) })
    }
}

/// One prepared call of each of the 150 tools.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments (with `confirm: true` for destructive tools).
    pub arguments: Map<String, Value>,
}

/// The 150 prepared calls, in tool order.
pub fn prepared_calls() -> Vec<PreparedCall> {
    (0..TOOL_COUNT)
        .map(|i| PreparedCall {
            name: tool_name(i),
            arguments: match call_arguments(i, i as u64) {
                Value::Object(map) => map,
                _ => unreachable!("call_arguments builds an object"),
            },
        })
        .collect()
}

/// Everything the in-process benchmarks call.
pub struct Fixture {
    /// The prepared calls.
    pub calls: Vec<PreparedCall>,
    /// aac-tools, audit disabled.
    pub aac_no_audit: Server,
    /// aac-tools, audit records built and handed to a sink that keeps nothing.
    pub aac_counting: Server,
    /// The counting sink of `aac_counting`.
    pub counting: CountingSink,
    /// The principal, as the HTTP layer hands it over after verifying the token.
    pub principal: Arc<Principal>,
    /// rmcp, stored router.
    pub rmcp_stored: StoredRouter,
    /// rmcp, router rebuilt per call.
    pub rmcp_per_call: PerCallRouter,
    peer: Peer<RoleServer>,
    _running: RunningService<RoleServer, StoredRouter>,
    _client_end: tokio::io::DuplexStream,
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture").finish_non_exhaustive()
    }
}

impl Default for Fixture {
    fn default() -> Fixture {
        Fixture::new()
    }
}

impl Fixture {
    /// Build the servers. Must run inside a tokio runtime (rmcp spawns its service task,
    /// whose peer the rmcp calls need).
    pub fn new() -> Fixture {
        let registry = aac_flavour::registry().expect("the benchmark tools register");
        assert_eq!(
            registry.len(),
            TOOL_COUNT,
            "every benchmark tool is registered"
        );
        let aac_no_audit = Server::builder(registry.clone())
            .verifier(bench_verifier())
            .audit_disabled()
            .build()
            .expect("the server builds");
        let counting = CountingSink::default();
        let aac_counting = Server::builder(registry)
            .verifier(bench_verifier())
            .audit(counting.clone())
            .build()
            .expect("the server builds");
        let (server_end, client_end) = tokio::io::duplex(64 * 1024);
        let running = serve_directly(StoredRouter::new(), server_end, None);
        let peer = running.peer().clone();
        Fixture {
            calls: prepared_calls(),
            aac_no_audit,
            aac_counting,
            counting,
            principal: Arc::new(bench_principal()),
            rmcp_stored: StoredRouter::new(),
            rmcp_per_call: PerCallRouter,
            peer,
            _running: running,
            _client_end: client_end,
        }
    }

    /// The `i`-th call (modulo 150).
    pub fn call(&self, i: usize) -> &PreparedCall {
        &self.calls[i % self.calls.len()]
    }

    /// One call through [`Server::call`] with an already verified principal (the path of
    /// Streamable HTTP, which verifies the token once per request).
    pub async fn aac_verified(&self, server: &Server, i: usize) -> bool {
        let call = self.call(i);
        let request = CallRequest::new(
            call.name.clone(),
            Some(Value::Object(call.arguments.clone())),
        )
        .credentials(Credentials::Verified(Arc::clone(&self.principal)));
        let response = server.call(request).await;
        let ok = response.error().is_none();
        std::hint::black_box(response.to_mcp_json());
        ok
    }

    /// One call through [`Server::call`] with a bearer token the server verifies.
    pub async fn aac_bearer(&self, server: &Server, i: usize) -> bool {
        let call = self.call(i);
        let request = CallRequest::new(
            call.name.clone(),
            Some(Value::Object(call.arguments.clone())),
        )
        .bearer(BENCH_TOKEN);
        let response = server.call(request).await;
        let ok = response.error().is_none();
        std::hint::black_box(response.to_mcp_json());
        ok
    }

    /// One call through rmcp's generated `call_tool` of `handler`.
    pub async fn rmcp<H: ServerHandler>(&self, handler: &H, i: usize) -> bool {
        let call = self.call(i);
        let params =
            CallToolRequestParams::new(call.name.clone()).with_arguments(call.arguments.clone());
        let context = RequestContext::new(NumberOrString::Number(i as i64), self.peer.clone());
        match handler.call_tool(params, context).await {
            Ok(CallToolResponse::Complete(result)) => {
                let ok = result.is_error != Some(true);
                std::hint::black_box(serde_json::to_value(result).is_ok()) && ok
            }
            _ => false,
        }
    }

    /// The floor: the handler's own work with no framework around it (deserialize the
    /// arguments, run, serialize the output).
    pub fn bare(&self, i: usize) -> bool {
        let call = self.call(i);
        let mut arguments = call.arguments.clone();
        arguments.remove("confirm");
        let Ok(args) = serde_json::from_value::<BenchArgs>(Value::Object(arguments)) else {
            return false;
        };
        let out = work("tool", args);
        std::hint::black_box(serde_json::to_value(out).is_ok())
    }

    /// `tools/list` of aac-tools through `Server::list_tools_json`, serialized.
    pub fn aac_list(&self) -> usize {
        let list = self.aac_no_audit.list_tools_json(Some(&self.principal));
        serde_json::to_string(&*list).map_or(0, |s| s.len())
    }

    /// `tools/list` of rmcp with the stored router, serialized as sent.
    pub fn rmcp_stored_list(&self) -> usize {
        serde_json::to_string(&self.rmcp_stored.list()).map_or(0, |s| s.len())
    }

    /// `tools/list` of rmcp rebuilding its router, serialized as sent.
    pub fn rmcp_per_call_list(&self) -> usize {
        serde_json::to_string(&self.rmcp_per_call.list()).map_or(0, |s| s.len())
    }
}

/// An MCP session over an in-memory stream, in process: the client writes JSON-RPC lines
/// and reads the answers, the server runs as a task of the same runtime. What the stdio
/// transport does per message (framing, JSON-RPC parsing and serialization, dispatch),
/// without pipes or threads.
#[derive(Debug)]
pub struct McpSession {
    write: WriteHalf<DuplexStream>,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    /// The 150 `tools/call` lines, prepared once.
    calls: Vec<String>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for McpSession {
    fn drop(&mut self) {
        self.server.abort();
    }
}

const LIST_REQUEST: &str = r#"{"jsonrpc":"2.0","id":0,"method":"tools/list","params":{}}"#;

impl McpSession {
    /// A session with an aac-tools server (through `aac_tools::mcp::serve_io`, with the
    /// benchmark token, as over stdio). Must run inside a tokio runtime.
    pub async fn aac(server: Server) -> std::io::Result<McpSession> {
        McpSession::start(|read, write| {
            tokio::spawn(async move {
                let _ = aac_tools::mcp::serve_io(server, Some(BENCH_TOKEN.to_owned()), read, write)
                    .await;
            })
        })
        .await
    }

    /// A session with an rmcp server.
    pub async fn rmcp<H: ServerHandler>(handler: H) -> std::io::Result<McpSession> {
        McpSession::start(|read, write| {
            tokio::spawn(async move {
                if let Ok(running) = rmcp::ServiceExt::serve(handler, (read, write)).await {
                    let _ = running.waiting().await;
                }
            })
        })
        .await
    }

    async fn start(
        spawn: impl FnOnce(
            ReadHalf<DuplexStream>,
            WriteHalf<DuplexStream>,
        ) -> tokio::task::JoinHandle<()>,
    ) -> std::io::Result<McpSession> {
        let (client, server_end) = tokio::io::duplex(256 * 1024);
        let (read, write) = tokio::io::split(server_end);
        let server = spawn(read, write);
        let (read, write) = tokio::io::split(client);
        let mut session = McpSession {
            write,
            lines: BufReader::new(read).lines(),
            // Request id 150 + i calls tool i.
            calls: (0..TOOL_COUNT as u64)
                .map(|i| crate::load::call_request(TOOL_COUNT as u64 + i) + "\n")
                .collect(),
            server,
        };
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": crate::load::PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "aac-bench", "version": "0"},
            },
        });
        let answer = session.round_trip(&(init.to_string() + "\n")).await?;
        if !answer.contains("\"result\"") {
            return Err(std::io::Error::other(format!(
                "initialize failed: {answer}"
            )));
        }
        session
            .write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await?;
        Ok(session)
    }

    async fn round_trip(&mut self, line: &str) -> std::io::Result<String> {
        self.write.write_all(line.as_bytes()).await?;
        loop {
            let answer = self
                .lines
                .next_line()
                .await?
                .ok_or_else(|| std::io::Error::other("the server closed the stream"))?;
            // Notifications (log messages) have no id.
            if answer.contains("\"id\":") {
                return Ok(answer);
            }
        }
    }

    /// One `tools/call` of tool `i % 150`; true when it is the tool's success (checked
    /// on the text: the answer's id, `isError: false` and the tool's name in its output).
    pub async fn call(&mut self, i: usize) -> bool {
        let index = i % TOOL_COUNT;
        let line = std::mem::take(&mut self.calls[index]);
        let answer = self.round_trip(&line).await;
        self.calls[index] = line;
        let Ok(answer) = answer else { return false };
        let id = format!("\"id\":{}", TOOL_COUNT + index);
        let tool = format!("\"tool\":\"{}\"", tool_name(index));
        answer.contains(&id) && answer.contains("\"isError\":false") && answer.contains(&tool)
    }

    /// One `tools/list`; the number of tools listed (counted on the text).
    pub async fn list(&mut self) -> usize {
        match self.round_trip(&(LIST_REQUEST.to_owned() + "\n")).await {
            Ok(answer) => answer.matches("\"inputSchema\"").count(),
            Err(_) => 0,
        }
    }
}
