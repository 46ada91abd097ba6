//! The everyday commands of a server, as one call from its `main` (feature `cli`).
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     aac_tools::cli::Cli::new("notes", env!("CARGO_PKG_VERSION"))
//!         .about("Notes over MCP")
//!         .schema("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);")
//!         .run()
//!         .await
//! }
//! ```
//!
//! gives the binary, under its own name, these commands (`notes --help` lists them):
//!
//! ```text
//! notes serve [--http ADDR] [--read-only] [--stateless]   stdio by default, token from AAC_TOKEN
//! notes token create --subject S [--workspace W] --scopes a,b|all [--expires 30d]
//! notes token revoke ID_OR_TOKEN
//! notes token list
//! notes audit [--tool T] [--outcome O] [--since TIME] [--workspace W] [--limit N]
//!             [--json] [--stats] [--verify]
//! notes manifest
//! ```
//!
//! One SQLite file (`--db PATH`, else `AAC_DB`, else `notes.db`) holds the tools' data
//! (the [`Database`] is the server's state, so tools take `ReadDb`/`WriteDb`/`DeleteDb`
//! handles), the token store and the audit trail. The tools are every `#[mcp_tool]` linked
//! into the binary ([`Registry::collect`]) unless [`Cli::tools`] says otherwise.
//!
//! Exit codes: 0 done, 1 error (one line on stderr, `error: …`), 2 usage (from clap).
//! Logs go to stderr; `serve` over stdio logs warnings and errors only, because a host may
//! be showing that stream, and everything else logs at `info` (`AAC_LOG` or `RUST_LOG`,
//! such as `AAC_LOG=debug`, override both).
//!
//! An application keeps its own extras with hooks: its schema and opening rules
//! ([`Cli::schema`], [`Cli::open_with`]), the server's configuration ([`Cli::configure`]),
//! a check of who a token is for ([`Cli::check_token`]), its own subcommands
//! ([`Cli::command`]), flags ([`Cli::clap`]) and preparation before serving
//! ([`Cli::before_serve`]). The reference server, `examples/aacworkflow`, uses every one.

mod args;
mod audit;
mod db;
mod logs;
#[cfg(feature = "postgres")]
mod postgres;
mod serve;
mod token;

use std::ffi::OsString;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{ArgMatches, FromArgMatches, Subcommand};

use crate::BoxFuture;
use crate::registry::{Registry, RegistryError};
use crate::server::ServerBuilder;
use crate::sqlite::Database;

// clap is not re-exported: its public enums have a variant named `String`, and a public
// path to them from here would make rustc print `std::string::String` in full in the
// diagnostics of every crate that uses aac-tools. Hooks that take clap types use the
// caller's own `clap = "4"`.

/// A failure of a command: one line that says what to do, printed as `error: …`, exit 1.
///
/// Any [`std::error::Error`] converts into it, so `?` works in hooks.
pub struct CliError(String);

impl CliError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> CliError {
        CliError(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for CliError {
    fn from(err: E) -> CliError {
        CliError(err.to_string())
    }
}

/// Whether a command may create the database file, or write to it at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only (`audit`, `token list`): the file must exist and be the application's,
    /// at a schema this build reads (a newer one is refused); nothing is created,
    /// migrated or written. Open it with [`Database::open_read_only`].
    Read,
    /// The file must exist; the schema may be brought up to date (`token revoke`).
    Existing,
    /// Create the file and the schema if needed (`serve`, `token create`). The command
    /// line then creates the audit trail's table too, so that every database it made
    /// has one, and a trail that is missing later was removed.
    Create,
}

/// What `token create` was asked for, as [`Cli::check_token`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    /// The subject (`--subject`, or `--user`).
    pub subject: String,
    /// The workspace (`--workspace`), if any.
    pub workspace: Option<String>,
    /// The scopes, checked against the tools' scopes (`all` expanded).
    pub scopes: Vec<String>,
    /// The lifetime in seconds (`--expires`); `None`: never expires.
    pub ttl_seconds: Option<i64>,
}

type Opener = dyn Fn(&Path, OpenMode) -> Result<Database, CliError> + Send + Sync;
type Tools = dyn Fn() -> Result<Registry, RegistryError> + Send + Sync;
type Configure = dyn Fn(ServerBuilder, &Database) -> ServerBuilder + Send + Sync;
type CheckToken =
    dyn Fn(&Database, &TokenRequest) -> Result<Option<String>, CliError> + Send + Sync;
