//! Two replicas on one PostgreSQL database, each a real HTTP server with its own pools:
//! a token revoked through one is refused by the other at once (no cache); concurrent
//! calls to both, allowed and refused, end in one hash chain that verifies, with one
//! record per answer; the audit role may only insert and select; a sink whose database
//! cannot be reached refuses every call with 503 and answers nothing without its record.

mod postgres_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use aac_tools::audit::{AuditQuery, Outcome, verify_chain};
use aac_tools::http::HttpOptions;
use aac_tools::postgres::{Database, PgSink, ReadDb, TokenStore, WriteDb, tokio_postgres};
use aac_tools::tokens::TokenIssuer;
use aac_tools::{CallRequest, Credentials, Registry, Server, Status, Text, ToolError, mcp_tool};
use postgres_support::{TestDb, as_role};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Counts the notes.
#[mcp_tool(read_only, scope = "notes:read")]
async fn pgt_count(db: ReadDb) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    let n: i64 = tx
        .client()
        .query_one("SELECT count(*) FROM notes", &[])
        .await?
        .get(0);
    tx.commit().await?;
    Ok(Text(n.to_string()))
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

/// Adds a note.
#[mcp_tool(scope = "notes:write")]
async fn pgt_add(db: WriteDb, args: Note) -> Result<Text, ToolError> {
    let tx = db.begin().await?;
    tx.client()
        .execute("INSERT INTO notes (text) VALUES ($1)", &[&args.text])
        .await?;
    tx.commit().await?;
    Ok(Text("added".into()))
}

static HANDLER_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Counts its runs, touches no database.
#[mcp_tool(read_only, scope = "notes:read")]
async fn pgt_ping() -> Result<Text, ToolError> {
    HANDLER_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(Text("pong".into()))
}

const TOOLS: [&str; 3] = ["pgt_count", "pgt_add", "pgt_ping"];

