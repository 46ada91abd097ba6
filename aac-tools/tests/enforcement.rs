//! Enforcement through `Server::call`, on a test registry: principals, scopes, the confirm
//! guard, argument validation, read-only mode, the listing filter and the one error type.
//!
//! Every handler counts its runs in the server's own state, so that each test knows
//! exactly which calls reached a handler and which were refused before it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Once};

use aac_tools::audit::{AuditError, AuditRecord, AuditSink, Check, MemorySink, Outcome};
use aac_tools::sqlite::{Database, TokenStore};
use aac_tools::{
    BoxFuture, CONFIRM_REQUIRED, CallRequest, CallResponse, Credentials, Ctx, Principal, Registry,
    Server, ServerBuilder, State, StaticTokens, Status, Text, ToolError, Transport, VerifierChain,
    mcp_tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------
// The test registry
// ---------------------------------------------------------------------------------------

/// Counts handler runs per tool, and keeps the argument keys each handler saw.
#[derive(Default)]
struct Runs {
    counts: Mutex<HashMap<&'static str, usize>>,
    seen_keys: Mutex<Vec<BTreeSet<String>>>,
}

impl Runs {
    fn ran(&self, ctx: &Ctx) {
        *self.counts.lock().unwrap().entry(ctx.tool()).or_default() += 1;
    }
    fn count(&self, tool: &str) -> usize {
        self.counts.lock().unwrap().get(tool).copied().unwrap_or(0)
    }
    fn total(&self) -> usize {
        self.counts.lock().unwrap().values().sum()
    }
}

#[derive(Serialize, JsonSchema)]
struct Done {
    tool: String,
    subject: String,
}

fn done(runs: &Runs, ctx: &Ctx) -> Result<Done, ToolError> {
    runs.ran(ctx);
    Ok(Done {
        tool: ctx.tool().to_owned(),
        subject: ctx.principal().subject().to_owned(),
    })
}

/// Read notes.
#[mcp_tool(read_only, scope = "notes:read")]
async fn read_notes(runs: State<Runs>, ctx: Ctx) -> Result<Done, ToolError> {
    done(&runs, &ctx)
}

/// Read notes and tags.
#[mcp_tool(read_only, scope = "notes:read", scope = "tags:read")]
async fn read_tagged(runs: State<Runs>, ctx: Ctx) -> Result<Done, ToolError> {
    done(&runs, &ctx)
}

/// Write a note.
#[mcp_tool(scope = "notes:write")]
async fn write_note(runs: State<Runs>, ctx: Ctx) -> Result<Done, ToolError> {
    done(&runs, &ctx)
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoteId {
    id: u32,
}

/// Delete a note.
#[mcp_tool(destructive, idempotent, scope = "notes:write")]
async fn delete_note(runs: State<Runs>, ctx: Ctx, args: NoteId) -> Result<Done, ToolError> {
    // `deny_unknown_fields`: a `confirm` left in the arguments would fail here.
    let _ = args.id;
    done(&runs, &ctx)
}

/// Purge every tag.
#[mcp_tool(destructive, scope = "tags:admin", scope = "notes:write")]
async fn purge_tags(runs: State<Runs>, ctx: Ctx) -> Result<Done, ToolError> {
    done(&runs, &ctx)
}

/// Wipe everything, showing which argument keys the handler received.
#[mcp_tool(destructive, scope = "notes:write")]
async fn wipe(runs: State<Runs>, ctx: Ctx, args: Map<String, Value>) -> Result<Done, ToolError> {
    runs.seen_keys
        .lock()
        .unwrap()
        .push(args.keys().cloned().collect());
    done(&runs, &ctx)
}

#[derive(Deserialize, JsonSchema)]
enum Priority {
    Low,
    High,
}

#[derive(Deserialize, JsonSchema)]
struct Inner {
    level: u8,
}

#[derive(Deserialize, JsonSchema)]
struct Shape {
    name: String,
    #[schemars(range(min = 1, max = 10))]
    count: u32,
    priority: Priority,
    inner: Inner,
    #[serde(default)]
    tags: Vec<String>,
}

/// Takes typed arguments.
#[mcp_tool(read_only, scope = "notes:read")]
async fn shaped(runs: State<Runs>, ctx: Ctx, args: Shape) -> Result<Done, ToolError> {
    let _ = (args.name, args.count, args.inner.level, args.tags);
    let _ = matches!(args.priority, Priority::Low | Priority::High);
    done(&runs, &ctx)
}

/// Fails in its own words.
#[mcp_tool(read_only, scope = "notes:read")]
async fn missing_note(runs: State<Runs>, ctx: Ctx) -> Result<Text, ToolError> {
    runs.ran(&ctx);
    Err(ToolError::not_found("note 42 not found"))
}

/// Panics.
#[mcp_tool(read_only, scope = "notes:read")]
async fn panicky(runs: State<Runs>, ctx: Ctx) -> Result<Text, ToolError> {
    runs.ran(&ctx);
    panic!("the handler fell over");
}

/// Every tool of the test registry and the scopes it needs, written here by hand: the
/// expectations of the matrix come from this table, never from the server.
const TABLE: &[(&str, &[&str])] = &[
    ("delete_note", &["notes:write"]),
    ("missing_note", &["notes:read"]),
    ("panicky", &["notes:read"]),
    ("purge_tags", &["tags:admin", "notes:write"]),
    ("read_notes", &["notes:read"]),
    ("read_tagged", &["notes:read", "tags:read"]),
    ("shaped", &["notes:read"]),
    ("wipe", &["notes:write"]),
    ("write_note", &["notes:write"]),
];

const DESTRUCTIVE: &[&str] = &["delete_note", "purge_tags", "wipe"];
const READ_ONLY: &[&str] = &[
    "missing_note",
    "panicky",
    "read_notes",
    "read_tagged",
    "shaped",
];

/// Valid arguments for each tool (`confirm: true` for destructive ones).
fn valid_arguments(tool: &str) -> Value {
    match tool {
        "delete_note" => json!({"id": 7, "confirm": true}),
        "purge_tags" | "wipe" => json!({"confirm": true}),
        "shaped" => json!({"name": "n", "count": 3, "priority": "High", "inner": {"level": 2}}),
        _ => json!({}),
    }
}

struct Fixture {
    server: Server,
    runs: Arc<Runs>,
    sink: MemorySink,
}

impl Fixture {
    fn last_record(&self) -> AuditRecord {
        self.sink.records().pop().expect("a record was written")
    }
}

/// A server over the test registry, configured further by `configure`, with an audit
/// sink in memory and run counters of its own.
fn fixture(configure: impl FnOnce(ServerBuilder) -> ServerBuilder) -> Fixture {
    quiet_panics();
    let sink = MemorySink::new();
    let builder = Server::builder(Registry::collect().expect("the test registry builds"))
        .audit(sink.clone())
        .state(Runs::default());
    let server = configure(builder).build().expect("the server builds");
    let runs = server
        .state()
        .get::<Runs>()
        .expect("the counters are registered");
    Fixture { server, runs, sink }
}

/// The `panicky` tool panics on purpose; keep its message out of the test output.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let expected = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| *m == "the handler fell over");
            if !expected {
                default(info);
            }
        }));
    });
}

