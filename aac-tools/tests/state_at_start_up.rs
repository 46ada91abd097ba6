//! A tool, resource or prompt that takes shared state (or a data handle) the server was
//! never given is named when the server starts, rather than found by its first caller's
//! 500.

use std::io::Write;
use std::sync::{Arc, Mutex};

use aac_tools::audit::MemorySink;
use aac_tools::sqlite::{Database, Db};
use aac_tools::{
    CallRequest, Completion, Credentials, Principal, PromptMessage, Registry, Server,
    ServerBuilder, State, Text, ToolError, access::Read, mcp_prompt, mcp_resource, mcp_tool,
};

struct Greeting {
    text: &'static str,
}

/// Say hello.
#[mcp_tool(read_only, scope = "t:read")]
async fn greet(greeting: State<Greeting>) -> Result<Text, ToolError> {
    Ok(Text(greeting.text.to_owned()))
}

/// Count the rows of a table.
#[mcp_tool(read_only, scope = "t:read")]
async fn count(db: Db<Read>) -> Result<Text, ToolError> {
    let n: i64 = db
        .run(|tx| Ok(tx.conn().query_row("SELECT 1", [], |r| r.get(0))?))
        .await?;
    Ok(Text(n.to_string()))
}

/// The greeting, as a resource.
#[mcp_resource(uri = "t://greeting", scope = "t:read")]
async fn greeting(greeting: State<Greeting>) -> Result<String, ToolError> {
    Ok(greeting.text.to_owned())
}

struct Topics {
    names: Vec<String>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct OpenerArgs {
    topic: String,
}

/// A prompt that starts with the greeting.
#[mcp_prompt(scope = "t:read", complete = complete_topic)]
async fn opener(greeting: State<Greeting>, args: OpenerArgs) -> Result<PromptMessage, ToolError> {
    Ok(PromptMessage::user(format!(
        "{} {}",
        greeting.text, args.topic
    )))
}

/// The topics, for the prompt's argument; it takes the greeting too (named once).
async fn complete_topic(
    _c: Completion,
    topics: State<Topics>,
    _greeting: State<Greeting>,
) -> Result<Vec<String>, ToolError> {
    Ok(topics.names.clone())
}

/// The warnings `build` logged, one line each.
fn warnings_of_build(configure: impl FnOnce(ServerBuilder) -> ServerBuilder) -> (Server, String) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let builder =
        Server::builder(Registry::collect().expect("the registry builds")).audit(MemorySink::new());
    let server = tracing::subscriber::with_default(subscriber, || {
        configure(builder)
            .build()
            .expect("a missing state is a warning, not a refusal")
    });
    let logged = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (server, logged)
}

#[tokio::test]
async fn what_a_server_was_not_given_is_named_at_start_up() {
    let (server, logged) = warnings_of_build(|b| b);
    let lines: Vec<&str> = logged.lines().collect();
    assert_eq!(lines.len(), 5, "{logged}");
    for (what, needs) in [
        ("tool `greet`", "`State<state_at_start_up::Greeting>`"),
        ("tool `count`", "`Db<Read>` (a handle on the `Database`)"),
        (
            "resource `t://greeting`",
            "`State<state_at_start_up::Greeting>`",
        ),
        ("prompt `opener`", "`State<state_at_start_up::Greeting>`"),
        ("prompt `opener`", "`State<state_at_start_up::Topics>`"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.contains(what) && l.contains(needs))
            .unwrap_or_else(|| panic!("no warning for {what}: {logged}"));
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains("state_at_start_up.rs:"), "{line}");
        assert!(line.contains("ServerBuilder::state"), "{line}");
    }

    // The server runs all the same; the call still fails as it did, naming the
    // registration it lacks.
    let caller = Credentials::Verified(Arc::new(Principal::new("p", ["t:read"])));
    let response = server
        .call(CallRequest::new("greet", None).credentials(caller))
        .await;
    let err = response.error().expect("refused");
    assert_eq!(err.reason(), "internal_error", "{err}");
    assert!(err.message().contains("ServerBuilder::state"), "{err}");
}

#[tokio::test]
async fn a_server_given_everything_warns_of_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("t.db")).unwrap();
    let (server, logged) = warnings_of_build(|b| {
        b.state(Greeting { text: "hello" })
            .state(Topics { names: vec![] })
            .state(db)
    });
    assert_eq!(logged, "");
    let caller = Credentials::Verified(Arc::new(Principal::new("p", ["t:read"])));
    for tool in ["greet", "count"] {
        let response = server
            .call(CallRequest::new(tool, None).credentials(caller.clone()))
            .await;
        assert!(response.error().is_none(), "{tool}: {:?}", response.error());
    }
}
