//! JWT access tokens, beside the opaque tokens of the store.
//!
//! A [`JwtVerifier`] checks the signature (a shared HS256 secret, or the keys of a JWKS
//! file), the issuer, the audience (this resource), the expiry, and turns the claims
//! into a [`Principal`]: `sub` is the subject, the scopes come from `scope`
//! (space-separated) or `scp` (an array or a string), the workspace from a claim you
//! name (default `workspace`), and `jti` becomes the token id.
//!
//! Opaque tokens keep working beside JWTs with a [`VerifierChain`](crate::VerifierChain):
//!
//! ```no_run
//! # fn run(store: aac_tools::sqlite::TokenStore) -> Result<(), Box<dyn std::error::Error>> {
//! use aac_tools::VerifierChain;
//! use aac_tools::jwt::{JwtVerifier, looks_like_jwt};
//! use aac_tools::sqlite::TokenStore;
//!
//! let jwt = JwtVerifier::builder()
//!     .issuer("https://auth.example.com")
//!     .audience("https://mcp.example.com/mcp")
//!     .jwks_file("/etc/aac/jwks.json")
//!     .build()?;
//! let verifier = VerifierChain::new()
//!     .with(TokenStore::claims, store)
//!     .with(looks_like_jwt, jwt);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ToolError;
use crate::principal::{BoxFuture, Principal, TokenVerifier};

/// Whether `token` has the shape of a JWT (three dot-separated parts), for
/// [`VerifierChain::with`](crate::VerifierChain::with).
pub fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|&b| b == b'.').count() == 2
}

/// Why a [`JwtVerifier`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfigError(String);

impl fmt::Display for JwtConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JwtConfigError {}

/// Configures a [`JwtVerifier`]: an audience and one source of keys are required.
#[derive(Default)]
pub struct JwtVerifierBuilder {
    issuer: Option<String>,
    audience: Option<String>,
    secret: Option<Vec<u8>>,
    jwks_file: Option<PathBuf>,
    jwks_json: Option<String>,
    workspace_claim: Option<String>,
    leeway_seconds: Option<u64>,
}

impl fmt::Debug for JwtVerifierBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtVerifierBuilder")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("jwks_file", &self.jwks_file)
            .field("workspace_claim", &self.workspace_claim)
            .finish_non_exhaustive()
    }
}

impl JwtVerifierBuilder {
    /// Accept only tokens whose `iss` is this issuer.
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Accept only tokens whose `aud` names this resource (required): usually the
    /// `resource_url` of the HTTP options.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// Verify HS256 signatures with this shared secret (at least 32 bytes).
    pub fn hs256_secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(secret.as_ref().to_vec());
        self
    }

    /// Verify signatures with the keys of this JWKS file (RFC 7517), read once by
    /// [`build`](Self::build). Tokens name their key with `kid`; a set of one key
    /// needs none.
    pub fn jwks_file(mut self, path: impl AsRef<Path>) -> Self {
        self.jwks_file = Some(path.as_ref().to_owned());
        self
    }

    /// Like [`jwks_file`](Self::jwks_file), from the JSON text of a key set.
    pub fn jwks_json(mut self, json: impl Into<String>) -> Self {
        self.jwks_json = Some(json.into());
        self
    }

    /// The claim holding the workspace (default `workspace`).
    pub fn workspace_claim(mut self, claim: impl Into<String>) -> Self {
        self.workspace_claim = Some(claim.into());
        self
    }

    /// Clock skew tolerated on `exp` and `nbf`, in seconds (default 60).
    pub fn leeway_seconds(mut self, seconds: u64) -> Self {
        self.leeway_seconds = Some(seconds);
        self
    }

    /// Build the verifier.
    pub fn build(self) -> Result<JwtVerifier, JwtConfigError> {
        let err = |m: String| JwtConfigError(m);
        ensure_crypto_provider();
        let audience = self.audience.filter(|a| !a.is_empty()).ok_or_else(|| {
            err("a JWT verifier needs an audience: the resource the tokens are issued for".into())
        })?;
        let sources = [
            self.secret.is_some(),
            self.jwks_file.is_some(),
            self.jwks_json.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(err(
                "a JWT verifier needs exactly one source of keys: an HS256 secret or a JWKS".into(),
            ));
        }
        let keys = if let Some(secret) = self.secret {
            if secret.len() < 32 {
                return Err(err(
                    "the HS256 secret must be at least 32 bytes long".to_owned()
                ));
            }
            let key = DecodingKey::from_secret(&secret)
                .map_err(|e| err(format!("the HS256 secret is not usable: {e}")))?;
            Keys::Secret(key)
        } else {
            let (text, source) = match (self.jwks_file, self.jwks_json) {
                (Some(path), _) => (
                    std::fs::read_to_string(&path).map_err(|e| {
                        err(format!(
                            "the JWKS file `{}` cannot be read: {e}",
                            path.display()
                        ))
                    })?,
                    format!("the JWKS file `{}`", path.display()),
                ),
                (None, Some(json)) => (json, "the JWKS".to_owned()),
                (None, None) => unreachable!("one source of keys is set"),
            };
            Keys::Set(parse_jwks(&text).map_err(|why| err(format!("{source} {why}")))?)
        };
        Ok(JwtVerifier {
            issuer: self.issuer,
            audience,
            keys,
            workspace_claim: self
                .workspace_claim
                .unwrap_or_else(|| "workspace".to_owned()),
            leeway: self.leeway_seconds.unwrap_or(60),
        })
    }
}