fn as_principal(scopes: &[&str]) -> Credentials {
    Credentials::Verified(Arc::new(
        Principal::new("tester", scopes.iter().copied()).in_workspace("ws"),
    ))
}

async fn call(
    server: &Server,
    tool: &str,
    arguments: Option<Value>,
    scopes: &[&str],
) -> CallResponse {
    server
        .call(CallRequest::new(tool, arguments).credentials(as_principal(scopes)))
        .await
}

/// The scopes some tool of the table needs, sorted.
const ALL_SCOPES: &[&str] = &["notes:read", "notes:write", "tags:admin", "tags:read"];

/// Every subset of `scopes`.
fn subsets<'a>(scopes: &[&'a str]) -> Vec<Vec<&'a str>> {
    (0..1u32 << scopes.len())
        .map(|bits| {
            scopes
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, s)| *s)
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The registry is the one the table describes
// ---------------------------------------------------------------------------------------

#[test]
fn the_table_describes_the_registry() {
    let registry = Registry::collect().unwrap();
    let listed: Vec<(&str, Vec<&str>)> = registry
        .tools()
        .iter()
        .map(|t| (t.name(), t.def().scopes().to_vec()))
        .collect();
    let table: Vec<(&str, Vec<&str>)> = TABLE.iter().map(|(n, s)| (*n, s.to_vec())).collect();
    assert_eq!(listed, table);
    for entry in registry.tools() {
        let name = entry.name();
        assert_eq!(
            entry.def().is_destructive(),
            DESTRUCTIVE.contains(&name),
            "{name}"
        );
        assert_eq!(
            entry.def().is_read_only(),
            READ_ONLY.contains(&name),
            "{name}"
        );
    }
    let mut in_play: Vec<&str> = TABLE.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    in_play.sort_unstable();
    in_play.dedup();
    assert_eq!(in_play, ALL_SCOPES);
    assert_eq!(registry.scopes_supported(), ALL_SCOPES);
}