/// One replica: its own pools, token store, audit sink and HTTP server.
struct Replica {
    addr: SocketAddr,
    tokens: TokenStore,
    sink: PgSink,
    stop: CancellationToken,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn replica(test: &TestDb) -> Replica {
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let tokens = TokenStore::open(&db).unwrap();
    let sink = PgSink::open(&db).unwrap();
    let server = Server::builder(Registry::collect_named(&TOOLS).unwrap())
        .verifier(tokens.clone())
        .audit(sink.clone())
        .state(db)
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let options = HttpOptions::default().shutdown(stop.clone());
    tokio::spawn(aac_tools::http::serve(server, listener, options));
    Replica {
        addr,
        tokens,
        sink,
        stop,
    }
}

/// A token of `r`'s store that may read and write notes.
async fn writer(r: &Replica) -> String {
    r.tokens
        .create("w", None, &["notes:read", "notes:write"], None)
        .await
        .unwrap()
        .token
}

async fn migrated() -> TestDb {
    let test = TestDb::new().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate(
        "notes",
        &["CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL)"],
    )
    .await
    .unwrap();
    test
}

/// `POST /tools/{tool}` over a fresh connection: the status and the JSON body.
async fn post(addr: SocketAddr, tool: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "POST /tools/{tool} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        addr.port(),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    let status: u16 = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"));
    let (_, body) = response.split_once("\r\n\r\n").unwrap_or(("", ""));
    let body = serde_json::from_str(body).unwrap_or(Value::String(body.to_owned()));
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_on_one_replica_is_refused_by_the_other_at_once() {
    let test = migrated().await;
    let a = replica(&test).await;
    let b = replica(&test).await;
    let issued = a
        .tokens
        .create("alice", Some("demo"), &["notes:read"], None)
        .await
        .unwrap();
    for r in [&a, &b] {
        let (status, body) = post(r.addr, "pgt_count", Some(&issued.token), &json!({})).await;
        assert_eq!(status, 200, "{body}");
    }
    // Listed by either replica, never with its secret.
    let listed = b.tokens.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, issued.id);
    assert_eq!(listed[0].subject, "alice");

    // Revoked through B: A refuses the very next call.
    assert!(b.tokens.revoke(&issued.id).await.unwrap());
    assert!(!b.tokens.revoke(&issued.token).await.unwrap(), "once");
    for r in [&a, &b] {
        let (status, body) = post(r.addr, "pgt_count", Some(&issued.token), &json!({})).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["reason"], "invalid_token", "{body}");
        assert!(
            body["error"].as_str().unwrap().contains("revoked"),
            "{body}"
        );
    }
    // A token of the right shape but a wrong secret is unknown, on either replica.
    let forged = format!("{}{}", &issued.token[..issued.token.len() - 1], "0");
    let forged = if forged == issued.token {
        format!("{}1", &issued.token[..issued.token.len() - 1])
    } else {
        forged
    };
    let (status, body) = post(a.addr, "pgt_count", Some(&forged), &json!({})).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("unknown"),
        "{body}"
    );

    // The table holds the hash, not the secret.
    let owner = test.owner().await;
    let row = owner
        .query_one("SELECT secret_hash FROM aac_tokens", &[])
        .await
        .unwrap();
    let stored: Vec<u8> = row.get(0);
    let secret = issued.token.rsplit('_').next().unwrap();
    assert_eq!(stored.len(), 32);
    assert!(
        !issued
            .token
            .as_bytes()
            .windows(32)
            .any(|w| w == stored.as_slice())
    );
    use sha2::Digest;
    assert_eq!(stored, sha2::Sha256::digest(secret.as_bytes()).to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_write_one_chain_that_verifies() {
    let test = migrated().await;
    let a = replica(&test).await;
    let b = replica(&test).await;
    let writer = writer(&a).await;
    let reader = b
        .tokens
        .create("r", None, &["notes:read"], None)
        .await
        .unwrap()
        .token;
    const PER_KIND: usize = 12;
    let mut calls = Vec::new();
    for i in 0..PER_KIND {
        for (n, r) in [&a, &b].into_iter().enumerate() {
            let addr = r.addr;
            let (writer, reader) = (writer.clone(), reader.clone());
            calls.push(tokio::spawn(async move {
                let text = format!("note {i} via {n}");
                vec![
                    post(addr, "pgt_add", Some(&writer), &json!({ "text": text })).await,
                    post(addr, "pgt_count", Some(&reader), &json!({})).await,
                    // Refused: scope, then no token, then an unknown tool.
                    post(addr, "pgt_add", Some(&reader), &json!({ "text": "no" })).await,
                    post(addr, "pgt_count", None, &json!({})).await,
                    post(addr, "pgt_nothing", Some(&reader), &json!({})).await,
                ]
            }));
        }
    }
    let mut statuses = Vec::new();
    for call in calls {
        statuses.extend(call.await.unwrap().into_iter().map(|(s, _)| s));
    }
    let count = |s: u16| statuses.iter().filter(|&&x| x == s).count();
    let calls = 2 * PER_KIND;
    assert_eq!(count(200), 2 * calls, "{statuses:?}");
    assert_eq!(count(403), calls, "{statuses:?}");
    assert_eq!(count(401), calls, "{statuses:?}");
    assert_eq!(count(404), calls, "{statuses:?}");

    // One chain, from both replicas, with a record for every answer.
    let trail = a.sink.mirror().await.unwrap();
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.checked as usize, statuses.len());
    assert_eq!(
        report,
        b.sink.verify().await.unwrap(),
        "both see the same chain"
    );
    let written = a.sink.stats().records + b.sink.stats().records;
    assert_eq!(written as usize, statuses.len(), "each wrote its own");
    assert!(a.sink.stats().records > 0 && b.sink.stats().records > 0);
    let records = AuditQuery::new().fetch(&trail).unwrap();
    for (status, expected) in [(200, 2 * calls), (401, calls), (403, calls), (404, calls)] {
        let n = records.iter().filter(|r| r.record.status == status).count();
        assert_eq!(n, expected, "records answered {status}");
    }
    assert!(
        records
            .iter()
            .filter(|r| r.record.status != 200)
            .all(|r| r.record.outcome == Outcome::Denied)
    );
    let summary = AuditQuery::new().summary(&trail).unwrap();
    assert_eq!(
        (summary.total, summary.success, summary.denied),
        (statuses.len() as u64, 2 * calls as u64, 3 * calls as u64)
    );
    // Every 200 of `pgt_add` is in the data.
    let owner = test.owner().await;
    let notes: i64 = owner
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(notes as usize, calls);

    // The audit role may insert and select, never change or remove a record.
    let mut config: tokio_postgres::Config = test.url.parse().unwrap();
    config.user(test.roles.audit());
    let (audit, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    for sql in [
        "UPDATE aac_audit SET tool = 'x'",
        "DELETE FROM aac_audit",
        "TRUNCATE aac_audit",
        "DROP TABLE aac_audit",
        "SELECT * FROM notes",
        "SELECT * FROM aac_tokens",
    ] {
        let err = audit.batch_execute(sql).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{sql}: {err:?}"
        );
    }
    // Nor may any data role touch it (tests/postgres_levels.rs goes through every level).
    let report = verify_chain(&a.sink.mirror().await.unwrap()).unwrap();
    assert_eq!(report.checked as usize, statuses.len());

    // The owner, past every role, is refused too: the table's guards refuse an edit,
    // a deletion or a truncation whoever sends it.
    assert!(report.missing_triggers.is_empty(), "{report}");
    for sql in [
        "UPDATE aac_audit SET status = 201 WHERE seq = 3",
        "DELETE FROM aac_audit WHERE seq > 2",
        "TRUNCATE aac_audit",
        "INSERT INTO aac_audit SELECT * FROM aac_audit WHERE seq = 3 \
         ON CONFLICT (seq) DO UPDATE SET status = 201",
    ] {
        let err = owner.batch_execute(sql).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{sql}: {err:?}"
        );
        assert!(
            err.as_db_error().unwrap().message().contains("append-only"),
            "{sql}: {err:?}"
        );
    }
    // An owner who disables a guard to edit a record breaks the chain where it happened,
    // and the verification names the guard.
    owner
        .batch_execute(
            "ALTER TABLE aac_audit DISABLE TRIGGER aac_audit_no_update;
             UPDATE aac_audit SET status = 201 WHERE seq = 3",
        )
        .await
        .unwrap();
    let report = a.sink.verify().await.unwrap();
    assert_eq!(report.broken.as_ref().map(|b| b.seq), Some(3), "{report}");
    assert_eq!(report.missing_triggers, ["aac_audit_no_update"], "{report}");
    // Dropped, they are named too; a migration puts them back.
    owner
        .batch_execute(
            "DROP TRIGGER aac_audit_no_delete ON aac_audit;
             DROP TRIGGER aac_audit_no_truncate ON aac_audit;",
        )
        .await
        .unwrap();
    let report = a.sink.verify().await.unwrap();
    assert_eq!(
        report.missing_triggers,
        [
            "aac_audit_no_delete",
            "aac_audit_no_truncate",
            "aac_audit_no_update"
        ],
        "{report}"
    );
    Database::connect(&test.url, test.roles.clone())
        .unwrap()
        .migrate(
            "notes",
            &["CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL)"],
        )
        .await
        .unwrap();
    let report = a.sink.verify().await.unwrap();
    assert!(report.missing_triggers.is_empty(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_audit_database_refuses_every_call() {
    // A port nothing listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = on_loopback(port, "nobody", "nothing", std::time::Duration::from_secs(2));
    let sink = PgSink::with_config(config).unwrap();
    let server = Server::builder(Registry::collect_named(&["pgt_ping"]).unwrap())
        .audit(sink.clone())
        .build()
        .unwrap();
    let principal = Arc::new(aac_tools::Principal::new("p", ["notes:read"]));
    for _ in 0..3 {
        let response = server
            .call(
                CallRequest::new("pgt_ping", Some(json!({})))
                    .credentials(Credentials::Verified(principal.clone())),
            )
            .await;
        let err = response.error().expect("refused");
        assert_eq!(err.status(), Status::Unavailable);
        assert_eq!(err.reason(), "audit_unavailable");
    }
    assert_eq!(
        HANDLER_RUNS.load(Ordering::SeqCst),
        0,
        "no handler ran without a place for its record"
    );
    assert_eq!(sink.stats().records, 0);
}

/// A sink's configuration: `user` on `dbname` at `127.0.0.1:port`.
fn on_loopback(
    port: u16,
    user: &str,
    dbname: &str,
    connect_timeout: std::time::Duration,
) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(user)
        .dbname(dbname)
        .connect_timeout(connect_timeout);
    config
}

/// Counts its runs, touches no database (for the cut-connection test alone).
#[mcp_tool(read_only, scope = "notes:read")]
async fn pgt_echo() -> Result<Text, ToolError> {
    Ok(Text("echo".into()))
}

/// A TCP proxy to PostgreSQL that can cut every connection and refuse new ones, or cut
/// one connection at the next chunk it carries one way (dropping that chunk).
struct Proxy {
    port: u16,
    open: Arc<std::sync::atomic::AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    /// Chunks to the database let through before one is dropped and its connection cut
    /// (negative: none is).
    lose_request: Arc<AtomicI64>,
    /// Chunks from the database let through before one is dropped and its connection
    /// cut (negative: none is).
    lose_answer: Arc<AtomicI64>,
    /// Keep the next chunk to the database and close the client's side of its
    /// connection; deliver the chunk when `release` is notified.
    hold_request: Arc<std::sync::atomic::AtomicBool>,
    release: Arc<tokio::sync::Notify>,
    /// Chunks to the database let through before the connection that carries the next
    /// freezes: that chunk and every later one to the database are swallowed, and the
    /// connection stays open (negative: none does).
    freeze_request: Arc<AtomicI64>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (accept_open, accept_cut) = (Arc::clone(&open), cut.clone());
        let lose_request = Arc::new(AtomicI64::new(-1));
        let lose_answer = Arc::new(AtomicI64::new(-1));
        let (accept_lose_request, accept_lose_answer) =
            (Arc::clone(&lose_request), Arc::clone(&lose_answer));
        let hold_request = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let release = Arc::new(tokio::sync::Notify::new());
        let (accept_hold, accept_release) = (Arc::clone(&hold_request), Arc::clone(&release));
        let freeze_request = Arc::new(AtomicI64::new(-1));
        let accept_freeze = Arc::clone(&freeze_request);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accept_open.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is closed at once
                }
                let mut cut = accept_cut.subscribe();
                let open = Arc::clone(&accept_open);
                let (lose_request, lose_answer) = (
                    Arc::clone(&accept_lose_request),
                    Arc::clone(&accept_lose_answer),
                );
                let (hold, release) = (Arc::clone(&accept_hold), Arc::clone(&accept_release));
                let freeze = Arc::clone(&accept_freeze);
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut server_read, mut server_write) = server.into_split();
                    let held = {
                        let (mut client_read, mut client_write) = client.split();
                        // Each chunk is forwarded only while the proxy is open: once `cut`
                        // returns, not one more byte goes either way (a cut that the
                        // connection's task notices later could let a whole request
                        // through).
                        tokio::select! {
                            held = forward(&mut client_read, &mut server_write, &open, &lose_request, Some((&hold, &freeze))) => held,
                            held = forward(&mut server_read, &mut client_write, &open, &lose_answer, None) => held,
                            _ = cut.changed() => None,
                        }
                    };
                    drop(client);
                    if let Some(chunk) = held {
                        release.notified().await;
                        if server_write.write_all(&chunk).await.is_ok() {
                            let mut answer = vec![0u8; 16 * 1024];
                            let _ = server_read.read(&mut answer).await;
                        }
                    }
                });
            }
        });
        Proxy {
            port,
            open,
            cut,
            lose_request,
            lose_answer,
            hold_request,
            release,
            freeze_request,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// Let `n` chunks go to the database, then drop the next and cut its connection.
    fn lose_request_after(&self, n: i64) {
        self.lose_request.store(n, Ordering::SeqCst);
    }

    /// Let `n` chunks come from the database, then drop the next and cut its connection.
    fn lose_answer_after(&self, n: i64) {
        self.lose_answer.store(n, Ordering::SeqCst);
    }

    /// Keep the next chunk to the database, and close the client's side of its connection
    /// (the database's side stays open) until [`Proxy::deliver_held`].
    fn hold_next_request(&self) {
        self.hold_request.store(true, Ordering::SeqCst);
    }

    /// Let `n` chunks go to the database, then freeze the connection that carries the
    /// next: it stays open, and nothing more of it reaches the database, as from a
    /// replica that stopped (a paused VM, a debugger, a partition).
    fn freeze_request_after(&self, n: i64) {
        self.freeze_request.store(n, Ordering::SeqCst);
    }

    /// Deliver the chunk kept by [`Proxy::hold_next_request`] to the database, late.
    fn deliver_held(&self) {
        self.release.notify_one();
    }
}

