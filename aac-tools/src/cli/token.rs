//! `token create | revoke | list`.

use super::args::{CreateArgs, TokenCommand};
use super::{CliContext, CliError, OpenMode, TokenRequest, parse_duration, print_out};
use crate::audit::{printable, table_cell};
use crate::sqlite::TokenStore;

pub(super) fn token(context: &CliContext, command: TokenCommand) -> Result<(), CliError> {
    match command {
        TokenCommand::Create(args) => create(context, args),
        TokenCommand::Revoke { id_or_token } => {
            let tokens = store(context, OpenMode::Existing)?;
            let revoked = tokens
                .revoke(&id_or_token)
                .map_err(|e| CliError::new(format!("cannot revoke the token: {e}")))?;
            if !revoked {
                return Err(CliError::new(format!(
                    "no live token with that id; `{} token list` shows the ids",
                    context.name()
                )));
            }
            context.note("token revoked");
            Ok(())
        }
        TokenCommand::List => {
            let tokens = store(context, OpenMode::Read)?;
            let list = tokens
                .list()
                .map_err(|e| CliError::new(format!("cannot list the tokens: {e}")))?;
            print_list(list)
        }
    }
}

/// One line per token, never its secret.
pub(super) fn print_list(list: Vec<crate::tokens::TokenInfo>) -> Result<(), CliError> {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut text = String::new();
    for t in list {
        let state = match (t.revoked_at, t.expires_at) {
            (Some(at), _) => format!("revoked {}", when(at)),
            (None, Some(at)) if at <= now => format!("expired {}", when(at)),
            (None, Some(at)) => format!("live until {}", when(at)),
            (None, None) => "live".to_owned(),
        };
        let who = match &t.workspace {
            Some(workspace) => format!("{}@{workspace}", t.subject),
            None => t.subject.clone(),
        };
        text.push_str(&format!(
            "{}  {}  {}  [{}]\n",
            table_cell(&t.id),
            table_cell(&who),
            state,
            printable(&t.scopes.join(" "))
        ));
    }
    print_out(text)
}

fn store(context: &CliContext, mode: OpenMode) -> Result<TokenStore, CliError> {
    let db = context.open_db(mode)?;
    TokenStore::open(&db).map_err(|e| CliError::new(format!("cannot open the token store: {e}")))
}

/// Unix seconds as `2025-06-22T15:30:00Z`.
fn when(t: i64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|at| at.format(FORMAT).ok())
        .unwrap_or_else(|| t.to_string())
}

/// The longest lifetime `--expires` takes: 100 years (of 365.25 days), whose end every
/// date format still prints.
const MAX_TTL: i64 = 36_525 * 86_400;

/// The request `token create` makes, checked (scopes known, names printable).
pub(super) fn request(context: &CliContext, args: &CreateArgs) -> Result<TokenRequest, CliError> {
    let ttl = args.expires.as_deref().map(parse_duration).transpose()?;
    if let (Some(ttl), Some(expires)) = (ttl, args.expires.as_deref())
        && ttl > MAX_TTL
    {
        return Err(CliError::new(format!(
            "--expires `{}` is longer than 100 years; give a shorter lifetime, or leave \
             --expires out for a token that never expires (revoke it when done)",
            expires.trim()
        )));
    }
    let known = context.registry()?.scopes_supported();
    let mut scopes: Vec<String> = Vec::new();
    // In the order given, each once; `all` stands for every scope the tools use.
    for scope in args.scopes.iter().map(|s| s.trim()) {
        if !scope.is_empty() && scope != "all" && !scopes.iter().any(|s| s == scope) {
            scopes.push(scope.to_owned());
        }
    }
    // Checked before `all` expands, so that `--scopes all,isues:write` is a typo
    // reported, not a token quietly given every scope.
    if let Some(unknown) = scopes.iter().find(|s| !known.contains(&s.as_str())) {
        return Err(CliError::new(format!(
            "unknown scope `{}`; the tools use: {} (or `all`)",
            printable(unknown),
            known.join(", ")
        )));
    }
    if args.scopes.iter().any(|s| s.trim() == "all") {
        scopes = known.iter().map(|s| (*s).to_owned()).collect();
    }
    if scopes.is_empty() {
        return Err(CliError::new(if known.is_empty() {
            "the server has no tools, so no scope to give; link tools into the binary".to_owned()
        } else {
            format!(
                "no scopes given; pass --scopes, such as --scopes {} (or `all`)",
                known[0]
            )
        }));
    }
    let subject = args.subject.trim().to_owned();
    let workspace = args.workspace.as_ref().map(|w| w.trim().to_owned());
    for (what, value) in [
        ("--subject", Some(&subject)),
        ("--workspace", workspace.as_ref()),
    ] {
        if let Some(value) = value
            && (value.is_empty() || value.chars().any(char::is_control))
        {
            return Err(CliError::new(format!(
                "{what} `{}` is empty or holds a control character",
                printable(value)
            )));
        }
    }
    Ok(TokenRequest {
        subject,
        workspace,
        scopes,
        ttl_seconds: ttl,
    })
}

fn create(context: &CliContext, args: CreateArgs) -> Result<(), CliError> {
    let request = request(context, &args)?;
    let db = context.open_db(context.shared.token_create_mode)?;
    let note = match &context.shared.check_token {
        Some(check) => check(&db, &request)?,
        None => None,
    };
    let tokens = TokenStore::open(&db)
        .map_err(|e| CliError::new(format!("cannot open the token store: {e}")))?;
    let scopes: Vec<&str> = request.scopes.iter().map(String::as_str).collect();
    let created = tokens
        .create(
            &request.subject,
            request.workspace.as_deref(),
            &scopes,
            request.ttl_seconds,
        )
        .map_err(|e| CliError::new(format!("cannot create the token: {e}")))?;
    report(context, &request, &created, note, args.expires.as_deref())
}

/// The new token alone on stdout, what it is on stderr.
pub(super) fn report(
    context: &CliContext,
    request: &TokenRequest,
    created: &crate::tokens::NewToken,
    note: Option<String>,
    expires: Option<&str>,
) -> Result<(), CliError> {
    let name = context.name();
    let scopes = request.scopes.join(" ");
    print_out(format_args!("{}\n", created.token)).map_err(|e| {
        CliError::new(format!(
            "{e}; token {id} was created but nobody saw it: `{name} token revoke {id}`",
            id = created.id
        ))
    })?;
    let who = match &request.workspace {
        Some(workspace) => format!("{}@{workspace}", request.subject),
        None => request.subject.clone(),
    };
    eprintln!(
        "{name}: token {} for {who}{}, scopes: {}{}",
        created.id,
        note.map(|n| format!(" ({n})")).unwrap_or_default(),
        scopes,
        match expires {
            Some(e) => format!(", expires in {}", e.trim()),
            None => ", never expires".to_owned(),
        }
    );
    Ok(())
}