// ---------------------------------------------------------------------------------------
// Scopes: every tool × every subset of the scopes in play
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn every_tool_under_every_subset_of_scopes() {
    let f = fixture(|b| b);
    let subsets = subsets(ALL_SCOPES);
    assert_eq!(subsets.len(), 16);
    let mut allowed_calls = 0;
    for (tool, needs) in TABLE {
        for granted in &subsets {
            let allowed = needs.iter().all(|scope| granted.contains(scope));
            let before = f.runs.count(tool);
            let response = call(&f.server, tool, Some(valid_arguments(tool)), granted).await;
            let ran = f.runs.count(tool) - before;
            if allowed {
                allowed_calls += 1;
                assert_eq!(ran, 1, "{tool} with {granted:?} should reach its handler");
                assert_ne!(
                    response.check(),
                    Some(Check::Scope),
                    "{tool} with {granted:?}"
                );
                match *tool {
                    "missing_note" => {
                        assert_eq!(response.error().unwrap().status(), Status::NotFound)
                    }
                    "panicky" => assert_eq!(response.error().unwrap().status(), Status::Internal),
                    _ => assert!(
                        response.error().is_none(),
                        "{tool} with {granted:?}: {:?}",
                        response.error()
                    ),
                }
            } else {
                assert_eq!(ran, 0, "{tool} with {granted:?} must not reach its handler");
                assert_eq!(
                    response.check(),
                    Some(Check::Scope),
                    "{tool} with {granted:?}"
                );
                let err = response.error().unwrap();
                assert_eq!(err.status(), Status::Forbidden);
                assert_eq!(err.reason(), "insufficient_scope");
                for scope in *needs {
                    assert!(err.message().contains(scope), "{err} names `{scope}`");
                }
            }
            let record = f.last_record();
            assert_eq!(record.tool, *tool);
            assert_eq!(record.check, response.check());
            let mut provided: Vec<&str> = granted.clone();
            provided.sort_unstable();
            assert_eq!(record.scopes_provided, provided);
        }
    }
    assert_eq!(f.runs.total(), allowed_calls);
    // Seven tools need one of the four scopes (8 subsets hold it), two need two (4 subsets).
    assert_eq!(allowed_calls, 7 * 8 + 2 * 4);
}

#[tokio::test]
async fn a_principal_without_scopes_reaches_nothing() {
    let f = fixture(|b| b);
    for (tool, _) in TABLE {
        let response = call(&f.server, tool, Some(valid_arguments(tool)), &[]).await;
        assert_eq!(response.check(), Some(Check::Scope), "{tool}");
    }
    assert_eq!(f.runs.total(), 0);
}

// ---------------------------------------------------------------------------------------
// The confirm guard
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn only_json_true_confirms_a_destructive_call() {
    let f = fixture(|b| b);
    let variants: [(&str, Option<Value>); 7] = [
        ("absent", None),
        ("false", Some(json!(false))),
        ("the string \"true\"", Some(json!("true"))),
        ("1", Some(json!(1))),
        ("null", Some(Value::Null)),
        ("{}", Some(json!({}))),
        ("true", Some(json!(true))),
    ];
    for tool in DESTRUCTIVE {
        for (label, confirm) in &variants {
            let mut arguments = valid_arguments(tool);
            let map = arguments.as_object_mut().unwrap();
            map.remove("confirm");
            if let Some(confirm) = confirm {
                map.insert("confirm".to_owned(), confirm.clone());
            }
            let before = f.runs.count(tool);
            let response = call(&f.server, tool, Some(arguments), ALL_SCOPES).await;
            let ran = f.runs.count(tool) - before;
            if *label == "true" {
                assert_eq!(ran, 1, "{tool} with confirm {label}");
                assert!(response.error().is_none(), "{tool}: {:?}", response.error());
            } else {
                assert_eq!(ran, 0, "{tool} with confirm {label} must not run");
                assert_eq!(
                    response.check(),
                    Some(Check::Confirm),
                    "{tool} with {label}"
                );
                let err = response.error().unwrap();
                assert_eq!(err.status(), Status::BadRequest);
                assert_eq!(err.status().code(), 400);
                assert_eq!(err.reason(), "destructive_flag_missing");
                assert_eq!(
                    err.message(),
                    "confirm: true required for destructive operations"
                );
                assert_eq!(err.message(), CONFIRM_REQUIRED);
                assert_eq!(
                    error_body(&response.to_mcp_json()),
                    json!({
                        "error": "confirm: true required for destructive operations",
                        "reason": "destructive_flag_missing",
                        "status": 400,
                    })
                );
            }
        }
        // A call without any `arguments` at all.
        let response = call(&f.server, tool, None, ALL_SCOPES).await;
        assert_eq!(
            response.check(),
            Some(Check::Confirm),
            "{tool} without arguments"
        );
    }
    assert_eq!(f.runs.total(), DESTRUCTIVE.len());
}

#[tokio::test]
async fn the_handler_never_sees_confirm() {
    let f = fixture(|b| b);
    let response = call(
        &f.server,
        "wipe",
        Some(json!({"confirm": true, "reason": "spring cleaning"})),
        ALL_SCOPES,
    )
    .await;
    assert!(response.error().is_none(), "{:?}", response.error());
    let seen = f.runs.seen_keys.lock().unwrap().clone();
    assert_eq!(seen, [BTreeSet::from(["reason".to_owned()])]);
    // `delete_note`'s arguments deny unknown fields: it only succeeds without `confirm`.
    let response = call(
        &f.server,
        "delete_note",
        Some(json!({"id": 1, "confirm": true})),
        ALL_SCOPES,
    )
    .await;
    assert!(response.error().is_none(), "{:?}", response.error());
    // The audit record keeps the confirmation.
    assert_eq!(f.last_record().arguments["confirm"], json!(true));
}

