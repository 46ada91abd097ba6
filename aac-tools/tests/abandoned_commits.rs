//! A call abandoned while its tool runs (the server stops under it: its runtime drops the
//! call's task) leaves a record that tells the truth about its database writes. SQLite's
//! transaction runs on a blocking thread the runtime cannot stop, which once committed
//! after the record said the call was abandoned (a confirmed delete recorded as a failed,
//! cancelled call): now an abandoned call's transaction that has not begun its `COMMIT`
//! rolls back, and one whose writes committed before is recorded `success` (status 499,
//! `cancelled_after_commit`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aac_tools::audit::{MemorySink, Outcome};
use aac_tools::sqlite::{Database, WriteDb};
use aac_tools::{CallRequest, Credentials, Principal, Registry, Server, Text, ToolError, mcp_tool};

static IN_TRANSACTION: AtomicBool = AtomicBool::new(false);
static GO_ON: AtomicBool = AtomicBool::new(false);
static COMMITTED: AtomicBool = AtomicBool::new(false);

/// Adds a note with `text` inside a transaction that sets `started`, then waits for
/// `go_on` before it ends.
async fn note_held_open(
    db: WriteDb,
    text: &'static str,
    started: &'static AtomicBool,
    go_on: &'static AtomicBool,
) -> Result<Text, ToolError> {
    db.run(move |tx| {
        tx.conn()
            .execute("INSERT INTO notes (text) VALUES (?1)", [text])?;
        started.store(true, Ordering::SeqCst);
        while !go_on.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    })
    .await?;
    Ok(Text("added".into()))
}

/// Adds a note inside a transaction that waits for [`GO_ON`] before it ends.
#[mcp_tool(scope = "notes:write")]
async fn slow_note(db: WriteDb) -> Result<Text, ToolError> {
    note_held_open(db, "slow", &IN_TRANSACTION, &GO_ON).await
}

/// Adds a note (committed), then waits for ever before answering.
#[mcp_tool(scope = "notes:write")]
async fn note_then_wait(db: WriteDb) -> Result<Text, ToolError> {
    db.run(|tx| {
        tx.conn()
            .execute("INSERT INTO notes (text) VALUES ('kept')", [])?;
        Ok(())
    })
    .await?;
    COMMITTED.store(true, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(Text("never".into()))
}

struct Fixture {
    _dir: tempfile::TempDir,
    db: Database,
    sink: MemorySink,
    server: Server,
}

fn fixture(tool: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("notes.db")).unwrap();
    db.with_writer(|c| c.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)"))
        .unwrap();
    let sink = MemorySink::new();
    let server = Server::builder(Registry::collect_named(&[tool]).unwrap())
        .audit(sink.clone())
        .state(db.clone())
        .build()
        .unwrap();
    Fixture {
        _dir: dir,
        db,
        sink,
        server,
    }
}

fn notes(db: &Database, text: &str) -> i64 {
    db.with_reader(|c| {
        c.query_row("SELECT count(*) FROM notes WHERE text = ?1", [text], |r| {
            r.get(0)
        })
    })
    .unwrap()
}

/// Start `tool` on a runtime of its own, wait for `until`, then stop the runtime under
/// the call (as a server's process does when it stops with calls running).
fn abandon_when(f: &Fixture, tool: &str, until: &AtomicBool) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = f.server.clone();
    let caller = Credentials::Verified(Arc::new(Principal::new("caller", ["notes:write"])));
    let tool = tool.to_owned();
    runtime.spawn(async move {
        server
            .call(CallRequest::new(tool, Some(serde_json::json!({}))).credentials(caller))
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !until.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the tool never got there");
        std::thread::sleep(Duration::from_millis(5));
    }
    runtime.shutdown_background();
}

#[test]
fn a_transaction_of_a_call_abandoned_before_its_commit_rolls_back() {
    let f = fixture("slow_note");
    abandon_when(&f, "slow_note", &IN_TRANSACTION);
    // The runtime drops the call's task in the background: its record, written as it is
    // dropped, says it is gone (the transaction could otherwise end first, under load).
    let deadline = Instant::now() + Duration::from_secs(20);
    while f.sink.records().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The transaction's thread goes on after the call's task is gone; once it is done
    // (it holds the writer until then), nothing of the call stayed.
    GO_ON.store(true, Ordering::SeqCst);
    f.db.with_writer(|_| Ok(())).unwrap();
    assert_eq!(
        notes(&f.db, "slow"),
        0,
        "the abandoned call's insert committed"
    );
    let records = f.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record.tool, "slow_note");
    assert_eq!(record.outcome, Outcome::Error, "{record:?}");
    assert_eq!(record.status, 499);
    assert_eq!(record.reason.as_deref(), Some("cancelled"));
}

