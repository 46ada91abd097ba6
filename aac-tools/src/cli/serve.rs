//! `serve`: stdio with the token from `AAC_TOKEN`, or Streamable HTTP.

use clap::ArgMatches;

use super::args::ServeArgs;
use super::{CliContext, CliError, OpenMode};
use crate::audit::{CheckpointKey, SqliteSink, write_checkpoint_for};
use crate::confirm::SqliteLedger;
use crate::server::Server;
use crate::sqlite::{Database, TokenStore};

pub(super) async fn serve(
    context: CliContext,
    args: ServeArgs,
    matches: ArgMatches,
) -> Result<(), CliError> {
    if args.checkpoints.is_none() {
        warn_unused_checkpoint_key(&context, "without --checkpoints FILE");
    }
    let db = context.open_db(OpenMode::Create)?;
    let fallback_token = match &context.shared.before_serve {
        Some(hook) => hook(context.clone(), db.clone(), matches).await?,
        None => None,
    };
    let (server, sink) = build(&context, &db, &args)?;
    let checkpoints = match &args.checkpoints {
        Some(file) => Some(Checkpoints::start(sink, file)?),
        None => None,
    };
    let served = match args.http.clone() {
        None => stdio(&context, server, fallback_token).await,
        Some(addr) => http(&context, server, &addr, &args).await,
    };
    if let Some(checkpoints) = checkpoints {
        checkpoints.stop().await?;
    }
    // Every call taken is answered and recorded: what the write-ahead log holds goes into
    // the file, and the log is emptied, so that the file alone is the whole database (a
    // copy of it is not missing the last writes). Best effort: a reader elsewhere (an
    // `audit` running) may hold part of the log back.
    let checkpoint =
        db.with_writer(|conn| conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())));
    if let Err(err) = checkpoint {
        tracing::warn!(error = %err, "the write-ahead log was not emptied at the stop");
    }
    served
}

/// A warning on stderr when `AAC_CHECKPOINT_KEY` is set but nothing will be signed
/// (`why`): whoever set it expects checkpoints.
pub(super) fn warn_unused_checkpoint_key(context: &CliContext, why: &str) {
    if std::env::var("AAC_CHECKPOINT_KEY").is_ok_and(|key| !key.trim().is_empty()) {
        context.note(format_args!(
            "warning: AAC_CHECKPOINT_KEY is set, but {why} no checkpoint is signed"
        ));
    }
}

/// How often `serve --checkpoints` signs the chain's head.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The task that signs the chain's head every [`CHECKPOINT_EVERY`], and once more when
/// the server stops.
struct Checkpoints {
    write: std::sync::Arc<dyn Fn() -> Result<(), CliError> + Send + Sync>,
    task: tokio::task::JoinHandle<()>,
}

impl Checkpoints {
    /// Signing the head of the trail `sink` writes, naming the records it did not write
    /// ([`write_checkpoint_for`]).
    fn start(sink: SqliteSink, file: &std::path::Path) -> Result<Checkpoints, CliError> {
        let secret = std::env::var("AAC_CHECKPOINT_KEY").map_err(|_| {
            CliError::new(
                "--checkpoints needs the signing key in AAC_CHECKPOINT_KEY \
                 (make one with `audit --new-checkpoint-key`)",
            )
        })?;
        let key = CheckpointKey::from_hex(&secret)
            .map_err(|e| CliError::new(format!("AAC_CHECKPOINT_KEY: {e}")))?;
        let file = file.to_owned();
        let write = std::sync::Arc::new(move || {
            let conn =
                crate::audit::open_reader(sink.path()).map_err(|e| CliError::new(e.to_string()))?;
            write_checkpoint_for(&sink, &conn, &key, &file)
                .map(drop)
                .map_err(|e| CliError::new(e.to_string()))
        });
        // The first one now: a file that cannot be written stops the server at once.
        write()?;
        let periodic = std::sync::Arc::clone(&write);
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(CHECKPOINT_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                let write = std::sync::Arc::clone(&periodic);
                match tokio::task::spawn_blocking(move || write()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => {
                        tracing::error!(error = %err, "cannot write an audit checkpoint")
                    }
                    Err(err) => tracing::error!(error = %err, "the audit checkpoint task failed"),
                }
            }
        });
        Ok(Checkpoints { write, task })
    }

    /// The last checkpoint, when the server stops.
    async fn stop(self) -> Result<(), CliError> {
        self.task.abort();
        let write = self.write;
        tokio::task::spawn_blocking(move || write())
            .await
            .map_err(|e| CliError::new(format!("the audit checkpoint task failed: {e}")))?
    }
}

