//! The MCP layer's `tools/list` is the registry's tool objects exactly (the MCP layer
//! builds its own tool values from the registry's parts and shares its schemas), its
//! validators work from the first call, and a schema that does not compile still stops
//! the start-up.

#![cfg(feature = "mcp")]

use std::borrow::Cow;

use aac_tools::{Principal, Registry, RegistryError, Server, StaticTokens, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

mod listed {
    use super::*;

    #[derive(Deserialize, JsonSchema)]
    pub(crate) struct Lookup {
        /// The issue's number.
        pub(crate) id: u32,
        /// Labels to match.
        #[serde(default)]
        pub(crate) tags: Vec<String>,
    }

    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Found {
        pub(crate) id: u32,
    }

    /// Finds an issue.
    #[mcp_tool(read_only, idempotent, scope = "issues:read", title = "Find an issue")]
    pub(crate) async fn find_issue(args: Lookup) -> Result<Found, ToolError> {
        let _ = args.tags;
        Ok(Found { id: args.id })
    }

    /// Counts issues: a number, which the tool object wraps in `{"result": …}`.
    #[mcp_tool(read_only, scope = "issues:read", rate = "30/min")]
    pub(crate) async fn count_issues() -> Result<u64, ToolError> {
        Ok(3)
    }

    /// Deletes an issue.
    #[mcp_tool(destructive, scope = "issues:delete", confirm = "user")]
    pub(crate) async fn drop_issue(args: Lookup) -> Result<Found, ToolError> {
        Ok(Found { id: args.id })
    }
}

mod broken {
    use super::*;

    /// Arguments whose schema no validator can compile.
    #[derive(Deserialize)]
    pub(crate) struct Odd {
        #[allow(dead_code)]
        pub(crate) x: u32,
    }

    impl JsonSchema for Odd {
        fn schema_name() -> Cow<'static, str> {
            "Odd".into()
        }
        fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
            schemars::json_schema!({
                "type": "object",
                "properties": {"x": {"type": "not-a-type"}}
            })
        }
    }

    /// Cannot be served.
    #[mcp_tool(read_only, scope = "odd:read")]
    pub(crate) async fn odd_tool(args: Odd) -> Result<u32, ToolError> {
        Ok(args.x)
    }
}

fn server() -> Server {
    let registry = Registry::collect_module(&format!("{}::listed", module_path!())).unwrap();
    Server::builder(registry)
        .verifier(StaticTokens::new().with(
            "all",
            Principal::new("all", ["issues:read", "issues:delete"]),
        ))
        .audit_disabled()
        .build()
        .unwrap()
}

struct Session {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
}

impl Session {
    async fn start(server: Server) -> Session {
        let (client, server_end) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server_end);
        tokio::spawn(async move {
            let _ = aac_tools::mcp::serve_io(server, Some("all".to_owned()), read, write).await;
        });
        let (read, write) = tokio::io::split(client);
        let mut session = Session {
            lines: BufReader::new(read).lines(),
            write,
        };
        session
            .request(
                1,
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}),
            )
            .await;
        session
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        session
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.unwrap();
    }

    async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self.lines.next_line().await.unwrap().expect("an answer");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }
}