#[tokio::test]
async fn only_destructive_tools_have_a_confirm_property() {
    let registry = Registry::collect().unwrap();
    for entry in registry.tools() {
        let schema = &entry.json()["inputSchema"];
        let confirm = &schema["properties"]["confirm"];
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        if DESTRUCTIVE.contains(&entry.name()) {
            assert_eq!(confirm["type"], "boolean", "{}", entry.name());
            let description = confirm["description"].as_str().unwrap();
            assert!(
                description.contains("explicitly confirmed"),
                "{description}"
            );
            assert!(required.contains(&json!("confirm")), "{}", entry.name());
        } else {
            assert!(confirm.is_null(), "{} has no confirm", entry.name());
            assert!(!required.contains(&json!("confirm")), "{}", entry.name());
        }
    }
    // A non-destructive tool sent `confirm` is sent an unknown argument.
    let f = fixture(|b| b);
    let response = call(
        &f.server,
        "write_note",
        Some(json!({"confirm": true})),
        ALL_SCOPES,
    )
    .await;
    assert_eq!(response.check(), Some(Check::Validate));
    assert!(
        response
            .error()
            .unwrap()
            .message()
            .starts_with("invalid arguments at `/confirm`: ")
    );
    assert_eq!(f.runs.total(), 0);
}

// ---------------------------------------------------------------------------------------
// Principals and tokens: deny by default
// ---------------------------------------------------------------------------------------

struct TokenFixture {
    _dir: tempfile::TempDir,
    db: Database,
    store: TokenStore,
}

fn token_store() -> TokenFixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("tokens.db")).unwrap();
    let store = TokenStore::open(&db).unwrap();
    TokenFixture {
        _dir: dir,
        db,
        store,
    }
}

async fn call_with(server: &Server, credentials: Credentials) -> CallResponse {
    server
        .call(CallRequest::new("read_notes", None).credentials(credentials))
        .await
}

fn bearer(token: &str) -> Credentials {
    Credentials::Bearer(token.to_owned())
}

#[tokio::test]
async fn tokens_from_the_store_authenticate_until_expired_or_revoked() {
    let t = token_store();
    let f = fixture(|b| b.verifier(t.store.clone()));
    let live = t
        .store
        .create("alice", Some("acme"), &["notes:read"], None)
        .unwrap();
    let ok = call_with(&f.server, bearer(&live.token)).await;
    assert!(ok.error().is_none(), "{:?}", ok.error());
    let record = f.last_record();
    assert_eq!(record.principal.as_deref(), Some("alice"));
    assert_eq!(record.workspace.as_deref(), Some("acme"));
    assert_eq!(
        ok.result().unwrap().structured_value().unwrap()["subject"],
        "alice"
    );

    let expired = t
        .store
        .create("alice", None, &["notes:read"], Some(-1))
        .unwrap();
    let revoked = t
        .store
        .create("alice", None, &["notes:read"], Some(3600))
        .unwrap();
    assert!(t.store.revoke(&revoked.id).unwrap());
    assert!(!t.store.revoke(&revoked.id).unwrap(), "already revoked");
    let wrong_secret = format!("{}{}", &live.token[..live.token.len() - 1], {
        if live.token.ends_with('0') { '1' } else { '0' }
    });
    let unknown = format!("aac_{}_{}", "0".repeat(12), "f".repeat(64));
    let cases: Vec<(&str, String, &str)> = vec![
        ("expired", expired.token.clone(), "token expired"),
        ("revoked", revoked.token.clone(), "token revoked"),
        ("unknown id", unknown, "unknown token"),
        ("wrong secret", wrong_secret, "unknown token"),
        ("empty", String::new(), "malformed token"),
        ("not ours", "hello".to_owned(), "malformed token"),
        ("prefix only", "aac_".to_owned(), "malformed token"),
        ("short parts", "aac_abc_def".to_owned(), "malformed token"),
        ("upper case", live.token.to_uppercase(), "malformed token"),
        (
            "truncated",
            live.token[..live.token.len() - 2].to_owned(),
            "malformed token",
        ),
        (
            "with scheme",
            format!("Bearer {}", live.token),
            "malformed token",
        ),
    ];
    for (label, token, why) in cases {
        let response = call_with(&f.server, bearer(&token)).await;
        assert_eq!(response.check(), Some(Check::Authenticate), "{label}");
        let err = response.error().unwrap();
        assert_eq!(err.status(), Status::Unauthorized, "{label}");
        assert_eq!(err.reason(), "invalid_token", "{label}");
        assert_eq!(err.message(), why, "{label}");
        assert!(
            !err.message().contains(&token) || token.is_empty(),
            "{label}: the token is not echoed"
        );
        let record = f.last_record();
        assert_eq!(record.outcome, Outcome::Denied);
        assert_eq!(record.principal, None);
        assert!(record.scopes_provided.is_empty());
    }
    // The live token still works after all that.
    assert!(
        call_with(&f.server, bearer(&live.token))
            .await
            .error()
            .is_none()
    );
    assert_eq!(f.runs.total(), 2);
}