/// The server, and the sink of its audit trail.
fn build(
    context: &CliContext,
    db: &Database,
    args: &ServeArgs,
) -> Result<(Server, SqliteSink), CliError> {
    let tokens = TokenStore::open(db)
        .map_err(|e| CliError::new(format!("cannot open the token store: {e}")))?;
    // The audit trail: the `aac_audit` table in the same file.
    let sink = SqliteSink::open(db.path()).map_err(|e| {
        CliError::new(format!(
            "cannot open the audit trail in `{}`: {e}; every call must leave a record, so the server does not start",
            db.path().display()
        ))
    })?;
    let shared = &context.shared;
    let builder =
        Server::builder(context.registry()?).name(shared.name.clone(), shared.version.clone());
    let builder = match args.jwt()? {
        Some(jwt) => builder.verifier(
            crate::VerifierChain::new()
                .with(TokenStore::claims, tokens)
                .with(crate::jwt::looks_like_jwt, jwt),
        ),
        None => builder.verifier(tokens),
    };
    let builder = builder
        .audit(sink.clone())
        .state(db.clone())
        .read_only_mode(args.read_only);
    let mut builder = args
        .confirmation(builder)
        .rate_limit_per_principal(args.rate_limit)
        .request_state_keys(request_state_keys(context, args)?)
        // Single use of request states, in the audit database: any replica sharing it
        // refuses a replay.
        .request_state_ledger(SqliteLedger::open(db.path()).map_err(CliError::new)?);
    for configure in &shared.configure {
        builder = configure(builder, db);
    }
    let server = builder
        .build()
        .map_err(|e| CliError::new(format!("cannot build the server: {e}")))?;
    Ok((server, sink))
}

/// The request-state keys from `AAC_REQUEST_STATE_KEYS`: comma-separated hex, each at
/// least 32 bytes; none when unset or empty (a random key per process). A stateless
/// server that asks a person without them is told: a retry that another replica takes
/// is refused there (its seal does not verify).
pub(super) fn request_state_keys(
    context: &CliContext,
    args: &ServeArgs,
) -> Result<Vec<Vec<u8>>, CliError> {
    let keys = match std::env::var("AAC_REQUEST_STATE_KEYS") {
        Ok(text) => parse_request_state_keys(&text)?,
        Err(_) => Vec::new(),
    };
    if keys.is_empty() && args.stateless && args.confirm != crate::confirm::ConfirmPolicy::Argument
    {
        context.note(
            "AAC_REQUEST_STATE_KEYS is not set, so this replica seals requestStates with a key \
             of its own: behind a balancer, give every replica the same keys, or a retry that \
             reaches another one is refused",
        );
    }
    Ok(keys)
}

/// [`request_state_keys`] of `text`. A value that names no key but is not empty (`,`) is
/// refused: whoever set it meant keys shared by every replica, and a random key would
/// make each replica refuse the others' states.
fn parse_request_state_keys(text: &str) -> Result<Vec<Vec<u8>>, CliError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let keys = parse_keys(text)?;
    if keys.is_empty() {
        return Err(CliError::new(
            "AAC_REQUEST_STATE_KEYS names no key: give comma-separated keys of 64 or more hex digits, or unset it",
        ));
    }
    Ok(keys)
}

