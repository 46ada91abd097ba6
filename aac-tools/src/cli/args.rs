//! The built-in subcommands, as clap sees them.

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum Builtin {
    /// Serve the tools over MCP: stdio by default (token from AAC_TOKEN), or Streamable HTTP
    Serve(ServeArgs),
    /// Create, revoke and list bearer tokens
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print the tools manifest: every tool's definition and scopes, as JSON
    Manifest(ManifestArgs),
    /// Show the audit trail: one record per tool call, refused ones included
    Audit(AuditArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ManifestArgs {
    /// The manifest of a server run with this `serve --confirm` policy: destructive
    /// tools a person confirms say so in their `_meta`, as that server's `GET /tools`
    /// and `tools/list` do
    #[arg(long, value_name = "POLICY", default_value = "argument")]
    pub(crate) confirm: crate::confirm::ConfirmPolicy,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Serve Streamable HTTP on this address (such as 127.0.0.1:8080) instead of stdio
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<String>,
    /// Only the read-only tools are listed and callable
    #[arg(long)]
    pub(crate) read_only: bool,
    /// Streamable HTTP without sessions (each request stands alone)
    #[arg(long, requires = "http")]
    pub(crate) stateless: bool,
    /// Also accept requests whose Host is this name or address (with a port: only that
    /// port); repeat it, or separate with commas. By default only localhost, 127.0.0.1
    /// and ::1 are accepted (the guard against DNS rebinding); `*` accepts any Host and
    /// turns the guard off
    #[arg(
        long = "allow-host",
        value_name = "HOST",
        value_delimiter = ',',
        requires = "http"
    )]
    pub(crate) allow_host: Vec<String>,
    /// Let web pages of this origin (`scheme://host[:port]`) call the server and read its
    /// answers (CORS: preflights answered, `Access-Control-Allow-Origin` sent); repeat it,
    /// or separate with commas. By default no page of another origin may read an answer
    #[arg(
        long = "cors-origin",
        value_name = "ORIGIN",
        value_delimiter = ',',
        requires = "http",
        value_parser = a_cors_origin
    )]
    pub(crate) cors_origin: Vec<String>,
    /// The most connections one peer address keeps open (loopback peers are not counted);
    /// raise it behind a proxy on another host, whose address every client shares
    #[arg(long, value_name = "N", requires = "http",
          default_value_t = crate::http::DEFAULT_MAX_CONNECTIONS_PER_PEER as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_connections_per_peer: u64,
    /// The most connections open at once; past it new ones are closed at once. At most
    /// what the open-file limit leaves (which `serve` raises to the hard limit first)
    #[arg(long, value_name = "N", requires = "http",
          default_value_t = crate::http::DEFAULT_MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_connections: u64,
    /// Append signed checkpoints of the audit chain's head to this file, every 10 s and
    /// when the server stops; the key is AAC_CHECKPOINT_KEY (see `audit --new-checkpoint-key`)
    #[arg(long, value_name = "FILE")]
    pub(crate) checkpoints: Option<std::path::PathBuf>,
    /// Who confirms destructive calls: `argument` (`confirm: true`), `user` (a person,
    /// asked through the client) or `user-or-argument` (a person where the client can ask);
    /// 2026-07-28 request states are sealed with the keys in AAC_REQUEST_STATE_KEYS
    /// (comma-separated, 64+ hex digits each, the first signs)
    #[arg(long, value_name = "POLICY", default_value = "argument")]
    pub(crate) confirm: crate::confirm::ConfirmPolicy,
    /// How long a person has to answer a confirmation, in seconds (at least 1): the wait
    /// for the answer to an elicitation (default 120) and the life of a 2026-07-28
    /// request state (default 300)
    #[arg(long, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) confirm_timeout: Option<u64>,
    /// The most calls (and reads, prompts, completions) one principal may make, every tool
    /// together, such as `20/s` or `600/min`; past it, 429 and a `rate_limited` record.
    /// Bounds how fast one token can grow the audit trail. Default: no limit
    #[arg(long, value_name = "RATE")]
    pub(crate) rate_limit: Option<crate::Rate>,
    /// This endpoint's canonical URL, as clients reach it (such as
    /// https://mcp.example.com/mcp): the `resource` of the OAuth protected-resource metadata
    /// and the audience JWTs must name, both without a trailing `/`. Default:
    /// http://<the request's Host>/mcp
    #[arg(long, value_name = "URL", requires = "http", value_parser = a_resource_url)]
    pub(crate) resource_url: Option<String>,
    /// An OAuth authorization server that issues tokens for this server, listed in the
    /// protected-resource metadata (`authorization_servers`); repeat it for several
    #[arg(long = "authorization-server", value_name = "URL", requires = "http",
          value_parser = an_http_url)]
    pub(crate) authorization_servers: Vec<String>,
    /// Also accept JWT access tokens issued by this issuer (`iss`), beside the store's
    /// tokens; their keys come from --jwt-jwks, or from a shared HS256 secret (32 bytes or
    /// more) in AAC_JWT_SECRET
    #[arg(long, value_name = "ISSUER", value_parser = not_empty)]
    pub(crate) jwt_issuer: Option<String>,
    /// The JWKS file (RFC 7517) whose keys sign the JWTs
    #[arg(long, value_name = "FILE", requires = "jwt_issuer")]
    pub(crate) jwt_jwks: Option<std::path::PathBuf>,
    /// The audience (`aud`) a JWT must name. Default: --resource-url
    #[arg(long, value_name = "AUDIENCE", requires = "jwt_issuer", value_parser = not_empty)]
    pub(crate) jwt_audience: Option<String>,
    /// The JWT claim that holds the workspace (default `workspace`)
    #[arg(long, value_name = "CLAIM", requires = "jwt_issuer")]
    pub(crate) jwt_workspace_claim: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Create a token and print it alone on stdout (only its hash is stored)
    Create(CreateArgs),
    /// Revoke a token, given its id or the whole token
    Revoke {
        /// The token's id (as `token list` shows it) or the token itself (refused, and
        /// nothing revoked, if its secret is not the token's)
        id_or_token: String,
    },
    /// List tokens (never their secrets)
    List,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// Who the token acts as (the principal's subject)
    #[arg(long = "subject", visible_alias = "user", value_name = "NAME")]
    pub(crate) subject: String,
    /// The workspace the token acts in
    #[arg(long)]
    pub(crate) workspace: Option<String>,
    /// Comma-separated scopes, or `all`
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) scopes: Vec<String>,
    /// Lifetime, such as 30d, 12h, 15m or 2w [default: never expires]
    #[arg(long, value_name = "DURATION")]
    pub(crate) expires: Option<String>,
}

