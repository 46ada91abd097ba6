//! The variant (p): the 150-tool server with the durable PostgreSQL audit trail, each
//! server process on a database of its own, created and dropped by the driver; and the
//! floor it is measured against, one durable single-row `INSERT`.

use std::io;
use std::time::{Duration, Instant};

use aac_tools::postgres::{Database, PgSink, Roles, tokio_postgres};

fn failed(what: &str, err: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {err}"))
}

/// The sink of a (p) server on the empty database at `url`, its roles named after the
/// database: the audit table is created (migrated) first. Runs its own runtime on a
/// thread of its own, so it may be called from async code.
pub fn sink(url: &str) -> io::Result<PgSink> {
    let name = url
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| io::Error::other(format!("no database name in {url}")))?;
    let roles = Roles::new(name).map_err(|e| failed("the roles' prefix", e))?;
    let db = Database::connect(url, roles).map_err(|e| failed("the audit database", e))?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(db.migrate("bench", &[]))
                    .map_err(|e| failed("migrating the audit database", e))
            })
            .join()
            .map_err(|_| io::Error::other("the migration panicked"))?
    })?;
    PgSink::open(&db).map_err(|e| failed("the PostgreSQL audit sink", e))
}

async fn connect(url: &str) -> io::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| failed(&format!("PostgreSQL at {url}"), e))?;
    tokio::spawn(connection);
    Ok(client)
}

/// The URL of database `name` on the server of `url`.
pub fn url_of(url: &str, name: &str) -> String {
    let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
    format!("{base}/{name}")
}

/// A fresh database `name` on the server of `admin_url`: its URL.
pub async fn create(admin_url: &str, name: &str) -> io::Result<String> {
    let admin = connect(admin_url).await?;
    drop_all(&admin, name).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(|e| failed("CREATE DATABASE", e))?;
    Ok(url_of(admin_url, name))
}

/// Drop database `name` and the roles of its levels.
pub async fn drop(admin_url: &str, name: &str) -> io::Result<()> {
    let admin = connect(admin_url).await?;
    drop_all(&admin, name).await;
    Ok(())
}

async fn drop_all(admin: &tokio_postgres::Client, name: &str) {
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    for role in ["read", "write", "delete", "tokens", "audit"] {
        let _ = admin
            .batch_execute(&format!("DROP ROLE IF EXISTS {name}_{role}"))
            .await;
    }
}

/// `n` latencies (ns) of one single-row `INSERT` of 300 bytes in its own transaction, on
/// the database at `url` (a scratch table, dropped after): the round trip and the WAL
/// flush that every durable record needs at least.
///
/// With a non-zero `gap`, this thread spins for `gap` between two commits (outside the
/// timing), so that PostgreSQL's backend waits that long for each statement, as it does
/// behind a server whose lone client's calls leave the rest of a call between two
/// records; with none, the commits follow each other as fast as they can.
pub async fn commit_latencies(url: &str, n: usize, gap: Duration) -> io::Result<Vec<u64>> {
    let client = connect(url).await?;
    let sql = |e| failed("the commit probe", e);
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS commit_probe (id BIGINT, body TEXT)")
        .await
        .map_err(sql)?;
    let insert = client
        .prepare("INSERT INTO commit_probe VALUES ($1, $2)")
        .await
        .map_err(sql)?;
    let body = "x".repeat(300);
    let mut out = Vec::with_capacity(n);
    for i in 0..(n + 20) as i64 {
        spin(gap);
        let started = Instant::now();
        client.execute(&insert, &[&i, &body]).await.map_err(sql)?;
        if i >= 20 {
            out.push(started.elapsed().as_nanos() as u64);
        }
    }
    client
        .batch_execute("DROP TABLE commit_probe")
        .await
        .map_err(sql)?;
    Ok(out)
}

/// `n` latencies (ns) of the sink's append of one record on the empty database at
/// `url` (created by [`create`]), from this thread as a server's lone caller appends
/// it, with this thread spinning for `gap` between two appends (as in
/// [`commit_latencies`]).
pub async fn append_latencies(url: &str, n: usize, gap: Duration) -> io::Result<Vec<u64>> {
    use aac_tools::audit::{AuditRecord, AuditSink, CallKind, Outcome};
    let sink = sink(url)?;
    let record = |i: usize| AuditRecord {
        tool: "tool_042".to_owned(),
        outcome: Outcome::Success,
        reason: None,
        check: None,
        status: 200,
        scopes_provided: vec!["bench:read".to_owned(), "bench:write".to_owned()],
        timestamp: "2026-12-02T07:30:00.123456Z".to_owned(),
        principal: Some("bench".to_owned()),
        workspace: None,
        transport: "stdio".to_owned(),
        request_id: Some(i.to_string()),
        duration_us: 12,
        access_level: Some(aac_tools::access::AccessLevel::Write),
        arguments: serde_json::json!({"id": i, "text": "x".repeat(40), "tags": ["a", "b"], "limit": 10}),
        confirmed_by: None,
        kind: CallKind::Tool,
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n + 20 {
        spin(gap);
        let record = record(i);
        let started = Instant::now();
        sink.record(record)
            .await
            .map_err(|e| failed("the sink's append", e))?;
        if i >= 20 {
            out.push(started.elapsed().as_nanos() as u64);
        }
    }
    Ok(out)
}

/// Keep this thread busy for `gap` (a lone server's thread runs the rest of a call
/// between two records; sleeping instead would change what is measured).
fn spin(gap: Duration) {
    let until = Instant::now() + gap;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}
