//! Opaque bearer tokens stored in SQLite as hashes only.
//!
//! A token reads `aac_<id>_<secret>`: the id (12 hex digits) finds the row, the secret
//! (64 hex digits, 256 random bits) is never stored, only its SHA-256, compared in
//! constant time. Tokens can expire and be revoked.

use rusqlite::OptionalExtension;

use super::{Database, DbError};
use crate::BoxFuture;
use crate::error::ToolError;
use crate::principal::{Principal, TokenVerifier};
use crate::tokens::{
    ID_HEX, PREFIX, SECRET_HEX, StoredToken, TokenError, TokenIssuer, check_stored, hash_secret,
    parse, secret_matches, unix_now as now, wrong_secret,
};
pub use crate::tokens::{NewToken, TokenInfo};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aac_tokens (
    id          TEXT PRIMARY KEY,
    secret_hash BLOB NOT NULL,
    subject     TEXT NOT NULL,
    workspace   TEXT,
    scopes      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    revoked_at  INTEGER
);
";

/// The token store: creates, lists, revokes and verifies opaque tokens.
#[derive(Debug, Clone)]
pub struct TokenStore {
    db: Database,
}

fn random_hex(len: usize) -> Result<String, DbError> {
    crate::tokens::random_hex(len).map_err(|e| DbError::new(e.to_string(), None))
}

impl TokenStore {
    /// The store in `db`, creating its table if needed (and only then: a database
    /// opened with [`Database::open_read_only`] must have it already).
    pub fn open(db: &Database) -> Result<TokenStore, DbError> {
        let exists = db.with_reader(|conn| {
            conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'aac_tokens'",
                [],
                |r| r.get::<_, i64>(0),
            )
        })? > 0;
        if !exists {
            if db.is_read_only() {
                return Err(DbError::new(
                    format!(
                        "`{}` has no `aac_tokens` table, and is open to read only",
                        db.path().display()
                    ),
                    None,
                ));
            }
            db.with_writer(|conn| conn.execute_batch(SCHEMA))?;
        }
        // On a table of an earlier version too.
        if !db.is_read_only() {
            db.with_writer(|conn| super::seal_against_blob_writes(conn, "aac_tokens"))?;
        }
        if let Err(why) =
            db.with_reader(|conn| Ok(super::refuse_foreign_framework_triggers(conn)))?
        {
            return Err(DbError::new(why, None));
        }
        Ok(TokenStore { db: db.clone() })
    }

    /// Create a token for `subject` in `workspace` with `scopes`, expiring after
    /// `ttl_seconds` if given.
    pub fn create(
        &self,
        subject: &str,
        workspace: Option<&str>,
        scopes: &[&str],
        ttl_seconds: Option<i64>,
    ) -> Result<NewToken, DbError> {
        let id = random_hex(ID_HEX)?;
        let secret = random_hex(SECRET_HEX)?;
        let created = now();
        let expires = ttl_seconds.map(|ttl| created.saturating_add(ttl));
        self.db.with_writer(|conn| {
            conn.execute(
                "INSERT INTO aac_tokens (id, secret_hash, subject, workspace, scopes, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![
                    id,
                    hash_secret(&secret).to_vec(),
                    subject,
                    workspace,
                    scopes.join(" "),
                    created,
                    expires
                ],
            )
        })?;
        Ok(NewToken {
            token: format!("{PREFIX}{id}_{secret}"),
            id,
        })
    }

    /// Revoke a token, given its id or the whole token. Returns whether a live token
    /// was revoked (`false` if unknown or already revoked). A whole token whose secret
    /// is not the token's (the right id) is an error, and nothing is revoked.
    pub fn revoke(&self, id_or_token: &str) -> Result<bool, DbError> {
        let (id, secret) =
            parse(id_or_token).map_or((id_or_token, None), |(id, secret)| (id, Some(secret)));
        // A whole token revokes only with its own secret, checked as a presented token's
        // is (`None`: it is not). A row's hash never changes: read before the update, it
        // is still the row's.
        let changed = self.db.with_writer(|conn| {
            if let Some(secret) = secret {
                let stored: Option<Vec<u8>> = conn
                    .query_row(
                        "SELECT secret_hash FROM aac_tokens WHERE id = ?1",
                        [id],
                        |r| r.get(0),
                    )
                    .optional()?;
                if stored.is_some_and(|hash| !secret_matches(secret, &hash)) {
                    return Ok(None);
                }
            }
            conn.execute(
                "UPDATE aac_tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                rusqlite::params![id, now()],
            )
            .map(Some)
        })?;
        match changed {
            Some(changed) => Ok(changed > 0),
            None => Err(DbError::new(wrong_secret(id), None)),
        }
    }

    /// Every token, newest first.
    pub fn list(&self) -> Result<Vec<TokenInfo>, DbError> {
        self.db.with_reader(|conn| {
            let mut stmt = conn.prepare(
                "SELECT id, subject, workspace, scopes, created_at, expires_at, revoked_at
                 FROM aac_tokens ORDER BY created_at DESC, id",
            )?;
            let rows = stmt.query_map([], |r| {
                let scopes: String = r.get(3)?;
                Ok(TokenInfo {
                    id: r.get(0)?,
                    subject: r.get(1)?,
                    workspace: r.get(2)?,
                    scopes: scopes.split_whitespace().map(str::to_owned).collect(),
                    created_at: r.get(4)?,
                    expires_at: r.get(5)?,
                    revoked_at: r.get(6)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Verify a token synchronously (the async [`TokenVerifier`] runs this on a
    /// blocking thread).
    pub fn verify_blocking(&self, token: &str) -> Result<Principal, ToolError> {
        let Some((id, secret)) = parse(token) else {
            return Err(ToolError::invalid_token("malformed token"));
        };
        // A check, not a power: allowed while a tool runs (a call it makes in process).
        let row = self
            .db
            .with_reader_unchecked(|conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT secret_hash, subject, workspace, scopes, expires_at, revoked_at
                     FROM aac_tokens WHERE id = ?1",
                )?;
                let mut rows = stmt.query([id])?;
                match rows.next()? {
                    Some(r) => Ok(Some(StoredToken {
                        secret_hash: r.get(0)?,
                        subject: r.get(1)?,
                        workspace: r.get(2)?,
                        scopes: r.get(3)?,
                        expires_at: r.get(4)?,
                        revoked_at: r.get(5)?,
                    })),
                    None => Ok(None),
                }
            })
            .map_err(|e| ToolError::internal(format!("token store: {e}")))?;
        check_stored(id, secret, row)
    }

    /// Whether `token` looks like one of this store's tokens (for [`crate::VerifierChain`]).
    pub fn claims(token: &str) -> bool {
        token.starts_with(PREFIX)
    }
}

impl TokenVerifier for TokenStore {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        let store = self.clone();
        let token = token.to_owned();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.verify_blocking(&token))
                .await
                .unwrap_or_else(|e| Err(ToolError::internal(format!("token check failed: {e}"))))
        })
    }
}

/// The blocking SQLite calls (`what`) run on the blocking pool when a runtime is there.
/// Refused to a running tool, checked here, on the caller's thread: the blocking thread
/// runs no tool.
fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T, DbError> + Send + 'static,
) -> BoxFuture<'static, Result<T, TokenError>> {
    let refused = super::refused_in_tools(what);
    Box::pin(async move {
        refused.map_err(|e| TokenError::new(e.to_string()))?;
        let result = match tokio::runtime::Handle::try_current() {
            Ok(_) => tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
                Err(DbError::new(
                    format!("the token store task failed: {e}"),
                    None,
                ))
            }),
            Err(_) => f(),
        };
        result.map_err(|e| TokenError::new(e.to_string()))
    })
}

