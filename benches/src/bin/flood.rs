//! A flood of token-less requests with large bodies against the real reference server,
//! and what it costs the audit trail: how much the database grows.
//!
//! ```text
//! cargo build --release -p aacworkflow -p aac-bench
//! target/release/flood [--requests 100000] [--body-bytes 1048576] [--connections 8] [--bin target/release/aacworkflow]
//! ```
//!
//! It starts `aacworkflow serve --http 127.0.0.1:0` on a fresh database (`init --demo`),
//! sends the requests over keep-alive HTTP/1.1 connections (half to `POST /mcp` as a
//! `tools/call`, half to `POST /tools/create_issue`), each with a body of `--body-bytes`
//! and no token, stops the server (which records the rate limit's last counts), and
//! prints the answers by status, the records, and the growth of the database files.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    requests: usize,
    body_bytes: usize,
    connections: usize,
    bin: PathBuf,
}

fn args() -> Args {
    let mut args = Args {
        requests: 100_000,
        body_bytes: 1024 * 1024,
        connections: 8,
        bin: PathBuf::from("target/release/aacworkflow"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--requests" => args.requests = value.parse().expect("--requests N"),
            "--body-bytes" => args.body_bytes = value.parse().expect("--body-bytes N"),
            "--connections" => args.connections = value.parse().expect("--connections N"),
            "--bin" => args.bin = PathBuf::from(value),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// The bytes of the database and of its WAL.
fn db_bytes(db: &Path) -> (u64, u64) {
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    (size(db.to_path_buf()), size(PathBuf::from(wal)))
}

fn aacworkflow(bin: &Path, db: &Path, args: &[&str]) -> String {
    let output = Command::new(bin)
        .args(args)
        .env("AAC_DB", db)
        .output()
        .expect("aacworkflow runs");
    assert!(
        output.status.success(),
        "aacworkflow {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// Read one HTTP/1.1 response; its status.
async fn response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<u16> {
    buf.clear();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(status)
}

#[tokio::main]
async fn main() {
    let args = args();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("flood.db");
    aacworkflow(&args.bin, &db, &["init", "--demo"]);
    let before = db_bytes(&db);
    let records_before = audit_total(&args.bin, &db);

    let mut child = Command::new(&args.bin)
        .args(["serve", "--http", "127.0.0.1:0"])
        .env("AAC_DB", &db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("the server prints its address")
            .expect("a line");
        if let Some(url) = line.split("serving MCP on ").nth(1) {
            break url.trim().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();

    // The bodies: a tools/call whose arguments fill the size, and the same object for REST.
    let filler = args.body_bytes.saturating_sub(100);
    let mcp_body = Arc::new(
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"create_issue","arguments":{{"title":"{}"}}}}}}"#,
            "x".repeat(filler)
        )
        .into_bytes(),
    );
    let rest_body = Arc::new(format!(r#"{{"title":"{}"}}"#, "x".repeat(filler)).into_bytes());
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (next, addr) = (Arc::clone(&next), addr.clone());
        let (mcp_body, rest_body) = (Arc::clone(&mcp_body), Arc::clone(&rest_body));
        let total = args.requests;
        tasks.push(tokio::spawn(async move {
            let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
            let mut stream: Option<TcpStream> = None;
            let mut buf = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let (path, body, extra) = if i % 2 == 0 {
                    ("/mcp", &mcp_body, "Accept: application/json, text/event-stream\r\n")
                } else {
                    ("/tools/create_issue", &rest_body, "")
                };
                let head = format!(
                    "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n",
                    body.len()
                );
                let mut status = None;
                for _ in 0..2 {
                    if stream.is_none() {
                        stream = TcpStream::connect(&addr).await.ok();
                    }
                    let Some(s) = stream.as_mut() else { continue };
                    if s.write_all(head.as_bytes()).await.is_ok()
                        && s.write_all(body).await.is_ok()
                    {
                        status = response(s, &mut buf).await;
                    }
                    if status.is_some() {
                        break;
                    }
                    stream = None;
                }
                *statuses.entry(status.unwrap_or(0)).or_default() += 1;
            }
            statuses
        }));
    }
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for task in tasks {
        for (status, n) in task.await.expect("a client task") {
            *statuses.entry(status).or_default() += n;
        }
    }
    let elapsed = started.elapsed();
    // Stop the server gracefully (SIGINT), so that it records the last counts.
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();

    let records = audit_total(&args.bin, &db) - records_before;
    let stats = aacworkflow(
        &args.bin,
        &db,
        &["audit", "--json", "--tool", "(rate limited)"],
    );
    let suppressed: u64 = stats
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| r["arguments"]["suppressed"].as_u64())
        .sum();
    let verify = aacworkflow(&args.bin, &db, &["audit", "--verify"]);
    let all = aacworkflow(&args.bin, &db, &["audit", "--json"]);
    let after = db_bytes(&db);
    let largest = all.lines().map(str::len).max().unwrap_or(0);
    if let Ok(keep) = std::env::var("FLOOD_KEEP") {
        std::fs::copy(&db, keep).expect("copy the database");
    }
    println!(
        "flood: {} token-less requests of {} bytes over {} connections in {:.1} s ({:.0} req/s, {:.2} GiB sent)",
        args.requests,
        args.body_bytes,
        args.connections,
        elapsed.as_secs_f64(),
        args.requests as f64 / elapsed.as_secs_f64(),
        (args.requests * args.body_bytes) as f64 / f64::from(1u32 << 30),
    );
    println!("answers by status: {statuses:?}");
    println!(
        "audit records written: {records} ({} of them counts, covering {suppressed} refusals not recorded one by one)",
        stats.lines().count()
    );
    println!(
        "database file: {} -> {} bytes (+{} bytes, {:.2} bytes per request); WAL {} -> {} bytes (bounded by SQLite's autocheckpoint, 1000 pages)",
        before.0,
        after.0,
        after.0.saturating_sub(before.0),
        after.0.saturating_sub(before.0) as f64 / args.requests as f64,
        before.1,
        after.1,
    );
    println!(
        "records as JSON: {} bytes in all, the largest {largest} bytes",
        all.len()
    );
    print!("{verify}");
}

fn audit_total(bin: &Path, db: &Path) -> i64 {
    let stats: serde_json::Value =
        serde_json::from_str(&aacworkflow(bin, db, &["audit", "--stats", "--json"]))
            .expect("stats JSON");
    stats["total"].as_i64().expect("a total")
}