/// One key of a JWKS.
struct SetKey {
    kid: Option<String>,
    /// The key's `alg`, if it names one.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

enum Keys {
    Secret(DecodingKey),
    Set(Vec<SetKey>),
}

fn parse_jwks(text: &str) -> Result<Vec<SetKey>, String> {
    let set: JwkSet =
        serde_json::from_str(text).map_err(|e| format!("is not a JSON Web Key Set: {e}"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let kid = jwk.common.key_id.clone();
        let name = kid.as_deref().unwrap_or("without `kid`");
        let alg = match jwk.common.key_algorithm {
            Some(alg) => Some(
                Algorithm::from_str(&alg.to_string())
                    .map_err(|_| format!("has key `{name}` with an unsupported `alg` {alg}"))?,
            ),
            None => None,
        };
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| format!("has key `{name}` that cannot be used: {e}"))?;
        keys.push(SetKey { kid, alg, key });
    }
    if keys.is_empty() {
        return Err("has no keys".to_owned());
    }
    Ok(keys)
}

/// If the build enables more than one crypto backend of `jsonwebtoken`, pick RustCrypto
/// rather than panic on the first token.
fn ensure_crypto_provider() {
    if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    }
}

/// Verifies JWT access tokens; a [`TokenVerifier`]. Build it with
/// [`JwtVerifier::builder`].
pub struct JwtVerifier {
    issuer: Option<String>,
    audience: String,
    keys: Keys,
    workspace_claim: String,
    leeway: u64,
}

impl fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = match &self.keys {
            Keys::Secret(_) => "hs256 secret".to_owned(),
            Keys::Set(keys) => format!("{} JWKS keys", keys.len()),
        };
        f.debug_struct("JwtVerifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("keys", &keys)
            .field("workspace_claim", &self.workspace_claim)
            .finish()
    }
}

/// `scp` as an array of scopes or one space-separated string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scp {
    List(Vec<String>),
    Text(String),
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Scp>,
    #[serde(default)]
    jti: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

impl JwtVerifier {
    /// Start configuring a verifier.
    pub fn builder() -> JwtVerifierBuilder {
        JwtVerifierBuilder::default()
    }

    /// Verify `token` now (no I/O: the keys are in memory).
    pub fn verify_now(&self, token: &str) -> Result<Principal, ToolError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| ToolError::invalid_token("malformed token"))?;
        let (key, alg) = match &self.keys {
            Keys::Secret(key) => (key, Algorithm::HS256),
            Keys::Set(keys) => {
                let found = match &header.kid {
                    Some(kid) => keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
                    None if keys.len() == 1 => keys.first(),
                    None => None,
                };
                let key = found.ok_or_else(|| {
                    ToolError::invalid_token("the token is signed with an unknown key")
                })?;
                if key.alg.is_some_and(|alg| alg != header.alg)
                    || header.alg.family() != key.key.family()
                {
                    return Err(ToolError::invalid_token(
                        "the token's algorithm does not match its key",
                    ));
                }
                (&key.key, header.alg)
            }
        };
        let mut validation = Validation::new(alg);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        validation.set_audience(&[&self.audience]);
        let mut required = vec!["exp", "aud", "sub"];
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let data = jsonwebtoken::decode::<Claims>(token, key, &validation)
            .map_err(|e| ToolError::invalid_token(describe(e.kind())))?;
        let claims = data.claims;
        let subject = claims
            .sub
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ToolError::invalid_token("the token has no subject"))?;
        let scopes: Vec<String> = match (claims.scope, claims.scp) {
            (Some(scope), _) => scope.split_whitespace().map(str::to_owned).collect(),
            (None, Some(Scp::List(list))) => list,
            (None, Some(Scp::Text(text))) => text.split_whitespace().map(str::to_owned).collect(),
            (None, None) => Vec::new(),
        };
        let mut principal = Principal::new(subject, scopes);
        match claims.other.get(&self.workspace_claim) {
            None | Some(Value::Null) => {}
            Some(Value::String(ws)) if !ws.is_empty() => principal = principal.in_workspace(ws),
            Some(_) => {
                return Err(ToolError::invalid_token(format!(
                    "the token's `{}` claim is not a workspace name",
                    self.workspace_claim
                )));
            }
        }
        if let Some(jti) = claims.jti {
            principal = principal.with_token_id(jti);
        }
        Ok(principal)
    }
}

fn describe(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired".to_owned(),
        ErrorKind::ImmatureSignature => "the token is not valid yet".to_owned(),
        ErrorKind::InvalidIssuer => "the token was issued by another issuer".to_owned(),
        ErrorKind::InvalidAudience => "the token was issued for another audience".to_owned(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".to_owned(),
        ErrorKind::InvalidAlgorithm => "the token's algorithm is not accepted".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
        ErrorKind::InvalidClaimFormat(claim) => format!("the token's `{claim}` claim is malformed"),
        _ => "malformed token".to_owned(),
    }
}

impl TokenVerifier for JwtVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        Box::pin(async move { self.verify_now(token) })
    }
}
