//! The load generator: real MCP clients, over a server process's stdio or over
//! Streamable HTTP on loopback, calling the 150 tools in turn and checking every answer.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Barrier, Notify, Semaphore};

use crate::pipeline::BENCH_TOKEN;
use crate::stats::RunResult;
use crate::tools::{TOOL_COUNT, tool_name};
use crate::variant::{TransportKind, Variant};
use crate::work::call_arguments;

/// The protocol version the benchmark clients ask for.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// How long to warm up and to measure one scenario, and a bound on the calls made.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Calls made before measuring (per client), not counted.
    pub warmup_calls: u64,
    /// The measured window.
    pub measure: Duration,
    /// At most this many measured calls per client, whatever the window.
    pub max_calls: u64,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// The JSON-RPC `tools/call` request `id` for tool `index % 150`.
pub fn call_request(id: u64) -> String {
    let index = (id as usize) % TOOL_COUNT;
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": tool_name(index), "arguments": call_arguments(index, id)},
    })
    .to_string()
}

/// Check that `message` answers request `id` with the tool's success: no JSON-RPC
/// error, not `isError`, and the structured output of the right tool for this call.
pub fn check_answer(message: &Value, id: u64) -> io::Result<()> {
    if message.get("id").and_then(Value::as_u64) != Some(id) {
        return Err(bad(format!("answer to the wrong request: {message}")));
    }
    let result = message
        .get("result")
        .ok_or_else(|| bad(format!("not a result: {message}")))?;
    if result.get("isError") == Some(&Value::Bool(true)) {
        return Err(bad(format!("the call failed: {result}")));
    }
    let structured = &result["structuredContent"];
    let index = (id as usize) % TOOL_COUNT;
    if structured["id"].as_u64() != Some(id) || structured["tool"] != tool_name(index).as_str() {
        return Err(bad(format!("unexpected output: {result}")));
    }
    Ok(())
}

fn initialize_request(id: u64) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "aac-bench", "version": env!("CARGO_PKG_VERSION")},
        },
    })
    .to_string()
}

/// A JSON-RPC message that answers a request; `None` for a notification (log messages).
fn parse_answer(line: &str) -> io::Result<Option<Value>> {
    let message: Value =
        serde_json::from_str(line).map_err(|e| bad(format!("not JSON ({e}): {line}")))?;
    Ok(message.get("id").is_some().then_some(message))
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// A benchmark server running as a child process; killed when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// Where an HTTP server listens.
    pub addr: Option<SocketAddr>,
}

impl ServerProcess {
    /// Start `exe serve <variant> <transport> [audit-db]` (the `bench-all` binary serves
    /// when called so). Over HTTP, waits for the address it listens on.
    pub async fn spawn(
        exe: &Path,
        variant: Variant,
        transport: TransportKind,
        audit_db: Option<&Path>,
    ) -> io::Result<ServerProcess> {
        // `AAC_BENCH_SERVER_WRAPPER="valgrind --tool=callgrind"` runs the server under a
        // profiler (for `bench-all drive`).
        let wrapper = std::env::var("AAC_BENCH_SERVER_WRAPPER").unwrap_or_default();
        let mut wrapper = wrapper.split_whitespace();
        let mut command = match wrapper.next() {
            Some(program) => {
                let mut command = Command::new(program);
                command.args(wrapper).arg(exe);
                command
            }
            None => Command::new(exe),
        };
        command
            .arg("serve")
            .arg(variant.key())
            .arg(transport.as_str())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env("RUST_LOG", "error")
            .kill_on_drop(true);
        if let Some(path) = audit_db {
            command.arg(path);
        }
        let mut child = command.spawn()?;
        let mut addr = None;
        if transport == TransportKind::Http {
            let stdout = child.stdout.take().ok_or_else(|| bad("no stdout"))?;
            let mut lines = BufReader::new(stdout).lines();
            let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
                .await
                .map_err(|_| bad("the server did not say where it listens"))??
                .ok_or_else(|| bad("the server exited before listening"))?;
            let text = line
                .strip_prefix("listening ")
                .ok_or_else(|| bad(format!("unexpected first line: {line}")))?;
            addr = Some(
                text.parse()
                    .map_err(|_| bad(format!("bad address: {text}")))?,
            );
        }
        Ok(ServerProcess { child, addr })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Connect an MCP client to a stdio server (once).
    pub async fn stdio_client(&mut self) -> io::Result<StdioClient> {
        let stdin = self.child.stdin.take().ok_or_else(|| bad("stdin taken"))?;
        let stdout = self
            .child
            .stdout
            .take()
            .ok_or_else(|| bad("stdout taken"))?;
        let mut client = StdioClient {
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 1,
        };
        client.initialize().await?;
        Ok(client)
    }

    /// Ask the server to stop with SIGTERM (so that a profiler wrapping it writes its
    /// data), wait for it up to `grace`, then stop it.
    pub async fn terminate(mut self, grace: Duration) {
        let pid = self.pid().to_string();
        let asked = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .is_ok_and(|s| s.success());
        if asked {
            let _ = tokio::time::timeout(grace, self.child.wait()).await;
        }
        self.stop().await;
    }

    /// Wait (up to `patience`) for the server to end by itself, as a stdio server does
    /// once its client is dropped; then stop it.
    pub async fn finish(mut self, patience: Duration) {
        let _ = tokio::time::timeout(patience, self.child.wait()).await;
        self.stop().await;
    }

    /// Stop the server and wait for it.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// An MCP client over a child's stdin and stdout (newline-delimited JSON-RPC).
#[derive(Debug)]
pub struct StdioClient {
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl StdioClient {
    async fn send(&mut self, line: &str) -> io::Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.stdin.write_all(&buf).await?;
        self.stdin.flush().await
    }

    async fn recv(&mut self) -> io::Result<Value> {
        loop {
            let line = self
                .lines
                .next_line()
                .await?
                .ok_or_else(|| bad("the server closed stdout"))?;
            if let Some(message) = parse_answer(&line)? {
                return Ok(message);
            }
        }
    }

    async fn initialize(&mut self) -> io::Result<()> {
        self.send(&initialize_request(0)).await?;
        let answer = self.recv().await?;
        if answer.get("result").is_none() {
            return Err(bad(format!("initialize failed: {answer}")));
        }
        self.send(INITIALIZED).await
    }

    async fn call(&mut self) -> io::Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&call_request(id)).await?;
        let answer = self.recv().await?;
        check_answer(&answer, id)
    }