#[tokio::test]
async fn the_store_keeps_hashes_only() {
    let t = token_store();
    let token = t
        .store
        .create("bob", None, &["notes:read", "tags:read"], None)
        .unwrap();
    let secret = token.token.rsplit('_').next().unwrap().to_owned();
    assert_eq!(secret.len(), 64);
    let stored: Vec<(String, Vec<u8>, String)> =
        t.db.with_reader(|conn| {
            conn.prepare("SELECT id, secret_hash, scopes FROM aac_tokens")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })
        .unwrap();
    assert_eq!(stored.len(), 1);
    let (id, hash, scopes) = &stored[0];
    assert_eq!(id, &token.id);
    assert_eq!(hash.len(), 32);
    assert_eq!(scopes, "notes:read tags:read");
    assert!(!String::from_utf8_lossy(hash).contains(&secret));
    let file = std::fs::read(t.db.path()).unwrap();
    let wal = std::fs::read(t.db.path().with_extension("db-wal")).unwrap_or_default();
    for bytes in [file, wal] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the secret is not on disk"
        );
    }
    let listed = t.store.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].scopes, ["notes:read", "tags:read"]);
    let principal = t.store.verify_blocking(&token.token).unwrap();
    assert_eq!(principal.token_id(), Some(token.id.as_str()));
    assert!(principal.has_scopes(&["notes:read", "tags:read"]));
}

#[tokio::test]
async fn no_credentials_is_missing_token_on_every_transport() {
    let t = token_store();
    let with_verifier = fixture(|b| b.verifier(t.store.clone()));
    let without_verifier = fixture(|b| b);
    for f in [&with_verifier, &without_verifier] {
        for transport in [
            Transport::Stdio,
            Transport::StreamableHttp,
            Transport::PlainHttp,
            Transport::InProcess,
        ] {
            let response = f
                .server
                .call(CallRequest::new("read_notes", None).transport(transport))
                .await;
            assert_eq!(response.check(), Some(Check::Authenticate), "{transport}");
            let err = response.error().unwrap();
            assert_eq!(
                (err.status(), err.reason()),
                (Status::Unauthorized, "missing_token")
            );
            assert_eq!(f.last_record().transport, transport.as_str());
        }
        assert_eq!(f.runs.total(), 0);
    }
    // A server that accepts no tokens refuses every one.
    let live = t
        .store
        .create("alice", None, &["notes:read"], None)
        .unwrap();
    let response = call_with(&without_verifier.server, bearer(&live.token)).await;
    assert_eq!(response.error().unwrap().reason(), "invalid_token");
}

#[tokio::test]
async fn verifiers_chain_by_the_tokens_they_claim() {
    let t = token_store();
    let live = t
        .store
        .create("alice", None, &["notes:read"], None)
        .unwrap();
    let chain = VerifierChain::new()
        .with(TokenStore::claims, t.store.clone())
        .with(
            |token| token.starts_with("static-"),
            StaticTokens::new().with("static-ci", Principal::new("ci", ["notes:read"])),
        );
    let f = fixture(|b| b.verifier(chain));
    assert!(
        call_with(&f.server, bearer(&live.token))
            .await
            .error()
            .is_none()
    );
    assert!(
        call_with(&f.server, bearer("static-ci"))
            .await
            .error()
            .is_none()
    );
    assert_eq!(
        call_with(&f.server, bearer("static-other"))
            .await
            .error()
            .unwrap()
            .message(),
        "unknown token"
    );
    assert_eq!(
        call_with(&f.server, bearer("jwt.like.token"))
            .await
            .error()
            .unwrap()
            .message(),
        "malformed token"
    );
    let subjects: Vec<Option<String>> = f.sink.records().into_iter().map(|r| r.principal).collect();
    assert_eq!(
        subjects,
        [Some("alice".into()), Some("ci".into()), None, None]
    );
}

/// Collects the events logged while it is the default subscriber.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl tracing::Subscriber for Logs {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Logs {
    fn warnings(&self) -> Vec<String> {
        let logs = self.0.lock().unwrap();
        logs.iter()
            .filter(|(level, _)| *level == tracing::Level::WARN)
            .map(|(_, message)| message.clone())
            .collect()
    }
}

