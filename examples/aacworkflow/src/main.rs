//! `aacworkflow`: the command line of the aac-tools reference server.
//!
//! ```text
//! aacworkflow init [--demo]
//! aacworkflow token create --workspace W --user U --scopes s1,s2 [--expires 30d]
//! aacworkflow token revoke ID_OR_TOKEN
//! aacworkflow token list
//! aacworkflow serve [--http ADDR] [--read-only] [--stateless] [--demo]
//! aacworkflow manifest
//! aacworkflow audit [--tool T] [--outcome O] [--since TIME] [--json] [--stats]
//! ```
//!
//! The database is `--db PATH`, else `AAC_DB`, else `aacworkflow.db`. Logs go to stderr
//! only: on stdio, stdout belongs to the MCP protocol.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use aac_tools::audit::Outcome;
use aac_tools::sqlite::{Database, TokenStore};
use aacworkflow::store::{self, AppError, OpenMode};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "aacworkflow",
    version,
    about = "The aac-tools reference server: an issue tracker whose MCP tools enforce their annotations",
    after_help = "Start here:\n  aacworkflow serve --demo --http 127.0.0.1:8080"
)]
struct Cli {
    /// The database file [default: aacworkflow.db in the working directory]
    #[arg(long, global = true, env = "AAC_DB", value_name = "PATH")]
    db: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the database and its schema (harmless if it exists)
    Init {
        /// Also add the demo workspaces, users, agents and issues
        #[arg(long)]
        demo: bool,
    },
    /// Create, revoke and list bearer tokens
    #[command(subcommand)]
    Token(TokenCommand),
    /// Serve the tools over MCP: stdio by default (token from AAC_TOKEN), or Streamable HTTP
    Serve {
        /// Serve Streamable HTTP on this address (such as 127.0.0.1:8080) instead of stdio
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Only the four read-only tools are listed and callable
        #[arg(long)]
        read_only: bool,
        /// Streamable HTTP without sessions (each request stands alone)
        #[arg(long, requires = "http")]
        stateless: bool,
        /// Seed the demo data and print a ready-to-use token for alice on stderr
        #[arg(long)]
        demo: bool,
    },
    /// Print the tools manifest (the committed copy is examples/aacworkflow/tools.json)
    Manifest,
    /// Show the audit trail: one record per tool call, refused ones included
    Audit(AuditArgs),
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create a token and print it alone on stdout (only its hash is stored)
    Create {
        /// The workspace the token acts in
        #[arg(long)]
        workspace: String,
        /// The user it acts as; must exist in the workspace
        #[arg(long)]
        user: String,
        /// Comma-separated scopes, such as issues:read,issues:write (or `all`)
        #[arg(long, value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        /// Lifetime, such as 30d, 12h, 15m or 2w [default: never expires]
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
    },
    /// Revoke a token, given its id or the whole token
    Revoke {
        /// The token's id (as `token list` shows it) or the token itself
        id_or_token: String,
    },
    /// List tokens (never their secrets)
    List,
}

#[derive(Debug, clap::Args)]
struct AuditArgs {
    /// Only calls of this tool
    #[arg(long)]
    tool: Option<String>,
    /// Only calls with this outcome
    #[arg(long, value_parser = ["success", "denied", "error"])]
    outcome: Option<String>,
    /// Only calls since this time: RFC 3339 (2025-06-22T15:30:00Z), a day (2025-06-22), or an age (24h, 7d)
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// One JSON record per line
    #[arg(long)]
    json: bool,
    /// Only calls in this workspace
    #[arg(long)]
    workspace: Option<String>,
    /// Only the newest N records
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// A summary instead of the records: calls per day, most refused tools, denials per hour
    #[arg(long)]
    stats: bool,
    /// Check the hash chain of the trail instead of listing records
    #[arg(long, conflicts_with = "stats")]
    verify: bool,
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let path = store::resolve_path(cli.db);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command, &path)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AAC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

