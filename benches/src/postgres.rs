//! The reference server on PostgreSQL against the SQLite default (`bench-all --postgres
//! URL`): the real `aacworkflow` binary (`cargo build --release -p aacworkflow`, found
//! next to `bench-all` or at `AACWORKFLOW_BIN`), `serve --http --stateless`, the same
//! HTTP scenarios on each setup:
//!
//! - SQLite: one process on one file (the default);
//! - PostgreSQL: 1, 2 and 3 replicas on one database, the clients spread over them in
//!   turn (client-side round robin: no balancer process in the measure).
//!
//! Scenarios: `get_issue` (a read-only tool: the read role, a `READ ONLY` transaction) and
//! `comment_issue` (a write: the write role, an `INSERT`), as REST `POST /tools/{name}`
//! from `CLIENTS` keep-alive HTTP/1.1 clients. Every call is authenticated against the
//! token store and recorded in the audit trail before it is answered; the trail is
//! verified after each setup. The URL names a user that may create databases and roles
//! (`psql` creates and drops a fresh database and its roles per setup).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Barrier;

use aac_bench::stats::{RunResult, percentile};

/// Concurrent clients of every scenario.
const CLIENTS: usize = 64;

/// The scenarios: a tool and its arguments.
const SCENARIOS: [(&str, &str); 2] = [
    ("get_issue", r#"{"issue_id": "AAC-1"}"#),
    (
        "comment_issue",
        r#"{"issue_id": "AAC-1", "body": "a comment from the benchmark"}"#,
    ),
];

/// One measured scenario on one setup.
#[derive(Debug, Clone)]
struct Line {
    /// `SQLite, 1 process` or `PostgreSQL, N replicas`.
    setup: String,
    /// The tool called.
    tool: &'static str,
    /// Calls per second (median of the rounds).
    calls_per_sec: f64,
    /// Median latency of the best round, in microseconds.
    p50_us: u64,
    /// 99th percentile.
    p99_us: u64,
}

/// Every setup and scenario, as a Markdown section.
pub(crate) fn section(admin_url: &str, secs: f64, rounds: usize) -> io::Result<String> {
    let bin = aacworkflow_bin()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for replicas in [0usize, 1, 2, 3] {
        let setup = if replicas == 0 {
            "SQLite, 1 process".to_owned()
        } else {
            format!(
                "PostgreSQL, {replicas} replica{}",
                if replicas > 1 { "s" } else { "" }
            )
        };
        eprintln!("== {setup}");
        let target = Target::prepare(&bin, admin_url, replicas)?;
        let measured = runtime.block_on(async {
            let servers = target.serve(replicas.max(1)).await?;
            let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
            let mut out = Vec::new();
            for (tool, args) in SCENARIOS {
                let mut runs = Vec::new();
                for _ in 0..rounds {
                    runs.push(run(&addrs, &target.token, tool, args, secs).await?);
                }
                out.push((tool, runs));
            }
            let connections = target.connections();
            drop(servers);
            Ok::<_, io::Error>((out, connections))
        })?;
        let (measured, connections) = measured;
        for (tool, runs) in measured {
            let rates: Vec<f64> = runs.iter().map(RunResult::throughput).collect();
            let best = runs
                .iter()
                .max_by(|a, b| a.throughput().total_cmp(&b.throughput()))
                .cloned()
                .unwrap_or_default();
            let mut sorted = best.latencies_ns.clone();
            sorted.sort_unstable();
            lines.push(Line {
                setup: setup.clone(),
                tool,
                calls_per_sec: aac_bench::stats::median(&rates),
                p50_us: percentile(&sorted, 50.0) / 1000,
                p99_us: percentile(&sorted, 99.0) / 1000,
            });
        }
        let verified = target.verify()?;
        notes.push(match connections {
            Some(n) => format!("{setup}: {verified}; {n} connections to PostgreSQL after the run"),
            None => format!("{setup}: {verified}"),
        });
    }
    Ok(report(&lines, &notes, secs, rounds))
}

fn report(lines: &[Line], notes: &[String], secs: f64, rounds: usize) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "## The reference server on PostgreSQL\n\n`aacworkflow serve --http --stateless` \
         (release), {CLIENTS} keep-alive clients calling `POST /tools/{{name}}`, {secs} s per \
         round, median of {rounds} rounds; with replicas the clients are spread over them in \
         turn. Every call is authenticated, run in its level's transaction and recorded in \
         the audit trail before it is answered. Client, replicas and database share this \
         machine: on 2 cores, more replicas compete for the same cores and cannot add \
         throughput; the figures show the cost of each setup, not the design's ceiling.\n\n"
    ));
    out.push_str("| setup | tool | calls/s | p50 µs | p99 µs |\n| --- | --- | --- | --- | --- |\n");
    for l in lines {
        out.push_str(&format!(
            "| {} | `{}` | {:.0} | {} | {} |\n",
            l.setup, l.tool, l.calls_per_sec, l.p50_us, l.p99_us
        ));
    }
    out.push('\n');
    for note in notes {
        out.push_str(&format!("- {note}\n"));
    }
    out.push('\n');
    out
}