/// Copy `from` to `to` chunk by chunk while `open`; return at the end of either, or at the
/// first chunk read once closed or when `lose` counts down to it (that chunk is dropped,
/// and `lose` turned off), or with the first chunk read once `hold` is set (cleared).
/// When `freeze` counts down to a chunk (and is turned off), that chunk and every later
/// one are swallowed until `from` ends.
async fn forward(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    open: &std::sync::atomic::AtomicBool,
    lose: &AtomicI64,
    hold: Option<(&std::sync::atomic::AtomicBool, &AtomicI64)>,
) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut frozen = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        if let Some((hold, freeze)) = hold {
            if hold.swap(false, Ordering::SeqCst) {
                return Some(buf[..n].to_vec());
            }
            frozen = frozen
                || freeze.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    (left >= 0).then_some(left - 1)
                }) == Ok(0);
            if frozen {
                continue;
            }
        }
        if !open.load(Ordering::SeqCst)
            || lose.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                (left >= 0).then_some(left - 1)
            }) == Ok(0)
            || to.write_all(&buf[..n]).await.is_err()
        {
            return None;
        }
    }
}

/// A server of `pgt_echo` whose audit sink reaches the database through a [`Proxy`].
async fn behind_proxy(test: &TestDb) -> (Proxy, PgSink, Server) {
    let admin: tokio_postgres::Config = test.url.parse().unwrap();
    let target = SocketAddr::from(([127, 0, 0, 1], admin.get_ports()[0]));
    let proxy = Proxy::start(target).await;
    let config = on_loopback(
        proxy.port,
        &test.roles.audit(),
        &test.name,
        std::time::Duration::from_secs(2),
    );
    let sink = PgSink::with_config(config).unwrap();
    let server = Server::builder(Registry::collect_named(&["pgt_echo"]).unwrap())
        .audit(sink.clone())
        .build()
        .unwrap();
    (proxy, sink, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_lost_mid_run_fails_closed_and_recovers() {
    let test = migrated().await;
    let (proxy, sink, server) = behind_proxy(&test).await;
    let principal = Arc::new(aac_tools::Principal::new("p", ["notes:read"]));
    let call = || {
        server.call(
            CallRequest::new("pgt_echo", Some(json!({})))
                .credentials(Credentials::Verified(principal.clone())),
        )
    };
    let mut ok = 0;
    for _ in 0..3 {
        assert!(call().await.error().is_none());
        ok += 1;
    }
    proxy.cut();
    // Nothing is answered 200 while the trail cannot be written.
    for _ in 0..5 {
        let response = call().await;
        let err = response
            .error()
            .expect("refused while the database is away");
        assert_eq!(err.status(), Status::Unavailable);
        assert_eq!(err.reason(), "audit_unavailable");
    }
    proxy.restore();
    // The sink retries (at most once a second): calls are refused until a record goes in.
    let mut refused_after_restore = 0;
    loop {
        let response = call().await;
        match response.error() {
            None => {
                ok += 1;
                break;
            }
            Some(err) => {
                assert_eq!(err.reason(), "audit_unavailable");
                refused_after_restore += 1;
                assert!(refused_after_restore < 200, "the sink never recovered");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    let trail = sink.mirror().await.unwrap();
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{report}");
    let records = AuditQuery::new().fetch(&trail).unwrap();
    let answered_ok = records.iter().filter(|r| r.record.status == 200).count();
    assert_eq!(answered_ok, ok, "every 200 has its record, and only those");
}

/// A connection lost around an append leaves the append in doubt: before answering, the
/// sink looks for the batch on a new connection, and appends it there if it is not in
/// the trail. Its answer lost (the single statement's, or the `COMMIT`'s), its statement
/// lost, or the idle connection ended by the server: every call is answered 200, and the
/// trail holds each record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_on_a_lost_connection_is_settled_before_its_call_is_answered() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let (proxy, sink, server) = behind_proxy(&test).await;
    let principal = Arc::new(aac_tools::Principal::new("p", ["notes:read"]));
    let (server, principal) = (&server, &principal);
    let call = |id: &'static str| async move {
        let response = server
            .call(
                CallRequest::new("pgt_echo", Some(json!({})))
                    .request_id(id)
                    .credentials(Credentials::Verified(principal.clone())),
            )
            .await;
        assert!(response.error().is_none(), "{id}: {:?}", response.error());
    };
    for id in ["warm-0", "warm-1", "warm-2"] {
        call(id).await;
    }
    // The database commits the batch; its answer never reaches the sink: found.
    proxy.lose_answer_after(0);
    call("answer-lost").await;
    // The statement never reaches the database: appended on the new connection.
    proxy.lose_request_after(0);
    call("request-lost").await;
    // The server ends the sink's idle connection (a restart, an idle timeout…).
    let owner = test.owner().await;
    let ended: i64 = owner
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE usename = $1",
            &[&test.roles.audit()],
        )
        .await
        .unwrap()
        .get(0);
    // (The sessions of the connections lost above may still be on their way out.)
    assert!(ended >= 1, "the sink's connection");
    call("after-terminate").await;
    // The statement is held on its way: the sink sees its connection closed, finds
    // nothing and appends the batch on a new connection; the statement then reaches the
    // lost session, late, and finds the head moved: nothing twice.
    proxy.hold_next_request();
    call("request-late").await;
    proxy.deliver_held();
    call("after-late").await;
    // Another replica appends: this one's guess misses, and its batch goes the two-trip
    // way (the guess; the lock and the head; the insert and its `COMMIT`), whose last
    // answer is lost: found.
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let other = PgSink::open(&db).unwrap();
    other.record(record(9, 0)).await.unwrap();
    proxy.lose_answer_after(2);
    call("commit-answer-lost").await;

    let trail = sink.mirror().await.unwrap();
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{report}");
    let ids: Vec<String> = AuditQuery::new()
        .fetch(&trail)
        .unwrap()
        .into_iter()
        .filter_map(|r| r.record.request_id)
        .collect();
    assert_eq!(
        ids,
        [
            "warm-0",
            "warm-1",
            "warm-2",
            "answer-lost",
            "request-lost",
            "after-terminate",
            "request-late",
            "after-late",
            "9-0",
            "commit-answer-lost"
        ],
        "each record once, in order"
    );
    assert_eq!(sink.stats().lost, 0, "{:?}", sink.stats());
}

/// A database that stalls with the sink's connection open (a hung host, a proxy that
/// stops forwarding) does not hold the call until TCP gives up, many minutes later: the
/// append gives up after its deadline, and its batch, in doubt, is settled on a new
/// connection (here: appended, since it never arrived), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_to_a_stalled_database_gives_up_and_is_settled() {
    let test = migrated().await;
    let (proxy, sink, server) = behind_proxy(&test).await;
    let principal = Arc::new(aac_tools::Principal::new("p", ["notes:read"]));
    let call = |id: &'static str| {
        server.call(
            CallRequest::new("pgt_echo", Some(json!({})))
                .request_id(id)
                .credentials(Credentials::Verified(principal.clone())),
        )
    };
    assert!(call("warm").await.error().is_none());
    proxy.freeze_request_after(0);
    // A hang guard, not a timing assertion (the deadline is 10 s).
    let response = tokio::time::timeout(std::time::Duration::from_secs(40), call("stalled"))
        .await
        .expect("the call is answered, not left waiting on a stalled database");
    assert!(response.error().is_none(), "{:?}", response.error());
    assert!(call("after").await.error().is_none());
    assert_eq!(
        trail_ids(&sink).await,
        ["warm", "stalled", "after"],
        "each record once, on an intact chain"
    );
}