    /// One request at a time: send, wait for the answer, send the next.
    pub async fn sequential(&mut self, plan: Plan) -> io::Result<RunResult> {
        for _ in 0..plan.warmup_calls {
            self.call().await?;
        }
        let start = Instant::now();
        let deadline = start + plan.measure;
        let mut latencies = Vec::new();
        while latencies.len() < plan.max_calls as usize && Instant::now() < deadline {
            let t = Instant::now();
            self.call().await?;
            latencies.push(t.elapsed().as_nanos() as u64);
        }
        Ok(RunResult {
            calls: latencies.len() as u64,
            elapsed: start.elapsed(),
            latencies_ns: latencies,
        })
    }

    /// Up to `window` requests in flight: the writer sends whenever fewer are waiting,
    /// the reader takes the answers in whatever order they come.
    pub async fn pipelined(&mut self, plan: Plan, window: usize) -> io::Result<RunResult> {
        for _ in 0..plan.warmup_calls {
            self.call().await?;
        }
        let permits = Semaphore::new(window);
        let sent_at: Mutex<HashMap<u64, Instant>> = Mutex::new(HashMap::new());
        let sent = AtomicU64::new(0);
        let finished = AtomicBool::new(false);
        let done = Notify::new();
        let first_id = self.next_id;
        let start = Instant::now();
        let deadline = start + plan.measure;
        let stdin = &mut self.stdin;
        let lines = &mut self.lines;

        let writer = async {
            let mut id = first_id;
            while id - first_id < plan.max_calls && Instant::now() < deadline {
                permits.acquire().await.map_err(io::Error::other)?.forget();
                let mut line = call_request(id).into_bytes();
                line.push(b'\n');
                sent_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, Instant::now());
                stdin.write_all(&line).await?;
                stdin.flush().await?;
                id += 1;
                sent.store(id - first_id, Ordering::Release);
            }
            finished.store(true, Ordering::Release);
            done.notify_one();
            Ok::<u64, io::Error>(id)
        };
        let reader = async {
            let mut latencies = Vec::new();
            loop {
                if finished.load(Ordering::Acquire)
                    && latencies.len() as u64 == sent.load(Ordering::Acquire)
                {
                    break;
                }
                let line = tokio::select! {
                    line = lines.next_line() => line?.ok_or_else(|| bad("the server closed stdout"))?,
                    () = done.notified() => continue,
                };
                let received = Instant::now();
                let Some(answer) = parse_answer(&line)? else {
                    continue;
                };
                let id = answer.get("id").and_then(Value::as_u64).unwrap_or(0);
                let at = sent_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id)
                    .ok_or_else(|| bad(format!("answer to an unknown request: {answer}")))?;
                check_answer(&answer, id)?;
                latencies.push(received.duration_since(at).as_nanos() as u64);
                permits.add_permits(1);
            }
            Ok::<_, io::Error>(latencies)
        };
        let (end_id, latencies) = tokio::try_join!(writer, reader)?;
        self.next_id = end_id;
        Ok(RunResult {
            calls: latencies.len() as u64,
            elapsed: start.elapsed(),
            latencies_ns: latencies,
        })
    }
}