/// The largest `--limit`: SQLite's largest integer.
const MAX_LIMIT: u64 = i64::MAX.unsigned_abs();

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Only calls of this tool (for a resource, its URI; for a prompt, its name)
    #[arg(long)]
    pub(crate) tool: Option<String>,
    /// Only calls of this kind
    #[arg(long, value_parser = ["tool", "resource", "prompt", "completion"])]
    pub(crate) kind: Option<String>,
    /// Only calls with this outcome
    #[arg(long, value_parser = ["success", "denied", "error"])]
    pub(crate) outcome: Option<String>,
    /// Only calls refused or failed for this reason (such as insufficient_scope)
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Only calls by this principal (subject)
    #[arg(long)]
    pub(crate) principal: Option<String>,
    /// Only calls in this workspace
    #[arg(long)]
    pub(crate) workspace: Option<String>,
    /// Only calls since this time: RFC 3339 (2025-06-22T15:30:00Z), a day (2025-06-22), or an age (24h, 7d)
    #[arg(long, value_name = "TIME", value_parser = a_time)]
    pub(crate) since: Option<String>,
    /// Only calls before this time (same forms as --since)
    #[arg(long, value_name = "TIME", value_parser = a_time)]
    pub(crate) until: Option<String>,
    /// Only the newest N records (1 or more)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_LIMIT),
          conflicts_with = "stats")]
    pub(crate) limit: Option<u64>,
    /// One JSON record per line
    #[arg(long)]
    pub(crate) json: bool,
    /// A summary instead of the records: calls per day, most refused tools, denials per hour
    #[arg(long)]
    pub(crate) stats: bool,
    /// Check the hash chain of the whole trail (and its append-only triggers) instead of
    /// listing records; no filter applies
    #[arg(long, conflicts_with_all = ["stats", "tool", "kind", "outcome", "reason", "principal",
          "workspace", "since", "until", "limit"])]
    pub(crate) verify: bool,
    /// With --verify: also check the signed checkpoints in this file (needs --public-key)
    #[arg(long, value_name = "FILE", requires_all = ["verify", "public_key"])]
    pub(crate) checkpoints: Option<std::path::PathBuf>,
    /// The public checkpoint key (64 hex digits) that signed the checkpoints
    #[arg(long, value_name = "HEX", requires = "checkpoints")]
    pub(crate) public_key: Option<String>,
    /// Print a new checkpoint key (the secret, for AAC_CHECKPOINT_KEY) on stdout and its
    /// public half on stderr, and do nothing else
    #[arg(long, conflicts_with_all = ["tool", "kind", "outcome", "reason", "principal",
          "workspace", "since", "until", "limit", "json", "stats", "verify", "checkpoints",
          "public_key"])]
    pub(crate) new_checkpoint_key: bool,
}