impl TokenIssuer for TokenStore {
    fn create<'a>(
        &'a self,
        subject: &'a str,
        workspace: Option<&'a str>,
        scopes: &'a [&'a str],
        ttl_seconds: Option<i64>,
    ) -> BoxFuture<'a, Result<NewToken, TokenError>> {
        let store = self.clone();
        let subject = subject.to_owned();
        let workspace = workspace.map(str::to_owned);
        let scopes: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        blocking("TokenStore::create", move || {
            let scopes: Vec<&str> = scopes.iter().map(String::as_str).collect();
            TokenStore::create(&store, &subject, workspace.as_deref(), &scopes, ttl_seconds)
        })
    }

    fn revoke<'a>(&'a self, id_or_token: &'a str) -> BoxFuture<'a, Result<bool, TokenError>> {
        let store = self.clone();
        let id_or_token = id_or_token.to_owned();
        blocking("TokenStore::revoke", move || {
            TokenStore::revoke(&store, &id_or_token)
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<TokenInfo>, TokenError>> {
        let store = self.clone();
        blocking("TokenStore::list", move || TokenStore::list(&store))
    }
}

#[cfg(test)]
mod tests {
    use crate::tokens::parse;

    #[test]
    fn token_shape() {
        let id = "0123456789ab";
        let secret = "a".repeat(64);
        let token = format!("aac_{id}_{secret}");
        assert_eq!(parse(&token), Some((id, secret.as_str())));
        assert_eq!(parse("aac_short_abc"), None);
        assert_eq!(parse(&format!("xyz_{id}_{secret}")), None);
        assert_eq!(parse(&format!("aac_{id}_{}", "A".repeat(64))), None);
    }
}