async fn run(command: Command, path: &Path) -> Result<(), AppError> {
    match command {
        Command::Init { demo } => init(path, demo).await,
        Command::Token(command) => token(path, command),
        Command::Serve {
            http,
            read_only,
            stateless,
            demo,
        } => serve(path, http, read_only, stateless, demo).await,
        Command::Manifest => {
            print!("{}", aacworkflow::registry()?.manifest());
            Ok(())
        }
        Command::Audit(args) => audit(path, args),
    }
}

async fn init(path: &Path, demo: bool) -> Result<(), AppError> {
    let db = store::open(path, OpenMode::Create)?;
    eprintln!(
        "aacworkflow: database `{}` ready (schema version {})",
        path.display(),
        store::SCHEMA_VERSION
    );
    if demo {
        seed(&db).await?;
        eprintln!(
            "aacworkflow: demo data ready: workspace `demo` (alice admin, bob member, carol viewer) \
             and workspace `other` (oscar admin)\n\
             next: aacworkflow token create --workspace demo --user alice --scopes all"
        );
    }
    Ok(())
}

async fn seed(db: &Database) -> Result<(), AppError> {
    aacworkflow::seed::seed_demo(db)
        .await
        .map_err(|e| AppError::new(format!("cannot add the demo data: {}", e.message())))
}

fn token_store(db: &Database) -> Result<TokenStore, AppError> {
    TokenStore::open(db).map_err(|e| AppError::new(format!("cannot open the token store: {e}")))
}

/// `30d` → seconds. Units: s, m, h, d, w.
fn parse_duration(text: &str) -> Result<i64, AppError> {
    let bad = || {
        AppError::new(format!(
            "cannot read the duration `{text}`; write a number and a unit, such as 30d, 12h, 15m, 90s or 2w"
        ))
    };
    let text = text.trim();
    let unit = text.chars().last().ok_or_else(bad)?;
    let seconds = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return Err(bad()),
    };
    let number: i64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
    if number <= 0 {
        return Err(bad());
    }
    number.checked_mul(seconds).ok_or_else(bad)
}

fn token(path: &Path, command: TokenCommand) -> Result<(), AppError> {
    let db = store::open(path, OpenMode::Existing)?;
    let tokens = token_store(&db)?;
    match command {
        TokenCommand::Create {
            workspace,
            user,
            scopes,
            expires,
        } => {
            let ttl = expires.as_deref().map(parse_duration).transpose()?;
            let known = aacworkflow::registry()?.scopes_supported();
            let scopes: Vec<&str> = if scopes.iter().any(|s| s == "all") {
                known.clone()
            } else {
                scopes
                    .iter()
                    .map(|s| s.trim())
                    .filter(|s| !s.is_empty())
                    .collect()
            };
            if scopes.is_empty() {
                return Err(AppError::new(
                    "no scopes given; pass --scopes, such as --scopes issues:read",
                ));
            }
            if let Some(unknown) = scopes.iter().find(|s| !known.contains(s)) {
                return Err(AppError::new(format!(
                    "unknown scope `{unknown}`; the tools use: {} (or `all`)",
                    known.join(", ")
                )));
            }
            let role = user_role(&db, &workspace, &user)?;
            let Some(role) = role else {
                return Err(AppError::new(format!(
                    "no user `{user}` in workspace `{workspace}`; \
                     run `aacworkflow init --demo` for the demo users, or check the names"
                )));
            };
            let created = tokens
                .create(&user, Some(&workspace), &scopes, ttl)
                .map_err(|e| AppError::new(format!("cannot create the token: {e}")))?;
            println!("{}", created.token);
            eprintln!(
                "aacworkflow: token {} for {user}@{workspace} ({role}), scopes: {}{}",
                created.id,
                scopes.join(" "),
                match expires {
                    Some(e) => format!(", expires in {e}"),
                    None => ", never expires".to_owned(),
                }
            );
            Ok(())
        }
        TokenCommand::Revoke { id_or_token } => {
            let revoked = tokens
                .revoke(&id_or_token)
                .map_err(|e| AppError::new(format!("cannot revoke the token: {e}")))?;
            if revoked {
                eprintln!("aacworkflow: token revoked");
                Ok(())
            } else {
                Err(AppError::new(
                    "no live token with that id; `aacworkflow token list` shows the ids",
                ))
            }
        }
        TokenCommand::List => {
            let list = tokens
                .list()
                .map_err(|e| AppError::new(format!("cannot list the tokens: {e}")))?;
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            let when = |t: i64| {
                time::OffsetDateTime::from_unix_timestamp(t)
                    .map(aacworkflow::model::timestamp)
                    .unwrap_or_else(|_| t.to_string())
            };
            for t in list {
                let state = match (t.revoked_at, t.expires_at) {
                    (Some(at), _) => format!("revoked {}", when(at)),
                    (None, Some(at)) if at <= now => format!("expired {}", when(at)),
                    (None, Some(at)) => format!("live until {}", when(at)),
                    (None, None) => "live".to_owned(),
                };
                println!(
                    "{}  {}@{}  {}  [{}]",
                    t.id,
                    t.subject,
                    t.workspace.as_deref().unwrap_or("-"),
                    state,
                    t.scopes.join(" ")
                );
            }
            Ok(())
        }
    }
}

