//! JWT access tokens, beside the opaque tokens of the store.
//!
//! A [`JwtVerifier`] checks the signature (a shared HS256 secret, or the keys of a JWKS
//! file), the issuer, the audience (this resource), the expiry, and turns the claims
//! into a [`Principal`]: `sub` is the subject, the scopes come from `scope`
//! (space-separated) or `scp` (an array or a string), the workspace from a claim you
//! name (default `workspace`), and `jti` becomes the token id. A header or claims that
//! repeat a key, and an `iss` that is not one string, are refused as malformed.
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

use crate::BoxFuture;
use crate::error::ToolError;
use crate::principal::{Principal, TokenVerifier};

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
    /// `resource_url` of the HTTP options, as the metadata advertises it (without a
    /// trailing `/`).
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

    /// The claim holding the workspace (default `workspace`); not one read for something
    /// else (`sub`, `scope`, `scp`, `jti`, `exp`, `nbf`, `iat`, `aud`, `iss`), which
    /// [`build`](Self::build) refuses.
    pub fn workspace_claim(mut self, claim: impl Into<String>) -> Self {
        self.workspace_claim = Some(claim.into());
        self
    }

    /// Clock skew tolerated on `exp` and `nbf`, in seconds (default 60, at most a day).
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
        // A claim the verifier reads for something else would give every token no
        // workspace, silently.
        if let Some(claim) = &self.workspace_claim
            && (claim.is_empty() || RESERVED_CLAIMS.contains(&claim.as_str()))
        {
            return Err(err(format!(
                "the workspace claim cannot be `{}`: {} are read for what they are",
                claim.escape_debug(),
                RESERVED_CLAIMS.join(", ")
            )));
        }
        if self.leeway_seconds.is_some_and(|s| s > MAX_LEEWAY) {
            return Err(err(format!(
                "a leeway of more than {MAX_LEEWAY} seconds (a day) would accept tokens long \
                 expired"
            )));
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
                    read_jwks_file(&path).map_err(|e| {
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

/// The claims read for what they are, which cannot name the workspace.
const RESERVED_CLAIMS: [&str; 9] = [
    "sub", "scope", "scp", "jti", "exp", "nbf", "iat", "aud", "iss",
];

/// The most clock skew tolerated, in seconds.
const MAX_LEEWAY: u64 = 86_400;

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

/// The most a JWKS file may hold: a key set is a few KiB (one RSA key about 1.5).
pub const MAX_JWKS_BYTES: u64 = 1024 * 1024;

/// The JWKS file at `path`, read whole if it is a regular file of at most
/// [`MAX_JWKS_BYTES`]: `/dev/zero` or a FIFO there filled memory (1.5 GB in 3 s) or
/// waited for ever.
fn read_jwks_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    // Asked of the path before opening it: the open of a FIFO waits for a writer.
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::other(
            "not a regular file (a FIFO, a socket or a device)",
        ));
    }
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(MAX_JWKS_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_JWKS_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_JWKS_BYTES} bytes, more than any key set"
        )));
    }
    Ok(text)
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
        if let Some(why) = unfit_for_signatures(jwk) {
            return Err(format!("has key `{name}` that {why}"));
        }
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| format!("has key `{name}` that cannot be used: {e}"))?;
        keys.push(SetKey { kid, alg, key });
    }
    if keys.is_empty() {
        return Err("has no keys".to_owned());
    }
    Ok(keys)
}