#[tokio::test]
async fn unauthenticated_use_is_an_explicit_opt_in_that_warns() {
    let logs = Logs::default();
    let f = tracing::subscriber::with_default(logs.clone(), || {
        fixture(|b| b.danger_allow_unauthenticated(Principal::new("anonymous", ["notes:read"])))
    });
    let warnings = logs.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("unauthenticated calls are ALLOWED"),
        "{warnings:?}"
    );
    assert!(
        warnings[0].contains("danger_allow_unauthenticated"),
        "{warnings:?}"
    );

    // Without credentials, calls run as the configured principal…
    let response = f.server.call(CallRequest::new("read_notes", None)).await;
    assert!(response.error().is_none(), "{:?}", response.error());
    assert_eq!(f.last_record().principal.as_deref(), Some("anonymous"));
    // …whose scopes still apply…
    let response = f.server.call(CallRequest::new("write_note", None)).await;
    assert_eq!(response.check(), Some(Check::Scope));
    // …and credentials that fail are refused, never downgraded to anonymous.
    let response = f
        .server
        .call(CallRequest::new("read_notes", None).bearer("forged"))
        .await;
    assert_eq!(response.check(), Some(Check::Authenticate));
    assert_eq!(response.error().unwrap().reason(), "invalid_token");
    assert_eq!(f.runs.total(), 1);

    // Without the opt-in: no warning, and no way in without a token.
    let quiet = Logs::default();
    let strict = tracing::subscriber::with_default(quiet.clone(), || fixture(|b| b));
    assert!(quiet.warnings().is_empty(), "{:?}", quiet.warnings());
    let response = strict
        .server
        .call(CallRequest::new("read_notes", None))
        .await;
    assert_eq!(response.error().unwrap().reason(), "missing_token");
}

// ---------------------------------------------------------------------------------------
// Read-only mode and the listing filter
// ---------------------------------------------------------------------------------------

fn listed(server: &Server, principal: Option<&Principal>) -> Vec<String> {
    let list = server.list_tools_json(principal);
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn read_only_mode_hides_and_refuses_every_tool_that_is_not_read_only() {
    let f = fixture(|b| b.read_only_mode(true));
    assert!(f.server.is_read_only_mode());
    let everyone = Principal::new("root", ALL_SCOPES.iter().copied());
    assert_eq!(listed(&f.server, Some(&everyone)), READ_ONLY);
    for (tool, _) in TABLE {
        let response = call(&f.server, tool, Some(valid_arguments(tool)), ALL_SCOPES).await;
        if READ_ONLY.contains(tool) {
            assert_ne!(response.check(), Some(Check::ReadOnlyMode), "{tool}");
        } else {
            assert_eq!(response.check(), Some(Check::ReadOnlyMode), "{tool}");
            let err = response.error().unwrap();
            // Indistinguishable from a tool that does not exist.
            assert_eq!(err, &ToolError::unknown_tool(tool));
            assert_eq!(err.status(), Status::NotFound);
        }
    }
    assert_eq!(f.runs.total(), READ_ONLY.len());
    let response = call(&f.server, "no_such_tool", None, ALL_SCOPES).await;
    assert_eq!(response.check(), Some(Check::FindTool));
    assert_eq!(response.error().unwrap().reason(), "unknown_tool");

    // Off (the default), everything is listed.
    let all = fixture(|b| b);
    assert!(!all.server.is_read_only_mode());
    let names: Vec<&str> = TABLE.iter().map(|(n, _)| *n).collect();
    assert_eq!(listed(&all.server, Some(&everyone)), names);
}

#[tokio::test]
async fn the_listing_filter_hides_tools_the_principal_lacks_scopes_for() {
    let off = fixture(|b| b);
    let on = fixture(|b| b.filter_list_by_scope(true));
    let names: Vec<&str> = TABLE.iter().map(|(n, _)| *n).collect();
    for granted in subsets(ALL_SCOPES) {
        let principal = Principal::new("p", granted.iter().copied());
        // Off by default: a hidden tool could not trigger a scope step-up.
        assert_eq!(listed(&off.server, Some(&principal)), names);
        let expected: Vec<&str> = TABLE
            .iter()
            .filter(|(_, needs)| needs.iter().all(|s| granted.contains(s)))
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            listed(&on.server, Some(&principal)),
            expected,
            "{granted:?}"
        );
    }
    assert!(listed(&on.server, None).is_empty());
    // The filter only hides: a call is still refused for its scopes, with a 403.
    let response = call(&on.server, "write_note", None, &["notes:read"]).await;
    assert_eq!(response.check(), Some(Check::Scope));
    // Read-only mode and the filter together.
    let both = fixture(|b| b.read_only_mode(true).filter_list_by_scope(true));
    let reader = Principal::new("r", ["notes:read"]);
    assert_eq!(
        listed(&both.server, Some(&reader)),
        ["missing_note", "panicky", "read_notes", "shaped"]
    );
}

// ---------------------------------------------------------------------------------------
// Argument validation
// ---------------------------------------------------------------------------------------

fn shape(change: impl FnOnce(&mut Map<String, Value>)) -> Value {
    let mut arguments = valid_arguments("shaped");
    change(arguments.as_object_mut().unwrap());
    arguments
}