/// Makes `sink`'s next appends read the chain's head first (the two-trip way, as a replica
/// does when another one writes too): it appends, `other` appends after it, and its next
/// append finds its guess of the head wrong. Returns the records' numbers used.
async fn take_turns(sink: &PgSink, other: &PgSink) {
    use aac_tools::audit::AuditSink;
    sink.record(record(1, 0)).await.unwrap();
    other.record(record(2, 0)).await.unwrap();
    sink.record(record(1, 1)).await.unwrap();
}

/// `pg_terminate_backend` every session of the audit role: what a restart, an idle
/// timeout (`idle_session_timeout`) or an administrator does to idle connections.
async fn end_audit_sessions(test: &TestDb) -> i64 {
    test.owner()
        .await
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE usename = $1",
            &[&test.roles.audit()],
        )
        .await
        .unwrap()
        .get(0)
}

/// The request ids of the trail, in `seq` order, after checking its chain.
async fn trail_ids(sink: &PgSink) -> Vec<String> {
    let trail = sink.mirror().await.unwrap();
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{report}");
    AuditQuery::new()
        .fetch(&trail)
        .unwrap()
        .into_iter()
        .filter_map(|r| r.record.request_id)
        .collect()
}

/// A replica whose appends read the head first (another replica writes too) finds its
/// idle connection ended by the server at the first statement of its next append, before
/// anything of the batch was sent: the batch is appended on a new connection, and
/// answered as written, not refused (its call has run: a refusal there would leave a
/// call served with no record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_ended_while_idle_before_a_two_trip_append_is_opened_again() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let (a, b) = (PgSink::open(&db).unwrap(), PgSink::open(&db).unwrap());
    take_turns(&a, &b).await;
    assert!(end_audit_sessions(&test).await >= 2, "both sinks' sessions");
    a.record(record(1, 2))
        .await
        .expect("appended on a new connection");
    b.record(record(2, 1))
        .await
        .expect("settled on a new connection");
    a.record(record(1, 3)).await.unwrap();
    assert_eq!(
        trail_ids(&a).await,
        ["1-0", "2-0", "1-1", "1-2", "2-1", "1-3"],
        "each record once, in order"
    );
    assert_eq!((a.stats().lost, b.stats().lost), (0, 0));
}

/// A sink whose idle connection the server ended, and which cannot log in again at its
/// next append (`max_connections` reached, a failover, a `pg_hba` change): that append is
/// in doubt (its statement went out on the dead connection), and cannot be looked for.
/// It is refused but kept by the sink, which settles it (finds it, or appends it once)
/// before its next write, once it can log in: no record lost, none twice. Before, the
/// batch was dropped, its record only in the error log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_in_doubt_that_cannot_be_settled_at_once_is_settled_before_the_next() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let sink = PgSink::open(&db).unwrap();
    sink.record(record(1, 0)).await.unwrap();
    let owner = test.owner().await;
    let logins = |limit: i32| {
        format!(
            "ALTER ROLE \"{}\" CONNECTION LIMIT {limit}",
            test.roles.audit()
        )
    };
    owner.batch_execute(&logins(0)).await.unwrap();
    assert!(end_audit_sessions(&test).await >= 1);
    let refused = sink.record(record(1, 1)).await;
    assert!(refused.is_err(), "{refused:?}");
    // While the batch is kept and the database still refuses the login, later records
    // are refused (and handed back), not written past it.
    let mut later = sink
        .record(record(1, 2))
        .await
        .expect_err("the database still refuses the audit role");
    assert!(
        later.take_record().is_some(),
        "handed back: nothing of it was sent"
    );
    owner.batch_execute(&logins(-1)).await.unwrap();
    // The sink tries to connect again at most once a second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    sink.record(record(1, 3))
        .await
        .expect("written once the kept batch is settled");
    assert_eq!(
        trail_ids(&sink).await,
        ["1-0", "1-1", "1-3"],
        "the batch in doubt once, before the next"
    );
    // Recorded as its call was answered: 503, the audit failed.
    let trail = sink.mirror().await.unwrap();
    let kept = AuditQuery::new()
        .fetch(&trail)
        .unwrap()
        .into_iter()
        .find(|r| r.record.request_id.as_deref() == Some("1-1"))
        .unwrap()
        .record;
    assert_eq!(
        (kept.status, kept.reason.as_deref()),
        (503, Some("audit_unavailable")),
        "{kept:?}"
    );

    // A count of refusals answered 429 earlier, kept in doubt the same way, is written
    // as it is: no caller was answered 503 for it.
    let mut count = record(1, 4);
    count.request_id = None;
    count.reason = Some("rate_limited".to_owned());
    count.status = 429;
    count.outcome = Outcome::Denied;
    count.arguments = json!({"suppressed": 7});
    owner.batch_execute(&logins(0)).await.unwrap();
    assert!(end_audit_sessions(&test).await >= 1);
    assert!(sink.record(count).await.is_err());
    owner.batch_execute(&logins(-1)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    sink.record(record(1, 5)).await.unwrap();
    let trail = sink.mirror().await.unwrap();
    let records = AuditQuery::new().fetch(&trail).unwrap();
    let counted: Vec<_> = records
        .iter()
        .filter(|r| r.record.arguments.get("suppressed").is_some())
        .map(|r| (r.record.status, r.record.reason.clone()))
        .collect();
    assert_eq!(counted, [(429, Some("rate_limited".to_owned()))]);
    assert_eq!(trail_ids(&sink).await, ["1-0", "1-1", "1-3", "1-5"]);
}

