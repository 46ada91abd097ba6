//! The token store's seam: issuing, listing and revoking opaque bearer tokens, whatever
//! stores them. The pipeline only verifies tokens ([`TokenVerifier`]); a store that can
//! also issue them implements [`TokenIssuer`], which the everyday commands (`token
//! create`, `token revoke`, `token list`) use. [`sqlite::TokenStore`](crate::sqlite::TokenStore)
//! is the embedded implementation; another backend adds its own.

use std::fmt;

use crate::BoxFuture;
use crate::principal::TokenVerifier;

/// A token just created: the secret string, shown once, and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// The full bearer token. Only its hash is stored; show it to the user once.
    pub token: String,
    /// Its public id, for listing and revoking.
    pub id: String,
}

/// What the store knows of a token (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The public id.
    pub id: String,
    /// The subject it authenticates.
    pub subject: String,
    /// The workspace, if any.
    pub workspace: Option<String>,
    /// Its scopes.
    pub scopes: Vec<String>,
    /// Creation, in Unix seconds.
    pub created_at: i64,
    /// Expiry, in Unix seconds.
    pub expires_at: Option<i64>,
    /// Revocation, in Unix seconds.
    pub revoked_at: Option<i64>,
}

/// Why a token store could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenError(String);

impl TokenError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> TokenError {
        TokenError(message.into())
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TokenError {}

/// A token store that issues, lists and revokes the tokens it verifies. Stores hash
/// the secret; none can show a token again after [`TokenIssuer::create`].
pub trait TokenIssuer: TokenVerifier {
    /// Create a token for `subject` in `workspace` with `scopes`, expiring after
    /// `ttl_seconds` if given.
    fn create<'a>(
        &'a self,
        subject: &'a str,
        workspace: Option<&'a str>,
        scopes: &'a [&'a str],
        ttl_seconds: Option<i64>,
    ) -> BoxFuture<'a, Result<NewToken, TokenError>>;

    /// Revoke a token, given its id or the whole token. Whether a live token was
    /// revoked (`false` if unknown or already revoked). Every verifier of the store
    /// refuses it from then on.
    fn revoke<'a>(&'a self, id_or_token: &'a str) -> BoxFuture<'a, Result<bool, TokenError>>;

    /// Every token, newest first.
    fn list(&self) -> BoxFuture<'_, Result<Vec<TokenInfo>, TokenError>>;
}
