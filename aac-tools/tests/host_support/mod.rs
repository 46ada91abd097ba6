//! A minimal Streamable HTTP MCP server for the host tests, written by hand (no rmcp, no
//! aac-tools): it answers `initialize`, `tools/list` and `tools/call` from fixed tool
//! definitions, counts every request per method and per tool, and can drop the connection
//! of a `tools/call` without answering, to play a transport failure.
//!
//! It runs on its own thread and runtime, on 127.0.0.1 at a free port, and stops on drop.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with a `tools/call` of one tool.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Answer with this `CallToolResult`.
    Answer(Value),
    /// Read the request, count it, and close the connection without a response.
    Drop,
    /// Drop the first `n` calls, then answer.
    DropThenAnswer(u32, Value),
    /// Answer with this HTTP status (a refusal such as 403 `insufficient_scope`), this
    /// `WWW-Authenticate` header if any, and this body (sent as JSON when it starts with `{`).
    Status {
        status: u16,
        www_authenticate: Option<String>,
        body: String,
    },
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The HTTP method.
    pub http_method: String,
    /// The JSON-RPC method (`initialize`, `tools/call`, …), if a JSON-RPC body came.
    pub method: Option<String>,
    /// `params` of the JSON-RPC message.
    pub params: Value,
    /// The `Authorization` header.
    pub authorization: Option<String>,
}

/// How the server runs, beyond its tools.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// If set, every request without `Authorization: Bearer <token>` gets a 401.
    pub token: Option<String>,
    /// If set, `initialize` answers with this `Mcp-Session-Id`.
    pub session: Option<String>,
    /// If set, `initialize` gets this status (and body) instead of an answer.
    pub refuse_initialize: Option<(u16, String)>,
}

#[derive(Default)]
struct State {
    seen: Vec<Seen>,
    calls: HashMap<String, u32>,
}

pub struct FakeServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeServer {
    /// Serve `tools` (MCP `Tool` objects); `behaviours` by tool name (default: answer
    /// `{"content": [{"type": "text", "text": "ok"}]}`); `token`: if set, every request
    /// without `Authorization: Bearer <token>` gets a 401.
    pub fn start(
        tools: Vec<Value>,
        behaviours: HashMap<String, Behaviour>,
        token: Option<&str>,
    ) -> FakeServer {
        let options = Options {
            token: token.map(str::to_owned),
            ..Options::default()
        };
        FakeServer::start_with(tools, behaviours, options)
    }

