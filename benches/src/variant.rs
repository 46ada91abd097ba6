//! The four servers compared, and how each is served over stdio and Streamable HTTP.

use std::io;
use std::path::Path;

use aac_tools::Server;
use aac_tools::audit::{SinkStats, Synchronous};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::aac_flavour;
use crate::pipeline::{BENCH_TOKEN, CountingSink, bench_verifier};
use crate::rmcp_flavour::{PerCallRouter, StoredRouter};

/// One of the four servers of the comparison, all with the same 150 tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// (a) aac-tools with every check on and the durable SQLite audit trail.
    AacDurable,
    /// (a-normal) the same with `synchronous = NORMAL`: records survive a crash of the
    /// process, not a power loss; separates the framework's cost from the disk's.
    AacDurableNormal,
    /// (b) aac-tools with every check on and the audit trail off.
    AacNoAudit,
    /// (a-count) aac-tools handing every record to a sink that keeps nothing: what
    /// building and handing over records costs, without storage. Not in [`Variant::ALL`]:
    /// measured for the attribution of (a-normal) − (b) only.
    AacCounting,
    /// (c) rmcp's `#[tool]` macros with a stored router.
    RmcpStored,
    /// (d) rmcp's default `#[tool_handler]`, which rebuilds the router on every call.
    RmcpPerCall,
    /// (p) aac-tools with every check on and the durable PostgreSQL audit trail
    /// (`PgSink`, `synchronous_commit = on`) on a database of its own. Not in
    /// [`Variant::ALL`]: measured when `bench-all` is given `--postgres URL`.
    AacPostgres,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 5] = [
        Variant::AacDurable,
        Variant::AacDurableNormal,
        Variant::AacNoAudit,
        Variant::RmcpStored,
        Variant::RmcpPerCall,
    ];

    /// `a`, `n` (a-normal), `b`, `m` (a-count), `c` or `d`.
    pub const fn key(self) -> &'static str {
        match self {
            Variant::AacDurable => "a",
            Variant::AacDurableNormal => "n",
            Variant::AacNoAudit => "b",
            Variant::AacCounting => "m",
            Variant::RmcpStored => "c",
            Variant::RmcpPerCall => "d",
            Variant::AacPostgres => "p",
        }
    }

    /// The variant of this key.
    pub fn from_key(key: &str) -> Option<Variant> {
        Variant::ALL
            .into_iter()
            .chain([Variant::AacCounting, Variant::AacPostgres])
            .find(|v| v.key() == key)
    }

    /// A short description for tables.
    pub const fn label(self) -> &'static str {
        match self {
            Variant::AacDurable => "(a) aac-tools, durable SQLite audit",
            Variant::AacDurableNormal => "(a-normal) aac-tools, SQLite audit, synchronous NORMAL",
            Variant::AacNoAudit => "(b) aac-tools, audit off",
            Variant::AacCounting => "(a-count) aac-tools, records to a sink that keeps nothing",
            Variant::RmcpStored => "(c) rmcp macros, stored router",
            Variant::RmcpPerCall => "(d) rmcp macros, default #[tool_handler]",
            Variant::AacPostgres => "(p) aac-tools, durable PostgreSQL audit",
        }
    }

    /// Whether this is an aac-tools server.
    pub const fn is_aac(self) -> bool {
        matches!(
            self,
            Variant::AacDurable
                | Variant::AacDurableNormal
                | Variant::AacNoAudit
                | Variant::AacCounting
                | Variant::AacPostgres
        )
    }

    /// Whether this server keeps an audit trail of its own: a SQLite file, or for (p) a
    /// PostgreSQL database (its URL in place of the file's path).
    pub const fn has_audit_db(self) -> bool {
        matches!(
            self,
            Variant::AacDurable | Variant::AacDurableNormal | Variant::AacPostgres
        )
    }

    /// The name in ratios: `a`, `a-normal`, `b`, `c` or `d`.
    pub const fn short(self) -> &'static str {
        match self {
            Variant::AacDurableNormal => "a-normal",
            Variant::AacCounting => "a-count",
            other => other.key(),
        }
    }
}

/// The transports a server is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// MCP over the process's stdin and stdout.
    Stdio,
    /// MCP over Streamable HTTP on a loopback port (sessions on, the default of both
    /// frameworks).
    Http,
}

impl TransportKind {
    /// `stdio` or `http`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::Http => "http",
        }
    }

    /// The transport of this name.
    pub fn parse(s: &str) -> Option<TransportKind> {
        match s {
            "stdio" => Some(TransportKind::Stdio),
            "http" => Some(TransportKind::Http),
            _ => None,
        }
    }
}

/// The aac-tools server of variant (a), (a-normal), (b) or (a-count). (a) and (a-normal)
/// write their audit trail to the SQLite file `audit_db`.
pub fn aac_server(variant: Variant, audit_db: Option<&Path>) -> io::Result<Server> {
    aac_server_and_sink(variant, audit_db).map(|(server, _)| server)
}

/// The [`SinkStats`] of a server's audit sink, read when asked.
pub type Stats = Box<dyn Fn() -> SinkStats + Send + Sync>;