/// A replica frozen while it holds the chain's lock (between the head's read and its
/// insert: a paused VM, a debugger, a partition) holds up another replica's append for
/// about 2 s, not for as long as it stays frozen: PostgreSQL ends the frozen session
/// (`idle_in_transaction_session_timeout`), which releases the lock. The frozen replica's
/// batch is then settled on a new connection, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_frozen_holding_the_chain_lock_holds_up_the_others_for_seconds_only() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let (proxy, frozen, _server) = behind_proxy(&test).await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let other = PgSink::open(&db).unwrap();
    take_turns(&frozen, &other).await;
    // Its next append: the lock and the head go through, its insert never does.
    proxy.freeze_request_after(1);
    let append = {
        let frozen = frozen.clone();
        tokio::spawn(async move { frozen.record(record(1, 2)).await })
    };
    let owner = test.owner().await;
    let holding = async {
        loop {
            let idle: i64 = owner
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE usename = $1 AND state = 'idle in transaction'",
                    &[&test.roles.audit()],
                )
                .await
                .unwrap()
                .get(0);
            if idle > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), holding)
        .await
        .expect("the frozen replica holds the lock, idle in its transaction");
    let started = std::time::Instant::now();
    tokio::time::timeout(
        std::time::Duration::from_secs(15),
        other.record(record(2, 1)),
    )
    .await
    .expect("held up for as long as the replica stays frozen")
    .expect("appended once the frozen session is ended");
    let held = started.elapsed();
    assert!(
        held < std::time::Duration::from_secs(5),
        "held up {held:?}, longer than the session's idle timeout"
    );
    tokio::time::timeout(std::time::Duration::from_secs(15), append)
        .await
        .expect("the frozen replica's call is answered")
        .unwrap()
        .expect("its batch settled on a new connection");
    assert_eq!(
        trail_ids(&other).await,
        ["1-0", "2-0", "1-1", "2-1", "1-2"],
        "each record once"
    );
    assert_eq!((frozen.stats().lost, other.stats().lost), (0, 0));
}

/// Another session holding the chain's lock (the owner, an administrator: no other role
/// may lock its row) makes an append give up after `lock_timeout` (5 s), refused rather
/// than left waiting; once the lock is free, appends go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_waits_for_the_chain_lock_for_seconds_then_gives_up() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let sink = PgSink::open(&db).unwrap();
    sink.record(record(1, 0)).await.unwrap();
    let owner = test.owner().await;
    // The owner (an administrator) takes the chain's lock, as an append does.
    owner
        .batch_execute("BEGIN; SELECT FROM aac_audit_lock FOR UPDATE")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        sink.record(record(1, 1)),
    )
    .await
    .expect("an append waits for the lock for seconds, not for ever")
    .expect_err("refused while another session holds the lock");
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(4),
        "gave up after {waited:?}"
    );
    assert!(err.to_string().contains("lock timeout"), "{err}");
    // The record is handed back with the error, for the server to write later.
    let mut err = err;
    let back = err.take_record().expect("the record handed back");
    assert_eq!(back.request_id.as_deref(), Some("1-1"));
    assert_eq!(back, record(1, 1));
    owner.batch_execute("COMMIT").await.unwrap();
    let mut tries = 0;
    while sink.record(record(1, 2)).await.is_err() {
        tries += 1;
        assert!(tries < 100, "the sink never recovered");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(trail_ids(&sink).await, ["1-0", "1-2"]);
}

/// The key of the advisory lock that serialized appends before the chain's lock became a
/// row only the audit role may lock.
const OLD_CHAIN_KEY: i64 = 0x6161_635f_6175_6469;

/// The chain's lock is a row of `aac_audit_lock` that only the audit role (and the
/// owner) may lock: no data role can take it, queue for it, or hold up an append with any
/// lock it may take, such as a session-level advisory lock on the key appends once took,
/// which a pooled connection would keep after its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_data_role_can_take_or_wait_on_the_chains_lock() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let sink = PgSink::open(&db).unwrap();
    sink.record(record(1, 0)).await.unwrap();
    let mut holders = Vec::new();
    for role in [test.roles.read(), test.roles.write(), test.roles.delete()] {
        let client = as_role(&test, &role).await;
        for sql in [
            "SELECT 1 FROM aac_audit_lock FOR UPDATE",
            "SELECT 1 FROM aac_audit_lock FOR KEY SHARE",
            "SELECT 1 FROM aac_audit_lock",
            "LOCK TABLE aac_audit_lock IN ACCESS SHARE MODE",
            "LOCK TABLE aac_audit IN ACCESS SHARE MODE",
            "UPDATE aac_audit_lock SET id = true",
        ] {
            let err = client
                .batch_execute(&format!("BEGIN READ WRITE; {sql}"))
                .await
                .expect_err(&format!("{role}: `{sql}` is refused"));
            assert_eq!(
                err.code(),
                Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
                "{role}: `{sql}`: {err:?}"
            );
            client.batch_execute("ROLLBACK").await.unwrap();
        }
        // What any role may take: a session-level advisory lock (the old key's, shared so
        // that every role holds it at once), kept as long as the session lives.
        client
            .execute("SELECT pg_advisory_lock_shared($1)", &[&OLD_CHAIN_KEY])
            .await
            .unwrap();
        holders.push(client);
    }
    // Appends go on, at once, one way (one statement) and the other (a head to read).
    let other = PgSink::open(&db).unwrap();
    for i in 1..4 {
        for (n, sink) in [(1, &sink), (2, &other)] {
            tokio::time::timeout(std::time::Duration::from_secs(2), sink.record(record(n, i)))
                .await
                .expect("no data role's lock holds up an append")
                .expect("appended");
        }
    }
    assert_eq!(
        trail_ids(&sink).await,
        ["1-0", "1-1", "2-1", "1-2", "2-2", "1-3", "2-3"]
    );
    drop(holders);
}