    /// [`FakeServer::start`] with every option.
    pub fn start_with(
        tools: Vec<Value>,
        behaviours: HashMap<String, Behaviour>,
        options: Options,
    ) -> FakeServer {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::new(Shared {
            tools,
            behaviours,
            options,
            state: state.clone(),
        });
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = TcpListener::from_std(std_listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => break,
                        accepted = listener.accept() => {
                            let Ok((stream, _)) = accepted else { continue };
                            let shared = shared.clone();
                            tokio::spawn(async move { shared.serve(stream).await });
                        }
                    }
                }
            });
        });
        FakeServer {
            addr,
            state,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// How many `tools/call` requests for `tool` arrived (answered or dropped).
    pub fn calls(&self, tool: &str) -> u32 {
        self.state
            .lock()
            .unwrap()
            .calls
            .get(tool)
            .copied()
            .unwrap_or(0)
    }

    /// How many `tools/call` requests arrived, for any tool.
    pub fn all_calls(&self) -> u32 {
        self.state.lock().unwrap().calls.values().sum()
    }

    /// Every request, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The `params` of every `tools/call`, in order.
    pub fn call_params(&self) -> Vec<Value> {
        self.seen()
            .into_iter()
            .filter(|s| s.method.as_deref() == Some("tools/call"))
            .map(|s| s.params)
            .collect()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Shared {
    tools: Vec<Value>,
    behaviours: HashMap<String, Behaviour>,
    options: Options,
    state: Arc<Mutex<State>>,
}

enum Reply {
    Json(Value),
    Status(u16, &'static str),
    /// A status with an optional `WWW-Authenticate` and a body.
    Refusal {
        status: u16,
        www_authenticate: Option<String>,
        body: String,
    },
    Hangup,
}

impl Shared {
    async fn serve(&self, mut stream: TcpStream) {
        // One request per connection: every reply closes it.
        let Some((head, body)) = read_request(&mut stream).await else {
            return;
        };
        let mut lines = head.lines();
        let http_method = lines
            .next()
            .and_then(|l| l.split(' ').next())
            .unwrap_or("")
            .to_owned();
        let authorization = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("authorization")
                .then(|| value.trim().to_owned())
        });
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        self.state.lock().unwrap().seen.push(Seen {
            http_method: http_method.clone(),
            method: method.clone(),
            params: params.clone(),
            authorization: authorization.clone(),
        });
        let reply = if let Some(token) = &self.options.token
            && authorization.as_deref() != Some(format!("Bearer {token}").as_str())
        {
            Reply::Status(401, "Unauthorized")
        } else if http_method != "POST" {
            Reply::Status(405, "Method Not Allowed")
        } else if method.as_deref() == Some("initialize")
            && let Some((status, body)) = &self.options.refuse_initialize
        {
            Reply::Refusal {
                status: *status,
                www_authenticate: None,
                body: body.clone(),
            }
        } else {
            self.answer(method.as_deref(), message.get("id").cloned(), &params)
        };
        let bytes = match reply {
            Reply::Hangup => return, // drop the stream: no status line, nothing
            Reply::Json(body) => {
                let session = match (&self.options.session, method.as_deref()) {
                    (Some(id), Some("initialize")) => format!("mcp-session-id: {id}\r\n"),
                    _ => String::new(),
                };
                let body = body.to_string();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{session}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
            }
            Reply::Refusal {
                status,
                www_authenticate,
                body,
            } => {
                let challenge = www_authenticate
                    .map(|c| format!("www-authenticate: {c}\r\n"))
                    .unwrap_or_default();
                let content_type = if body.starts_with('{') {
                    "application/json"
                } else {
                    "text/plain"
                };
                format!(
                    "HTTP/1.1 {status} Refused\r\ncontent-type: {content_type}\r\n{challenge}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
            }
            Reply::Status(401, text) => format!(
                "HTTP/1.1 401 {text}\r\nwww-authenticate: Bearer error=\"invalid_token\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            ),
            Reply::Status(code, text) => {
                format!("HTTP/1.1 {code} {text}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            }
        };
        let _ = stream.write_all(bytes.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    fn answer(&self, method: Option<&str>, id: Option<Value>, params: &Value) -> Reply {
        let Some(id) = id else {
            // A notification (`notifications/initialized`, `notifications/cancelled`).
            return Reply::Status(202, "Accepted");
        };
        let result = match method {
            Some("initialize") => json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "counting-server", "version": "0.0.0"}
            }),
            Some("tools/list") => json!({"tools": self.tools}),
            Some("tools/call") => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let known = self.tools.iter().any(|t| t["name"] == name.as_str());
                if !known {
                    return Reply::Json(json!({
                        "jsonrpc": "2.0", "id": id,
                        "error": {"code": -32602, "message": format!("unknown tool: {name}")}
                    }));
                }
                let n = {
                    let mut state = self.state.lock().unwrap();
                    let n = state.calls.entry(name.clone()).or_insert(0);
                    *n += 1;
                    *n
                };
                match self.behaviours.get(&name) {
                    Some(Behaviour::Drop) => return Reply::Hangup,
                    Some(Behaviour::DropThenAnswer(drops, _)) if n <= *drops => {
                        return Reply::Hangup;
                    }
                    Some(Behaviour::DropThenAnswer(_, result) | Behaviour::Answer(result)) => {
                        result.clone()
                    }
                    Some(Behaviour::Status {
                        status,
                        www_authenticate,
                        body,
                    }) => {
                        return Reply::Refusal {
                            status: *status,
                            www_authenticate: www_authenticate.clone(),
                            body: body.clone(),
                        };
                    }
                    None => json!({"content": [{"type": "text", "text": "ok"}]}),
                }
            }
            Some("ping") => json!({}),
            _ => {
                return Reply::Json(json!({
                    "jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": "method not found"}
                }));
            }
        };
        Reply::Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

/// A tool definition with the four hints given (absent when `None`).
pub fn tool(name: &str, title: &str, hints: [Option<bool>; 4], confirm: bool) -> Value {
    let keys = [
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    ];
    let mut annotations = serde_json::Map::new();
    for (key, value) in keys.iter().zip(hints) {
        if let Some(b) = value {
            annotations.insert((*key).to_owned(), Value::Bool(b));
        }
    }
    let mut properties = json!({"id": {"type": "string"}});
    let mut required = vec![json!("id")];
    if confirm {
        properties["confirm"] = json!({"type": "boolean"});
        required.push(json!("confirm"));
    }
    json!({
        "name": name,
        "title": title,
        "inputSchema": {"type": "object", "properties": properties, "required": required},
        "annotations": annotations,
    })
}