impl ServeArgs {
    /// Who confirms destructive calls, and how long a person has to answer, as given.
    pub(crate) fn confirmation(&self, builder: crate::ServerBuilder) -> crate::ServerBuilder {
        let builder = builder.confirmation(self.confirm);
        match self.confirm_timeout {
            Some(secs) => {
                let timeout = std::time::Duration::from_secs(secs);
                builder
                    .confirmation_timeout(timeout)
                    .request_state_ttl(timeout)
            }
            None => builder,
        }
    }
}

impl ServeArgs {
    /// Why JWTs for the `resource` that the protected-resource metadata advertises would be
    /// refused, if they would (a warning at start-up): over HTTP, `--jwt-audience` names
    /// another audience, and clients that follow the metadata (MCP's authorization) ask
    /// the authorization server for tokens for the advertised resource.
    pub(crate) fn unadvertised_audience(&self) -> Option<String> {
        let audience = self.jwt_audience.as_ref()?;
        self.http.as_ref()?;
        match &self.resource_url {
            None => Some(format!(
                "JWTs must name `{audience}` (--jwt-audience) as their audience, but without \
                 --resource-url the protected-resource metadata advertises \
                 http://<the request's Host>/mcp as this server's resource, the audience \
                 clients ask tokens for: set --resource-url to the URL clients reach /mcp at \
                 (`{audience}` if that is it), which is then the audience"
            )),
            Some(resource) if resource != audience => Some(format!(
                "JWTs must name `{audience}` (--jwt-audience) as their audience, but the \
                 protected-resource metadata advertises `{resource}` (--resource-url) as this \
                 server's resource, the audience clients ask tokens for: leave out \
                 --jwt-audience unless the authorization server names this server \
                 `{audience}` in the tokens it issues for `{resource}`"
            )),
            Some(_) => None,
        }
    }