type Handler =
    dyn Fn(CliContext, ArgMatches) -> BoxFuture<'static, Result<(), CliError>> + Send + Sync;
type BeforeServe = dyn Fn(CliContext, Database, ArgMatches) -> BoxFuture<'static, Result<Option<String>, CliError>>
    + Send
    + Sync;
type MapCommand = dyn FnOnce(clap::Command) -> clap::Command + Send;

/// What a command handler knows: the program's name, the database path, and how to open
/// the database and collect the tools as the built-in commands do.
#[derive(Clone)]
pub struct CliContext {
    shared: Arc<Shared>,
    db: PathBuf,
}

struct Shared {
    name: String,
    version: String,
    opener: Option<Box<Opener>>,
    schema: Vec<String>,
    tools: Box<Tools>,
    configure: Vec<Box<Configure>>,
    check_token: Option<Box<CheckToken>>,
    before_serve: Option<Box<BeforeServe>>,
    token_create_mode: OpenMode,
    /// `NAME token create --flag VALUE …` with the flags this program requires, for hints.
    token_create_usage: String,
    #[cfg(feature = "postgres")]
    postgres: Option<postgres::PgSchema>,
    #[cfg(feature = "postgres")]
    pg_hooks: postgres::PgHooks,
}

impl fmt::Debug for CliContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CliContext")
            .field("name", &self.shared.name)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl CliContext {
    /// The program's name, as given to [`Cli::new`].
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The database file: `--db`, else `AAC_DB`, else the default.
    pub fn db_path(&self) -> &Path {
        &self.db
    }

    /// [`CliContext::db_path`] as a message may show it: a PostgreSQL URL's password
    /// (`user:password@`, a `password=` parameter) written `***`, since a host may show
    /// a stdio server's stderr to a person.
    pub fn db_shown(&self) -> String {
        without_password(&self.db.to_string_lossy())
    }

    /// Open the database as the built-in commands do: [`Cli::open_with`] if given, else
    /// the default checks, [`Cli::schema`] and the token store's table; with
    /// [`OpenMode::Create`], the audit trail's table too (created if missing, checked if
    /// not).
    pub fn open_db(&self, mode: OpenMode) -> Result<Database, CliError> {
        let db = match &self.shared.opener {
            Some(open) => open(&self.db, mode),
            None => db::open(self, mode),
        }?;
        if mode == OpenMode::Create {
            db.with_writer(|conn| Ok(crate::audit::ensure_table(conn)))
                .map_err(CliError::from)?
                .map_err(|e| {
                    CliError::new(format!("the audit trail in `{}`: {e}", self.db.display()))
                })?;
        }
        Ok(db)
    }

    /// The server's tools.
    pub fn registry(&self) -> Result<Registry, CliError> {
        (self.shared.tools)().map_err(|e| CliError::new(format!("the tools do not register: {e}")))
    }

    /// `name: message` on stderr, the way the built-in commands report progress.
    pub fn note(&self, message: impl fmt::Display) {
        // Never a panic for a closed stderr.
        let _ = writeln!(std::io::stderr(), "{}: {message}", self.shared.name);
    }
}

/// The command line of a server: [`Cli::new`], hooks if needed, then [`Cli::run`].
///
/// ```no_run
/// use aac_tools::cli::{Cli, CliError};
///
/// # async fn run() -> std::process::ExitCode {
/// Cli::new("notes", env!("CARGO_PKG_VERSION"))
///     .about("Notes over MCP")
///     .schema("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);")
///     // Tokens only for subjects the application knows.
///     .check_token(|db, request| {
///         let known: bool = db.with_reader(|c| {
///             c.query_row("SELECT count(*) > 0 FROM notes WHERE text = ?1", [&request.subject], |r| r.get(0))
///         })?;
///         if known { Ok(None) } else { Err(CliError::new(format!("unknown subject `{}`", request.subject))) }
///     })
///     .run()
///     .await
/// # }
/// ```
pub struct Cli {
    shared: Shared,
    about: Option<String>,
    after_help: Option<String>,
    default_db: Option<PathBuf>,
    logging: bool,
    commands: Vec<(clap::Command, Box<Handler>)>,
    maps: Vec<Box<MapCommand>>,
}