#[test]
fn a_call_abandoned_after_its_commit_is_recorded_as_what_it_did() {
    let f = fixture("note_then_wait");
    abandon_when(&f, "note_then_wait", &COMMITTED);
    let deadline = Instant::now() + Duration::from_secs(20);
    while f.sink.records().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(notes(&f.db, "kept"), 1);
    let records = f.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record.outcome, Outcome::Success, "{record:?}");
    assert_eq!(record.status, 499);
    assert_eq!(record.reason.as_deref(), Some("cancelled_after_commit"));
}

static HTTP_IN_TRANSACTION: AtomicBool = AtomicBool::new(false);
static HTTP_GO_ON: AtomicBool = AtomicBool::new(false);

/// As `slow_note`, for the HTTP server's shutdown.
#[mcp_tool(scope = "notes:write")]
async fn slow_note_http(db: WriteDb) -> Result<Text, ToolError> {
    note_held_open(db, "slow over http", &HTTP_IN_TRANSACTION, &HTTP_GO_ON).await
}

static DRAINED_IN_TRANSACTION: AtomicBool = AtomicBool::new(false);
static DRAINED_GO_ON: AtomicBool = AtomicBool::new(false);

/// As `slow_note`, for a call the shutdown's drain waits for.
#[mcp_tool(scope = "notes:write")]
async fn drained_note(db: WriteDb) -> Result<Text, ToolError> {
    note_held_open(db, "drained", &DRAINED_IN_TRANSACTION, &DRAINED_GO_ON).await
}

static LEFT_IN_TRANSACTION: AtomicBool = AtomicBool::new(false);
static LEFT_GO_ON: AtomicBool = AtomicBool::new(false);

/// As `slow_note`, for a call whose client leaves while it runs.
#[mcp_tool(scope = "notes:write")]
async fn left_note(db: WriteDb) -> Result<Text, ToolError> {
    note_held_open(db, "client left", &LEFT_IN_TRANSACTION, &LEFT_GO_ON).await
}

static NEVER_ENDS_STARTED: AtomicBool = AtomicBool::new(false);

/// Never returns (an author's mistake: a wait with no end).
#[mcp_tool(scope = "notes:write")]
async fn never_ends() -> Result<Text, ToolError> {
    NEVER_ENDS_STARTED.store(true, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(Text("never".into()))
}

/// An HTTP server of `tool` on a free port, stopped by the token returned.
async fn serve_http(
    f: &Fixture,
    tool: &str,
) -> (
    std::net::SocketAddr,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<std::io::Result<()>>,
    Server,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = Server::builder(Registry::collect_named(&[tool]).unwrap())
        .verifier(aac_tools::StaticTokens::new().with("t", Principal::new("w", ["notes:write"])))
        .audit(f.sink.clone())
        .state(f.db.clone())
        // (`big_answer`'s answer, larger than a socket's buffers.)
        .max_output_bytes(64 << 20)
        .build()
        .unwrap();
    let serving = tokio::spawn(aac_tools::http::serve(
        server.clone(),
        listener,
        aac_tools::http::HttpOptions::default().shutdown(stop.clone()),
    ));
    (addr, stop, serving, server)
}

/// `POST /tools/{tool}` on a task of its own: the whole answer, as text.
fn post_rest(addr: std::net::SocketAddr, tool: &str) -> tokio::task::JoinHandle<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "POST /tools/{tool} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer t\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        addr.port()
    );
    tokio::spawn(async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    })
}

async fn wait_for(flag: &AtomicBool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !flag.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the tool never got there");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A REST call running when the HTTP server begins to stop is drained as a `/mcp` call
/// is: it ends within the drain, commits, is answered 200 and recorded so. (Only `/mcp`
/// calls were waited for: a REST call alone was abandoned at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_call_running_at_shutdown_is_drained_to_its_answer() {
    let f = fixture("drained_note");
    let (addr, stop, serving, _) = serve_http(&f, "drained_note").await;
    let call = post_rest(addr, "drained_note");
    wait_for(&DRAINED_IN_TRANSACTION).await;
    stop.cancel();
    tokio::time::sleep(Duration::from_secs(1)).await;
    DRAINED_GO_ON.store(true, Ordering::SeqCst);
    let answer = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the call ends")
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(20), serving).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(notes(&f.db, "drained"), 1);
    let records = f.sink.records();
    assert_eq!(
        records.iter().map(|r| r.status).collect::<Vec<_>>(),
        [200],
        "{records:?}"
    );
}