/// A database the framework migrated before the chain's lock was a row (its schema at
/// version 2) gets the table and its row when a release that knows it migrates, and the
/// grants: the audit role may lock the row, no other role may touch it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_database_migrates_to_the_chains_lock_row() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    test.owner()
        .await
        .batch_execute(
            "DROP TABLE aac_audit_lock; UPDATE aac_schema SET version = 2 WHERE component = 'aac'",
        )
        .await
        .unwrap();
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    db.migrate(
        "notes",
        &["CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL)"],
    )
    .await
    .unwrap();
    assert_eq!(db.schema_version("aac").await.unwrap(), 3);
    let rows: Vec<i64> = test.column("SELECT count(*) FROM aac_audit_lock").await;
    assert_eq!(rows, [1]);
    for role in test.roles.all() {
        let rights: Vec<String> = test
            .column(&format!(
                "SELECT concat_ws(',', \
                   CASE WHEN has_table_privilege('{role}', 'aac_audit_lock', 'SELECT') THEN 'SELECT' END, \
                   CASE WHEN has_table_privilege('{role}', 'aac_audit_lock', 'UPDATE') THEN 'UPDATE' END, \
                   CASE WHEN has_table_privilege('{role}', 'aac_audit_lock', 'INSERT') THEN 'INSERT' END, \
                   CASE WHEN has_table_privilege('{role}', 'aac_audit_lock', 'DELETE') THEN 'DELETE' END, \
                   CASE WHEN has_table_privilege('{role}', 'aac_audit_lock', 'TRUNCATE') THEN 'TRUNCATE' END)"
            ))
            .await;
        let expected = if role == test.roles.audit() {
            "SELECT,UPDATE"
        } else {
            ""
        };
        assert_eq!(rights, [expected], "{role}");
    }
    let sink = PgSink::open(&db).unwrap();
    for i in 0..3 {
        sink.record(record(1, i)).await.unwrap();
    }
    assert_eq!(trail_ids(&sink).await, ["1-0", "1-1", "1-2"]);
}

/// Replicas started at once on a new database all migrate it: the framework's tables
/// and the application's are created by one of them at a time, none fails on a
/// concurrent `CREATE TABLE IF NOT EXISTS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_migrating_a_new_database_at_once_all_start() {
    let migrations = ["CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, text TEXT NOT NULL)"];
    // A race shows only sometimes: a few new databases, each with replicas that migrate
    // and others that first ask the schema's version (as `serve` does).
    for _ in 0..4 {
        let test = TestDb::new().await;
        let runs: Vec<_> = (0..8)
            .map(|i| {
                let db = Database::connect(&test.url, test.roles.clone()).unwrap();
                tokio::spawn(async move {
                    if i % 2 == 1 {
                        db.schema_version("notes").await?;
                    }
                    db.migrate("notes", &migrations).await
                })
            })
            .collect();
        for run in runs {
            run.await
                .unwrap()
                .expect("every replica migrates or finds the schema migrated");
        }
        let db = Database::connect(&test.url, test.roles.clone()).unwrap();
        assert_eq!(db.schema_version("notes").await.unwrap(), 1);
    }
}

/// The table's declaration on PostgreSQL is SQLite's: `NOT NULL` columns and the `CHECK`
/// of `outcome` refuse a row no record makes, even from the audit role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_table_refuses_rows_no_record_makes() {
    let test = migrated().await;
    let mut config: tokio_postgres::Config = test.url.parse().unwrap();
    config.user(test.roles.audit());
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let err = client
        .batch_execute("INSERT INTO aac_audit (seq) VALUES (1)")
        .await
        .expect_err("a row of NULLs");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::NOT_NULL_VIOLATION),
        "{err}"
    );
    let err = client
        .batch_execute(
            "INSERT INTO aac_audit (seq, timestamp, tool, outcome, status, scopes_provided, \
             transport, duration_us, arguments, prev_hash, hash) \
             VALUES (1, 't', 'x', 'maybe', 200, '', 'stdio', 0, '{}', 'p', 'h')",
        )
        .await
        .expect_err("an outcome no record has");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
        "{err}"
    );
    let kind: String = test
        .column("SELECT column_default FROM information_schema.columns WHERE table_name = 'aac_audit' AND column_name = 'kind'")
        .await
        .remove(0);
    assert!(kind.starts_with("'tool'"), "{kind}");
}

/// The single-use ledger of 2026-07-28 confirmations on PostgreSQL: a nonce redeemed
/// through one replica is refused by another; the audit role may write the ledger, and no
/// data role can reach it (so a tool's raw SQL cannot clear a spent state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_redeemed_on_one_replica_is_refused_by_another() {
    use aac_tools::confirm::RequestStateLedger;
    use aac_tools::postgres::PgLedger;
    let test = migrated().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let (first, second) = (PgLedger::open(&db), PgLedger::open(&db));
    let later = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
        + 300;
    assert!(first.redeem("nonce-a", later).await.unwrap());
    assert!(
        !second.redeem("nonce-a", later).await.unwrap(),
        "a replay on another replica"
    );
    assert!(
        !first.redeem("nonce-a", later).await.unwrap(),
        "a replay on the same one"
    );
    assert!(second.redeem("nonce-b", later).await.unwrap());
    // Remembered past its expiry: a replica whose clock runs behind (or a check made the
    // second before) still accepts a state expired a moment ago by this clock.
    let expired = later - 400;
    assert!(first.redeem("nonce-c", expired).await.unwrap());
    assert!(first.redeem("nonce-d", later).await.unwrap());
    assert!(
        !second.redeem("nonce-c", expired).await.unwrap(),
        "a replay of a state just expired"
    );

    // The data roles cannot touch the ledger.
    for role in [test.roles.read(), test.roles.write(), test.roles.delete()] {
        let mut config: tokio_postgres::Config = test.url.parse().unwrap();
        config.user(&role);
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let err = client
            .execute("DELETE FROM aac_request_states", &[])
            .await
            .unwrap_err();
        let code = err.as_db_error().map(|e| e.code().code().to_owned());
        // 42501 insufficient privilege (25006, read-only transaction, for the read role)
        assert!(
            matches!(code.as_deref(), Some("42501" | "25006")),
            "{role}: {err:?}"
        );
    }
}

/// An append the database refuses halfway (a trigger on `aac_audit` refuses one tool's
/// rows) fails the calls of its batch with 503 and leaves nothing behind: no row of it,
/// and a connection whose next append commits and chains as if it had never been tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_refused_halfway_is_rolled_back_and_the_next_one_commits() {
    let test = migrated().await;
    let a = replica(&test).await;
    let token = writer(&a).await;
    let owner = test.owner().await;
    owner
        .batch_execute(
            "CREATE FUNCTION refuse_count() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.tool = 'pgt_count' THEN RAISE EXCEPTION 'no counts in this trail'; END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_count BEFORE INSERT ON aac_audit
                 FOR EACH ROW EXECUTE FUNCTION refuse_count();",
        )
        .await
        .unwrap();

    let (status, body) = post(a.addr, "pgt_add", Some(&token), &json!({"text": "one"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(a.addr, "pgt_count", Some(&token), &json!({})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["reason"], "audit_unavailable", "{body}");
    // The sink reports not ready until a write succeeds: a call or two may be refused
    // before theirs does; then calls are answered again, on the same connection.
    answered_again(a.addr, &token).await;

    let trail = a.sink.mirror().await.unwrap();
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{report}");
    let records = AuditQuery::new().fetch(&trail).unwrap();
    let tools: Vec<&str> = records.iter().map(|r| r.record.tool.as_str()).collect();
    assert!(!tools.contains(&"pgt_count"), "{tools:?}");
    assert_eq!(tools.first(), Some(&"pgt_add"), "{tools:?}");
    assert_eq!(tools.last(), Some(&"pgt_add"), "{tools:?}");
    assert!(records.last().unwrap().record.status == 200, "{records:?}");
    let seqs: Vec<i64> = test.column("SELECT seq FROM aac_audit ORDER BY seq").await;
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, expected, "no gap where the refused append was");
    assert_eq!(
        owner
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND state = 'idle in transaction (aborted)'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0),
        0,
        "no connection left in the aborted transaction"
    );
}