#[tokio::test]
async fn invalid_arguments_are_refused_with_the_pointer_and_the_reason() {
    let f = fixture(|b| b);
    let cases: Vec<(&str, Option<Value>, &str, &str)> = vec![
        (
            "wrong type",
            Some(shape(|m| drop(m.insert("name".into(), json!(5))))),
            "/name",
            "is not of type \"string\"",
        ),
        (
            "missing field",
            Some(shape(|m| drop(m.remove("count")))),
            "/count",
            "\"count\" is a required property",
        ),
        (
            "unknown field",
            Some(shape(|m| drop(m.insert("colour".into(), json!("red"))))),
            "/colour",
            "'colour' was unexpected",
        ),
        (
            "below the minimum",
            Some(shape(|m| drop(m.insert("count".into(), json!(0))))),
            "/count",
            "less than the minimum of 1",
        ),
        (
            "above the maximum",
            Some(shape(|m| drop(m.insert("count".into(), json!(11))))),
            "/count",
            "greater than the maximum of 10",
        ),
        (
            "negative unsigned",
            Some(shape(|m| drop(m.insert("count".into(), json!(-3))))),
            "/count",
            "less than the minimum",
        ),
        (
            "fraction for an integer",
            Some(shape(|m| drop(m.insert("count".into(), json!(2.5))))),
            "/count",
            "is not of type \"integer\"",
        ),
        (
            "out of range, nested",
            Some(shape(|m| {
                drop(m.insert("inner".into(), json!({"level": 300})))
            })),
            "/inner/level",
            "greater than the maximum of 255",
        ),
        (
            "not a variant",
            Some(shape(|m| {
                drop(m.insert("priority".into(), json!("Medium")))
            })),
            "/priority",
            "\"Medium\"",
        ),
        (
            "wrong item type",
            Some(shape(|m| drop(m.insert("tags".into(), json!(["a", 2]))))),
            "/tags/1",
            "is not of type \"string\"",
        ),
        (
            "not an object",
            Some(json!([1, 2])),
            "/",
            "is not of type \"object\"",
        ),
        ("null", Some(Value::Null), "/", "is not of type \"object\""),
        (
            "no arguments",
            None,
            "/name",
            "\"name\" is a required property",
        ),
    ];
    for (label, arguments, pointer, reason) in cases {
        let response = call(&f.server, "shaped", arguments, ALL_SCOPES).await;
        assert_eq!(response.check(), Some(Check::Validate), "{label}");
        let err = response.error().unwrap();
        assert_eq!(err.status(), Status::BadRequest, "{label}");
        assert_eq!(err.reason(), "invalid_arguments", "{label}");
        let prefix = format!("invalid arguments at `{pointer}`: ");
        assert!(err.message().starts_with(&prefix), "{label}: {err}");
        assert!(err.message().contains(reason), "{label}: {err}");
    }
    assert_eq!(f.runs.total(), 0);
    let response = call(
        &f.server,
        "shaped",
        Some(valid_arguments("shaped")),
        ALL_SCOPES,
    )
    .await;
    assert!(response.error().is_none(), "{:?}", response.error());
}

// ---------------------------------------------------------------------------------------
// Which check refused, in the order of the path of one call
// ---------------------------------------------------------------------------------------

/// A sink that cannot take records.
struct BrokenSink;

impl AuditSink for BrokenSink {
    fn ready(&self) -> Result<(), AuditError> {
        Err(AuditError::new("the disk is full"))
    }
    fn record(&self, _: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        Box::pin(async { Err(AuditError::new("the disk is full")) })
    }
}