fn parse_keys(text: &str) -> Result<Vec<Vec<u8>>, CliError> {
    text.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .enumerate()
        .map(|(i, key)| {
            let bytes = (0..key.len())
                .step_by(2)
                .map(|j| {
                    key.get(j..j + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect::<Option<Vec<u8>>>();
            match bytes {
                Some(bytes) if bytes.len() >= 32 => Ok(bytes),
                _ => Err(CliError::new(format!(
                    "AAC_REQUEST_STATE_KEYS: key {} is not 64 or more hex digits",
                    i + 1
                ))),
            }
        })
        .collect()
}

async fn stdio(
    context: &CliContext,
    server: Server,
    fallback_token: Option<String>,
) -> Result<(), CliError> {
    let token = match std::env::var("AAC_TOKEN") {
        Ok(token) if !token.trim().is_empty() => token.trim().to_owned(),
        _ => match fallback_token {
            Some(token) => {
                context.note(
                    "AAC_TOKEN is not set, so this stdio session uses the token printed above",
                );
                token
            }
            None => return Err(no_stdio_token(context)),
        },
    };
    // Checked again on every call; this only turns a typo into a clear start-up error.
    // The server's own verifier: the store's tokens, and JWTs with --jwt-issuer.
    let principal = server
        .authenticate(&crate::Credentials::Bearer(token.clone()))
        .await
        .map_err(|e| token_refused(context, &token, e.message()))?;
    tracing::info!(
        principal = %principal,
        read_only = server.is_read_only_mode(),
        tools = %served_tools(&server),
        "serving MCP on stdio"
    );
    stdio_until_signal(server, token).await
}

/// Serve MCP over stdio with `token` until stdin ends, or SIGTERM or Ctrl-C, which end
/// the session as the end of stdin does: every call read so far is taken to its end and
/// recorded before the process exits. A second signal stops it at once, exit 130: every
/// call still in hand is abandoned (no transaction of it commits from then on, running or
/// yet to begin), and the process exits as soon as their records are written, at most
/// [`LAST_RECORDS`] later. (Every backend.)
pub(super) async fn stdio_until_signal(server: Server, token: String) -> Result<(), CliError> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let on_signal = shutdown.clone();
    let stopping = server.clone();
    let stopped_at_once = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let at_once = std::sync::Arc::clone(&stopped_at_once);
    // Taken over now, before the first request is read: a signal that came before the
    // task below first ran would kill the process as if none were handled.
    let mut signals = StopSignals::now();
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!(
            "stopping: no more requests are read; the calls in hand finish and are recorded"
        );
        on_signal.cancel();
        signals.next().await;
        // Exiting here, as this did, cut the calls in hand between their tool's commit
        // and their record: work done with no record. They are abandoned instead (what
        // has not committed rolls back, each is recorded 499 with what it committed), and
        // the session, which ends once they have, gets a bounded time to write that.
        tracing::warn!(
            "stopping at once (a second signal): the calls in hand are abandoned, and the \
             process exits once their records are written"
        );
        at_once.store(true, std::sync::atomic::Ordering::Release);
        stopping.stop_stdio_calls();
        drop(stopping);
        tokio::time::sleep(LAST_RECORDS).await;
        tracing::error!(
            limit_s = LAST_RECORDS.as_secs(),
            "stopped at once: records not written by now are lost"
        );
        std::process::exit(130);
    });
    let served = crate::mcp::serve_stdio_until(server, Some(token), shutdown)
        .await
        .map_err(|e| CliError::new(format!("the stdio session failed: {e}")));
    if stopped_at_once.load(std::sync::atomic::Ordering::Acquire) {
        // Every call of the session ended, its record written (its answer waited for it).
        std::process::exit(130);
    }
    served
}

/// How long a `serve` over stdio stopped at once (a second signal) waits for the records
/// of the calls it abandons before it exits regardless.
const LAST_RECORDS: std::time::Duration = std::time::Duration::from_secs(2);

/// A stdio `serve` without a token: which command makes one.
pub(super) fn no_stdio_token(context: &CliContext) -> CliError {
    CliError::new(format!(
        "no token for stdio: set AAC_TOKEN to a token from `{}`",
        context.shared.token_create_usage
    ))
}

/// A stdio `serve` whose token the store refuses (`why`): the database that refused it is
/// named, since a mistyped `--db` or `AAC_DB` opens (and creates) another one.
pub(super) fn token_refused(context: &CliContext, token: &str, why: &str) -> CliError {
    // What a header holds, not the token: said first, it is the whole mistake.
    if token
        .get(..7)
        .is_some_and(|start| start.eq_ignore_ascii_case("bearer "))
    {
        return CliError::new(format!(
            "AAC_TOKEN is refused ({why}): it holds the token alone, without `Bearer `"
        ));
    }
    CliError::new(format!(
        "AAC_TOKEN is refused ({why}): a token of the database `{}` comes from `{}` (point \
         --db or AAC_DB at the database that made it); a JWT needs --jwt-issuer and is checked \
         against its issuer's keys",
        context.db_shown(),
        context.shared.token_create_usage
    ))
}