/// [`aac_server`], and its audit sink's [`SinkStats`] if it keeps a trail.
pub fn aac_server_and_sink(
    variant: Variant,
    audit_db: Option<&Path>,
) -> io::Result<(Server, Option<Stats>)> {
    let registry = aac_flavour::registry().map_err(io::Error::other)?;
    let builder = Server::builder(registry).verifier(bench_verifier());
    let mut kept = None;
    let builder = match variant {
        Variant::AacNoAudit => builder.audit_disabled(),
        Variant::AacCounting => builder.audit(CountingSink::default()),
        Variant::AacDurable | Variant::AacDurableNormal => {
            let path = audit_db.ok_or_else(|| {
                io::Error::other("this variant needs the path of its audit database")
            })?;
            let synchronous = if variant == Variant::AacDurable {
                Synchronous::Full
            } else {
                Synchronous::Normal
            };
            let sink = crate::durable::sink(path, synchronous)?;
            let stats = sink.clone();
            kept = Some(Box::new(move || stats.stats()) as Stats);
            builder.audit(sink)
        }
        Variant::AacPostgres => {
            let url = audit_db
                .and_then(Path::to_str)
                .ok_or_else(|| io::Error::other("(p) needs the URL of its audit database"))?;
            let sink = crate::postgres_audit::sink(url)?;
            let stats = sink.clone();
            kept = Some(Box::new(move || stats.stats()) as Stats);
            builder.audit(sink)
        }
        _ => return Err(io::Error::other("not an aac-tools variant")),
    };
    Ok((builder.build().map_err(io::Error::other)?, kept))
}

/// Where a stdio server with a SQLite trail at `audit_db` writes its sink's
/// [`SinkStats`] when its client leaves, as `records batches busy_ns`.
pub fn stats_file(audit_db: &Path) -> std::path::PathBuf {
    // (p)'s is the URL of its database: its figures go to the temporary directory.
    if let Some(url) = audit_db.to_str().filter(|u| u.starts_with("postgres")) {
        let name = url.rsplit('/').next().unwrap_or("postgres");
        return std::env::temp_dir().join(format!("{name}.stats"));
    }
    let mut path = audit_db.as_os_str().to_owned();
    path.push(".stats");
    path.into()
}

/// The [`SinkStats`] a stdio server left in [`stats_file`]: records, batches and the
/// nanoseconds spent writing them.
pub fn read_stats(audit_db: &Path) -> io::Result<(u64, u64, u64)> {
    let text = std::fs::read_to_string(stats_file(audit_db))?;
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let mut next = || {
        fields
            .next()
            .and_then(Result::ok)
            .ok_or_else(|| io::Error::other(format!("bad stats file: {text:?}")))
    };
    Ok((next()?, next()?, next()?))
}

/// Serve `variant` on `transport` until the client goes away (stdio) or the process is
/// killed (HTTP). Over HTTP the first line on stdout is `listening <addr>`.
pub async fn serve(
    variant: Variant,
    transport: TransportKind,
    audit_db: Option<&Path>,
) -> io::Result<()> {
    match transport {
        TransportKind::Stdio => serve_stdio(variant, audit_db).await,
        TransportKind::Http => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            println!("listening {addr}");
            serve_http(variant, listener, audit_db).await
        }
    }
}

async fn serve_stdio(variant: Variant, audit_db: Option<&Path>) -> io::Result<()> {
    match variant {
        Variant::AacDurable
        | Variant::AacDurableNormal
        | Variant::AacNoAudit
        | Variant::AacCounting
        | Variant::AacPostgres => {
            let (server, sink) = aac_server_and_sink(variant, audit_db)?;
            aac_tools::mcp::serve_stdio(server, Some(BENCH_TOKEN.to_owned())).await?;
            if let (Some(sink), Some(db)) = (sink, audit_db) {
                let stats: SinkStats = sink();
                std::fs::write(
                    stats_file(db),
                    format!(
                        "{} {} {}\n",
                        stats.records,
                        stats.batches,
                        stats.busy.as_nanos()
                    ),
                )?;
            }
            Ok(())
        }
        Variant::RmcpStored => rmcp_stdio(StoredRouter::new()).await,
        Variant::RmcpPerCall => rmcp_stdio(PerCallRouter).await,
    }
}

/// An rmcp server over rmcp's own stdio transport, until the client leaves.
async fn rmcp_stdio<H: rmcp::ServerHandler>(handler: H) -> io::Result<()> {
    let failed = |err: String| io::Error::other(format!("the MCP session failed: {err}"));
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| failed(e.to_string()))?;
    running.waiting().await.map_err(|e| failed(e.to_string()))?;
    Ok(())
}

async fn serve_http(
    variant: Variant,
    listener: tokio::net::TcpListener,
    audit_db: Option<&Path>,
) -> io::Result<()> {
    match variant {
        Variant::AacDurable
        | Variant::AacDurableNormal
        | Variant::AacNoAudit
        | Variant::AacCounting
        | Variant::AacPostgres => {
            let server = aac_server(variant, audit_db)?;
            aac_tools::http::serve(server, listener, aac_tools::http::HttpOptions::default()).await
        }
        Variant::RmcpStored => rmcp_http(listener, StoredRouter::new).await,
        Variant::RmcpPerCall => rmcp_http(listener, || PerCallRouter).await,
    }
}

/// An rmcp server over rmcp's Streamable HTTP service (sessions on, one handler per
/// session from `handler`), at `/mcp`.
async fn rmcp_http<H: rmcp::ServerHandler>(
    listener: tokio::net::TcpListener,
    handler: impl Fn() -> H + Send + Sync + 'static,
) -> io::Result<()> {
    let service: StreamableHttpService<H, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(handler()),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    axum::serve(
        nodelay(listener),
        axum::Router::new().nest_service("/mcp", service),
    )
    .await
}

/// The listener with `TCP_NODELAY` on every connection, as `aac_tools::http::serve` does:
/// without it an SSE answer waits for the client's delayed ACK (40 ms).
fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    })
}