/// The HTTP server stops while a call's transaction waits (for the database's lock, say)
/// past the shutdown's drain: the call is abandoned when the drain ends, so its
/// transaction, which had not begun its `COMMIT`, rolls back, and its record says
/// `cancelled` (499), never a success. (It committed once the wait ended, after the
/// client's session was cut, and was recorded 200.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_running_past_the_http_drain_is_abandoned_and_commits_nothing() {
    let f = fixture("slow_note_http");
    let (addr, stop, serving, server) = serve_http(&f, "slow_note_http").await;
    let call = post_rest(addr, "slow_note_http");
    wait_for(&HTTP_IN_TRANSACTION).await;
    stop.cancel();
    tokio::time::sleep(aac_tools::http::SHUTDOWN_DRAIN + Duration::from_millis(500)).await;
    HTTP_GO_ON.store(true, Ordering::SeqCst);
    let answer = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the call ends")
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(20), serving).await;
    assert_eq!(
        notes(&f.db, "slow over http"),
        0,
        "committed after the drain"
    );
    let records = f.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].status, records[0].reason.as_deref()),
        (499, Some("cancelled")),
        "{records:?}"
    );
    assert!(!answer.contains(" 200 "), "{answer}");
    // A call that begins later on the same server (as an HTTP call would) is not
    // abandoned.
    let later = server
        .call(
            CallRequest::new("slow_note_http", Some(serde_json::json!({})))
                .credentials(Credentials::Verified(Arc::new(Principal::new(
                    "w",
                    ["notes:write"],
                ))))
                .transport(aac_tools::Transport::PlainHttp),
        )
        .await;
    assert!(later.error().is_none(), "{:?}", later.error());
    assert_eq!(notes(&f.db, "slow over http"), 1);
}

/// A REST call whose tool never returns does not hold the HTTP server's end: when the
/// shutdown's drain ends the call is dropped, recorded as abandoned (499 `cancelled`,
/// at once, not when the process goes), answered as stopped, and the server returns.
/// (`serve` waited for its connection for ever, and the call was never recorded.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_call_that_never_ends_does_not_hold_the_server_s_end() {
    let f = fixture("never_ends");
    let (addr, stop, serving, _) = serve_http(&f, "never_ends").await;
    let call = post_rest(addr, "never_ends");
    wait_for(&NEVER_ENDS_STARTED).await;
    stop.cancel();
    let limit = aac_tools::http::SHUTDOWN_DRAIN + Duration::from_secs(5);
    tokio::time::timeout(limit, serving)
        .await
        .expect("the server ends after its drain")
        .unwrap()
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call is answered")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while f.sink.records().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let records = f.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0].outcome,
            records[0].status,
            records[0].reason.as_deref()
        ),
        (Outcome::Error, 499, Some("cancelled")),
        "{records:?}"
    );
}

static BIG_ANSWER_GIVEN: AtomicBool = AtomicBool::new(false);

/// An answer larger than a socket's buffers: 24 MiB of text.
#[mcp_tool(read_only, scope = "notes:write")]
async fn big_answer() -> Result<Text, ToolError> {
    BIG_ANSWER_GIVEN.store(true, Ordering::SeqCst);
    Ok(Text("x".repeat(24 << 20)))
}

/// A client that asks for a large answer and never reads it does not hold the HTTP
/// server's end: its connection is closed once the shutdown's drain and close are over,
/// and `serve` returns. (It waited for that client for ever, serving no one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_its_answer_does_not_hold_the_server_s_end() {
    use tokio::io::AsyncWriteExt;
    let f = fixture("big_answer");
    let (addr, stop, serving, _) = serve_http(&f, "big_answer").await;
    let request = format!(
        "POST /tools/big_answer HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer t\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
        addr.port()
    );
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled.write_all(request.as_bytes()).await.unwrap();
    wait_for(&BIG_ANSWER_GIVEN).await;
    // The answer is being written into a socket nobody reads.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let limit =
        aac_tools::http::SHUTDOWN_DRAIN + aac_tools::http::SHUTDOWN_CLOSE + Duration::from_secs(10);
    tokio::time::timeout(limit, serving)
        .await
        .expect("the server ends, its unread answer dropped")
        .unwrap()
        .unwrap();
    // The call itself was answered (as far as the client took it) and recorded once.
    assert_eq!(f.sink.records().len(), 1);
    drop(stalled);
}

/// A client that resets its connection while its call's transaction runs: the call goes
/// on to its end, whatever the connection does with the request it was serving (keeps
/// it, half-closed, or drops it, when it reads the reset): it commits, and is recorded as
/// the success it was, not abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_resets_its_connection_mid_call_goes_on_to_its_end() {
    use tokio::io::AsyncWriteExt;
    let f = fixture("left_note");
    let (addr, stop, serving, _) = serve_http(&f, "left_note").await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /tools/left_note HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer t\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
        addr.port()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    wait_for(&LEFT_IN_TRANSACTION).await;
    // A reset, not a close: a read of the connection fails from now on.
    stream.set_zero_linger().unwrap();
    drop(stream);
    // Long enough for the server to see the reset (not a timing assertion: the
    // outcome below is the same whenever it sees it).
    tokio::time::sleep(Duration::from_millis(300)).await;
    LEFT_GO_ON.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    while f.sink.records().is_empty() {
        assert!(Instant::now() < deadline, "no record");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let records = f.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(
        (record.outcome, record.status, record.reason.as_deref()),
        (Outcome::Success, 200, None),
        "{record:?}"
    );
    assert_eq!(notes(&f.db, "client left"), 1);
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), serving).await;
}