/// Why `--http ADDR` cannot be listened on, and what to do.
fn cannot_listen(addr: &str, err: &std::io::Error) -> CliError {
    let hint = match err.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "something listens there already: stop it, or pick another port (`{}` takes a free \
             one and prints it)",
            with_port(addr, 0)
        ),
        std::io::ErrorKind::AddrNotAvailable => {
            "this machine has no such address: use 127.0.0.1, or one of its own".to_owned()
        }
        std::io::ErrorKind::PermissionDenied => {
            "ports below 1024 need privileges: pick a port above 1024".to_owned()
        }
        // A port alone (`--http 8080`): on this machine's loopback.
        _ if addr.parse::<u16>().is_ok() => {
            format!("an address is HOST:PORT, such as `127.0.0.1:{addr}`")
        }
        _ if !addr.contains(':') || addr.ends_with(':') => {
            format!(
                "an address is HOST:PORT, such as `{}`",
                with_port(addr, 8080)
            )
        }
        _ => "pick another address, such as 127.0.0.1:8080".to_owned(),
    };
    CliError::new(format!("cannot listen on `{addr}`: {err}; {hint}"))
}

/// `addr` with this port (its host kept, 127.0.0.1 if it has none).
fn with_port(addr: &str, port: u16) -> String {
    let host = match addr.rsplit_once(':') {
        Some((host, _)) if !host.is_empty() && !host.ends_with(':') => host,
        Some(_) => "127.0.0.1",
        None if addr.is_empty() => "127.0.0.1",
        None => addr,
    };
    format!("{host}:{port}")
}

pub(super) async fn http(
    context: &CliContext,
    server: Server,
    addr: &str,
    args: &ServeArgs,
) -> Result<(), CliError> {
    let stateless = args.stateless;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| cannot_listen(addr, &e))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::new(format!("cannot read the listening address: {e}")))?;
    if !local.ip().is_loopback() && args.allow_host.is_empty() {
        tracing::warn!(
            %local,
            "listening beyond loopback, but only requests whose Host is localhost, 127.0.0.1 or ::1 \
             are accepted (the DNS-rebinding guard): name the others with --allow-host, or put a \
             proxy that sets Host in front"
        );
    }
    if let Some(why) = args.unadvertised_audience() {
        tracing::warn!("{why}");
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    let max_connections = connection_cap(args.max_connections);
    let mut options = crate::http::HttpOptions::default()
        .max_connections(max_connections)
        .stateless(stateless)
        .max_connections_per_peer(
            usize::try_from(args.max_connections_per_peer).unwrap_or(usize::MAX),
        )
        .shutdown(shutdown.clone());
    if let Some(url) = &args.resource_url {
        options = options.resource_url(url.clone());
    }
    if !args.authorization_servers.is_empty() {
        options = options.authorization_servers(args.authorization_servers.clone());
    }
    if args.allow_host.iter().any(|h| h.trim() == "*") {
        tracing::warn!(
            "--allow-host '*': requests with any Host are accepted, so the guard against DNS \
             rebinding is off (a web page of any site may reach this server through a name \
             it controls); name the hosts instead"
        );
    }
    if !args.allow_host.is_empty() {
        let defaults = ["localhost", "127.0.0.1", "::1"].map(str::to_owned);
        let hosts = defaults.into_iter().chain(
            args.allow_host
                .iter()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty()),
        );
        options = options.allowed_hosts(hosts);
    }
    if !args.cors_origin.is_empty() {
        options = options.cors_origins(args.cors_origin.iter().cloned());
    }
    let mut signals = StopSignals::now();
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("stopping: no new calls, sessions closed");
        shutdown.cancel();
    });
    // Tests and scripts read this line to find the port of `--http 127.0.0.1:0`.
    context.note(format_args!("serving MCP on http://{local}/mcp"));
    tracing::info!(
        %local,
        stateless,
        read_only = server.is_read_only_mode(),
        tools = %served_tools(&server),
        "serving Streamable HTTP"
    );
    crate::http::serve(server, listener, options)
        .await
        .map_err(|e| CliError::new(format!("the HTTP server failed: {e}")))
}