    /// The JWT verifier `--jwt-issuer` asks for, if it does: its keys from `--jwt-jwks` or
    /// `AAC_JWT_SECRET` (one of them), its audience `--jwt-audience` or `--resource-url`.
    pub(crate) fn jwt(&self) -> Result<Option<crate::jwt::JwtVerifier>, super::CliError> {
        let Some(issuer) = &self.jwt_issuer else {
            return Ok(None);
        };
        let usage = |m: &str| super::CliError::new(format!("--jwt-issuer: {m}"));
        let audience = self
            .jwt_audience
            .as_ref()
            .or(self.resource_url.as_ref())
            .ok_or_else(|| {
                usage(
                    "a JWT must name this server as its audience: give --jwt-audience (or, \
                     over HTTP, --resource-url, which is then the audience)",
                )
            })?;
        let secret = std::env::var("AAC_JWT_SECRET")
            .ok()
            .filter(|s| !s.is_empty());
        let mut builder = crate::jwt::JwtVerifier::builder()
            .issuer(issuer.clone())
            .audience(audience.clone());
        builder = match (&self.jwt_jwks, secret) {
            (Some(file), None) => builder.jwks_file(file),
            (None, Some(secret)) => builder.hs256_secret(secret),
            (Some(_), Some(_)) => {
                return Err(usage(
                    "both --jwt-jwks and AAC_JWT_SECRET are set: give the keys one way",
                ));
            }
            (None, None) => {
                return Err(usage(
                    "no keys to check signatures with: give --jwt-jwks FILE, or a shared \
                     HS256 secret in AAC_JWT_SECRET",
                ));
            }
        };
        if let Some(claim) = &self.jwt_workspace_claim {
            builder = builder.workspace_claim(claim.clone());
        }
        builder.build().map(Some).map_err(|e| usage(&e.to_string()))
    }
}

/// An absolute `http://` or `https://` URL with a host, a valid port if any, and no
/// user, password or fragment (what RFC 9728 metadata and its clients accept), kept as
/// written.
fn an_http_url(text: &str) -> Result<String, String> {
    let lower = text.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    else {
        return Err("expected an absolute URL starting with https:// (or http://)".to_owned());
    };
    if text.contains('\\') {
        return Err("a URL here has no backslash".to_owned());
    }
    let url = url::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err("the URL names no host".to_owned());
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a URL here carries no user or password".to_owned());
    }
    // Published as written, and compared as written (a JWT's audience): the authority must
    // be what a reader of the URL takes it for (no `https:///x`, `https://@x`, `x:`).
    // As written, case included: a reader (a client asking for a token for this
    // resource) lower-cases a scheme and a host, so `HTTPS://Example.COM` would be
    // published and compared as a URL no client asks for.
    let written = &text[text.len() - rest.len()..];
    if !text.starts_with("https://") && !text.starts_with("http://") {
        return Err(format!(
            "the URL's scheme is written `{}`: write it in lower case",
            &text[..text.len() - rest.len() - 3]
        ));
    }
    let authority = written.split(['/', '?', '#']).next().unwrap_or_default();
    let expected = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    if authority != expected {
        return Err(format!(
            "the URL's host is written `{authority}`: write it `{expected}`"
        ));
    }
    if url.fragment().is_some() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a URL here has no fragment, space or control character".to_owned());
    }
    Ok(text.to_owned())
}

/// [`an_http_url`] in the form the protected-resource metadata advertises it (without a
/// trailing `/`), so that the JWT audience taken from it is the advertised `resource`.
fn a_resource_url(text: &str) -> Result<String, String> {
    an_http_url(text).map(|url| crate::http::canonical_resource_url(&url).to_owned())
}

/// A `--cors-origin` value: an origin CORS may name (`http(s)://host[:port]`, `:*` for any
/// port), one a browser can send: not `null` nor `*`, no wildcard in the host.
fn a_cors_origin(text: &str) -> Result<String, String> {
    let text = text.trim();
    if crate::http::is_cors_origin(text) {
        Ok(text.to_owned())
    } else {
        Err(
            "expected an origin a browser sends, http(s)://host[:port] (:* for any port), \
             such as https://app.example.com: null, * and wildcards in the host are not \
             accepted (name each origin), an IPv6 host goes in brackets (http://[::1]:6274), \
             and an international name is written in punycode (xn--…)"
                .to_owned(),
        )
    }
}

/// A value that is not empty (nor only blanks).
fn not_empty(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("an empty value names nothing".to_owned());
    }
    Ok(text.to_owned())
}