impl fmt::Debug for Cli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cli")
            .field("name", &self.shared.name)
            .field("version", &self.shared.version)
            .field(
                "commands",
                &self
                    .commands
                    .iter()
                    .map(|(c, _)| c.get_name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Cli {
    /// The command line of the program `name` (its binary's name, shown in `--help` and
    /// messages), version `version` (`env!("CARGO_PKG_VERSION")`).
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Cli {
        Cli {
            shared: Shared {
                name: name.into(),
                version: version.into(),
                opener: None,
                schema: Vec::new(),
                tools: Box::new(Registry::collect),
                configure: Vec::new(),
                check_token: None,
                before_serve: None,
                token_create_mode: OpenMode::Create,
                token_create_usage: String::new(),
                #[cfg(feature = "postgres")]
                postgres: None,
                #[cfg(feature = "postgres")]
                pg_hooks: postgres::PgHooks::default(),
            },
            about: None,
            after_help: None,
            default_db: None,
            logging: true,
            commands: Vec::new(),
            maps: Vec::new(),
        }
    }

    /// The one-line description at the top of `--help`.
    pub fn about(mut self, text: impl Into<String>) -> Cli {
        self.about = Some(text.into());
        self
    }

    /// Text at the bottom of `--help`, such as a first command to try.
    pub fn after_help(mut self, text: impl Into<String>) -> Cli {
        self.after_help = Some(text.into());
        self
    }

    /// The database file when neither `--db` nor `AAC_DB` names one (default: `<name>.db`
    /// in the working directory).
    pub fn default_db(mut self, path: impl Into<PathBuf>) -> Cli {
        self.default_db = Some(path.into());
        self
    }

    /// The tools to serve (default: every `#[mcp_tool]` linked in, [`Registry::collect`]),
    /// such as `|| Registry::collect_module("my_server::tools")`.
    pub fn tools(
        mut self,
        tools: impl Fn() -> Result<Registry, RegistryError> + Send + Sync + 'static,
    ) -> Cli {
        self.shared.tools = Box::new(tools);
        self
    }

    /// SQL run, in one transaction, each time the database is opened: the application's
    /// tables, written to be harmless when repeated (`CREATE TABLE IF NOT EXISTS`).
    /// Several calls run in order. Ignored with [`Cli::open_with`].
    pub fn schema(mut self, sql: impl Into<String>) -> Cli {
        self.shared.schema.push(sql.into());
        self
    }

    /// Open the database yourself (your checks, migrations and messages) instead of the
    /// default: the file must exist for [`OpenMode::Read`] and [`OpenMode::Existing`]; its
    /// parent directory for [`OpenMode::Create`]; then [`Database::open`], [`Cli::schema`]
    /// and the token store. For [`OpenMode::Read`], check that the file is the
    /// application's and not from a newer version, create and migrate nothing, and return
    /// [`Database::open_read_only`]. The token store's table is created by the commands
    /// that use it; the audit trail's, by the command line after a [`OpenMode::Create`]
    /// open.
    pub fn open_with(
        mut self,
        open: impl Fn(&Path, OpenMode) -> Result<Database, CliError> + Send + Sync + 'static,
    ) -> Cli {
        self.shared.opener = Some(Box::new(open));
        self
    }

    /// Change the server before it is built, for example to add state or to filter
    /// `tools/list` by scope. The defaults are already set: name and version, the token
    /// store as verifier, the SQLite audit sink, the [`Database`] as state, read-only mode
    /// from `--read-only`. Several calls run in order.
    pub fn configure(
        mut self,
        configure: impl Fn(ServerBuilder, &Database) -> ServerBuilder + Send + Sync + 'static,
    ) -> Cli {
        self.shared.configure.push(Box::new(configure));
        self
    }

    /// Check a `token create` request before the token exists, such as that the subject is
    /// a user of the workspace. `Ok(Some(note))` adds the note to the report on stderr
    /// (`token … for alice@demo (admin)`); an error refuses the request.
    pub fn check_token(
        mut self,
        check: impl Fn(&Database, &TokenRequest) -> Result<Option<String>, CliError>
        + Send
        + Sync
        + 'static,
    ) -> Cli {
        self.shared.check_token = Some(Box::new(check));
        self
    }

    /// Serve on PostgreSQL too (feature `postgres`): `--db postgres://owner@host/name` (or
    /// `AAC_DB`) runs `serve`, `token` and `audit` on that database, whose schema is
    /// `migrations` (the SQL of version 1, 2, …, applied once each, in order) under the
    /// name `component`. The tools must then take [`crate::postgres`] handles (or a
    /// handle of the application's own over both backends). The SQLite hooks
    /// ([`Cli::configure`], [`Cli::check_token`], [`Cli::before_serve`],
    /// [`Cli::open_with`]) do not run on PostgreSQL; their counterparts there are
    /// [`Cli::postgres_check_token`] and [`Cli::postgres_before_serve`], and an
    /// application's own commands open the database with [`CliContext::postgres`]. The
    /// level roles are named after `AAC_DB_ROLE_PREFIX` (default `aac`).
    #[cfg(feature = "postgres")]
    pub fn postgres<I, S>(mut self, component: impl Into<String>, migrations: I) -> Cli
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.shared.postgres = Some(postgres::PgSchema {
            component: component.into(),
            migrations: migrations.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Open the database for `token create` with [`OpenMode::Existing`] instead of
    /// [`OpenMode::Create`]: for applications whose tokens name data that only their own
    /// set-up command creates.
    pub fn token_create_needs_existing_db(mut self) -> Cli {
        self.shared.token_create_mode = OpenMode::Existing;
        self
    }

    /// Add a subcommand of your own, run by `handler` with the [`CliContext`] and the
    /// subcommand's matches. Its name must not be one of the built-in commands.
    ///
    /// With `clap = "4"` among your dependencies:
    ///
    /// ```no_run
    /// use aac_tools::cli::{Cli, OpenMode};
    ///
    /// let cli = Cli::new("notes", "1.0").command(
    ///     clap::Command::new("init").about("Create the database"),
    ///     |ctx, _matches| Box::pin(async move {
    ///         ctx.open_db(OpenMode::Create)?;
    ///         ctx.note(format_args!("database `{}` ready", ctx.db_path().display()));
    ///         Ok(())
    ///     }),
    /// );
    /// ```
    pub fn command(
        mut self,
        command: clap::Command,
        handler: impl Fn(CliContext, ArgMatches) -> BoxFuture<'static, Result<(), CliError>>
        + Send
        + Sync
        + 'static,
    ) -> Cli {
        self.commands.push((command, Box::new(handler)));
        self
    }

    /// Change the clap command before parsing: add flags to a built-in subcommand
    /// (`cmd.mut_subcommand("serve", |s| s.arg(…))`, read back in [`Cli::before_serve`]),
    /// make an argument required, reword a help text. Several calls run in order.
    pub fn clap(
        mut self,
        map: impl FnOnce(clap::Command) -> clap::Command + Send + 'static,
    ) -> Cli {
        self.maps.push(Box::new(map));
        self
    }

    /// Run before `serve` builds the server, with the opened database and the `serve`
    /// matches (your own flags included). `Ok(Some(token))` is the token a stdio session
    /// uses when `AAC_TOKEN` is not set (a demo token, say).
    pub fn before_serve(
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
        self.shared.before_serve = Some(Box::new(hook));
        self
    }

    /// Whether to install a `tracing` subscriber writing to stderr (default: yes; it does
    /// nothing if the program installed one already).
    pub fn logging(mut self, on: bool) -> Cli {
        self.logging = on;
        self
    }

    /// The clap command, with every subcommand and hook applied (for tests and for
    /// generating completions or man pages).
    pub fn command_line(&mut self) -> clap::Command {
        let name = self.shared.name.clone();
        let default_db = self.default_db_path();
        let mut cmd = clap::Command::new(name.clone())
            .bin_name(name)
            .version(self.shared.version.clone())
            .subcommand_required(true)
            .arg_required_else_help(true)
            .arg(
                clap::Arg::new("db")
                    .long("db")
                    .global(true)
                    .env("AAC_DB")
                    // A PostgreSQL URL may hold a password: `--help` names the variable,
                    // not its value (help is pasted into tickets and CI logs).
                    .hide_env_values(true)
                    .value_name("PATH")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help(format!(
                        "The database file{} [default: {} in the working directory]",
                        if self.serves_postgres() {
                            ", or postgres://OWNER@HOST/NAME"
                        } else {
                            ""
                        },
                        default_db.display()
                    )),
            );
        if let Some(about) = &self.about {
            cmd = cmd.about(about.clone());
        }
        if let Some(after) = &self.after_help {
            cmd = cmd.after_help(after.clone());
        }
        cmd = args::Builtin::augment_subcommands(cmd);
        if let Ok(registry) = (self.shared.tools)() {
            let scopes = registry.scopes_supported().join(", ");
            cmd = cmd.mut_subcommand("token", |token| {
                token.mut_subcommand("create", |create| {
                    create.mut_arg("scopes", |a| {
                        a.help(format!(
                            "Comma-separated scopes, or `all`; the tools use: {scopes}"
                        ))
                    })
                })
            });
        }
        for (command, _) in &self.commands {
            cmd = cmd.subcommand(command.clone());
        }
        for map in std::mem::take(&mut self.maps) {
            cmd = map(cmd);
        }
        cmd
    }

    /// Whether `--db` may name a PostgreSQL database ([`Cli::postgres`]).
    fn serves_postgres(&self) -> bool {
        #[cfg(feature = "postgres")]
        return self.shared.postgres.is_some();
        #[cfg(not(feature = "postgres"))]
        false
    }

    fn default_db_path(&self) -> PathBuf {
        self.default_db
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.db", self.shared.name)))
    }

    /// Parse the process's arguments and run the command.
    pub async fn run(self) -> ExitCode {
        self.run_from(std::env::args_os()).await
    }

    /// Parse `args` (the first is the program) and run the command.
    pub async fn run_from<I, T>(mut self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cmd = self.command_line();
        self.shared.token_create_usage = token_create_usage(&cmd);
        let matches = match cmd.try_get_matches_from(args) {
            Ok(matches) => matches,
            Err(err) => {
                // --help and --version are "errors" that exit 0.
                let _ = err.print();
                return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
            }
        };
        let db = matches
            .get_one::<PathBuf>("db")
            .cloned()
            .unwrap_or_else(|| self.default_db_path());
        let Some((sub, sub_matches)) = matches.subcommand() else {
            return ExitCode::from(2);
        };
        let http = sub == "serve" && sub_matches.get_one::<String>("http").is_some();
        if self.logging {
            init_logging(sub == "serve" && !http);
        }
        let mut commands = std::mem::take(&mut self.commands);
        let context = CliContext {
            shared: Arc::new(self.shared),
            db,
        };
        let result = if args::Builtin::has_subcommand(sub) {
            match args::Builtin::from_arg_matches(&matches) {
                #[cfg(feature = "postgres")]
                Ok(builtin) if postgres::is_url(context.db_path()) => {
                    postgres::run(context, builtin, sub_matches.clone()).await
                }
                Ok(builtin) => run_builtin(context, builtin, sub_matches.clone()).await,
                Err(err) => {
                    let _ = err.print();
                    return ExitCode::from(2);
                }
            }
        } else if let Some(pos) = commands.iter().position(|(c, _)| c.get_name() == sub) {
            let (_, handler) = commands.swap_remove(pos);
            handler(context, sub_matches.clone()).await
        } else {
            Err(CliError::new(format!("no handler for the command `{sub}`")))
        };
        // The last log lines, if stderr is read at all.
        logs::flush(std::time::Duration::from_millis(500));
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                let _ = writeln!(std::io::stderr(), "error: {err}");
                ExitCode::FAILURE
            }
        }
    }
}

async fn run_builtin(
    context: CliContext,
    command: args::Builtin,
    matches: ArgMatches,
) -> Result<(), CliError> {
    match command {
        args::Builtin::Serve(args) => serve::serve(context, args, matches).await,
        args::Builtin::Token(command) => token::token(&context, command),
        args::Builtin::Audit(args) => audit::audit(&context, args),
        args::Builtin::Manifest(args) => manifest(&context, &args),
    }
}

/// `NAME token create --flag VALUE …`: the flags `token create` requires as this
/// program's command line has them (an application may require more, or rename them,
/// with [`Cli::clap`]), in the order of `--help`.
fn token_create_usage(cmd: &clap::Command) -> String {
    let mut usage = format!("{} token create", cmd.get_name());
    let create = cmd
        .find_subcommand("token")
        .and_then(|token| token.find_subcommand("create"));
    let mut required: Vec<&clap::Arg> = create
        .iter()
        .flat_map(|c| c.get_arguments())
        .filter(|arg| arg.is_required_set())
        .collect();
    // As `--help` lists them.
    required.sort_by_key(|arg| arg.get_display_order());
    for arg in required {
        if let Some(long) = arg.get_long() {
            let value = match arg.get_value_names() {
                Some([name, ..]) => name.to_string(),
                _ => arg.get_id().as_str().to_uppercase(),
            };
            usage.push_str(&format!(" --{long} {value}"));
        }
    }
    usage
}

/// Write `text` on stdout, flushed: a write that fails (a pipe nobody reads, as in
/// `… | head -c0`) is an error, never a panic as `print!` makes it.
/// `manifest`: the tools manifest, as a server under `args.confirm` serves it.
pub(crate) fn manifest(context: &CliContext, args: &args::ManifestArgs) -> Result<(), CliError> {
    print_out(
        context
            .registry()?
            .with_confirmation(args.confirm)
            .manifest(),
    )
}

pub(crate) fn print_out(text: impl fmt::Display) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    write!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| output_failed(&e))
}