#[tokio::test]
async fn tools_list_over_mcp_is_the_registry_s_tool_objects() {
    let server = server();
    let registry: Registry = server.registry().clone();
    let mut session = Session::start(server).await;
    let list = session.request(2, "tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().expect("a list");
    assert_eq!(tools.len(), 3);
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        let entry = registry.get(name).expect("a registered tool");
        assert_eq!(tool, entry.json(), "{name}");
        assert_eq!(&tool["inputSchema"], entry.input_schema(), "{name}");
    }
    // What each kind of tool carries, as sent.
    let find = &tools.iter().find(|t| t["name"] == "find_issue").unwrap();
    assert_eq!(find["title"], "Find an issue");
    assert_eq!(find["outputSchema"]["type"], "object");
    let count = &tools.iter().find(|t| t["name"] == "count_issues").unwrap();
    assert_eq!(count["outputSchema"]["required"], json!(["result"]));
    assert_eq!(
        count["_meta"]["aac-tools.dev/rate"],
        json!({"count": 30, "per_seconds": 60})
    );
    let drop = &tools.iter().find(|t| t["name"] == "drop_issue").unwrap();
    assert_eq!(drop["_meta"]["aac-tools.dev/confirm"], "user");
    assert_eq!(
        drop["inputSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
}

#[tokio::test]
async fn arguments_are_validated_from_the_first_call() {
    let mut session = Session::start(server()).await;
    // The first call of the tool is refused for its arguments, before its handler.
    let refused = session
        .request(
            2,
            "tools/call",
            json!({"name": "find_issue", "arguments": {"id": "seven"}}),
        )
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let error: Value =
        serde_json::from_str(refused["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(error["reason"], "invalid_arguments", "{refused}");
    assert_eq!(error["status"], 400, "{refused}");
    let found = session
        .request(
            3,
            "tools/call",
            json!({"name": "find_issue", "arguments": {"id": 7}}),
        )
        .await;
    assert_eq!(found["result"]["structuredContent"], json!({"id": 7}));
}

#[test]
fn a_schema_that_does_not_compile_stops_the_start_up() {
    let err = Registry::collect_module(&format!("{}::broken", module_path!())).unwrap_err();
    match err {
        RegistryError::InvalidSchema { tool, why } => {
            assert_eq!(tool, "odd_tool");
            assert!(why.contains("does not compile"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

mod alike {
    use super::*;

    #[derive(Deserialize, JsonSchema)]
    pub(crate) struct Key {
        /// Which one.
        pub(crate) id: u32,
    }

    #[derive(Deserialize, JsonSchema)]
    pub(crate) struct Other {
        /// Something else.
        pub(crate) name: String,
    }

    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Done {
        pub(crate) id: u32,
    }

    /// Reads one.
    #[mcp_tool(read_only, scope = "alike:read")]
    pub(crate) async fn read_one(args: Key) -> Result<Done, ToolError> {
        Ok(Done { id: args.id })
    }

    /// Reads another, with the same arguments.
    #[mcp_tool(read_only, scope = "alike:read")]
    pub(crate) async fn read_two(args: Key) -> Result<Done, ToolError> {
        Ok(Done { id: args.id })
    }

    /// Deletes one: the same arguments, and `confirm`.
    #[mcp_tool(destructive, scope = "alike:delete")]
    pub(crate) async fn delete_one(args: Key) -> Result<Done, ToolError> {
        Ok(Done { id: args.id })
    }

    /// Takes other arguments.
    #[mcp_tool(read_only, scope = "alike:read")]
    pub(crate) async fn name_one(args: Other) -> Result<Done, ToolError> {
        Ok(Done {
            id: args.name.len() as u32,
        })
    }
}

/// Tools with the same schemas hold one copy of each, and one validator, as rmcp holds
/// one schema per type; each still lists and validates as its own.
#[tokio::test]
async fn tools_with_the_same_schemas_share_them_and_their_validator() {
    let registry = Registry::collect_module(&format!("{}::alike", module_path!())).unwrap();
    assert_eq!(registry.len(), 4);
    // Input: `Key` (twice), `Key` with `confirm`, `Other`; output: `Done` for all four.
    assert_eq!(registry.__distinct_schemas(), (3, 1, 3));
    let one = registry.get("read_one").unwrap().json();
    let two = registry.get("read_two").unwrap().json();
    assert_eq!(one["inputSchema"], two["inputSchema"]);
    assert_eq!(one["name"], "read_one");
    assert_eq!(two["name"], "read_two");
    let delete = registry.get("delete_one").unwrap().json();
    assert_eq!(
        delete["inputSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    assert!(one["inputSchema"]["properties"].get("confirm").is_none());

    let server = Server::builder(registry)
        .verifier(
            StaticTokens::new().with("all", Principal::new("all", ["alike:read", "alike:delete"])),
        )
        .audit_disabled()
        .build()
        .unwrap();
    let mut session = Session::start(server).await;
    // The shared validator refuses for each tool, and lets each tool's good call through.
    for (n, tool) in ["read_one", "read_two"].into_iter().enumerate() {
        let id = 10 + 2 * n as u64;
        let refused = session
            .request(
                id,
                "tools/call",
                json!({"name": tool, "arguments": {"id": "x"}}),
            )
            .await;
        assert_eq!(refused["result"]["isError"], true, "{refused}");
        let done = session
            .request(
                id + 1,
                "tools/call",
                json!({"name": tool, "arguments": {"id": 4}}),
            )
            .await;
        assert_eq!(
            done["result"]["structuredContent"],
            json!({"id": 4}),
            "{done}"
        );
    }
    let refused = session
        .request(
            20,
            "tools/call",
            json!({"name": "name_one", "arguments": {"id": 4}}),
        )
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
}
