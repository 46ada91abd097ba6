//! Opaque bearer tokens stored in PostgreSQL as hashes only, in the same format as the
//! SQLite store (`aac_<id>_<secret>`, the SHA-256 of the secret compared in constant
//! time).
//!
//! Every verification reads the row: there is no cache, so a revocation made by one
//! replica (or by `token revoke` anywhere) is refused by every other from the moment it
//! commits. The store logs in as its own role, `<prefix>_tokens`, which may `SELECT`,
//! `INSERT` and `UPDATE` `aac_tokens` and nothing else; no data role reaches the table.

use deadpool_postgres::Pool;

use super::{Database, DbError, describe, get, pool};
use crate::BoxFuture;
use crate::error::ToolError;
use crate::principal::{Principal, TokenVerifier};
use crate::tokens::{
    ID_HEX, NewToken, PREFIX, SECRET_HEX, StoredToken, TokenError, TokenInfo, TokenIssuer,
    check_stored, hash_secret, parse, random_hex, secret_matches, unix_now as now, wrong_secret,
};

/// The token table. Created by [`super::migrate`] as the owner.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aac_tokens (
    id          TEXT PRIMARY KEY,
    secret_hash BYTEA NOT NULL,
    subject     TEXT NOT NULL,
    workspace   TEXT,
    scopes      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT,
    revoked_at  BIGINT
);
";

/// The token store on PostgreSQL: creates, lists, revokes and verifies opaque tokens.
/// Cheap to clone.
#[derive(Clone)]
pub struct TokenStore {
    pool: Pool,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore").finish_non_exhaustive()
    }
}

fn store_error(what: &str, err: &tokio_postgres::Error) -> TokenError {
    TokenError::new(format!("token store: {what}: {}", describe(err)))
}

impl TokenStore {
    /// The store of `db`, logged in as its tokens role. The table comes from
    /// [`Database::migrate`]; nothing is opened until first use.
    pub fn open(db: &Database) -> Result<TokenStore, DbError> {
        Ok(TokenStore {
            pool: pool(
                db.owner_config(),
                Some(&db.roles().tokens()),
                false,
                db.pool_size(),
            )?,
        })
    }

    async fn conn(&self) -> Result<deadpool_postgres::Object, TokenError> {
        get(&self.pool)
            .await
            .map_err(|why| TokenError::new(format!("token store: {why}")))
    }

    async fn create_token(
        &self,
        subject: &str,
        workspace: Option<&str>,
        scopes: &[&str],
        ttl_seconds: Option<i64>,
    ) -> Result<NewToken, TokenError> {
        refused_in_tools("TokenStore::create")?;
        let id = random_hex(ID_HEX)?;
        let secret = random_hex(SECRET_HEX)?;
        let created = now();
        let expires = ttl_seconds.map(|ttl| created.saturating_add(ttl));
        let hash = hash_secret(&secret).to_vec();
        let scopes = scopes.join(" ");
        self.conn()
            .await?
            .execute(
                "INSERT INTO aac_tokens (id, secret_hash, subject, workspace, scopes, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[&id, &hash, &subject, &workspace, &scopes, &created, &expires],
            )
            .await
            .map_err(|e| store_error("cannot create the token", &e))?;
        Ok(NewToken {
            token: format!("{PREFIX}{id}_{secret}"),
            id,
        })
    }

    async fn revoke_token(&self, id_or_token: &str) -> Result<bool, TokenError> {
        refused_in_tools("TokenStore::revoke")?;
        let (id, secret) =
            parse(id_or_token).map_or((id_or_token, None), |(id, secret)| (id, Some(secret)));
        let conn = self.conn().await?;
        // A whole token revokes only with its own secret, checked as a presented token's
        // is. (A row's hash never changes: read before the update, it is still the row's.)
        if let Some(secret) = secret {
            let row = conn
                .query_opt("SELECT secret_hash FROM aac_tokens WHERE id = $1", &[&id])
                .await
                .map_err(|e| store_error("cannot revoke the token", &e))?;
            if row.is_some_and(|row| !secret_matches(secret, row.get::<_, &[u8]>(0))) {
                return Err(TokenError::new(wrong_secret(id)));
            }
        }
        let changed = conn
            .execute(
                "UPDATE aac_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
                &[&id, &now()],
            )
            .await
            .map_err(|e| store_error("cannot revoke the token", &e))?;
        Ok(changed > 0)
    }