/// Why a key of a set may not verify access tokens, if it may not: one marked for
/// encryption (`use`, `key_ops`), an HS256 secret shorter than the 32 bytes
/// [`JwtVerifierBuilder::hs256_secret`] asks for, an RSA modulus under 2048 bits.
fn unfit_for_signatures(jwk: &jsonwebtoken::jwk::Jwk) -> Option<String> {
    use jsonwebtoken::jwk::{AlgorithmParameters, KeyOperations, PublicKeyUse};
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return Some("is not for signatures (its `use` is not `sig`)".to_owned());
    }
    if let Some(ops) = &jwk.common.key_operations
        && !ops.iter().any(|op| matches!(op, KeyOperations::Verify))
    {
        return Some("is not for verifying signatures (its `key_ops` lack `verify`)".to_owned());
    }
    // Base64url without padding: four characters carry three bytes.
    let decoded = |text: &str| text.trim_end_matches('=').len() * 3 / 4;
    match &jwk.algorithm {
        AlgorithmParameters::OctetKey(oct) if decoded(&oct.value) < 32 => {
            Some("is a secret shorter than 32 bytes".to_owned())
        }
        AlgorithmParameters::RSA(rsa) if decoded(&rsa.n) < 256 => {
            Some("is an RSA key shorter than 2048 bits".to_owned())
        }
        _ => None,
    }
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
    /// Read to refuse anything but one string (jsonwebtoken takes an array whose
    /// elements include the issuer).
    #[serde(default)]
    iss: Option<Value>,
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
        if repeats_a_key(token) {
            return Err(ToolError::invalid_token(
                "malformed token: its header or claims repeat a key",
            ));
        }
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
        // RFC 7519 §4.1.1: one StringOrURI, not a list of which one may match.
        if claims.iss.as_ref().is_some_and(|iss| !iss.is_string()) {
            return Err(ToolError::invalid_token(
                "the token's `iss` claim is malformed",
            ));
        }
        let subject = claims
            .sub
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ToolError::invalid_token("the token has no subject"))?;
        // Names that are printed, bound into request states and compared: no control
        // characters (a `\n` could make two principals' names read as one).
        if subject.chars().any(char::is_control) {
            return Err(ToolError::invalid_token(
                "the token's `sub` claim holds a control character",
            ));
        }
        let scopes: Vec<String> = match (claims.scope, claims.scp) {
            (Some(scope), _) => scope_tokens(&scope),
            (None, Some(Scp::List(list))) => list,
            (None, Some(Scp::Text(text))) => scope_tokens(&text),
            (None, None) => Vec::new(),
        };
        let mut principal = Principal::new(subject, scopes);
        match claims.other.get(&self.workspace_claim) {
            None | Some(Value::Null) => {}
            Some(Value::String(ws)) if !ws.is_empty() && !ws.chars().any(char::is_control) => {
                principal = principal.in_workspace(ws)
            }
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

/// Whether the token's header or claims repeat a key, at any depth. RFC 7519 §4 and RFC
/// 7515 §5.2 let a reader keep the last of a repeated name, which jsonwebtoken does for a
/// claim it does not name (the workspace claim among them), while the authorization
/// server or a proxy that checked the token may have read the first: refused, as the
/// arguments of a call that repeat a key are. A part that is not base64url JSON is left
/// to jsonwebtoken, which refuses it.
fn repeats_a_key(token: &str) -> bool {
    use base64::Engine;
    token.split('.').take(2).any(|part| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .is_ok_and(|json| crate::pipeline::repeated::repeated_key(&json).is_some())
    })
}