/// `pgt_add` until it is answered 200 again (at most five tries, 200 ms apart): a sink
/// whose write failed reports not ready until one succeeds, so a call or two may be
/// refused 503 first.
async fn answered_again(addr: SocketAddr, token: &str) {
    let mut answered = Vec::new();
    for _ in 0..5 {
        let (status, body) = post(addr, "pgt_add", Some(token), &json!({"text": "again"})).await;
        answered.push(status);
        if status == 200 {
            return;
        }
        assert_eq!(status, 503, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("not answered again: {answered:?}");
}

/// A trigger of the table owner's that drops some records (`RETURN NULL`): the call
/// whose record is dropped is refused 503, never answered as recorded; the others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_that_drops_records_fails_their_calls() {
    let test = migrated().await;
    let a = replica(&test).await;
    let token = writer(&a).await;
    let owner = test.owner().await;
    owner
        .batch_execute(
            "CREATE FUNCTION hide_count() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.tool = 'pgt_count' THEN RETURN NULL; END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER hide_count BEFORE INSERT ON aac_audit
                 FOR EACH ROW EXECUTE FUNCTION hide_count();",
        )
        .await
        .unwrap();
    // Twice each: the first append of a connection reads the head, the next guesses it.
    for _ in 0..2 {
        let (status, body) = post(a.addr, "pgt_add", Some(&token), &json!({"text": "one"})).await;
        assert_eq!(status, 200, "{body}");
    }
    for _ in 0..2 {
        let (status, body) = post(a.addr, "pgt_count", Some(&token), &json!({})).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["reason"], "audit_unavailable", "{body}");
        answered_again(a.addr, &token).await;
    }
    // The chain of what was stored links; the verification names the trigger.
    let trail = a.sink.mirror().await.unwrap();
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.foreign_triggers, ["hide_count"]);
    // One named as one of the framework's guards, and a rule, are named too (the guard
    // it replaced, as missing).
    owner
        .batch_execute(
            "DROP TRIGGER aac_audit_no_update ON aac_audit;
             CREATE TRIGGER aac_audit_no_update BEFORE INSERT ON aac_audit
                 FOR EACH ROW EXECUTE FUNCTION hide_count();
             CREATE RULE skip_pings AS ON INSERT TO aac_audit
                 WHERE NEW.tool = 'pgt_ping' DO INSTEAD NOTHING;",
        )
        .await
        .unwrap();
    let report = verify_chain(&a.sink.mirror().await.unwrap()).unwrap();
    assert_eq!(
        report.foreign_triggers,
        [
            "aac_audit_no_update (not the framework's)",
            "hide_count",
            "rule skip_pings"
        ]
    );
    assert_eq!(report.missing_triggers, ["aac_audit_no_update"]);
    // Row-level security that hides the newest records from the reader is named too.
    owner
        .batch_execute(
            "DROP RULE skip_pings ON aac_audit;
             ALTER TABLE aac_audit ENABLE ROW LEVEL SECURITY;
             ALTER TABLE aac_audit FORCE ROW LEVEL SECURITY;
             CREATE POLICY hide_new ON aac_audit FOR SELECT USING (seq <= 1);",
        )
        .await
        .unwrap();
    let report = verify_chain(&a.sink.mirror().await.unwrap()).unwrap();
    assert!(
        report
            .foreign_triggers
            .iter()
            .any(|t| t.starts_with("row-level security (forced, 1 policies)")),
        "{:?}",
        report.foreign_triggers
    );
}

/// A column of the trail whose type someone changed is named as an edit of the table,
/// by `audit --verify` and every reading of the trail, not a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_whose_type_was_changed_is_named_not_read() {
    let test = migrated().await;
    let a = replica(&test).await;
    let token = writer(&a).await;
    let (status, body) = post(a.addr, "pgt_add", Some(&token), &json!({"text": "one"})).await;
    assert_eq!(status, 200, "{body}");
    test.owner()
        .await
        .batch_execute("ALTER TABLE aac_audit ALTER COLUMN status TYPE text")
        .await
        .unwrap();
    let err = a.sink.mirror().await.unwrap_err().to_string();
    assert!(
        err.contains("was edited") && err.contains("`status`"),
        "{err}"
    );
}

/// Replicas taking turns on one chain: a replica that wrote the head appends in one round
/// trip, guessing the head is still its own; when another replica appended in between,
/// the guess inserts nothing and the batch is chained to the real head. Every record is
/// there once, in one unbroken chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_taking_turns_keep_one_chain_whoever_wrote_last() {
    let test = migrated().await;
    let a = replica(&test).await;
    let b = replica(&test).await;
    let token = writer(&a).await;
    let turns = "AAABABBBAAB";
    for (i, turn) in turns.chars().enumerate() {
        let r = if turn == 'A' { &a } else { &b };
        let text = format!("turn {i} on {turn}");
        let (status, body) = post(r.addr, "pgt_add", Some(&token), &json!({ "text": text })).await;
        assert_eq!(status, 200, "{body}");
    }
    let trail = a.sink.mirror().await.unwrap();
    let report = verify_chain(&trail).unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.checked as usize, turns.len());
    let seqs: Vec<i64> = test.column("SELECT seq FROM aac_audit ORDER BY seq").await;
    assert_eq!(seqs, (1..=turns.len() as i64).collect::<Vec<_>>());
    assert_eq!(
        (a.sink.stats().records, b.sink.stats().records),
        (6, 5),
        "each record written once, by the replica that answered it"
    );
    let texts: Vec<String> = test.column("SELECT text FROM notes ORDER BY id").await;
    assert_eq!(texts.len(), turns.len());
}

/// A record as a call leaves it, numbered by `request_id`.
fn record(sink: usize, i: usize) -> aac_tools::audit::AuditRecord {
    aac_tools::audit::AuditRecord {
        tool: "pgt_ping".to_owned(),
        outcome: Outcome::Success,
        reason: None,
        check: None,
        status: 200,
        scopes_provided: Vec::new(),
        timestamp: "2026-12-02T01:00:00.000000Z".to_owned(),
        principal: Some(format!("sink-{sink}")),
        workspace: None,
        transport: "streamable_http".to_owned(),
        request_id: Some(format!("{sink}-{i}")),
        duration_us: 10,
        access_level: None,
        arguments: json!({}),
        confirmed_by: None,
        kind: aac_tools::audit::CallKind::Tool,
    }
}