/// A `--since`/`--until` value that reads as a time (a usage error, exit 2, if not),
/// kept as written: an age counts back from when the query runs.
fn a_time(text: &str) -> Result<String, String> {
    crate::audit::parse_time(text)
        .map(|_| text.to_owned())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::{FromArgMatches, Subcommand};
    use jsonwebtoken::{EncodingKey, Header, encode, get_current_timestamp};
    use serde_json::json;

    use super::{Builtin, ServeArgs};

    const ISS: &str = "https://auth.example.test";
    const SECRET: &str = "a shared secret of at least thirty-two bytes";

    fn serve(argv: &[&str]) -> ServeArgs {
        let command = Builtin::augment_subcommands(clap::Command::new("aac"));
        let matches = command
            .try_get_matches_from(["aac", "serve"].iter().chain(argv))
            .unwrap();
        match Builtin::from_arg_matches(&matches).unwrap() {
            Builtin::Serve(args) => args,
            _ => unreachable!("serve"),
        }
    }

    /// The metadata advertised `http://127.0.0.1:8080/mcp` for `--resource-url
    /// http://127.0.0.1:8080/mcp/`, and a JWT for it was refused: the audience was the
    /// URL as written.
    #[test]
    fn the_jwt_audience_is_the_resource_url_the_metadata_advertises() {
        let dir = tempfile::tempdir().unwrap();
        let jwks = dir.path().join("jwks.json");
        // base64url of SECRET
        let k = "YSBzaGFyZWQgc2VjcmV0IG9mIGF0IGxlYXN0IHRoaXJ0eS10d28gYnl0ZXM";
        std::fs::write(&jwks, json!({"keys": [{"kty": "oct", "k": k}]}).to_string()).unwrap();
        let args = serve(&[
            "--http",
            "127.0.0.1:0",
            "--resource-url",
            "http://127.0.0.1:8080/mcp/",
            "--jwt-issuer",
            ISS,
            "--jwt-jwks",
            jwks.to_str().unwrap(),
        ]);
        let advertised = "http://127.0.0.1:8080/mcp";
        assert_eq!(
            crate::http::canonical_resource_url("http://127.0.0.1:8080/mcp/"),
            advertised
        );
        assert_eq!(args.resource_url.as_deref(), Some(advertised));
        let verifier = args.jwt().unwrap().unwrap();
        let token = |aud: &str| {
            let claims = json!({"iss": ISS, "aud": aud, "sub": "alice",
                                "exp": get_current_timestamp() + 300});
            let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
            encode(&Header::default(), &claims, &key).unwrap()
        };
        assert_eq!(
            verifier.verify_now(&token(advertised)).unwrap().subject(),
            "alice"
        );
        assert!(args.unadvertised_audience().is_none());
    }

    /// `--jwt-audience X` without `--resource-url` accepted only `aud: X` while the
    /// metadata advertised `http://<Host>/mcp`, and said nothing.
    #[test]
    fn an_audience_that_is_not_the_advertised_resource_is_warned_about() {
        let audience = "https://mcp.example.test/mcp";
        let why = serve(&[
            "--http",
            "127.0.0.1:0",
            "--jwt-issuer",
            ISS,
            "--jwt-audience",
            audience,
        ])
        .unadvertised_audience()
        .expect("a warning");
        assert!(why.contains("without --resource-url"), "{why}");
        assert!(why.contains(audience), "{why}");
        let why = serve(&[
            "--http",
            "127.0.0.1:0",
            "--resource-url",
            "https://other.example.test/mcp",
            "--jwt-issuer",
            ISS,
            "--jwt-audience",
            audience,
        ])
        .unadvertised_audience()
        .expect("a warning");
        assert!(why.contains("https://other.example.test/mcp"), "{why}");
        // The same audience, or no metadata (stdio): nothing to say.
        for argv in [
            &[
                "--http",
                "127.0.0.1:0",
                "--resource-url",
                audience,
                "--jwt-issuer",
                ISS,
                "--jwt-audience",
                audience,
            ][..],
            &["--jwt-issuer", ISS, "--jwt-audience", audience][..],
        ] {
            assert_eq!(serve(argv).unadvertised_audience(), None, "{argv:?}");
        }
    }
}
