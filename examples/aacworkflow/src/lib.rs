//! # aacworkflow: the aac-tools reference server
//!
//! An issue tracker on SQLite (the default) or PostgreSQL (`--db postgres://…`, for
//! replicas on one database) whose ten MCP tools show every part of aac-tools working
//! together: annotations that are enforced, scopes, the confirm guard, least-privilege data
//! handles, workspaces that leak nothing, and one audit record per call.
//!
//! - [`tools`]: the ten `#[mcp_tool]` functions;
//! - [`items`]: the issues as resources (`aacworkflow://issues/{id}`), the `triage_issue`
//!   prompt and completion of issue keys;
//! - [`queries`]: the SQL, as async query traits split into `Read*`, `Update*` and
//!   `Delete*`, implemented on both backends;
//! - [`backend`]: the tools' data handle on either backend, [`backend::Store`], and
//!   [`transact!`], which runs one transaction on it;
//! - [`store`]: opening the database file safely, its schema and version, and the
//!   PostgreSQL migrations;
//! - [`seed`]: the demo data.
//!
//! The binary (`aacworkflow init | token | serve | manifest | audit`) is documented in
//! `docs/aacworkflow.md`; all but `init` and `--demo` come from `aac_tools::cli`.

pub mod backend;
pub mod items;
pub mod model;
pub mod queries;
pub mod seed;
pub mod store;
pub mod tools;

use aac_tools::audit::AuditSink;
use aac_tools::sqlite::{Database, TokenStore};
use aac_tools::{Registry, Server};

pub use store::AppError;

/// The command that rewrites the committed manifest, `examples/aacworkflow/tools.json`.
pub const MANIFEST_REFRESH: &str =
    "cargo run -p aacworkflow -- manifest > examples/aacworkflow/tools.json";

/// The module whose `#[mcp_tool]` functions are the server's tools.
pub const TOOLS_MODULE: &str = concat!(module_path!(), "::tools");

/// The crate's root module: its tools (`tools`), resources and prompts (`items`).
pub const SERVER_MODULE: &str = module_path!();

/// The ten tools, the issue resources and the triage prompt of this crate (and only
/// those, whatever else is linked in).
pub fn registry() -> Result<Registry, AppError> {
    Registry::collect_module(SERVER_MODULE)
        .map_err(|e| AppError::new(format!("the tools do not register: {e}")))
}

/// The server over the SQLite `db`: tokens from its token store, audit records to
/// `audit`, the database as the tools' state, and read-only mode if asked (only the four
/// read-only tools are listed and callable).
pub fn server(db: &Database, audit: impl AuditSink, read_only: bool) -> Result<Server, AppError> {
    let tokens = TokenStore::open(db)
        .map_err(|e| AppError::new(format!("cannot open the token store: {e}")))?;
    Server::builder(registry()?)
        .name("aacworkflow", env!("CARGO_PKG_VERSION"))
        .verifier(tokens)
        .audit(audit)
        .state(db.clone())
        .read_only_mode(read_only)
        .build()
        .map_err(|e| AppError::new(format!("cannot build the server: {e}")))
}

/// The server over the PostgreSQL `db`, as [`server`] over SQLite: tokens from its token
/// store (`aac_tokens`), audit records to `audit` (such as its `PgSink`), the database as
/// the tools' state.
pub fn server_on_postgres(
    db: &aac_tools::postgres::Database,
    audit: impl AuditSink,
    read_only: bool,
) -> Result<Server, AppError> {
    let tokens = aac_tools::postgres::TokenStore::open(db)
        .map_err(|e| AppError::new(format!("cannot open the token store: {e}")))?;
    Server::builder(registry()?)
        .name("aacworkflow", env!("CARGO_PKG_VERSION"))
        .verifier(tokens)
        .audit(audit)
        .state(db.clone())
        .read_only_mode(read_only)
        .build()
        .map_err(|e| AppError::new(format!("cannot build the server: {e}")))
}