/// The error of a write on stdout that failed.
pub(crate) fn output_failed(err: &std::io::Error) -> CliError {
    CliError::new(format!("cannot write the output: {err}"))
}

/// Logs to stderr: `AAC_LOG`, else `RUST_LOG`, else warnings only on stdio (a host may
/// show that stream to a person) and `info` elsewhere.
fn init_logging(stdio: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let asked = ["AAC_LOG", "RUST_LOG"]
        .into_iter()
        .filter_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .find_map(|v| tracing_subscriber::EnvFilter::try_new(v).ok());
    let quiet = asked.is_none();
    let filter = asked
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(if stdio { "warn" } else { "info" }));
    let colour = std::io::stderr().is_terminal();
    logs::set_colour(colour);
    let layer = tracing_subscriber::fmt::layer()
        // Written by a thread of its own: a host that never reads the server's stderr
        // fills its pipe, and a log line written there blocked the server's thread (and,
        // with it, every call and SIGTERM). Past `logs::QUEUE` lines waiting, lines are
        // dropped and counted.
        .with_writer(logs::writer())
        // A log line that cannot be written (stderr closed: a pipe whose reader left) is
        // dropped; by default the subscriber reports it with `eprintln!`, which panics
        // there, and the panic took down the task that handles SIGTERM.
        .log_internal_errors(false)
        .with_ansi(colour)
        .with_target(false)
        .with_filter(filter)
        .with_filter(tracing_subscriber::filter::filter_fn(move |meta| {
            !(quiet && is_refusal_answered(meta))
        }));
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