/// The `aacworkflow` binary: `AACWORKFLOW_BIN`, else next to this program.
pub(crate) fn aacworkflow_bin() -> io::Result<PathBuf> {
    if let Ok(bin) = std::env::var("AACWORKFLOW_BIN") {
        return Ok(bin.into());
    }
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("aacworkflow");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(io::Error::other(format!(
            "no `{}`: build it with `cargo build --release -p aacworkflow` (or set AACWORKFLOW_BIN)",
            bin.display()
        )))
    }
}

/// One database with the demo data and a token for alice: a file, or a fresh PostgreSQL
/// database with roles of its own (dropped on drop).
struct Target {
    bin: PathBuf,
    /// `AAC_DB` and `AAC_DB_ROLE_PREFIX` (PostgreSQL).
    env: Vec<(&'static str, String)>,
    token: String,
    _dir: tempfile::TempDir,
    postgres: Option<(String, String)>,
}

impl Target {
    fn prepare(bin: &Path, admin_url: &str, replicas: usize) -> io::Result<Target> {
        let dir = tempfile::tempdir()?;
        let (env, postgres) = if replicas == 0 {
            let db = dir.path().join("aacworkflow.db").display().to_string();
            (vec![("AAC_DB", db)], None)
        } else {
            let name = format!("bench_pg_{}_{replicas}", std::process::id());
            psql(
                admin_url,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )?;
            psql(admin_url, &format!("CREATE DATABASE {name}"))?;
            let base = admin_url.rsplit_once('/').map_or(admin_url, |(b, _)| b);
            let url = format!("{base}/{name}");
            (
                vec![("AAC_DB", url), ("AAC_DB_ROLE_PREFIX", name.clone())],
                Some((admin_url.to_owned(), name)),
            )
        };
        let mut target = Target {
            bin: bin.to_owned(),
            env,
            token: String::new(),
            _dir: dir,
            postgres,
        };
        target.command(&["init", "--demo"])?;
        target.token = target
            .command(&[
                "token",
                "create",
                "--workspace",
                "demo",
                "--user",
                "alice",
                "--scopes",
                "all",
            ])?
            .trim()
            .to_owned();
        Ok(target)
    }

