//! `aacworkflow`: the command line of the aac-tools reference server.
//!
//! ```text
//! aacworkflow init [--demo]
//! aacworkflow token create --workspace W --user U --scopes s1,s2 [--expires 30d]
//! aacworkflow token revoke ID_OR_TOKEN
//! aacworkflow token list
//! aacworkflow serve [--http ADDR] [--read-only] [--stateless] [--demo]
//! aacworkflow manifest
//! aacworkflow audit [--tool T] [--outcome O] [--since TIME] [--json] [--stats] [--verify]
//! ```
//!
//! Everything but `init` and `--demo` comes from `aac_tools::cli`; this file holds the
//! application's extras: its database checks and schema (`store::open`, and
//! `store::POSTGRES_MIGRATIONS`), `init [--demo]`, `serve --demo`, and the rule that a
//! token's user exists in its workspace, each on both backends.
//!
//! The database is `--db PATH`, else `AAC_DB`, else `aacworkflow.db`; a
//! `postgres://OWNER@HOST/NAME` URL there runs every command on PostgreSQL instead (the
//! level roles named after `AAC_DB_ROLE_PREFIX`, default `aac`). Logs go to stderr only:
//! on stdio, stdout belongs to the MCP protocol.

use std::process::ExitCode;

use aac_tools::Registry;
use aac_tools::access::Read;
use aac_tools::cli::{Cli, CliContext, CliError, OpenMode, TokenRequest};
use aac_tools::postgres;
use aac_tools::sqlite::{Database, TokenStore};
use aac_tools::tokens::TokenIssuer;
use aacworkflow::backend::{Store, WriteStore};
use aacworkflow::queries::ReadMembers;
use aacworkflow::store::{self, AppError};
use aacworkflow::transact;

#[tokio::main]
async fn main() -> ExitCode {
    Cli::new("aacworkflow", env!("CARGO_PKG_VERSION"))
        .about(
            "The aac-tools reference server: an issue tracker whose MCP tools enforce their annotations",
        )
        .after_help("Start here:\n  aacworkflow serve --demo --http 127.0.0.1:8080")
        .default_db(store::DEFAULT_DB)
        .tools(|| Registry::collect_module(aacworkflow::SERVER_MODULE))
        .open_with(|path, mode| Ok(store::open(path, mode.into())?))
        // A token names a user of a workspace, which `init` creates.
        .token_create_needs_existing_db()
        .check_token(user_role)
        .command(init_command(), |ctx, m| {
            Box::pin(init(ctx, m.get_flag("demo")))
        })
        .clap(flags)
        .before_serve(|ctx, db, m| Box::pin(serve_demo(ctx, db, m.get_flag("demo"))))
        // The same on PostgreSQL (`--db postgres://…`).
        .postgres(store::POSTGRES_COMPONENT, store::POSTGRES_MIGRATIONS)
        .postgres_check_token(|db, request| Box::pin(pg_user_role(db, request)))
        .postgres_before_serve(|ctx, db, m| {
            Box::pin(pg_serve_demo(ctx, db, m.get_flag("demo")))
        })
        .run()
        .await
}

fn init_command() -> clap::Command {
    clap::Command::new("init")
        .about("Create the database and its schema (harmless if it exists)")
        .arg(demo_flag(
            "Also add the demo workspaces, users, agents and issues",
        ))
}

/// `serve --demo`, and this server's wording of the library's commands.
fn flags(cmd: clap::Command) -> clap::Command {
    cmd.mut_subcommand("serve", |serve| {
        serve
            .arg(demo_flag(
                "Seed the demo data and print a ready-to-use token for alice on stderr",
            ))
            .mut_arg("read_only", |a| {
                a.help("Only the four read-only tools are listed and callable")
            })
    })
    .mut_subcommand("token", |token| {
        token.mut_subcommand("create", |create| {
            create
                .mut_arg("workspace", |a| a.required(true))
                // `--user`, as a token here is for a user of the workspace.
                .mut_arg("subject", |a| {
                    a.long("user")
                        .alias(None)
                        .visible_alias("subject")
                        .value_name("USER")
                        .help("The user it acts as; must exist in the workspace")
                })
        })
    })
    .mut_subcommand("manifest", |m| {
        m.about("Print the tools manifest (the committed copy is examples/aacworkflow/tools.json)")
    })
}

fn demo_flag(help: &'static str) -> clap::Arg {
    clap::Arg::new("demo")
        .long("demo")
        .action(clap::ArgAction::SetTrue)
        .help(help)
}