/// Three replicas' sinks appending at once, each with concurrent callers: every append
/// of a replica that wrote the head last is one statement whose snapshot may predate
/// another replica's append (the primary key then refuses it, and the batch goes the
/// two-trip way). No record may fail, and the chain holds every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_appending_at_once_fail_no_record_and_keep_one_chain() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let sinks: Vec<PgSink> = (0..3).map(|_| PgSink::open(&db).unwrap()).collect();
    const CALLERS: usize = 4;
    const EACH: usize = 60;
    let mut tasks = Vec::new();
    for (n, sink) in sinks.iter().enumerate() {
        for caller in 0..CALLERS {
            let sink = sink.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..EACH {
                    sink.record(record(n, caller * EACH + i))
                        .await
                        .unwrap_or_else(|e| panic!("sink {n}, record {i}: {e}"));
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total = sinks.len() * CALLERS * EACH;
    let report = sinks[0].verify().await.unwrap();
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.checked as usize, total);
    for (n, sink) in sinks.iter().enumerate() {
        let stats = sink.stats();
        assert_eq!(
            stats.records as usize,
            CALLERS * EACH,
            "sink {n}: {stats:?}"
        );
        assert_eq!(stats.lost, 0, "sink {n}: {stats:?}");
    }
    let owner = test.owner().await;
    let (rows, distinct): (i64, i64) = {
        let row = owner
            .query_one(
                "SELECT count(*), count(DISTINCT request_id) FROM aac_audit",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((rows as usize, distinct as usize), (total, total));
}

/// The sink's connection tries each configured host in turn: the first refuses (nothing
/// listens on its port), the second is the database, and the record is written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_sink_tries_each_configured_host_in_turn() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let database: tokio_postgres::Config = test.url.parse().unwrap();
    let mut config = on_loopback(
        refused,
        &test.roles.audit(),
        &test.name,
        std::time::Duration::from_secs(2),
    );
    config.host("127.0.0.1").port(database.get_ports()[0]);
    let sink = PgSink::with_config(config).unwrap();
    sink.ready().expect("the second host accepts");
    sink.record(record(0, 1)).await.unwrap();
    let ids: Vec<Option<String>> = test.column("SELECT request_id FROM aac_audit").await;
    assert_eq!(ids, vec![Some("0-1".to_owned())]);
}

/// The port of a listener on loopback that accepts, reads nothing, answers nothing and
/// keeps every connection open: a database that never answers.
fn silent_listener() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    port
}

/// A server that accepts the connection and never answers (a stuck proxy, a half-dead
/// host) holds the sink no longer than its `connect_timeout`, start-up exchange
/// included: the sink opens not ready, and calls are refused with 503 instead of
/// waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_accepts_and_never_answers_is_given_up_on_after_the_connect_timeout() {
    use aac_tools::audit::AuditSink;
    let port = silent_listener();
    let config = on_loopback(
        port,
        "nobody",
        "nothing",
        std::time::Duration::from_millis(500),
    );
    // On a thread of its own, which a regression would leave hanging, not the test.
    let (sender, opening) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(PgSink::with_config(config).unwrap()));
    let opened = opening
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the sink gives up on a silent server instead of waiting for it");
    let err = opened.ready().expect_err("not ready");
    assert!(err.to_string().contains("did not answer in time"), "{err}");
    let refused = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        opened.record(record(0, 1)),
    )
    .await
    .expect("a record is refused, not held");
    assert!(refused.is_err());
}

/// The owner's connection (migrations, `init`, every command of `aacworkflow`) and the
/// trail's reading (`audit --verify`) give up on a server that accepts and never answers
/// within the connection's `connect_timeout`, the start-up exchange included, as the sink
/// does: they waited for it for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_and_the_trail_s_reader_give_up_on_a_database_that_never_answers() {
    let port = silent_listener();
    let guard = std::time::Duration::from_secs(30);
    let db = Database::connect(
        &format!("postgres://nobody@127.0.0.1:{port}/nothing?connect_timeout=1"),
        aac_tools::postgres::Roles::new("aac").unwrap(),
    )
    .unwrap();
    let err = tokio::time::timeout(guard, db.owner())
        .await
        .expect("the owner's connection gives up instead of waiting")
        .expect_err("no connection");
    assert!(
        err.to_string().contains("did not answer within 1 s"),
        "{err}"
    );
    let config = on_loopback(
        port,
        "nobody",
        "nothing",
        std::time::Duration::from_millis(500),
    );
    let err = tokio::time::timeout(guard, aac_tools::postgres::mirror(&config))
        .await
        .expect("the trail's reader gives up instead of waiting")
        .expect_err("no trail");
    assert!(
        err.to_string().contains("did not answer within 0.5 s"),
        "{err}"
    );
}

/// U+0000, which PostgreSQL refuses in text, never reaches the trail: a tool name (no
/// token needed) or a request id holding it is recorded with `␀` in its place, and the
/// next call is served, where the character once failed the record's batch and stopped
/// the sink; in arguments it is refused 400, before the handler, on every backend alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_is_recorded_visibly_and_never_stops_the_trail() {
    let test = migrated().await;
    let r = replica(&test).await;
    let writer = writer(&r).await;
    let (status, body) = post(r.addr, "%00", None, &json!({})).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = post(r.addr, "pgt%00add", Some(&writer), &json!({})).await;
    assert_eq!(
        (status, &body["reason"]),
        (404, &json!("unknown_tool")),
        "{body}"
    );
    let (status, body) = post(
        r.addr,
        "pgt_add",
        Some(&writer),
        &json!({"text": "a\u{0}b"}),
    )
    .await;
    assert_eq!(
        (status, &body["reason"]),
        (400, &json!("invalid_arguments")),
        "{body}"
    );
    let (status, body) = post(r.addr, "pgt_add", Some(&writer), &json!({"text": "ok"})).await;
    assert_eq!(status, 200, "{body}");

    let mut config: tokio_postgres::Config = test.url.parse().unwrap();
    config.dbname(&test.name);
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let tools: Vec<String> = client
        .query("SELECT tool FROM aac_audit ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(tools, ["\u{2400}", "pgt\u{2400}add", "pgt_add", "pgt_add"]);
}

/// A record of `seq` `i64::MAX` in the trail (written by hand, as the owner or the audit
/// role may) leaves no number for the next: every append is refused, 503
/// `audit_unavailable` with a message that says why, and the sink goes on answering.
/// Before, the append panicked (an overflow) on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_at_the_last_seq_refuses_appends_without_a_panic() {
    use aac_tools::audit::AuditSink;
    let test = migrated().await;
    let db = Database::connect(&test.url, test.roles.clone()).unwrap();
    let sink = PgSink::open(&db).unwrap();
    sink.record(record(1, 0)).await.unwrap();
    test.owner()
        .await
        .batch_execute(
            "CREATE TEMPORARY TABLE last AS SELECT * FROM aac_audit WHERE seq = 1; \
             UPDATE last SET seq = 9223372036854775807; \
             INSERT INTO aac_audit SELECT * FROM last;",
        )
        .await
        .unwrap();
    // A second sink reads the head first; the first guesses it, then reads it.
    let other = PgSink::open(&db).unwrap();
    for (sink, i) in [(&sink, 1), (&other, 2), (&sink, 3), (&other, 4)] {
        let err = sink.record(record(1, i)).await.expect_err("no seq is left");
        assert!(err.to_string().contains("seq 9223372036854775807"), "{err}");
    }
    let server = Server::builder(Registry::collect_named(&["pgt_ping"]).unwrap())
        .audit(sink.clone())
        .build()
        .unwrap();
    let principal = Arc::new(aac_tools::Principal::new("p", ["notes:read"]));
    let response = server
        .call(
            CallRequest::new("pgt_ping", Some(json!({})))
                .credentials(Credentials::Verified(principal)),
        )
        .await;
    let err = response.error().expect("refused: no record can be written");
    assert_eq!(err.status(), Status::Unavailable);
    assert_eq!(err.reason(), "audit_unavailable");
    let seqs: Vec<i64> = test.column("SELECT seq FROM aac_audit ORDER BY seq").await;
    assert_eq!(seqs, [1, i64::MAX]);
}