fn user_role(db: &Database, workspace: &str, user: &str) -> Result<Option<String>, AppError> {
    use rusqlite::OptionalExtension;
    db.with_reader(|conn| {
        conn.query_row(
            "SELECT role FROM users WHERE workspace = ?1 AND name = ?2",
            [workspace, user],
            |r| r.get(0),
        )
        .optional()
    })
    .map_err(|e| AppError::new(format!("cannot read the users: {e}")))
}

async fn serve(
    path: &Path,
    http: Option<String>,
    read_only: bool,
    stateless: bool,
    demo: bool,
) -> Result<(), AppError> {
    let db = store::open(path, OpenMode::Create)?;
    let mut demo_token = None;
    if demo {
        seed(&db).await?;
        let scopes = aacworkflow::registry()?.scopes_supported();
        let created = token_store(&db)?
            .create(
                "alice",
                Some(aacworkflow::seed::DEMO_WORKSPACE),
                &scopes,
                Some(30 * 86_400),
            )
            .map_err(|e| AppError::new(format!("cannot create the demo token: {e}")))?;
        eprintln!(
            "aacworkflow: demo data in `{}`; a token for alice@demo (admin, every scope, 30 days):\n\n    {}\n",
            path.display(),
            created.token
        );
        demo_token = Some(created.token);
    }
    let sink = audit_sink(&db)?;
    let server = aacworkflow::server(&db, sink, read_only)?;
    match http {
        None => serve_stdio(server, &db, demo_token).await,
        Some(addr) => serve_http(server, &addr, stateless).await,
    }
}

/// The audit trail: the `aac_audit` table in the same database file.
fn audit_sink(db: &Database) -> Result<aac_tools::audit::SqliteSink, AppError> {
    aac_tools::audit::SqliteSink::open(db.path()).map_err(|e| {
        AppError::new(format!(
            "cannot open the audit trail in `{}`: {e}; every call must leave a record, so the server does not start",
            db.path().display()
        ))
    })
}

