//! The audit trail's benchmark (not a test): run with
//!
//! ```text
//! cargo bench -p aac-tools --bench audit
//! ```
//!
//! 1. Durable records per second through [`SqliteSink`], group commit against one
//!    transaction per record, at 1, 8 and 64 concurrent callers, side by side in one run
//!    (each figure the median of three runs of `AUDIT_BENCH_SECONDS`, default 2 s).
//! 2. The median latency of a trivial tool call through `Server::call` in process, with
//!    the SQLite sink against `audit_disabled` (and, to show where the time goes, against
//!    an in-memory sink and a SQLite sink with `synchronous = NORMAL`), measured in
//!    interleaved blocks so that both see the same machine.
//! 3. For scale: the median latency of one `fdatasync` of a small append on the same
//!    file system.
//! 4. With the feature `postgres` and `AUDIT_BENCH_POSTGRES=postgres://user@host/db` (a
//!    user that may create databases and roles): the same for [`PgSink`] on a fresh
//!    database — a lone caller's trivial call against `audit_disabled`, beside the median
//!    of one durable single-row `INSERT` (its own transaction, `synchronous_commit = on`:
//!    the round trip and the WAL flush every durable record needs at least), and records
//!    per second at 1, 8 and 64 callers. `AUDIT_BENCH_ONLY=postgres` runs this part only.
//!
//! Figures are printed as a table, then as one JSON line (`AUDIT_BENCH_JSON …`).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aac_tools::audit::{
    AuditRecord, AuditSink, CommitMode, MemorySink, Outcome, SqliteSink, Synchronous,
};
use aac_tools::{CallRequest, Principal, Registry, Server, StaticTokens, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct PingArgs {
    /// Anything.
    word: String,
}

#[derive(Serialize, JsonSchema)]
struct Pong {
    word: String,
}

/// The trivial tool.
#[mcp_tool(read_only, scope = "bench:read")]
async fn ping(args: PingArgs) -> Result<Pong, ToolError> {
    Ok(Pong { word: args.word })
}

fn seconds() -> Duration {
    let s: f64 = std::env::var("AUDIT_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

fn sample_record(i: u64) -> AuditRecord {
    let denied = i.is_multiple_of(7);
    AuditRecord {
        tool: "update_issue".to_owned(),
        outcome: if denied {
            Outcome::Denied
        } else {
            Outcome::Success
        },
        reason: denied.then(|| "insufficient_scope".to_owned()),
        check: None,
        status: if denied { 403 } else { 200 },
        scopes_provided: vec!["issues:read".to_owned(), "issues:write".to_owned()],
        timestamp: "2025-06-22T15:30:00.123456Z".to_owned(),
        principal: Some("agent-7".to_owned()),
        workspace: Some("acme".to_owned()),
        transport: "streamable_http".to_owned(),
        request_id: Some(i.to_string()),
        duration_us: 180,
        access_level: Some(aac_tools::access::AccessLevel::Write),
        arguments: json!({"issue_id": "sha256:0123456789abcdef", "title": "sha256:fedcba9876543210"}),
        confirmed_by: None,
        kind: aac_tools::audit::CallKind::Tool,
    }
}

/// Records per second written by `callers` concurrent callers for `duration`, and the
/// mean number of records per transaction.
fn throughput(
    rt: &tokio::runtime::Runtime,
    builder: aac_tools::audit::SqliteSinkBuilder,
    callers: usize,
    duration: Duration,
) -> (f64, f64) {
    let sink = builder.open().unwrap();
    rt.block_on(async {
        for i in 0..20 {
            sink.record(sample_record(i)).await.unwrap();
        }
    });
    let measured = records_per_second(rt, &sink, SqliteSink::stats, callers, duration);
    assert!(sink.verify().unwrap().is_intact());
    measured
}

/// Records per second through `sink` from `callers` concurrent callers for `duration`,
/// and the mean batch (from the sink's own `stats`).
fn records_per_second<S: AuditSink + Clone + 'static>(
    rt: &tokio::runtime::Runtime,
    sink: &S,
    stats: fn(&S) -> aac_tools::audit::SinkStats,
    callers: usize,
    duration: Duration,
) -> (f64, f64) {
    let before = stats(sink);
    let started = Instant::now();
    let deadline = started + duration;
    rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..callers {
            let sink = sink.clone();
            tasks.push(tokio::spawn(async move {
                let mut i = c as u64 * 1_000_000;
                while Instant::now() < deadline {
                    sink.record(sample_record(i)).await.unwrap();
                    i += 1;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let after = stats(sink);
    let records = after.records - before.records;
    let batch = records as f64 / (after.batches - before.batches).max(1) as f64;
    (records as f64 / elapsed, batch)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// A server over the trivial tool, with `sink` or, for `None`, `audit_disabled`.
fn server(sink: Option<Box<dyn AuditSink>>) -> Server {
    let builder = Server::builder(Registry::collect().unwrap())
        .verifier(StaticTokens::new().with("token", Principal::new("bench", ["bench:read"])));
    let builder = match sink {
        Some(sink) => builder.audit(Arc::<dyn AuditSink>::from(sink)),
        None => builder.audit_disabled(),
    };
    builder.build().unwrap()
}

async fn one_call(server: &Server) -> f64 {
    let started = Instant::now();
    let response = server
        .call(CallRequest::new("ping", Some(json!({"word": "hello"}))).bearer("token"))
        .await;
    let took = started.elapsed().as_secs_f64() * 1e6;
    assert!(response.error().is_none(), "{:?}", response.error());
    took
}

/// Median call latency (µs) of each server, measured in interleaved blocks, by a caller
/// on the runtime's `block_on` thread.
fn latencies(
    rt: &tokio::runtime::Runtime,
    servers: &[(&str, Server)],
    blocks: usize,
    per_block: usize,
) -> Vec<f64> {
    rt.block_on(interleaved(servers, blocks, per_block))
}

/// The same, by a caller in a task on one of the runtime's workers, where a server's
/// handlers run (a sink that must leave the runtime to block moves the worker's core to
/// another thread there, and not on the `block_on` thread).
#[cfg(feature = "postgres")]
fn latencies_on_worker(
    rt: &tokio::runtime::Runtime,
    servers: &[(&'static str, Server)],
    blocks: usize,
    per_block: usize,
) -> Vec<f64> {
    let servers: Vec<(&'static str, Server)> = servers.to_vec();
    rt.block_on(async move {
        tokio::spawn(async move { interleaved(&servers, blocks, per_block).await })
            .await
            .unwrap()
    })
}

async fn interleaved(servers: &[(&str, Server)], blocks: usize, per_block: usize) -> Vec<f64> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
    for (_, s) in servers {
        for _ in 0..50 {
            one_call(s).await;
        }
    }
    for _ in 0..blocks {
        for (i, (_, s)) in servers.iter().enumerate() {
            for _ in 0..per_block {
                samples[i].push(one_call(s).await);
            }
        }
    }
    samples.iter_mut().map(|v| median(v)).collect()
}

/// Median latency (µs) of calls made by `callers` concurrent callers for `duration`.
fn concurrent_latency(
    rt: &tokio::runtime::Runtime,
    server: &Server,
    callers: usize,
    duration: Duration,
) -> f64 {
    let deadline = Instant::now() + duration;
    let mut samples = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..callers {
            let server = server.clone();
            tasks.push(tokio::spawn(async move {
                let mut v = Vec::new();
                while Instant::now() < deadline {
                    v.push(one_call(&server).await);
                    // A call without audit never waits: let the other callers run.
                    tokio::task::yield_now().await;
                }
                v
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    median(&mut samples)
}

/// Median latency (µs) of `fdatasync` after a 300-byte write: appended (the file
/// grows, so its size must be flushed too), and overwriting in place (as the
/// write-ahead log is rewritten from its start after each checkpoint).
fn fdatasync_latency() -> (f64, f64) {
    use std::io::{Seek, SeekFrom};
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("sync"))
        .unwrap();
    let mut append = Vec::new();
    for _ in 0..200 {
        file.seek(SeekFrom::End(0)).unwrap();
        file.write_all(&[b'x'; 300]).unwrap();
        let started = Instant::now();
        file.sync_data().unwrap();
        append.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let mut overwrite = Vec::new();
    for i in 0..200u64 {
        file.seek(SeekFrom::Start((i % 100) * 300)).unwrap();
        file.write_all(&[b'y'; 300]).unwrap();
        let started = Instant::now();
        file.sync_data().unwrap();
        overwrite.push(started.elapsed().as_secs_f64() * 1e6);
    }
    (median(&mut append), median(&mut overwrite))
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing we need.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    if quick {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let duration = seconds();
    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var("AUDIT_BENCH_POSTGRES") {
        postgres::run(&rt, &url, duration);
        if std::env::var("AUDIT_BENCH_ONLY").as_deref() == Ok("postgres") {
            return;
        }
    }
    // For profiling: only the group commit at 64 callers, for the duration.
    // `AUDIT_BENCH_PROFILE=normal`: with `synchronous = NORMAL` (no flush: the CPU bound).
    if let Some(profile) = std::env::var_os("AUDIT_BENCH_PROFILE") {
        let dir = tempfile::tempdir().unwrap();
        let mut builder = SqliteSink::builder(dir.path().join("audit.db"));
        if profile == "normal" {
            builder = builder.synchronous(Synchronous::Normal);
        }
        let (per_s, batch) = throughput(&rt, builder, 64, duration);
        println!("group commit, 64 callers: {per_s:.0} records/s, batch {batch:.1}");
        return;
    }
    println!(
        "audit benchmark: {} s per run, median of 3 runs",
        duration.as_secs_f64()
    );
    println!(
        "machine: {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // 1. Throughput.
    println!("\ndurable records/s (synchronous = FULL)");
    println!(
        "{:>8}  {:>13}  {:>6}  {:>13}  {:>6}  {:>11}  {:>7}",
        "callers", "group commit", "batch", "group, no wait", "batch", "per record", "ratio"
    );
    let mut json_rows = Vec::new();
    let fresh = |dir: &tempfile::TempDir, mode: CommitMode| {
        SqliteSink::builder(dir.path().join("audit.db")).commit(mode)
    };
    for callers in [1usize, 8, 64] {
        let (mut group, mut batch) = (Vec::new(), Vec::new());
        let (mut nowait, mut nowait_batch) = (Vec::new(), Vec::new());
        let mut per = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let (g, b) = throughput(&rt, fresh(&dir, CommitMode::Group), callers, duration);
            group.push(g);
            batch.push(b);
            let dir = tempfile::tempdir().unwrap();
            let builder = fresh(&dir, CommitMode::Group).linger(Duration::ZERO);
            let (g, b) = throughput(&rt, builder, callers, duration);
            nowait.push(g);
            nowait_batch.push(b);
            let dir = tempfile::tempdir().unwrap();
            per.push(throughput(&rt, fresh(&dir, CommitMode::PerRecord), callers, duration).0);
        }
        let (g, b) = (median(&mut group), median(&mut batch));
        let (n, nb) = (median(&mut nowait), median(&mut nowait_batch));
        let p = median(&mut per);
        println!(
            "{callers:>8}  {g:>13.0}  {b:>6.1}  {n:>14.0}  {nb:>6.1}  {p:>11.0}  {:>6.1}x",
            g / p
        );
        json_rows.push(json!({
            "callers": callers,
            "group_per_s": g.round(),
            "group_mean_batch": (b * 10.0).round() / 10.0,
            "group_no_wait_per_s": n.round(),
            "group_no_wait_mean_batch": (nb * 10.0).round() / 10.0,
            "per_record_per_s": p.round(),
            "ratio": (g / p * 10.0).round() / 10.0,
        }));
    }

    // 2. Latency of a trivial call.
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.db");
    let normal = dir.path().join("normal.db");
    let servers: Vec<(&str, Server)> = vec![
        ("audit_disabled", server(None)),
        ("memory sink", server(Some(Box::new(MemorySink::new())))),
        (
            "sqlite FULL",
            server(Some(Box::new(SqliteSink::open(&full).unwrap()))),
        ),
        (
            "sqlite NORMAL",
            server(Some(Box::new(
                SqliteSink::builder(&normal)
                    .synchronous(Synchronous::Normal)
                    .open()
                    .unwrap(),
            ))),
        ),
    ];
    let blocks = 20;
    let per_block = 100;
    let medians = latencies(&rt, &servers, blocks, per_block);
    let base = medians[0];
    println!(
        "\nmedian latency of a trivial call, in process, 1 caller ({} calls each, interleaved)",
        blocks * per_block
    );
    println!("{:>16}  {:>10}  {:>10}", "audit", "median µs", "added");
    let mut json_latency = Vec::new();
    for ((name, _), m) in servers.iter().zip(&medians) {
        let added = (m - base) / base * 100.0;
        println!("{name:>16}  {m:>10.1}  {added:>9.0}%");
        json_latency.push(json!({"audit": name, "median_us": (m * 10.0).round() / 10.0, "added_pct": added.round()}));
    }

    let conc_disabled = concurrent_latency(&rt, &servers[0].1, 64, duration);
    let conc_full = concurrent_latency(&rt, &servers[2].1, 64, duration);
    println!("\nmedian latency with 64 concurrent callers");
    println!("{:>16}  {conc_disabled:>10.1}", "audit_disabled");
    println!(
        "{:>16}  {conc_full:>10.1}  {:>9.0}%",
        "sqlite FULL",
        (conc_full - conc_disabled) / conc_disabled * 100.0
    );

    // 3. Scale.
    let (sync_append, sync_overwrite) = fdatasync_latency();
    println!(
        "\nmedian fdatasync after a 300-byte write: {sync_append:.1} µs appending, \
         {sync_overwrite:.1} µs overwriting"
    );

    println!(
        "AUDIT_BENCH_JSON {}",
        json!({
            "seconds": duration.as_secs_f64(),
            "throughput": json_rows,
            "latency_1_caller": json_latency,
            "latency_64_callers": {"audit_disabled_us": (conc_disabled * 10.0).round() / 10.0, "sqlite_full_us": (conc_full * 10.0).round() / 10.0},
            "fdatasync_append_us": (sync_append * 10.0).round() / 10.0,
            "fdatasync_overwrite_us": (sync_overwrite * 10.0).round() / 10.0,
        })
    );
}

/// Part 4: the PostgreSQL sink on a database of its own, created and dropped here.
#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use aac_tools::postgres::{Database, PgSink, Roles, tokio_postgres};

    async fn admin(url: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
        tokio::spawn(connection);
        client
    }

    /// The URL of database `name` on the server of `url`.
    fn url_of(url: &str, name: &str) -> String {
        let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
        format!("{base}/{name}")
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

    /// Median latency (µs) of one single-row `INSERT` in its own transaction.
    async fn commit_latency(url: &str) -> f64 {
        let client = admin(url).await;
        client
            .batch_execute("CREATE TABLE commit_probe (id BIGINT, body TEXT)")
            .await
            .unwrap();
        let insert = client
            .prepare("INSERT INTO commit_probe VALUES ($1, $2)")
            .await
            .unwrap();
        let body = "x".repeat(300);
        let mut samples = Vec::new();
        for i in 0..300i64 {
            let started = Instant::now();
            client.execute(&insert, &[&i, &body]).await.unwrap();
            samples.push(started.elapsed().as_secs_f64() * 1e6);
        }
        median(&mut samples[50..])
    }

    pub(super) fn run(rt: &tokio::runtime::Runtime, url: &str, duration: Duration) {
        let name = format!("aac_audit_bench_{}", std::process::id());
        let admin_client = rt.block_on(admin(url));
        rt.block_on(async {
            drop_all(&admin_client, &name).await;
            admin_client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap();
        });
        let db_url = url_of(url, &name);
        let db = Database::connect(&db_url, Roles::new(&name).unwrap()).unwrap();
        rt.block_on(db.migrate("bench", &[])).unwrap();
        let sink = PgSink::open(&db).unwrap();
        let servers: Vec<(&str, Server)> = vec![
            ("audit_disabled", server(None)),
            ("postgres", server(Some(Box::new(sink.clone())))),
        ];
        let before = sink.stats();
        let medians = latencies(rt, &servers, 20, 100);
        let after = sink.stats();
        let on_worker = latencies_on_worker(rt, &servers, 20, 100);
        let busy_us = (after.busy - before.busy).as_secs_f64() * 1e6
            / (after.batches - before.batches).max(1) as f64;
        let commit = rt.block_on(commit_latency(&db_url));
        let bound = medians[0] + commit + 30.0;
        println!("\nPostgreSQL sink (`PgSink`, synchronous_commit = on), database {name}");
        println!(
            "median latency of a trivial call, in process, 1 caller: audit_disabled {:.1} µs, \
             postgres {:.1} µs",
            medians[0], medians[1]
        );
        println!(
            "the same, called from a runtime worker (as a server's handlers are): \
             audit_disabled {:.1} µs, postgres {:.1} µs",
            on_worker[0], on_worker[1]
        );
        println!(
            "mean time in the sink's backend per append (its round trip and the statements): \
             {busy_us:.1} µs"
        );
        println!(
            "median of one durable single-row INSERT: {commit:.1} µs; bound \
             disabled + commit + 30 µs = {bound:.1} µs: {}",
            if medians[1] <= bound { "met" } else { "missed" }
        );
        println!("{:>8}  {:>10}  {:>6}", "callers", "records/s", "batch");
        let mut rows = Vec::new();
        for callers in [1usize, 8, 64] {
            let (per_s, batch) = records_per_second(rt, &sink, PgSink::stats, callers, duration);
            println!("{callers:>8}  {per_s:>10.0}  {batch:>6.1}");
            rows.push(json!({"callers": callers, "per_s": per_s.round(), "mean_batch": (batch * 10.0).round() / 10.0}));
        }
        let report = rt.block_on(sink.verify()).unwrap();
        assert!(report.is_intact(), "{report}");
        println!("chain intact: {} records", report.checked);
        println!(
            "AUDIT_BENCH_PG_JSON {}",
            json!({
                "disabled_us": (medians[0] * 10.0).round() / 10.0,
                "postgres_us": (medians[1] * 10.0).round() / 10.0,
                "disabled_on_worker_us": (on_worker[0] * 10.0).round() / 10.0,
                "postgres_on_worker_us": (on_worker[1] * 10.0).round() / 10.0,
                "commit_us": (commit * 10.0).round() / 10.0,
                "backend_per_append_us": (busy_us * 10.0).round() / 10.0,
                "throughput": rows,
            })
        );
        drop(servers);
        drop(sink);
        drop(db);
        rt.block_on(drop_all(&admin_client, &name));
    }
}