/// The scopes of a `scope` (or string `scp`) claim: separated by spaces (U+0020) only, as
/// RFC 6749 §3.3 says. Another blank (a no-break space) is part of a scope, which then
/// names none the tools use, as the authorization server that issued it meant.
fn scope_tokens(text: &str) -> Vec<String> {
    text.split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn describe(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired".to_owned(),
        ErrorKind::ImmatureSignature => "the token is not valid yet".to_owned(),
        ErrorKind::InvalidIssuer => "the token was issued by another issuer".to_owned(),
        ErrorKind::InvalidAudience => "the token was issued for another audience".to_owned(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".to_owned(),
        ErrorKind::InvalidAlgorithm => "the token's algorithm is not accepted".to_owned(),
        // jsonwebtoken says a claim is missing when it cannot read it either (an `exp` of
        // `1e20`, a `sub` that is a number).
        ErrorKind::MissingRequiredClaim(claim) => {
            format!(
                "the token has no `{claim}` claim it can read (missing, or not of its type or range)"
            )
        }
        ErrorKind::InvalidClaimFormat(claim) => format!("the token's `{claim}` claim is malformed"),
        _ => "malformed token".to_owned(),
    }
}

impl TokenVerifier for JwtVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Principal, ToolError>> {
        Box::pin(async move { self.verify_now(token) })
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header, encode, get_current_timestamp};
    use serde_json::json;

    use super::*;

    const SECRET: &str = "a shared secret of at least thirty-two bytes";
    const AUD: &str = "https://mcp.example.com/mcp";
    const ISS: &str = "https://auth.example.com";

    // RFC 8032 §7.1, test 1.
    const ED_SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const ED_PUBLIC_B64URL: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    fn hs256() -> JwtVerifier {
        JwtVerifier::builder()
            .issuer(ISS)
            .audience(AUD)
            .hs256_secret(SECRET)
            .build()
            .unwrap()
    }

    fn sign_hs256(claims: Value) -> String {
        let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
        encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
    }

    fn claims(extra: Value) -> Value {
        let mut claims = json!({
            "iss": ISS, "aud": AUD, "sub": "alice",
            "exp": get_current_timestamp() + 300,
        });
        claims
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        claims
    }

    fn reason(verifier: &JwtVerifier, token: &str) -> String {
        verifier.verify_now(token).unwrap_err().message().to_owned()
    }

    #[test]
    fn scopes_from_scope_or_scp() {
        let v = hs256();
        let p = v
            .verify_now(&sign_hs256(claims(json!({"scope": "a:read  b:write"}))))
            .unwrap();
        assert_eq!(p.scopes().collect::<Vec<_>>(), ["a:read", "b:write"]);
        let p = v
            .verify_now(&sign_hs256(claims(json!({"scp": ["c:read", "d:run"]}))))
            .unwrap();
        assert_eq!(p.scopes().collect::<Vec<_>>(), ["c:read", "d:run"]);
        let p = v
            .verify_now(&sign_hs256(claims(json!({"scp": "e:read f:read"}))))
            .unwrap();
        assert_eq!(p.scopes().collect::<Vec<_>>(), ["e:read", "f:read"]);
        // `scope` is a string (RFC 8693), never an array.
        assert_eq!(
            reason(&v, &sign_hs256(claims(json!({"scope": ["a:read"]})))),
            "malformed token"
        );
        let p = v.verify_now(&sign_hs256(claims(json!({})))).unwrap();
        assert_eq!(p.scopes().len(), 0);
        assert_eq!(p.subject(), "alice");
        assert_eq!(p.workspace(), None);
    }

    #[test]
    fn workspace_and_token_id() {
        let p = hs256()
            .verify_now(&sign_hs256(claims(
                json!({"workspace": "acme", "jti": "t-1"}),
            )))
            .unwrap();
        assert_eq!(p.workspace(), Some("acme"));
        assert_eq!(p.token_id(), Some("t-1"));
        let custom = JwtVerifier::builder()
            .audience(AUD)
            .hs256_secret(SECRET)
            .workspace_claim("org_id")
            .build()
            .unwrap();
        let p = custom
            .verify_now(&sign_hs256(claims(
                json!({"org_id": "o-7", "workspace": "x"}),
            )))
            .unwrap();
        assert_eq!(p.workspace(), Some("o-7"));
        assert_eq!(
            reason(&custom, &sign_hs256(claims(json!({"org_id": 7})))),
            "the token's `org_id` claim is not a workspace name"
        );
    }

    #[test]
    fn refusals_say_why() {
        let v = hs256();
        let now = get_current_timestamp();
        let cases = [
            (claims(json!({"exp": now - 3600})), "the token has expired"),
            (
                claims(json!({"nbf": now + 3600})),
                "the token is not valid yet",
            ),
            (
                claims(json!({"iss": "https://evil.example.com"})),
                "the token was issued by another issuer",
            ),
            (
                claims(json!({"aud": "https://other.example.com"})),
                "the token was issued for another audience",
            ),
        ];
        for (claims, why) in cases {
            assert_eq!(reason(&v, &sign_hs256(claims)), why);
        }
        let mut no_sub = claims(json!({}));
        no_sub.as_object_mut().unwrap().remove("sub");
        assert_eq!(
            reason(&v, &sign_hs256(no_sub)),
            "the token has no `sub` claim it can read (missing, or not of its type or range)"
        );
        let mut no_exp = claims(json!({}));
        no_exp.as_object_mut().unwrap().remove("exp");
        assert_eq!(
            reason(&v, &sign_hs256(no_exp)),
            "the token has no `exp` claim it can read (missing, or not of its type or range)"
        );
        // Out of range: not taken for a token that never expires.
        assert_eq!(
            reason(&v, &sign_hs256(claims(json!({"exp": 1e20})))),
            "the token has no `exp` claim it can read (missing, or not of its type or range)"
        );
        // another secret
        let key = EncodingKey::from_secret(b"another secret that is also long enough").unwrap();
        let forged = encode(&Header::new(Algorithm::HS256), &claims(json!({})), &key).unwrap();
        assert_eq!(reason(&v, &forged), "the token's signature does not verify");
        assert_eq!(reason(&v, "not.a.jwt"), "malformed token");
        let err = v.verify_now("x.y.z").unwrap_err();
        assert_eq!(err.reason(), "invalid_token");
    }

    fn ed_der() -> Vec<u8> {
        let mut der = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        der.extend((0..32).map(|i| u8::from_str_radix(&ED_SEED[2 * i..2 * i + 2], 16).unwrap()));
        der
    }

    /// A JWKS file that is a device, a FIFO or larger than any key set is refused at
    /// once: `/dev/zero` filled 1.5 GB in 3 s, a FIFO waited for ever.
    #[cfg(unix)]
    #[test]
    fn a_jwks_file_that_is_no_key_set_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("jwks.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; (MAX_JWKS_BYTES + 1) as usize]).unwrap();
        for (path, why) in [
            (Path::new("/dev/zero"), "not a regular file"),
            (fifo.as_path(), "not a regular file"),
            (big.as_path(), "larger than"),
        ] {
            let err = JwtVerifier::builder()
                .issuer(ISS)
                .audience(AUD)
                .jwks_file(path)
                .build()
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{path:?}: {err}");
        }
    }

    #[test]
    fn jwks_keys_by_kid() {
        let jwks = json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": ED_PUBLIC_B64URL, "kid": "ed-1", "alg": "EdDSA"},
            // base64url of SECRET
            {"kty": "oct", "k": "YSBzaGFyZWQgc2VjcmV0IG9mIGF0IGxlYXN0IHRoaXJ0eS10d28gYnl0ZXM", "kid": "hs-1"},
        ]});
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, jwks.to_string()).unwrap();
        let v = JwtVerifier::builder()
            .issuer(ISS)
            .audience(AUD)
            .jwks_file(&path)
            .build()
            .unwrap();

        let ed_key = EncodingKey::from_ed_der(&ed_der());
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some("ed-1".into());
        let token = encode(&header, &claims(json!({"scope": "x:read"})), &ed_key).unwrap();
        assert_eq!(v.verify_now(&token).unwrap().subject(), "alice");

        let hs_key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("hs-1".into());
        let token = encode(&header, &claims(json!({})), &hs_key).unwrap();
        assert!(v.verify_now(&token).is_ok());

        // an unknown kid, no kid in a set of two, an algorithm that is not the key's
        header.kid = Some("nope".into());
        let token = encode(&header, &claims(json!({})), &hs_key).unwrap();
        assert_eq!(
            reason(&v, &token),
            "the token is signed with an unknown key"
        );
        header.kid = None;
        let token = encode(&header, &claims(json!({})), &hs_key).unwrap();
        assert_eq!(
            reason(&v, &token),
            "the token is signed with an unknown key"
        );
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("ed-1".into());
        let token = encode(&header, &claims(json!({})), &hs_key).unwrap();
        assert_eq!(
            reason(&v, &token),
            "the token's algorithm does not match its key"
        );
    }

    #[test]
    fn configuration_errors() {
        let no_audience = JwtVerifier::builder().hs256_secret(SECRET).build();
        assert!(no_audience.unwrap_err().to_string().contains("audience"));
        let no_key = JwtVerifier::builder().audience(AUD).build();
        assert!(
            no_key
                .unwrap_err()
                .to_string()
                .contains("exactly one source of keys")
        );
        let short = JwtVerifier::builder()
            .audience(AUD)
            .hs256_secret("short")
            .build();
        assert!(short.unwrap_err().to_string().contains("at least 32 bytes"));
        let missing = JwtVerifier::builder()
            .audience(AUD)
            .jwks_file("/nonexistent/jwks.json")
            .build();
        assert!(missing.unwrap_err().to_string().contains("cannot be read"));
        for claim in ["sub", "scope", "jti", ""] {
            let taken = JwtVerifier::builder()
                .audience(AUD)
                .hs256_secret(SECRET)
                .workspace_claim(claim)
                .build();
            assert!(
                taken.unwrap_err().to_string().contains("workspace claim"),
                "{claim}"
            );
        }
        let lenient = JwtVerifier::builder()
            .audience(AUD)
            .hs256_secret(SECRET)
            .leeway_seconds(u64::MAX)
            .build();
        assert!(lenient.unwrap_err().to_string().contains("leeway"));
        let garbage = JwtVerifier::builder().audience(AUD).jwks_json("{}").build();
        assert!(
            garbage
                .unwrap_err()
                .to_string()
                .contains("not a JSON Web Key Set")
        );
    }

    #[test]
    fn keys_unfit_for_signatures_are_refused() {
        let secret = "YSBzaGFyZWQgc2VjcmV0IG9mIGF0IGxlYXN0IHRoaXJ0eS10d28gYnl0ZXM";
        // A 1024-bit modulus (128 bytes: 171 base64url characters), e = 3.
        let small_n = "A".repeat(171);
        let cases = [
            (json!({"kty": "oct", "k": "AQ"}), "shorter than 32 bytes"),
            (
                json!({"kty": "oct", "k": secret, "use": "enc"}),
                "not for signatures",
            ),
            (
                json!({"kty": "oct", "k": secret, "key_ops": ["encrypt"]}),
                "lack `verify`",
            ),
            (
                json!({"kty": "RSA", "n": small_n, "e": "Aw"}),
                "shorter than 2048 bits",
            ),
        ];
        for (key, why) in cases {
            let jwks = json!({ "keys": [key] }).to_string();
            let err = JwtVerifier::builder()
                .audience(AUD)
                .jwks_json(jwks)
                .build()
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{key}: {err}");
        }
        // Marked for signatures and verifying: taken.
        let jwks =
            json!({"keys": [{"kty": "oct", "k": secret, "use": "sig", "key_ops": ["verify"]}]});
        assert!(
            JwtVerifier::builder()
                .audience(AUD)
                .jwks_json(jwks.to_string())
                .build()
                .is_ok()
        );
    }

    /// Scopes are separated by U+0020 only (RFC 6749 §3.3), and names with control
    /// characters are refused: `a\nb` in `c` and `a` in `b\nc` would bind as one.
    #[test]
    fn scopes_split_on_spaces_only_and_names_have_no_control_characters() {
        let v = hs256();
        let p = v
            .verify_now(&sign_hs256(claims(
                json!({"scope": "issues:read\u{a0}issues:write  x:y\tz"}),
            )))
            .unwrap();
        assert_eq!(
            p.scopes().collect::<Vec<_>>(),
            ["issues:read\u{a0}issues:write", "x:y\tz"]
        );
        assert_eq!(
            reason(&v, &sign_hs256(claims(json!({"sub": "a\nb"})))),
            "the token's `sub` claim holds a control character"
        );
        assert_eq!(
            reason(&v, &sign_hs256(claims(json!({"workspace": "b\nc"})))),
            "the token's `workspace` claim is not a workspace name"
        );
    }

    /// A token signed with `SECRET` whose header and claims are these texts, as written.
    fn sign_raw(header: &str, claims: &str) -> String {
        use base64::Engine;
        let b64 = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
        let message = format!("{}.{}", b64(header), b64(claims));
        let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
        let signature =
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256).unwrap();
        format!("{message}.{signature}")
    }

    /// A repeated key reads as its last value here and may read as its first to the
    /// authorization server or a proxy: `"workspace":"demo","workspace":"other"` was taken
    /// as `other`.
    #[test]
    fn a_key_repeated_in_the_header_or_the_claims_is_malformed() {
        let v = hs256();
        let exp = get_current_timestamp() + 300;
        let header = r#"{"alg":"HS256","typ":"JWT"}"#;
        let claims = |extra: &str| {
            format!(r#"{{"iss":"{ISS}","aud":"{AUD}","sub":"alice","exp":{exp}{extra}}}"#)
        };
        let p = v
            .verify_now(&sign_raw(header, &claims(r#","workspace":"demo""#)))
            .unwrap();
        assert_eq!(p.workspace(), Some("demo"));
        for (header, claims) in [
            (header, claims(r#","workspace":"demo","workspace":"other""#)),
            (
                header,
                claims(r#","workspace":"demo","w\u006frkspace":"other""#),
            ),
            (header, claims(r#","sub":"mallory""#)),
            (header, claims(r#","realm":{"role":"a","role":"b"}"#)),
            (r#"{"alg":"HS256","typ":"JWT","x":1,"x":2}"#, claims("")),
            (r#"{"alg":"HS256","kid":"a","kid":"b"}"#, claims("")),
        ] {
            assert_eq!(
                reason(&v, &sign_raw(header, &claims)),
                "malformed token: its header or claims repeat a key",
                "{header} {claims}"
            );
        }
    }

    /// RFC 7519 §4.1.1: `iss` is one StringOrURI. An array was taken when one of its
    /// elements was the issuer.
    #[test]
    fn an_issuer_that_is_not_one_string_is_malformed() {
        let v = hs256();
        for iss in [json!(["https://evil.example.com", ISS]), json!([ISS])] {
            assert_eq!(
                reason(&v, &sign_hs256(claims(json!({ "iss": iss })))),
                "the token's `iss` claim is malformed",
                "{iss}"
            );
        }
        // With no issuer configured, the same: `iss` is read as what it is or refused.
        let any_issuer = JwtVerifier::builder()
            .audience(AUD)
            .hs256_secret(SECRET)
            .build()
            .unwrap();
        for iss in [json!([ISS]), json!(7), json!({"iss": ISS})] {
            assert_eq!(
                reason(&any_issuer, &sign_hs256(claims(json!({ "iss": iss })))),
                "the token's `iss` claim is malformed",
                "{iss}"
            );
        }
        assert!(
            any_issuer
                .verify_now(&sign_hs256(claims(json!({}))))
                .is_ok()
        );
        let mut no_iss = claims(json!({}));
        no_iss.as_object_mut().unwrap().remove("iss");
        assert!(any_issuer.verify_now(&sign_hs256(no_iss)).is_ok());
    }

    #[test]
    fn jwt_shape() {
        assert!(looks_like_jwt("a.b.c"));
        assert!(!looks_like_jwt("aac_0123_abcd"));
        assert!(!looks_like_jwt("a.b"));
    }
}