    /// Run `aacworkflow args…`; its stdout.
    fn command(&self, args: &[&str]) -> io::Result<String> {
        let out = std::process::Command::new(&self.bin)
            .args(args)
            .envs(self.env.iter().cloned())
            .env("AAC_LOG", "error")
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "aacworkflow {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `replicas` servers on this database.
    async fn serve(&self, replicas: usize) -> io::Result<Vec<Replica>> {
        let mut servers = Vec::new();
        for _ in 0..replicas {
            let mut child = Command::new(&self.bin)
                .args(["serve", "--http", "127.0.0.1:0", "--stateless"])
                .envs(self.env.iter().cloned())
                .env("AAC_LOG", "error")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
            let addr = loop {
                let line = lines
                    .next_line()
                    .await?
                    .ok_or_else(|| io::Error::other("a replica stopped before listening"))?;
                if let Some(url) = line.strip_prefix("aacworkflow: serving MCP on http://") {
                    let addr = url.trim_end_matches("/mcp");
                    break addr.parse().map_err(io::Error::other)?;
                }
            };
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            servers.push(Replica {
                _child: child,
                addr,
            });
        }
        Ok(servers)
    }

    /// Connections to the database now (PostgreSQL only).
    fn connections(&self) -> Option<u64> {
        let (admin, name) = self.postgres.as_ref()?;
        let out = psql(
            admin,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'"),
        )
        .ok()?;
        out.trim().parse().ok()
    }

    /// `audit --verify`'s first line.
    fn verify(&self) -> io::Result<String> {
        let out = self.command(&["audit", "--verify"])?;
        Ok(out
            .lines()
            .next()
            .unwrap_or("")
            .split(", head")
            .next()
            .unwrap_or("")
            .to_owned())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some((admin, name)) = &self.postgres {
            let _ = psql(
                admin,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            );
            for role in ["read", "write", "delete", "tokens", "audit"] {
                let _ = psql(admin, &format!("DROP ROLE IF EXISTS {name}_{role}"));
            }
        }
    }
}

/// A running `aacworkflow serve --http`, killed on drop.
struct Replica {
    _child: Child,
    addr: SocketAddr,
}

fn psql(url: &str, sql: &str) -> io::Result<String> {
    let out = std::process::Command::new("psql")
        .args([url, "-qAtc", sql])
        .output()
        .map_err(|e| io::Error::other(format!("psql (postgresql-client) is required: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `CLIENTS` clients calling `tool` for `secs` seconds (after a warm-up of 20 calls each),
/// client `i` on replica `i % replicas`.
async fn run(
    addrs: &[SocketAddr],
    token: &str,
    tool: &'static str,
    args: &'static str,
    secs: f64,
) -> io::Result<RunResult> {
    let barrier = Arc::new(Barrier::new(CLIENTS + 1));
    let measure = Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let addr = addrs[i % addrs.len()];
        let barrier = Arc::clone(&barrier);
        let auth = format!("Bearer {token}");
        tasks.push(tokio::spawn(async move {
            let prepared = async {
                let mut client = Client::connect(addr, auth).await?;
                for _ in 0..20 {
                    client.call(tool, args).await?;
                }
                Ok::<_, io::Error>(client)
            }
            .await;
            // Every client reaches the barrier, even one that failed.
            barrier.wait().await;
            let mut client = prepared?;
            let start = Instant::now();
            let deadline = start + measure;
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                client.call(tool, args).await?;
                latencies.push(t.elapsed().as_nanos() as u64);
            }
            Ok::<_, io::Error>((latencies, Instant::now()))
        }));
    }
    aac_bench::load::release_and_gather(&barrier, tasks).await
}

/// One keep-alive HTTP/1.1 connection to a replica.
struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
    auth: String,
}

impl Client {
    async fn connect(addr: SocketAddr, auth: String) -> io::Result<Client> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(connection);
        Ok(Client {
            sender,
            host: addr.to_string(),
            auth,
        })
    }

    /// One call, answered 200 or an error.
    async fn call(&mut self, tool: &str, args: &'static str) -> io::Result<()> {
        let request = Request::post(format!("/tools/{tool}"))
            .header("host", &self.host)
            .header("content-type", "application/json")
            .header("authorization", &self.auth)
            .body(Full::new(Bytes::from_static(args.as_bytes())))
            .map_err(io::Error::other)?;
        self.sender.ready().await.map_err(io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(io::Error::other)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(io::Error::other)?;
        if status != StatusCode::OK {
            return Err(io::Error::other(format!(
                "{tool}: HTTP {status}: {}",
                String::from_utf8_lossy(&body.to_bytes())
            )));
        }
        Ok(())
    }
}
