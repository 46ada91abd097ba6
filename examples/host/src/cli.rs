//! The command line of `aac-host`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use aac_tools::mcp::client::{ChildStderr, Endpoint};
use serde_json::{Map, Value};

pub(crate) const USAGE: &str = "\
usage: aac-host [OPTIONS] --url URL TOOL [ARGUMENTS]
       aac-host [OPTIONS] TOOL [ARGUMENTS] -- COMMAND [ARG...]
       aac-host [OPTIONS] --list (--url URL | -- COMMAND [ARG...])

Calls one tool of an MCP server, over Streamable HTTP (--url) or over the stdio of
COMMAND, with ARGUMENTS as a JSON object (default {}). A tool that is not read-only
from a trusted server is shown and you are asked first; only a yes adds
`confirm: true`, and only for tools that declare it. A transport failure is retried
with backoff for read-only and idempotent tools, never for the others.

options:
  --url URL        the server's Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp
  --token TOKEN    bearer token (default: $AAC_TOKEN); over stdio it is given to
                   COMMAND as AAC_TOKEN
  --trust          trust the server's annotations (untrusted ones count as absent,
                   so every tool is treated as destructive)
  --yes, -y        answer yes to this host's questions (for scripts); a server that
                   asks a person itself is still answered from the terminal
  --retries N      retries of a safe call after a transport failure (default 3)
  --backoff MS     delay before the first retry, doubling each time (default 250)
  --timeout SECS   give up on one request after SECS seconds (default 60)
  --json           print the whole tools/call result as JSON
  --verbose, -v    show the stdio server's own logs (its stderr) on this terminal,
                   escaped;
                   also AAC_HOST_VERBOSE=1 (default: discarded, so that they never
                   mix with the question asked)
  --server-log FILE  append the stdio server's stderr to FILE instead
  --list           list the tools and what the host would do with each
  --help, -h       this text

exit status: 0 done, 1 the tool answered with an error, 2 usage or connection error,
3 declined (nothing sent, or the server's question answered no), 4 transport failure
after sending (it may have run)
";

/// What the command line asks for.
pub(crate) enum Command {
    Help,
    Run(Options),
}

/// The options of one run.
pub(crate) struct Options {
    pub(crate) url: Option<String>,
    pub(crate) command: Vec<OsString>,
    pub(crate) token: Option<String>,
    pub(crate) token_from_flag: bool,
    pub(crate) trust: bool,
    pub(crate) yes: bool,
    pub(crate) retries: u32,
    pub(crate) backoff: Duration,
    pub(crate) timeout: Duration,
    pub(crate) json: bool,
    /// Where a stdio server's stderr goes.
    pub(crate) server_stderr: ChildStderr,
    /// `None` with `--list`.
    pub(crate) tool: Option<String>,
    pub(crate) arguments: Map<String, Value>,
}

impl Options {
    /// Where the server is, with its credentials.
    pub(crate) fn endpoint(&self) -> Endpoint {
        if let Some(url) = &self.url {
            let endpoint = Endpoint::http(url.clone());
            return match &self.token {
                Some(token) => endpoint.bearer(token.clone()),
                None => endpoint,
            };
        }
        let mut endpoint = Endpoint::stdio(self.command[0].clone())
            .args(self.command[1..].iter().cloned())
            .stderr(self.server_stderr.clone());
        // The child inherits $AAC_TOKEN; a token given as a flag is handed over the same way.
        if self.token_from_flag
            && let Some(token) = &self.token
        {
            endpoint = endpoint.env("AAC_TOKEN", token.clone());
        }
        endpoint
    }
}

/// Parse the arguments after the program name.
pub(crate) fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let mut url = None;
    let mut token = None;
    let mut trust = false;
    let mut yes = false;
    let mut retries = 3;
    let mut backoff = Duration::from_millis(250);
    let mut timeout = Duration::from_secs(60);
    let mut json = false;
    let mut verbose =
        std::env::var_os("AAC_HOST_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0");
    let mut server_log = None;
    let mut listing = false;
    let mut positional = Vec::new();
    let mut command = Vec::new();

    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            return Err(format!("argument is not UTF-8: {}", arg.to_string_lossy()));
        };
        let mut value = |flag: &str| {
            args.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("`{flag}` needs a value"))
        };
        match text {
            "--" => {
                command.extend(args.by_ref());
                break;
            }
            "--help" | "-h" => return Ok(Command::Help),
            "--url" => url = Some(value("--url")?),
            "--token" => token = Some(value("--token")?),
            "--trust" => trust = true,
            "--yes" | "-y" => yes = true,
            "--json" => json = true,
            "--verbose" | "-v" => verbose = true,
            "--server-log" => server_log = Some(PathBuf::from(value("--server-log")?)),
            "--list" => listing = true,
            "--retries" => {
                retries = value("--retries")?
                    .parse()
                    .map_err(|_| "`--retries` takes a whole number".to_owned())?;
            }
            "--backoff" => {
                let ms: u64 = value("--backoff")?
                    .parse()
                    .map_err(|_| "`--backoff` takes milliseconds".to_owned())?;
                backoff = Duration::from_millis(ms);
            }
            "--timeout" => {
                let secs: u64 = value("--timeout")?
                    .parse()
                    .map_err(|_| "`--timeout` takes seconds".to_owned())?;
                if secs == 0 {
                    return Err("`--timeout` must be at least 1 second".to_owned());
                }
                timeout = Duration::from_secs(secs);
            }
            flag if flag.starts_with('-') && flag.len() > 1 => {
                return Err(format!("unknown option `{flag}`"));
            }
            _ => positional.push(text.to_owned()),
        }
    }

    match (&url, command.is_empty()) {
        (Some(_), false) => return Err("give either `--url` or `-- COMMAND`, not both".into()),
        (None, true) => return Err("no server: give `--url URL` or `-- COMMAND [ARG...]`".into()),
        _ => {}
    }
    let (tool, arguments) = match (listing, positional.as_slice()) {
        (true, []) => (None, Map::new()),
        (true, _) => return Err("`--list` takes no tool".into()),
        (false, []) => return Err("no tool named".into()),
        (false, [tool]) => (Some(tool.clone()), Map::new()),
        (false, [tool, json_args]) => (Some(tool.clone()), parse_arguments(json_args)?),
        (false, [_, _, extra, ..]) => return Err(format!("unexpected argument `{extra}`")),
    };
    let server_stderr = match (server_log, verbose) {
        (Some(path), _) => ChildStderr::File(path),
        (None, true) => ChildStderr::Escaped,
        (None, false) => ChildStderr::Discard,
    };
    let token_from_flag = token.is_some();
    let token = token.or_else(|| std::env::var("AAC_TOKEN").ok().filter(|t| !t.is_empty()));
    Ok(Command::Run(Options {
        url,
        command,
        token,
        token_from_flag,
        trust,
        yes,
        retries,
        backoff,
        timeout,
        json,
        server_stderr,
        tool,
        arguments,
    }))
}

fn parse_arguments(text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!("ARGUMENTS must be a JSON object, not `{other}`")),
        Err(err) => Err(format!("ARGUMENTS is not JSON: {err}")),
    }
}
