//! The built-in commands on PostgreSQL (`--db postgres://…`, feature `postgres`): the
//! same `serve`, `token` and `audit`, with the data, the tokens and the audit trail in
//! one PostgreSQL database that any number of replicas share.
//!
//! The URL names the tables' owner, who migrates the schema (the framework's and the
//! application's, [`Cli::postgres`](super::Cli::postgres)) and grants the level roles;
//! the roles are named after `AAC_DB_ROLE_PREFIX` (default `aac`), each level's pool holds
//! at most `AAC_DB_POOL_SIZE` connections (default 4). Every command checks
//! the schema's version, so a binary older than the database refuses to run.

use clap::ArgMatches;

use super::args::{AuditArgs, Builtin, ServeArgs, TokenCommand};
use super::{Cli, CliContext, CliError, TokenRequest};
use crate::BoxFuture;
use crate::audit::AuditError;
use crate::postgres::{Database, PgLedger, PgSink, Roles, TokenStore};
use crate::server::Server;
use crate::tokens::TokenIssuer;

/// Whether `--db` names a PostgreSQL database rather than a file: a URL of scheme
/// `postgres` or `postgresql`, in any case and after any space (a URL with a space
/// or a capital is then refused as a URL, with what is wrong, not opened as a file).
pub(super) fn is_url(db: &std::path::Path) -> bool {
    db.to_str().is_some_and(|s| {
        let s = s.trim_start().as_bytes();
        ["postgres://", "postgresql://"].iter().any(|scheme| {
            s.len() >= scheme.len() && s[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
        })
    })
}

/// The application's schema on PostgreSQL: its component name and its migrations.
#[derive(Debug, Clone)]
pub(super) struct PgSchema {
    pub(super) component: String,
    pub(super) migrations: Vec<String>,
}

type CheckToken = dyn Fn(Database, TokenRequest) -> BoxFuture<'static, Result<Option<String>, CliError>>
    + Send
    + Sync;
type BeforeServe = dyn Fn(CliContext, Database, ArgMatches) -> BoxFuture<'static, Result<Option<String>, CliError>>
    + Send
    + Sync;

/// The application's hooks on PostgreSQL: the counterparts of [`Cli::check_token`] and
/// [`Cli::before_serve`].
#[derive(Default)]
pub(super) struct PgHooks {
    check_token: Option<Box<CheckToken>>,
    before_serve: Option<Box<BeforeServe>>,
}

impl Cli {
    /// [`Cli::check_token`] on PostgreSQL: check a `token create` request against the
    /// database (migrated already) before the token exists. `Ok(Some(note))` adds the
    /// note to the report on stderr; an error refuses the request.
    pub fn postgres_check_token(
        mut self,
        check: impl Fn(Database, TokenRequest) -> BoxFuture<'static, Result<Option<String>, CliError>>
        + Send
        + Sync
        + 'static,
    ) -> Cli {
        self.shared.pg_hooks.check_token = Some(Box::new(check));
        self
    }

    /// [`Cli::before_serve`] on PostgreSQL: run before `serve` builds the server, with
    /// the database (migrated already) and the `serve` matches. `Ok(Some(token))` is the
    /// token a stdio session uses when `AAC_TOKEN` is not set.
    pub fn postgres_before_serve(
        mut self,
        hook: impl Fn(
            CliContext,
            Database,
            ArgMatches,
        ) -> BoxFuture<'static, Result<Option<String>, CliError>>
        + Send
        + Sync
        + 'static,
    ) -> Cli {
        self.shared.pg_hooks.before_serve = Some(Box::new(hook));
        self
    }
}

impl CliContext {
    /// The PostgreSQL database when `--db` (or `AAC_DB`) is a `postgres://` URL, opened
    /// and migrated as the built-in commands do (the framework's schema and the
    /// application's, [`Cli::postgres`], then the level roles' grants); `None` when it
    /// names an SQLite file. For an application's own commands, such as `init`.
    pub async fn postgres(&self) -> Result<Option<Database>, CliError> {
        if !is_url(self.db_path()) {
            return Ok(None);
        }
        let db = open(self)?;
        migrate(self, &db).await?;
        Ok(Some(db))
    }
}

fn open(context: &CliContext) -> Result<Database, CliError> {
    let url = context.db_path().to_string_lossy().into_owned();
    let prefix = std::env::var("AAC_DB_ROLE_PREFIX")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| crate::postgres::DEFAULT_ROLE_PREFIX.to_owned());
    let roles =
        Roles::new(prefix.trim()).map_err(|e| CliError::new(format!("AAC_DB_ROLE_PREFIX: {e}")))?;
    let pool_size = match std::env::var("AAC_DB_POOL_SIZE") {
        Ok(size) if !size.trim().is_empty() => size
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=256).contains(n))
            .ok_or_else(|| {
                CliError::new(format!(
                    "AAC_DB_POOL_SIZE `{size}` is not a number from 1 to 256"
                ))
            })?,
        _ => crate::postgres::DEFAULT_POOL_SIZE,
    };
    Database::connect_with(&url, roles, pool_size).map_err(|e| CliError::new(format!("--db: {e}")))
}