/// An MCP client over Streamable HTTP: one keep-alive HTTP/1.1 connection and one
/// session, requests one at a time.
#[derive(Debug)]
pub struct HttpClient {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    session: Option<String>,
    next_id: u64,
}

impl HttpClient {
    /// Connect to `addr` and open an MCP session (initialize, then initialized).
    pub async fn connect(addr: SocketAddr) -> io::Result<HttpClient> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(connection);
        let mut client = HttpClient {
            sender,
            authority: addr.to_string(),
            session: None,
            next_id: 1,
        };
        let (status, headers, body) = client.post(initialize_request(0)).await?;
        if status != StatusCode::OK {
            return Err(bad(format!(
                "initialize: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        let answer = find_answer(&headers, &body, 0)?;
        if answer.get("result").is_none() {
            return Err(bad(format!("initialize failed: {answer}")));
        }
        client.session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (status, _, body) = client.post(INITIALIZED.to_owned()).await?;
        if !status.is_success() {
            return Err(bad(format!(
                "initialized: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        Ok(client)
    }

    async fn post(&mut self, body: String) -> io::Result<(StatusCode, HeaderMap, Bytes)> {
        let mut request = Request::post("/mcp")
            .header("host", &self.authority)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", format!("Bearer {BENCH_TOKEN}"));
        if let Some(session) = &self.session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", PROTOCOL_VERSION);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(io::Error::other)?;
        self.sender.ready().await.map_err(io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(io::Error::other)?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(io::Error::other)?.to_bytes();
        Ok((parts.status, parts.headers, body))
    }

    /// One `tools/call`, checked.
    pub async fn call(&mut self) -> io::Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        let (status, headers, body) = self.post(call_request(id)).await?;
        if status != StatusCode::OK {
            return Err(bad(format!(
                "tools/call: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        check_answer(&find_answer(&headers, &body, id)?, id)
    }
}

/// The JSON-RPC answer to request `id` in a response body: the body itself for
/// `application/json`, or the `data:` of an event for `text/event-stream`.
pub fn find_answer(headers: &HeaderMap, body: &[u8], id: u64) -> io::Result<Value> {
    let is_sse = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let text = std::str::from_utf8(body).map_err(|_| bad("the body is not UTF-8"))?;
    if !is_sse {
        return serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e}): {text}")));
    }
    let mut data = String::new();
    let mut found = None;
    let mut check = |data: &mut String| {
        if !data.trim().is_empty()
            && let Ok(message) = serde_json::from_str::<Value>(data)
            && message.get("id").and_then(Value::as_u64) == Some(id)
        {
            found = Some(message);
        }
        data.clear();
    };
    for line in text.lines() {
        if line.is_empty() {
            check(&mut data);
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    check(&mut data);
    found.ok_or_else(|| {
        bad(format!(
            "no answer to request {id} in the event stream: {text}"
        ))
    })
}

/// `clients` concurrent HTTP clients, each with its own connection and session, each
/// calling in a loop: warm-up first, then the measured window, all clients together.
pub async fn http_run(addr: SocketAddr, clients: usize, plan: Plan) -> io::Result<RunResult> {
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        connected.push(HttpClient::connect(addr).await?);
    }
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut tasks = Vec::with_capacity(clients);
    for mut client in connected {
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            for _ in 0..plan.warmup_calls {
                client.call().await?;
            }
            barrier.wait().await;
            let start = Instant::now();
            let deadline = start + plan.measure;
            let mut latencies = Vec::new();
            while (latencies.len() as u64) < plan.max_calls && Instant::now() < deadline {
                let t = Instant::now();
                client.call().await?;
                latencies.push(t.elapsed().as_nanos() as u64);
            }
            Ok::<_, io::Error>((latencies, Instant::now()))
        }));
    }
    release_and_gather(&barrier, tasks).await
}

/// A client task's answer: its latencies in the measured window and when it ended.
pub type ClientRun = tokio::task::JoinHandle<io::Result<(Vec<u64>, Instant)>>;

/// Release every client waiting at `barrier` (the measured window starts now), then
/// gather their latencies into one result, from the release to the last one's end.
pub async fn release_and_gather(barrier: &Barrier, tasks: Vec<ClientRun>) -> io::Result<RunResult> {
    barrier.wait().await;
    let start = Instant::now();
    let mut all = Vec::new();
    let mut end = start;
    for task in tasks {
        let (latencies, finished) = task.await.map_err(io::Error::other)??;
        all.extend(latencies);
        end = end.max(finished);
    }
    Ok(RunResult {
        calls: all.len() as u64,
        elapsed: end.duration_since(start),
        latencies_ns: all,
    })
}