#[tokio::test]
async fn each_refusal_names_its_check_in_the_order_of_the_path() {
    let f =
        fixture(|b| b.verifier(StaticTokens::new().with("t", Principal::new("u", ["notes:read"]))));
    let cases: Vec<(&str, CallRequest, Check, u16, &str)> = vec![
        (
            "no token, unknown tool",
            CallRequest::new("no_such_tool", None),
            Check::Authenticate,
            401,
            "missing_token",
        ),
        (
            "bad token, unknown tool",
            CallRequest::new("no_such_tool", None).bearer("x"),
            Check::Authenticate,
            401,
            "invalid_token",
        ),
        (
            "unknown tool",
            CallRequest::new("no_such_tool", None).bearer("t"),
            Check::FindTool,
            404,
            "unknown_tool",
        ),
        (
            "scope before confirm",
            CallRequest::new("delete_note", Some(json!({"id": "x"}))).bearer("t"),
            Check::Scope,
            403,
            "insufficient_scope",
        ),
        (
            "confirm before validation",
            CallRequest::new("delete_note", Some(json!({"id": "x"})))
                .credentials(as_principal(ALL_SCOPES)),
            Check::Confirm,
            400,
            "destructive_flag_missing",
        ),
        (
            "validation",
            CallRequest::new("delete_note", Some(json!({"id": "x", "confirm": true})))
                .credentials(as_principal(ALL_SCOPES)),
            Check::Validate,
            400,
            "invalid_arguments",
        ),
        (
            "the handler's own error",
            CallRequest::new("missing_note", None).bearer("t"),
            Check::Handler,
            404,
            "not_found",
        ),
    ];
    for (label, request, check, status, reason) in cases {
        let response = f.server.call(request).await;
        assert_eq!(response.check(), Some(check), "{label}");
        let err = response.error().unwrap();
        assert_eq!(
            (err.status().code(), err.reason()),
            (status, reason),
            "{label}"
        );
        let record = f.last_record();
        assert_eq!(
            record.check,
            Some(check),
            "{label}: the record carries the check"
        );
        assert_eq!(record.status, status, "{label}");
        assert_eq!(record.reason.as_deref(), Some(reason), "{label}");
        let expected_outcome = if check == Check::Handler {
            Outcome::Error
        } else {
            Outcome::Denied
        };
        assert_eq!(record.outcome, expected_outcome, "{label}");
        // On MCP: a tool result with isError, the error object, and the same JSON as text.
        let mcp = response.to_mcp_json();
        assert_eq!(mcp["isError"], true);
        let body = json!({"error": err.message(), "reason": reason, "status": status});
        assert!(mcp.get("structuredContent").is_none(), "{mcp}");
        let text: Value =
            serde_json::from_str(mcp["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, body);
    }
    assert_eq!(
        f.runs.total(),
        1,
        "only the handler's own error ran a handler"
    );
    let success = f
        .server
        .call(CallRequest::new("read_notes", None).bearer("t"))
        .await;
    assert_eq!(success.check(), None);
    assert_eq!(f.last_record().check, None);
    assert_eq!(f.last_record().outcome, Outcome::Success);

    // An audit trail that cannot write refuses the call before the handler runs.
    let runs_before = f.runs.total();
    let broken = Server::builder(Registry::collect().unwrap())
        .audit(BrokenSink)
        .state(Runs::default())
        .build()
        .unwrap();
    let response = call(&broken, "read_notes", None, ALL_SCOPES).await;
    assert_eq!(response.check(), Some(Check::Audit));
    let err = response.error().unwrap();
    assert_eq!(
        (err.status().code(), err.reason()),
        (503, "audit_unavailable")
    );
    assert_eq!(broken.state().get::<Runs>().unwrap().total(), 0);
    assert_eq!(f.runs.total(), runs_before);
}

// ---------------------------------------------------------------------------------------
// Handler errors and panics
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_handler_error_comes_back_unchanged() {
    let f = fixture(|b| b);
    let response = call(&f.server, "missing_note", None, ALL_SCOPES).await;
    assert_eq!(
        response.error(),
        Some(&ToolError::not_found("note 42 not found"))
    );
    assert_eq!(response.check(), Some(Check::Handler));
    assert_eq!(
        error_body(&response.to_mcp_json()),
        json!({"error": "note 42 not found", "reason": "not_found", "status": 404})
    );
    let record = f.last_record();
    assert_eq!((record.outcome, record.status), (Outcome::Error, 404));
}

#[tokio::test]
async fn a_panicking_handler_gives_500_and_the_server_keeps_serving() {
    let f = fixture(|b| b);
    for round in 0..3 {
        let response = call(&f.server, "panicky", None, ALL_SCOPES).await;
        assert_eq!(response.check(), Some(Check::Handler), "round {round}");
        let err = response.error().unwrap();
        assert_eq!(
            (err.status(), err.reason()),
            (Status::Internal, "internal_error")
        );
        assert_eq!(err.message(), "the tool `panicky` panicked");
        assert!(
            !err.message().contains("fell over"),
            "the panic message stays inside"
        );
        let record = f.last_record();
        assert_eq!(
            (record.tool.as_str(), record.outcome, record.status),
            ("panicky", Outcome::Error, 500)
        );

        let response = call(&f.server, "read_notes", None, ALL_SCOPES).await;
        assert!(
            response.error().is_none(),
            "round {round}: {:?}",
            response.error()
        );
    }
    assert_eq!(f.runs.count("panicky"), 3);
    assert_eq!(f.runs.count("read_notes"), 3);
    assert_eq!(f.sink.records().len(), 6);
}

#[tokio::test]
async fn concurrent_calls_are_each_checked_and_recorded() {
    let f = fixture(|b| b);
    let mut calls = Vec::new();
    for i in 0..64 {
        let server = f.server.clone();
        let (tool, scopes): (&str, &[&str]) = match i % 4 {
            0 => ("read_notes", &["notes:read"]),
            1 => ("read_notes", &[]),
            2 => ("panicky", &["notes:read"]),
            _ => ("write_note", &["notes:write"]),
        };
        calls.push(tokio::spawn(async move {
            (i % 4, call(&server, tool, None, scopes).await.check())
        }));
    }
    for handle in calls {
        let (kind, check) = handle.await.unwrap();
        let expected = [None, Some(Check::Scope), Some(Check::Handler), None][kind];
        assert_eq!(check, expected);
    }
    assert_eq!(f.runs.total(), 48);
    assert_eq!(f.sink.records().len(), 64);
}

/// The `{"error", "reason", "status"}` object of an MCP error result: its one text
/// content, parsed. An error result carries no `structuredContent` (clients may check it
/// against the tool's output schema).
fn error_body(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}