async fn init(ctx: CliContext, demo: bool) -> Result<(), CliError> {
    let store = match ctx.postgres().await? {
        Some(db) => {
            ctx.note(format_args!(
                "PostgreSQL database `{}` ready (schema version {})",
                db.name(),
                store::POSTGRES_MIGRATIONS.len()
            ));
            Store::postgres(&db)
        }
        None => {
            let db = ctx.open_db(OpenMode::Create)?;
            ctx.note(format_args!(
                "database `{}` ready (schema version {})",
                ctx.db_path().display(),
                store::SCHEMA_VERSION
            ));
            Store::sqlite(&db)
        }
    };
    if demo {
        seed(&store).await?;
        ctx.note(
            "demo data ready: workspace `demo` (alice admin, bob member, carol viewer) \
             and workspace `other` (oscar admin)\n\
             next: aacworkflow token create --workspace demo --user alice --scopes all",
        );
    }
    Ok(())
}

async fn seed(store: &WriteStore) -> Result<(), AppError> {
    aacworkflow::seed::seed_demo(store)
        .await
        .map_err(|e| AppError::new(format!("cannot add the demo data: {}", e.message())))
}

/// `serve --demo`: the demo data, and a token for alice printed on stderr, which a stdio
/// session also uses when `AAC_TOKEN` is not set.
async fn serve_demo(ctx: CliContext, db: Database, demo: bool) -> Result<Option<String>, CliError> {
    if !demo {
        return Ok(None);
    }
    seed(&Store::sqlite(&db)).await?;
    let scopes = ctx.registry()?.scopes_supported();
    let created = TokenStore::open(&db)?
        .create(
            "alice",
            Some(aacworkflow::seed::DEMO_WORKSPACE),
            &scopes,
            Some(DEMO_TOKEN_TTL),
        )
        .map_err(|e| CliError::new(format!("cannot create the demo token: {e}")))?;
    ctx.note(format_args!(
        "demo data in `{}`; a token for alice@demo (admin, every scope, 30 days):\n\n    {}\n",
        ctx.db_path().display(),
        created.token
    ));
    Ok(Some(created.token))
}

/// How long the token of `serve --demo` lives.
const DEMO_TOKEN_TTL: i64 = 30 * 86_400;

/// `serve --demo` on PostgreSQL.
async fn pg_serve_demo(
    ctx: CliContext,
    db: postgres::Database,
    demo: bool,
) -> Result<Option<String>, CliError> {
    if !demo {
        return Ok(None);
    }
    seed(&Store::postgres(&db)).await?;
    let scopes = ctx.registry()?.scopes_supported();
    let created = postgres::TokenStore::open(&db)?
        .create(
            "alice",
            Some(aacworkflow::seed::DEMO_WORKSPACE),
            &scopes,
            Some(DEMO_TOKEN_TTL),
        )
        .await
        .map_err(|e| CliError::new(format!("cannot create the demo token: {e}")))?;
    ctx.note(format_args!(
        "demo data in PostgreSQL database `{}`; a token for alice@demo (admin, every scope, 30 days):\n\n    {}\n",
        db.name(),
        created.token
    ));
    Ok(Some(created.token))
}

/// A token is for a user of its workspace; the user's role shows on stderr.
fn user_role(db: &Database, request: &TokenRequest) -> Result<Option<String>, CliError> {
    use rusqlite::OptionalExtension;
    let Some(workspace) = request.workspace.as_deref() else {
        return Err(CliError::new("a token needs --workspace"));
    };
    let user = request.subject.as_str();
    let role: Option<String> = db
        .with_reader(|conn| {
            conn.query_row(
                "SELECT role FROM users WHERE workspace = ?1 AND name = ?2",
                [workspace, user],
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(|e| CliError::new(format!("cannot read the users: {e}")))?;
    known_user(role, workspace, user)
}

/// [`user_role`] on PostgreSQL, through the same query as the tools' (at the `Read`
/// level, as the read role).
async fn pg_user_role(
    db: postgres::Database,
    request: TokenRequest,
) -> Result<Option<String>, CliError> {
    let Some(workspace) = request.workspace else {
        return Err(CliError::new("a token needs --workspace"));
    };
    let user = request.subject;
    let store: Store<Read> = Store::postgres(&db);
    let role = {
        let (workspace, user) = (workspace.clone(), user.clone());
        transact!(store, |tx| tx.role(&workspace, &user).await)
            .map_err(|e| CliError::new(format!("cannot read the users: {}", e.message())))?
    };
    known_user(role.map(|r| r.as_str().to_owned()), &workspace, &user)
}

fn known_user(
    role: Option<String>,
    workspace: &str,
    user: &str,
) -> Result<Option<String>, CliError> {
    match role {
        Some(role) => Ok(Some(role)),
        None => Err(CliError::new(format!(
            "no user `{}` in workspace `{}`; \
             run `aacworkflow init --demo` for the demo users, or check the names",
            user.escape_debug(),
            workspace.escape_debug()
        ))),
    }
}
