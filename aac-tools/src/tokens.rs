//! The token store's seam: issuing, listing and revoking opaque bearer tokens, whatever
//! stores them. The pipeline only verifies tokens ([`TokenVerifier`]); a store that can
//! also issue them implements [`TokenIssuer`], which the everyday commands (`token
//! create`, `token revoke`, `token list`) use. [`sqlite::TokenStore`](crate::sqlite::TokenStore)
//! is the embedded implementation; another backend adds its own.

use std::fmt;

use sha2::{Digest, Sha256};

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
    /// refuses it from then on. A whole token whose secret is not the token's (the right
    /// id) is an error, and nothing is revoked.
    fn revoke<'a>(&'a self, id_or_token: &'a str) -> BoxFuture<'a, Result<bool, TokenError>>;

    /// Every token, newest first.
    fn list(&self) -> BoxFuture<'_, Result<Vec<TokenInfo>, TokenError>>;
}

// The token format, shared by every store: `aac_<id>_<secret>`, where the id (12 hex
// digits) finds the row and the secret (64 hex digits, 256 random bits) is never stored,
// only its SHA-256, compared in constant time.

#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) const PREFIX: &str = "aac_";
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) const ID_HEX: usize = 12;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) const SECRET_HEX: usize = 64;

/// `len` random hex digits.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn random_hex(len: usize) -> Result<String, TokenError> {
    let mut bytes = vec![0u8; len / 2];
    getrandom::fill(&mut bytes)
        .map_err(|e| TokenError::new(format!("no randomness for a token: {e}")))?;
    Ok(crate::hex::encode(&bytes))
}

/// The stored form of a secret.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A token's row as every store keeps it.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) struct StoredToken {
    pub(crate) secret_hash: Vec<u8>,
    pub(crate) subject: String,
    pub(crate) workspace: Option<String>,
    pub(crate) scopes: String,
    pub(crate) expires_at: Option<i64>,
    pub(crate) revoked_at: Option<i64>,
}

/// The verdict on token `id` with `secret`, given its row (`None`: no such id): the same
/// checks, in the same order and constant-time comparison, for every store.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn check_stored(
    id: &str,
    secret: &str,
    row: Option<StoredToken>,
) -> Result<crate::Principal, crate::ToolError> {
    let unknown = || crate::ToolError::invalid_token("unknown token");
    let Some(row) = row else {
        // Spend the same work as a known id, so timing does not tell ids apart.
        let _ = secret_matches(secret, &[0u8; 32]);
        return Err(unknown());
    };
    if !secret_matches(secret, &row.secret_hash) {
        return Err(unknown());
    }
    if row.revoked_at.is_some() {
        return Err(crate::ToolError::invalid_token("token revoked"));
    }
    if row.expires_at.is_some_and(|at| at <= unix_now()) {
        return Err(crate::ToolError::invalid_token("token expired"));
    }
    let mut principal =
        crate::Principal::new(row.subject, row.scopes.split_whitespace()).with_token_id(id);
    if let Some(workspace) = row.workspace {
        principal = principal.in_workspace(workspace);
    }
    Ok(principal)
}

/// Whether `secret` is the one whose hash a row keeps, `stored`, compared in constant time:
/// the check of a presented token, and of a whole token given to revoke.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn secret_matches(secret: &str, stored: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(hash_secret(secret).as_slice().ct_eq(stored))
}

/// A store's refusal to revoke token `id` given whole with another secret: revoking by
/// the id alone would let a mistyped token, or another store's of the same id, revoke a
/// token its holder still relies on.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn wrong_secret(id: &str) -> String {
    format!(
        "that is not token `{id}`: its secret does not match (mistyped, or another store's \
         token); nothing revoked"
    )
}

/// Seconds since the epoch, as the stores keep times.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Split `aac_<id>_<secret>`; `None` if the token is not of that form.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn parse(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let is_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    (is_hex(id, ID_HEX) && is_hex(secret, SECRET_HEX)).then_some((id, secret))
}