    async fn list_tokens(&self) -> Result<Vec<TokenInfo>, TokenError> {
        refused_in_tools("TokenStore::list")?;
        let rows = self
            .conn()
            .await?
            .query(
                "SELECT id, subject, workspace, scopes, created_at, expires_at, revoked_at
                 FROM aac_tokens ORDER BY created_at DESC, id",
                &[],
            )
            .await
            .map_err(|e| store_error("cannot list the tokens", &e))?;
        Ok(rows
            .iter()
            .map(|r| {
                let scopes: String = r.get(3);
                TokenInfo {
                    id: r.get(0),
                    subject: r.get(1),
                    workspace: r.get(2),
                    scopes: scopes.split_whitespace().map(str::to_owned).collect(),
                    created_at: r.get(4),
                    expires_at: r.get(5),
                    revoked_at: r.get(6),
                }
            })
            .collect())
    }

    async fn verify_token(&self, token: &str) -> Result<Principal, ToolError> {
        let Some((id, secret)) = parse(token) else {
            return Err(ToolError::invalid_token("malformed token"));
        };
        // Why goes to the server's log, not to a caller who is not yet authenticated
        // (role names, addresses, the database's own words).
        let unavailable = |why: String| {
            tracing::warn!(error = %why, "the token store cannot be reached");
            ToolError::new(
                crate::Status::Unavailable,
                "token_store_unavailable",
                "the token store cannot be reached, try again",
            )
        };
        let conn = get(&self.pool).await.map_err(unavailable)?;
        let statement = conn
            .prepare_cached(
                "SELECT secret_hash, subject, workspace, scopes, expires_at, revoked_at
                 FROM aac_tokens WHERE id = $1",
            )
            .await
            .map_err(|e| unavailable(describe(&e)))?;
        let row = conn
            .query_opt(&statement, &[&id])
            .await
            .map_err(|e| unavailable(describe(&e)))?;
        let row = row.map(|row| StoredToken {
            secret_hash: row.get(0),
            subject: row.get(1),
            workspace: row.get(2),
            scopes: row.get(3),
            expires_at: row.get(4),
            revoked_at: row.get(5),
        });
        check_stored(id, secret, row)
    }

    /// Whether `token` looks like one of this store's tokens (for [`crate::VerifierChain`]).
    pub fn claims(token: &str) -> bool {
        token.starts_with(PREFIX)
    }
}

impl TokenVerifier for TokenStore {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        Box::pin(self.verify_token(token))
    }
}

impl TokenIssuer for TokenStore {
    fn create<'a>(
        &'a self,
        subject: &'a str,
        workspace: Option<&'a str>,
        scopes: &'a [&'a str],
        ttl_seconds: Option<i64>,
    ) -> BoxFuture<'a, Result<NewToken, TokenError>> {
        Box::pin(self.create_token(subject, workspace, scopes, ttl_seconds))
    }

    fn revoke<'a>(&'a self, id_or_token: &'a str) -> BoxFuture<'a, Result<bool, TokenError>> {
        Box::pin(self.revoke_token(id_or_token))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<TokenInfo>, TokenError>> {
        Box::pin(self.list_tokens())
    }
}

// A tool cannot take the token store as `State<T>`.
impl crate::State<TokenStore> {
    #[doc(hidden)]
    #[allow(missing_docs)]
    pub const __AAC_STORAGE: bool = true;
}

/// The issuer's methods refused to a running tool (see `Database::owner`): a read-only
/// tool holding the store in a state of its own could mint a token of any scopes.
fn refused_in_tools(what: &str) -> Result<(), TokenError> {
    super::refused_in_tools(what).map_err(|e| TokenError::new(e.to_string()))
}