/// Migrate (or check) the schema: the framework's and the application's.
async fn migrate(context: &CliContext, db: &Database) -> Result<(), CliError> {
    let Some(schema) = &context.shared.postgres else {
        return Err(sqlite_only(context));
    };
    let migrations: Vec<&str> = schema.migrations.iter().map(String::as_str).collect();
    db.migrate(&schema.component, &migrations)
        .await
        .map_err(|e| CliError::new(format!("cannot migrate `{}`: {e}", db.name())))?;
    Ok(())
}

/// Check, writing nothing, that the database was migrated, by no newer release.
async fn check(context: &CliContext, db: &Database) -> Result<(), CliError> {
    let Some(schema) = &context.shared.postgres else {
        return Err(sqlite_only(context));
    };
    db.check_schema(&schema.component, schema.migrations.len())
        .await
        .map_err(|e| CliError::new(format!("cannot read `{}`: {e}", db.name())))
}

fn sqlite_only(context: &CliContext) -> CliError {
    CliError::new(format!(
        "`{}` keeps its data in SQLite only: pass --db with a file path",
        context.name()
    ))
}

pub(super) async fn run(
    context: CliContext,
    command: Builtin,
    matches: ArgMatches,
) -> Result<(), CliError> {
    if let Builtin::Manifest(args) = &command {
        return super::manifest(&context, args);
    }
    let db = open(&context)?;
    // The reading commands check the schema and write nothing; the others migrate it.
    if matches!(
        command,
        Builtin::Audit(_) | Builtin::Token(TokenCommand::List)
    ) {
        check(&context, &db).await?;
    } else {
        migrate(&context, &db).await?;
    }
    match command {
        Builtin::Serve(args) => serve(&context, db, args, matches).await,
        Builtin::Token(command) => token(&context, &db, command).await,
        Builtin::Audit(args) => audit(&db, args).await,
        Builtin::Manifest(_) => Ok(()),
    }
}