/// The tools `server` serves, by name (every `#[mcp_tool]` the binary links, from any of
/// its crates, unless the registry was narrowed): said at start, so that a tool of a
/// dependency served by surprise shows.
fn served_tools(server: &Server) -> String {
    let names: Vec<&str> = server
        .visible_tools()
        .map(|entry| entry.def().name())
        .collect();
    format!("{} ({})", names.len(), names.join(", "))
}

/// The connection cap: `asked`, within what the open-file limit leaves once raised to the
/// hard limit (a quarter of it, at most 256, is kept for the databases, the logs and the
/// rest). Past the limit `accept` fails (`Too many open files`) for everyone, valid clients
/// included, where past the cap a new connection is closed at once and the open ones go on;
/// the soft limit is often 1024, which idle connections fill.
fn connection_cap(asked: u64) -> usize {
    let asked = usize::try_from(asked).unwrap_or(usize::MAX);
    let Some(limit) = raise_open_file_limit() else {
        return asked;
    };
    let room = limit.saturating_sub((limit / 4).min(256)).max(1);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if asked > room {
        tracing::warn!(
            open_file_limit = limit,
            max_connections = room,
            asked,
            "the open-file limit leaves room for fewer connections than asked: capped \
             (raise the limit, `ulimit -n` or systemd's LimitNOFILE, for more)"
        );
        return room;
    }
    asked
}

/// Raise the soft open-file limit to the hard one, and say what it is then (`None`: no
/// limit, or none known).
#[cfg(unix)]
fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => limit = raised,
            Err(err) => tracing::debug!(error = %err, "cannot raise the open-file limit"),
        }
    }
    limit.current
}

#[cfg(not(unix))]
fn raise_open_file_limit() -> Option<u64> {
    None
}

/// Ctrl-C (SIGINT), SIGTERM (what `docker stop` and systemd send), SIGHUP (what a
/// terminal or an SSH session sends as it closes, to a server run in its foreground) or
/// SIGQUIT (Ctrl-\\), handled from the moment [`StopSignals::now`] returns: each stops
/// the server as SIGTERM does. Left to their default, each killed the process where it
/// stood: calls committed and answered to nobody went unrecorded, and no last checkpoint
/// was written.
struct StopSignals {
    #[cfg(unix)]
    signals: Vec<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Take the signals over now (their default is to kill the process).
    fn now() -> StopSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            StopSignals {
                signals: [
                    SignalKind::terminate(),
                    SignalKind::interrupt(),
                    SignalKind::hangup(),
                    SignalKind::quit(),
                ]
                .into_iter()
                .filter_map(|kind| signal(kind).ok())
                .collect(),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// The next of them.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            if self.signals.is_empty() {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
            std::future::poll_fn(|cx| {
                for signal in &mut self.signals {
                    if signal.poll_recv(cx).is_ready() {
                        return std::task::Poll::Ready(());
                    }
                }
                std::task::Poll::Pending
            })
            .await;
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_request_state_keys;

    #[test]
    fn request_state_keys_that_name_nothing_are_refused_unless_empty() {
        assert!(parse_request_state_keys("").unwrap().is_empty());
        assert!(parse_request_state_keys("  ").unwrap().is_empty());
        for nothing in [",", " , ,"] {
            let err = parse_request_state_keys(nothing).unwrap_err();
            assert!(
                err.message().contains("names no key"),
                "{nothing:?}: {err:?}"
            );
        }
        let key = "ab".repeat(32);
        let keys = parse_request_state_keys(&format!("{key}, ,{key}")).unwrap();
        assert_eq!(keys, vec![vec![0xab; 32], vec![0xab; 32]]);
        let err = parse_request_state_keys("abcd").unwrap_err();
        assert!(err.message().contains("key 1"), "{err:?}");
    }

    /// The hint of an address that is not one says what to write instead: a port alone
    /// is on the loopback (it said `8080:8080`), a host alone gets a port.
    #[test]
    fn an_address_that_is_not_one_gets_one_to_write() {
        let invalid = std::io::Error::new(std::io::ErrorKind::InvalidInput, "invalid");
        for (addr, hint) in [
            ("8080", "such as `127.0.0.1:8080`"),
            ("localhost", "such as `localhost:8080`"),
            ("localhost:", "such as `localhost:8080`"),
        ] {
            let err = super::cannot_listen(addr, &invalid);
            assert!(err.message().contains(hint), "{addr}: {err:?}");
        }
    }
}
