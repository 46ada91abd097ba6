//! A small aac-tools server for the interop tests: notes on SQLite, with a read-only
//! tool, a write tool, a destructive tool, a tool that reports progress and logs, and one
//! that asks the client's model (sampling). Tokens come from the SQLite token store
//! and, optionally, JWTs.
//!
//! The `interop-server` binary serves it over stdio (token from `AAC_TOKEN`) or
//! Streamable HTTP; the tests also serve it in process.

use std::path::Path;

use aac_tools::audit::AuditSink;
use aac_tools::jwt::{JwtVerifier, looks_like_jwt};
use aac_tools::sqlite::{Database, TokenStore};
use aac_tools::{Registry, Server, VerifierChain};

pub mod tools;

/// Every scope the tools use.
pub const ALL_SCOPES: &[&str] = &["notes:read", "notes:write", "notes:delete"];

/// Open (and create) the notes database.
pub fn open_database(path: impl AsRef<Path>) -> Result<Database, Box<dyn std::error::Error>> {
    let db = Database::open(path)?;
    db.with_writer(|conn| {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",
        )
    })?;
    Ok(db)
}

/// How the test server is built.
#[derive(Debug, Default)]
pub struct Options {
    /// Read-only mode: only `read_only` tools are listed and callable.
    pub read_only: bool,
    /// Accept these JWTs beside the store's opaque tokens.
    pub jwt: Option<JwtVerifier>,
    /// List only the tools the caller has every scope for.
    pub filter_list_by_scope: bool,
    /// The rate of calls per principal (none by default).
    pub principal_rate: Option<aac_tools::Rate>,
    /// Who confirms destructive calls (`argument` by default).
    pub confirmation: aac_tools::confirm::ConfirmPolicy,
}

/// The server over `db`: opaque tokens from the store in `db` (and JWTs if configured),
/// audit records to `audit`.
pub fn build_server(
    db: &Database,
    audit: impl AuditSink,
    options: Options,
) -> Result<Server, Box<dyn std::error::Error>> {
    let store = TokenStore::open(db)?;
    let mut verifier = VerifierChain::new().with(TokenStore::claims, store);
    if let Some(jwt) = options.jwt {
        verifier = verifier.with(looks_like_jwt, jwt);
    }
    Ok(
        Server::builder(Registry::collect_module("interop_tests::tools")?)
            .name("aac-interop", env!("CARGO_PKG_VERSION"))
            .verifier(verifier)
            .audit(audit)
            .state(db.clone())
            .read_only_mode(options.read_only)
            .filter_list_by_scope(options.filter_list_by_scope)
            .rate_limit_per_principal(options.principal_rate)
            .confirmation(options.confirmation)
            .build()?,
    )
}