/// rmcp's warning for every request its handler answered with a JSON-RPC error: each
/// refused resource read, prompt or completion (whose record is in the audit trail),
/// where a refused tool call, a result, logs nothing. Left out unless `AAC_LOG` or
/// `RUST_LOG` asks for the log: a host may show a stdio server's stderr to a person,
/// and an operator's log would hold a line per refusal a caller chose to make.
fn is_refusal_answered(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_event()
        && *meta.level() == tracing::Level::WARN
        && meta.target() == "rmcp::service"
        && meta.fields().field("id").is_some()
        && meta.fields().field("error").is_some()
}

/// `30d` → seconds. Units: s, m, h, d, w.
pub(crate) fn parse_duration(text: &str) -> Result<i64, CliError> {
    let bad = || {
        CliError::new(format!(
            "cannot read the duration `{}`; write a number and a unit, such as 30d, 12h, 15m, 90s or 2w",
            text.escape_debug()
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
    let digits = &text[..text.len() - unit.len_utf8()];
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let number: i64 = digits.parse().map_err(|_| bad())?;
    if number <= 0 {
        return Err(CliError::new(format!(
            "the duration `{text}` is not positive; give a lifetime such as 30d, or leave the \
             flag out"
        )));
    }
    number.checked_mul(seconds).ok_or_else(bad)
}

/// `db` with a PostgreSQL URL's password written `***`: the one after `user:` before
/// the host, and the value of each `password` parameter. Anything else as it is.
fn without_password(db: &str) -> String {
    let Some(scheme_end) = db.find("://") else {
        return db.to_owned();
    };
    let (scheme, rest) = db.split_at(scheme_end + 3);
    if !scheme
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("postgres")
    {
        return db.to_owned();
    }
    // The authority ends at the path, the query or the fragment; its user information
    // at its last `@`.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!("{}:***{}", &authority[..colon], &authority[at..]),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((query, fragment)) => (query, Some(fragment)),
                None => (query, None),
            };
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
            format!("{path}?{}{fragment}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_url_is_shown_without_its_password() {
        for (db, shown) in [
            ("app.db", "app.db"),
            ("/tmp/a:b@c.db", "/tmp/a:b@c.db"),
            (
                "postgres://owner:s3cret@127.0.0.1:5432/app",
                "postgres://owner:***@127.0.0.1:5432/app",
            ),
            ("postgres://owner@host/app", "postgres://owner@host/app"),
            (
                "postgresql://o:p@ss:w@host/app?sslmode=disable&password=x&PASSWORD=y#f",
                "postgresql://o:***@host/app?sslmode=disable&password=***&PASSWORD=***#f",
            ),
            (
                "POSTGRES://host?password=s3cret",
                "POSTGRES://host?password=***",
            ),
        ] {
            assert_eq!(super::without_password(db), shown, "{db}");
        }
    }

    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d").unwrap(), 30 * 86_400);
        assert_eq!(parse_duration("2w").unwrap(), 14 * 86_400);
        assert_eq!(parse_duration("90s").unwrap(), 90);
        for bad in [
            "",
            "d",
            "30",
            "30x",
            "+5d",
            "5\u{1b}d",
            "-1d",
            "0h",
            "1.5h",
            "99999999999999999w",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.message().contains("30d"), "{bad}: {err}");
        }
        // What the operator typed is shown escaped: it cannot drive the terminal.
        let err = parse_duration("5\u{1b}]0;owned\u{7}d").unwrap_err();
        assert!(!err.message().contains('\u{1b}'), "{err}");
    }

    fn schema_names(path: &Path) -> Vec<String> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// With the default opener: a database created by the command line has its audit
    /// trail from the start; a reading command on a file without one fails and leaves
    /// it as it was.
    #[tokio::test]
    async fn a_created_database_has_its_trail_and_reading_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cli = || {
            Cli::new("notes", "1.0")
                .logging(false)
                .schema("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY);")
                .command(clap::Command::new("init"), |ctx, _| {
                    Box::pin(async move { ctx.open_db(OpenMode::Create).map(drop) })
                })
        };
        let created = dir.path().join("created.db");
        let db = created.to_str().unwrap();
        assert_eq!(
            cli().run_from(["notes", "--db", db, "init"]).await,
            ExitCode::SUCCESS
        );
        assert_eq!(schema_names(&created), ["aac_audit", "aac_tokens", "notes"]);
        assert_eq!(
            cli()
                .run_from(["notes", "--db", db, "audit", "--verify"])
                .await,
            ExitCode::SUCCESS
        );

        let bare = dir.path().join("bare.db");
        rusqlite::Connection::open(&bare)
            .unwrap()
            .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY);")
            .unwrap();
        let before = std::fs::read(&bare).unwrap();
        let db = bare.to_str().unwrap();
        for args in [&["audit", "--verify"][..], &["audit"], &["token", "list"]] {
            let mut argv = vec!["notes", "--db", db];
            argv.extend(args);
            assert_eq!(cli().run_from(argv).await, ExitCode::FAILURE, "{args:?}");
        }
        assert_eq!(std::fs::read(&bare).unwrap(), before, "untouched");
        assert_eq!(schema_names(&bare), ["notes"]);
    }

    /// `tokio::spawn(cli.run())` works: the future is `Send`.
    #[test]
    fn running_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let cli = Cli::new("notes", "1.0")
            .clap(|cmd| cmd)
            .configure(|builder, _| builder)
            .command(clap::Command::new("init"), |_, _| {
                Box::pin(async { Ok(()) })
            });
        let run = cli.run_from(["notes", "--help"]);
        assert_send(&run);
    }

    #[test]
    fn the_command_line_has_the_programs_name_and_every_command() {
        let mut cli = Cli::new("notes", "1.2.3").about("Notes over MCP").command(
            clap::Command::new("init").about("Create the database"),
            |_, _| Box::pin(async { Ok(()) }),
        );
        let mut cmd = cli.command_line();
        assert_eq!(
            token_create_usage(&cmd),
            "notes token create --subject NAME --scopes SCOPES"
        );
        let help = cmd.render_long_help().to_string();
        for word in [
            "Notes over MCP",
            "serve",
            "token",
            "audit",
            "manifest",
            "init",
            "notes.db",
        ] {
            assert!(help.contains(word), "{word} missing from:\n{help}");
        }
        assert!(cmd.render_usage().to_string().contains("notes"));
        assert_eq!(cmd.get_version(), Some("1.2.3"));
        cmd.debug_assert();
    }
}
