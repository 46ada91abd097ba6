//! Who is calling: principals and the verification of bearer tokens.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::BoxFuture;
use crate::error::ToolError;

/// An authenticated caller: a subject, the workspace it acts in, and its scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    subject: String,
    workspace: Option<String>,
    scopes: BTreeSet<String>,
    token_id: Option<String>,
}

impl Principal {
    /// A principal with a subject and scopes, in no workspace.
    pub fn new<I, S>(subject: impl Into<String>, scopes: I) -> Principal
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Principal {
            subject: subject.into(),
            workspace: None,
            scopes: scopes.into_iter().map(Into::into).collect(),
            token_id: None,
        }
    }

    /// The same principal in a workspace.
    pub fn in_workspace(mut self, workspace: impl Into<String>) -> Principal {
        self.workspace = Some(workspace.into());
        self
    }

    /// The same principal, remembering which token authenticated it.
    pub fn with_token_id(mut self, token_id: impl Into<String>) -> Principal {
        self.token_id = Some(token_id.into());
        self
    }

    /// Who this is (a user, a service account…).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The workspace the principal acts in, if any.
    pub fn workspace(&self) -> Option<&str> {
        self.workspace.as_deref()
    }

    /// The granted scopes, sorted.
    pub fn scopes(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.scopes.iter().map(String::as_str)
    }

    /// Whether `scope` is granted.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.contains(scope)
    }

    /// Whether every one of `scopes` is granted.
    pub fn has_scopes(&self, scopes: &[&str]) -> bool {
        scopes.iter().all(|s| self.has_scope(s))
    }

    /// The id of the token that authenticated this principal, if known.
    pub fn token_id(&self) -> Option<&str> {
        self.token_id.as_deref()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.workspace {
            Some(ws) => write!(f, "{}@{}", self.subject, ws),
            None => f.write_str(&self.subject),
        }
    }
}

/// Turns a bearer token into a [`Principal`], or refuses it with 401 `invalid_token`.
///
/// Built in: the SQLite token store (`sqlite::TokenStore`, opaque tokens stored as
/// hashes) and JWT access tokens (`jwt::JwtVerifier`); [`VerifierChain`] tries several.
pub trait TokenVerifier: Send + Sync + 'static {
    /// Verify `token`. Errors should be [`ToolError::invalid_token`] and say why
    /// (malformed, unknown, expired, revoked) without echoing the token.
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>>;

    /// Verify `token`, as [`TokenVerifier::verify`], for a principal the caller shares.
    /// The pipeline calls this on every call; the default wraps `verify`. A verifier
    /// that keeps its principals (such as [`StaticTokens`]) overrides it to hand out
    /// the one it holds instead of a copy per call.
    fn verify_shared<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Principal>, ToolError>> {
        Box::pin(async move { self.verify(token).await.map(Arc::new) })
    }
}

impl<V: TokenVerifier + ?Sized> TokenVerifier for Arc<V> {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        (**self).verify(token)
    }

    fn verify_shared<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Principal>, ToolError>> {
        (**self).verify_shared(token)
    }
}

/// Tries verifiers in order, each only for the tokens it claims: the first whose
/// `claims` returns true decides.
pub struct VerifierChain {
    verifiers: Vec<ClaimedBy>,
}

/// A verifier and the test of the tokens it claims.
type ClaimedBy = (fn(&str) -> bool, Box<dyn TokenVerifier>);

impl VerifierChain {
    /// An empty chain, which refuses every token.
    pub fn new() -> VerifierChain {
        VerifierChain {
            verifiers: Vec::new(),
        }
    }

    /// Add a verifier for the tokens `claims` accepts (for example: JWTs have two dots).
    pub fn with(mut self, claims: fn(&str) -> bool, verifier: impl TokenVerifier) -> VerifierChain {
        self.verifiers.push((claims, Box::new(verifier)));
        self
    }
}

impl Default for VerifierChain {
    fn default() -> Self {
        VerifierChain::new()
    }
}

impl fmt::Debug for VerifierChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifierChain")
            .field("verifiers", &self.verifiers.len())
            .finish()
    }
}

impl TokenVerifier for VerifierChain {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        match self.verifiers.iter().find(|(claims, _)| claims(token)) {
            Some((_, verifier)) => verifier.verify(token),
            None => Box::pin(async { Err(ToolError::invalid_token("malformed token")) }),
        }
    }

    fn verify_shared<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Principal>, ToolError>> {
        match self.verifiers.iter().find(|(claims, _)| claims(token)) {
            Some((_, verifier)) => verifier.verify_shared(token),
            None => Box::pin(async { Err(ToolError::invalid_token("malformed token")) }),
        }
    }
}

/// A fixed table of tokens, for tests and examples. Tokens are compared in constant time.
#[derive(Debug, Default, Clone)]
pub struct StaticTokens {
    tokens: Vec<(String, Arc<Principal>)>,
}

impl StaticTokens {
    /// An empty table.
    pub fn new() -> StaticTokens {
        StaticTokens::default()
    }

    /// Accept `token` as `principal`.
    pub fn with(mut self, token: impl Into<String>, principal: Principal) -> StaticTokens {
        self.tokens.push((token.into(), Arc::new(principal)));
        self
    }

    fn find(&self, token: &str) -> Result<&Arc<Principal>, ToolError> {
        use subtle::ConstantTimeEq;
        self.tokens
            .iter()
            .find(|(t, _)| bool::from(t.as_bytes().ct_eq(token.as_bytes())))
            .map(|(_, p)| p)
            .ok_or_else(|| ToolError::invalid_token("unknown token"))
    }
}

impl TokenVerifier for StaticTokens {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        let found = self.find(token).map(|p| Principal::clone(p));
        Box::pin(async move { found })
    }

    fn verify_shared<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Arc<Principal>, ToolError>> {
        let found = self.find(token).map(Arc::clone);
        Box::pin(async move { found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<T>(future: BoxFuture<'_, T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    #[test]
    fn shared_verification_hands_out_the_kept_principal() {
        let tokens = StaticTokens::new().with("t1", Principal::new("alice", ["a:read"]));
        let first = block_on(tokens.verify_shared("t1")).unwrap();
        let second = block_on(tokens.verify_shared("t1")).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(*first, block_on(tokens.verify("t1")).unwrap());
        assert_eq!(
            block_on(tokens.verify_shared("t2")).unwrap_err().reason(),
            "invalid_token"
        );
        // Through a chain and an Arc, the same principal, and the same refusals.
        let chain = Arc::new(VerifierChain::new().with(|t| t.starts_with('t'), tokens));
        assert_eq!(
            block_on(chain.verify_shared("t1")).unwrap().subject(),
            "alice"
        );
        assert!(block_on(chain.verify_shared("x1")).is_err());
        assert!(block_on(chain.verify_shared("t9")).is_err());
    }
}