async fn serve_stdio(
    server: aac_tools::Server,
    db: &Database,
    demo_token: Option<String>,
) -> Result<(), AppError> {
    let token = match std::env::var("AAC_TOKEN") {
        Ok(token) if !token.trim().is_empty() => token.trim().to_owned(),
        _ => match demo_token {
            Some(token) => {
                eprintln!(
                    "aacworkflow: AAC_TOKEN is not set, so this stdio session uses the demo token"
                );
                token
            }
            None => {
                return Err(AppError::new(
                    "no token for stdio: set AAC_TOKEN to a token from \
                     `aacworkflow token create --workspace W --user U --scopes …` (or add --demo)",
                ));
            }
        },
    };
    // Checked again on every call; this only turns a typo into a clear start-up error.
    let tokens = token_store(db)?;
    let principal =
        tokio::task::block_in_place(|| tokens.verify_blocking(&token)).map_err(|e| {
            AppError::new(format!(
                "AAC_TOKEN is refused ({}); create a new one with `aacworkflow token create`",
                e.message()
            ))
        })?;
    tracing::info!(
        principal = %principal,
        read_only = server.is_read_only_mode(),
        "serving MCP on stdio"
    );
    aac_tools::mcp::serve_stdio(server, Some(token))
        .await
        .map_err(|e| AppError::new(format!("the stdio session failed: {e}")))
}

async fn serve_http(
    server: aac_tools::Server,
    addr: &str,
    stateless: bool,
) -> Result<(), AppError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        AppError::new(format!(
            "cannot listen on `{addr}`: {e}; pick another address, such as 127.0.0.1:8080"
        ))
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| AppError::new(format!("cannot read the listening address: {e}")))?;
    if !local.ip().is_loopback() {
        tracing::warn!(
            %local,
            "listening beyond loopback, but only requests whose Host is localhost, 127.0.0.1 or ::1 \
             are accepted (the DNS-rebinding guard); put a proxy that sets Host in front"
        );
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    let options = aac_tools::http::HttpOptions::default()
        .stateless(stateless)
        .shutdown(shutdown.clone());
    tokio::spawn(async move {
        stop_signal().await;
        tracing::info!("stopping: no new calls, sessions closed");
        shutdown.cancel();
    });
    // Tests and scripts read this line to find the port of `--http 127.0.0.1:0`.
    eprintln!("aacworkflow: serving MCP on http://{local}/mcp");
    tracing::info!(
        %local,
        stateless,
        read_only = server.is_read_only_mode(),
        "serving Streamable HTTP"
    );
    aac_tools::http::serve(server, listener, options)
        .await
        .map_err(|e| AppError::new(format!("the HTTP server failed: {e}")))
}

/// Ctrl-C, or SIGTERM (what `docker stop` and systemd send).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn audit(path: &Path, args: AuditArgs) -> Result<(), AppError> {
    // Checks the file is ours (and creates nothing) before reading it.
    drop(store::open(path, OpenMode::Existing)?);
    let failed = |e: aac_tools::audit::AuditError| AppError::new(e.to_string());
    let mut query = aac_tools::audit::AuditQuery::new();
    if let Some(tool) = args.tool {
        query = query.tool(tool);
    }
    if let Some(outcome) = args.outcome.as_deref() {
        query = query.outcome(match outcome {
            "success" => Outcome::Success,
            "denied" => Outcome::Denied,
            _ => Outcome::Error,
        });
    }
    if let Some(workspace) = args.workspace {
        query = query.workspace(workspace);
    }
    if let Some(since) = args.since.as_deref() {
        query = query.since(since).map_err(failed)?;
    }
    if let Some(limit) = args.limit {
        query = query.limit(limit);
    }
    let command = aac_tools::audit::AuditCommand {
        query,
        json: args.json,
        stats: args.stats,
        verify: args.verify,
    };
    let conn = aac_tools::audit::open_reader(path).map_err(failed)?;
    // A database whose server never ran has no trail yet: create the (empty) table.
    if !has_audit_table(&conn) {
        let writer = rusqlite::Connection::open(path)
            .map_err(|e| AppError::new(format!("cannot open `{}`: {e}", path.display())))?;
        aac_tools::audit::ensure_table(&writer).map_err(failed)?;
    }
    let mut out = std::io::stdout().lock();
    command.run(&conn, &mut out).map_err(failed)
}

fn has_audit_table(conn: &rusqlite::Connection) -> bool {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [aac_tools::audit::AUDIT_TABLE],
        |_| Ok(()),
    )
    .is_ok()
}