async fn serve(
    context: &CliContext,
    db: Database,
    args: ServeArgs,
    matches: ArgMatches,
) -> Result<(), CliError> {
    if args.checkpoints.is_some() {
        return Err(CliError::new(
            "--checkpoints is for SQLite trails; on PostgreSQL, sign the head from `audit --verify` output",
        ));
    }
    super::serve::warn_unused_checkpoint_key(
        context,
        "--checkpoints is for SQLite trails, so on PostgreSQL",
    );
    let fallback_token = match &context.shared.pg_hooks.before_serve {
        Some(hook) => hook(context.clone(), db.clone(), matches).await?,
        None => None,
    };
    let tokens = TokenStore::open(&db)
        .map_err(|e| CliError::new(format!("cannot open the token store: {e}")))?;
    let sink = PgSink::open(&db).map_err(|e| CliError::new(e.to_string()))?;
    let ledger = PgLedger::open(&db);
    let shared = &context.shared;
    let builder =
        Server::builder(context.registry()?).name(shared.name.clone(), shared.version.clone());
    let builder = match args.jwt()? {
        Some(jwt) => builder.verifier(
            crate::VerifierChain::new()
                .with(TokenStore::claims, tokens.clone())
                .with(crate::jwt::looks_like_jwt, jwt),
        ),
        None => builder.verifier(tokens.clone()),
    };
    let builder = builder.audit(sink).state(db).read_only_mode(args.read_only);
    let server = args
        .confirmation(builder)
        .rate_limit_per_principal(args.rate_limit)
        .request_state_keys(super::serve::request_state_keys(context, &args)?)
        // Single use of request states beside the trail: any replica refuses a replay.
        .request_state_ledger(ledger)
        .build()
        .map_err(|e| CliError::new(format!("cannot build the server: {e}")))?;
    match args.http.clone() {
        Some(addr) => super::serve::http(context, server, &addr, &args).await,
        None => {
            let token = match std::env::var("AAC_TOKEN")
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
            {
                Some(token) => token,
                None => {
                    let token =
                        fallback_token.ok_or_else(|| super::serve::no_stdio_token(context))?;
                    context.note(
                        "AAC_TOKEN is not set, so this stdio session uses the token printed above",
                    );
                    token
                }
            };
            // The server's own verifier: the store's tokens, and JWTs with --jwt-issuer.
            server
                .authenticate(&crate::Credentials::Bearer(token.clone()))
                .await
                .map_err(|e| super::serve::token_refused(context, &token, e.message()))?;
            super::serve::stdio_until_signal(server, token).await
        }
    }
}

async fn token(context: &CliContext, db: &Database, command: TokenCommand) -> Result<(), CliError> {
    let tokens = TokenStore::open(db)
        .map_err(|e| CliError::new(format!("cannot open the token store: {e}")))?;
    match command {
        TokenCommand::Create(args) => {
            let request = super::token::request(context, &args)?;
            let note = match &context.shared.pg_hooks.check_token {
                Some(check) => check(db.clone(), request.clone()).await?,
                None => None,
            };
            let scopes: Vec<&str> = request.scopes.iter().map(String::as_str).collect();
            let created = tokens
                .create(
                    &request.subject,
                    request.workspace.as_deref(),
                    &scopes,
                    request.ttl_seconds,
                )
                .await
                .map_err(|e| CliError::new(format!("cannot create the token: {e}")))?;
            super::token::report(context, &request, &created, note, args.expires.as_deref())
        }
        TokenCommand::Revoke { id_or_token } => {
            let revoked = tokens
                .revoke(&id_or_token)
                .await
                .map_err(|e| CliError::new(format!("cannot revoke the token: {e}")))?;
            if !revoked {
                return Err(CliError::new(format!(
                    "no live token with that id; `{} token list` shows the ids",
                    context.name()
                )));
            }
            context.note("token revoked; every replica refuses it from now on");
            Ok(())
        }
        TokenCommand::List => {
            let list = tokens
                .list()
                .await
                .map_err(|e| CliError::new(format!("cannot list the tokens: {e}")))?;
            super::token::print_list(list)
        }
    }
}

async fn audit(db: &Database, args: AuditArgs) -> Result<(), CliError> {
    if args.new_checkpoint_key || args.checkpoints.is_some() {
        return Err(CliError::new(
            "signed checkpoints are for SQLite trails; `audit --verify --json` prints the head to sign",
        ));
    }
    let failed = |e: AuditError| CliError::new(e.to_string());
    let command = super::audit::command(&args)?;
    // The whole trail, copied into SQLite: read, summed up and verified by the same code.
    let trail = crate::postgres::mirror(db.owner_config())
        .await
        .map_err(failed)?;
    let mut out = std::io::stdout().lock();
    command.run(&trail, &mut out).map_err(failed)?;
    std::io::Write::flush(&mut out).map_err(|e| super::output_failed(&e))
}
