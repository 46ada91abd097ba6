//! `aac-host`: an MCP host that asks before destructive calls and retries only what is safe.
//!
//! ```text
//! aac-host [OPTIONS] --url URL TOOL [ARGUMENTS]
//! aac-host [OPTIONS] TOOL [ARGUMENTS] -- COMMAND [ARG...]
//! aac-host [OPTIONS] --list (--url URL | -- COMMAND [ARG...])
//! ```
//!
//! It connects to any MCP server (a command over stdio, or a Streamable HTTP URL), reads the
//! tool's definition from `tools/list`, and follows `aac_tools::host::ToolPolicy`: a tool
//! that may not run without asking is shown with its title and arguments and the user is
//! asked (`Delete issue AAC-42? [y/N]`); only a yes adds `confirm: true`, and only for tools
//! that declare a `confirm` property. A server that asks the person itself (an elicitation
//! of the session protocols, which this host speaks) gets its question shown here with
//! `[y/N]`. A transport failure is retried with backoff for read-only and idempotent tools,
//! and reported, never retried, for the others.

mod cli;
mod term;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aac_tools::host::{Backoff, Consent, Retry, ToolPolicy, Trust, call_with_retry};
use aac_tools::mcp::client::{
    ChildStderr, Client, ClientError, ClientErrorKind, Endpoint, ToolResult,
};
use serde_json::{Map, Value};

use crate::cli::{Command, Options};

/// The call ran and the tool succeeded.
const OK: u8 = 0;
/// The server answered with a tool error (a refusal or a failure).
const TOOL_ERROR: u8 = 1;
/// Bad usage, or the server could not be reached or refused the session.
const USAGE_OR_CONNECT: u8 = 2;
/// The user said no: nothing was sent.
const DECLINED: u8 = 3;
/// A transport failure after the call was sent: it may or may not have run.
const TRANSPORT: u8 = 4;

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(options)) => options,
        Err(message) => {
            eprintln!("aac-host: {message} (`aac-host --help` shows the usage)");
            return ExitCode::from(USAGE_OR_CONNECT);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("aac-host: cannot start the async runtime: {err}");
            return ExitCode::from(USAGE_OR_CONNECT);
        }
    };
    let code = runtime.block_on(run(options));
    // A stdio child is killed by a task of this runtime; give it a moment to run.
    runtime.shutdown_timeout(Duration::from_secs(3));
    ExitCode::from(code)
}

async fn run(options: Options) -> u8 {
    // The server's questions are shown only while the call this host makes is in flight.
    let calling = Arc::new(AtomicBool::new(false));
    let answers = term::Answers::default();
    let endpoint = options
        .endpoint()
        .ask_user(term::server_question(
            options.yes,
            Arc::clone(&calling),
            answers.clone(),
        ))
        .on_declined_unshown(term::declined_unshown(
            Arc::clone(&calling),
            answers.clone(),
        ));
    let client = match connect(&endpoint, options.timeout).await {
        Ok(client) => client,
        Err(err) => {
            eprintln!("aac-host: {}", connect_error(&err, &options));
            if !endpoint.is_http() && options.server_stderr == ChildStderr::Discard {
                eprintln!(
                    "aac-host: the server's own messages were discarded; --verbose shows them"
                );
            }
            return USAGE_OR_CONNECT;
        }
    };
    let tools = match client.list_tools().await {
        Ok(tools) => tools,
        Err(err) => {
            eprintln!("aac-host: {}", term::clean(err.message()));
            client.close().await;
            return USAGE_OR_CONNECT;
        }
    };
    let trust = if options.trust {
        Trust::Trusted
    } else {
        Trust::Untrusted
    };
    let Some(tool_name) = options.tool.clone() else {
        list(&tools, trust);
        client.close().await;
        return OK;
    };
    if tools
        .iter()
        .filter(|t| t["name"] == tool_name.as_str())
        .nth(1)
        .is_some()
    {
        eprintln!(
            "aac-host: the server lists `{}` more than once, so which definition (and which \
             hints) holds is unclear; nothing was sent",
            term::clean(&tool_name)
        );
        client.close().await;
        return USAGE_OR_CONNECT;
    }
    let Some(definition) = tools.iter().find(|t| t["name"] == tool_name.as_str()) else {
        eprintln!(
            "aac-host: the server lists no tool `{}`; it lists: {}",
            term::clean(&tool_name),
            tool_names(&tools)
        );
        client.close().await;
        return USAGE_OR_CONNECT;
    };
    let policy = match ToolPolicy::new(definition, trust) {
        Ok(policy) => policy,
        Err(err) => {
            eprintln!("aac-host: {err}");
            client.close().await;
            return USAGE_OR_CONNECT;
        }
    };
    warn_malformed(&policy);

    let mut arguments = options.arguments.clone();
    if policy.consent() == Consent::AskedByServer {
        // The server asks the person itself (its question arrives as an elicitation and
        // is answered on this terminal): asking first would ask twice.
        eprintln!(
            "`{}`: the server asks for your confirmation itself",
            term::clean(policy.name())
        );
        arguments = policy.confirmed_arguments(arguments);
    } else if policy.consent() != Consent::NotNeeded {
        let approved = if options.yes {
            eprintln!(
                "{} — answered yes by --yes",
                term::question(&policy, definition, &arguments)
            );
            true
        } else {
            term::ask(&policy, definition, &arguments).await
        };
        if !approved {
            eprintln!("declined: nothing was sent to the server");
            client.close().await;
            return DECLINED;
        }
        arguments = policy.confirmed_arguments(arguments);
    }

    calling.store(true, Ordering::SeqCst);
    let called = Called {
        policy: &policy,
        definition,
        trust,
        calling: &calling,
        answers: &answers,
    };
    let (code, reason) = call(client, &endpoint, &options, &called, arguments).await;
    calling.store(false, Ordering::SeqCst);
    let (declined, dismissed) = (
        answers.declined.load(Ordering::SeqCst),
        answers.dismissed.load(Ordering::SeqCst),
    );
    // A resend goes only to a server listing the tool as first listed (`still_safe`), so
    // `policy` is the one every attempt was made under, and the warnings below hold.
    // The person said no to the server's question and the server refused the call as
    // aac-tools servers do (`user_declined`): declined, as a no to this host's own. Any
    // other tool error is only that: what the server did before it is not known here.
    if code == TOOL_ERROR && declined && reason.as_deref() == Some("user_declined") {
        eprintln!("declined: the server ran nothing");
        return DECLINED;
    }
    if code == OK && (declined || dismissed) {
        let answer = if declined { "answered no" } else { "dismissed" };
        eprintln!(
            "aac-host: warning: `{}` ran although the server's own question was {answer}",
            term::clean(policy.name())
        );
    } else if policy.consent() == Consent::AskedByServer
        && code == OK
        && answers.asked.load(Ordering::SeqCst) == 0
    {
        eprintln!(
            "aac-host: warning: `{}` ran, and the server, which said it would ask you, did not",
            term::clean(policy.name())
        );
    }
    code
}

/// The call to make, and what its resend must still agree with.
struct Called<'a> {
    policy: &'a ToolPolicy,
    /// The tool as first listed: the definition the person was shown, or the host decided
    /// on without asking.
    definition: &'a Value,
    trust: Trust,
    /// Whether the server's questions are shown now (the host's call is in flight).
    calling: &'a AtomicBool,
    /// What the server's questions got so far.
    answers: &'a term::Answers,
}

async fn connect(endpoint: &Endpoint, timeout: Duration) -> Result<Client, ClientError> {
    Ok(Client::connect(endpoint).await?.with_timeout(timeout))
}

/// A connection error on one line, with what to do about a refused or missing token.
fn connect_error(err: &ClientError, options: &Options) -> String {
    let message = term::clean(err.message());
    match (err.kind(), &options.token) {
        (ClientErrorKind::Unauthorized, Some(_)) => {
            format!("{message}; pass a valid one with --token or AAC_TOKEN")
        }
        (ClientErrorKind::Unauthorized, None) => {
            format!("{message}; pass one with --token or set AAC_TOKEN")
        }
        _ => message,
    }
}

/// Say which of a tool's hints count as absent because they are not JSON booleans.
fn warn_malformed(policy: &ToolPolicy) {
    let malformed = policy.malformed_hints();
    if malformed.is_empty() {
        return;
    }
    let (what, verb) = if malformed == ["annotations"] {
        (
            "its annotations are".to_owned(),
            "not an object, so its hints count",
        )
    } else {
        (malformed.join(", "), "not JSON booleans, so they count")
    };
    eprintln!(
        "aac-host: warning: `{}`: {what} {verb} as absent",
        term::clean(policy.name())
    );
}

/// Send the call, retrying with backoff only if the policy says it is safe; the exit
/// status, and the reason of a tool error.
async fn call(
    client: Client,
    endpoint: &Endpoint,
    options: &Options,
    called: &Called<'_>,
    arguments: Map<String, Value>,
) -> (u8, Option<String>) {
    let policy = called.policy;
    let backoff = Backoff::new(
        options.backoff,
        Duration::from_secs(8).max(options.backoff),
        options.retries,
    );
    let name = policy.name().to_owned();
    let slot = tokio::sync::Mutex::new(Some(client));
    let done = call_with_retry(
        policy.retry(),
        &backoff,
        Failure::is_transport_failure,
        |attempt| {
            let (slot, name, arguments) = (&slot, &name, arguments.clone());
            async move {
                let mut slot = slot.lock().await;
                if attempt > 1 {
                    // A broken connection (or a dead child) is replaced before a retry;
                    // failing to reconnect sent nothing, so it may be retried as well.
                    if let Some(old) = slot.take() {
                        old.close().await;
                    }
                    // A person who said no to the server's question of this call (or had
                    // it dismissed) is not asked again by a resend, nor overruled by it.
                    if let Some(answer) = called.answers.refused() {
                        return Err(Failure::Changed(format!(
                            "the server's own question was {answer}"
                        )));
                    }
                    eprintln!(
                        "retrying `{}` (attempt {attempt} of {})",
                        term::clean(name),
                        backoff.retries() + 1
                    );
                    let fresh = connect(endpoint, options.timeout)
                        .await
                        .map_err(Failure::Reconnect)?;
                    // The server at the other end may not be the one that listed the
                    // tool (a restarted child, another replica): what it says now decides.
                    if let Err(failure) = still_safe(&fresh, called).await {
                        fresh.close().await;
                        return Err(failure);
                    }
                    *slot = Some(fresh);
                }
                let client = slot.as_ref().expect("a client is connected");
                let result = client.call_tool_object(name, Some(arguments)).await;
                if let Err(err) = &result
                    && err.is_transport_failure()
                {
                    eprintln!("attempt {attempt}: {}", term::clean(err.message()));
                }
                result.map_err(Failure::Call)
            }
        },
    )
    .await;
    if let Some(client) = slot.into_inner() {
        client.close().await;
    }
    let name = term::clean(&name);
    let code = match done.result {
        Ok(result) => return print_result(&result, options.json),
        Err(err) if err.is_transport_failure() => {
            if let Failure::Reconnect(err) = &err {
                eprintln!("aac-host: {}", term::clean(err.message()));
            }
            match policy.retry() {
                Retry::Never => eprintln!(
                    "aac-host: `{name}` was not retried: it is not idempotent, so it may or may \
                     not have run; check the server before calling it again"
                ),
                Retry::Safe => eprintln!(
                    "aac-host: `{name}` failed {} times on the transport; giving up",
                    done.attempts
                ),
            }
            TRANSPORT
        }
        // An HTTP refusal of the call (403 `insufficient_scope`, 404…) is the server's
        // answer, shown as a tool error is.
        Err(Failure::Call(err)) if err.refusal().is_some() => {
            let refusal = err.refusal().expect("a refusal");
            eprintln!(
                "error: {}: {}",
                term::clean(refusal.reason()),
                term::clean(refusal.message())
            );
            TOOL_ERROR
        }
        // A JSON-RPC error answered to the call is the server's answer too: delivered,
        // never resent, and no usage or connection error (a script reading 2 as "nothing
        // happened" would send it again).
        Err(Failure::Call(err)) if err.code().is_some() => {
            let code = err.code().expect("a code");
            eprintln!(
                "error: {code}: {}",
                term::clean(err.server_message().unwrap_or(err.message()))
            );
            TOOL_ERROR
        }
        Err(Failure::Call(err)) if err.kind() == ClientErrorKind::InputRequired => {
            eprintln!("error: input_required: {}", term::clean(err.message()));
            TOOL_ERROR
        }
        // Any other answer was sent in reply to a call the server received and could not
        // be read: the tool may have run.
        Err(Failure::Call(err)) => {
            eprintln!("aac-host: {}", term::clean(err.message()));
            eprintln!(
                "aac-host: `{name}` was sent, and its answer is none this host can read: it may \
                 or may not have run; check the server before calling it again"
            );
            TRANSPORT
        }
        // A resend stopped after a transport failure: the first attempt may have run.
        Err(Failure::Reconnect(err)) => {
            eprintln!("aac-host: {}", term::clean(err.message()));
            eprintln!(
                "aac-host: `{name}` was not resent; an earlier attempt may or may not have \
                 run; check the server before calling it again"
            );
            TRANSPORT
        }
        Err(Failure::Changed(why)) => {
            eprintln!(
                "aac-host: `{name}` was not resent: {why}; its earlier attempt may or may not \
                 have run; check the server before calling it again"
            );
            TRANSPORT
        }
    };
    (code, None)
}

/// Whether the tool may still be resent on `fresh`, a new connection: listed (once) again,
/// still safe to retry, and as first listed (the same definition, and so the same title,
/// hints and question to the person: the consent given, or found not needed, was for that).
async fn still_safe(fresh: &Client, called: &Called<'_>) -> Result<(), Failure> {
    let name = called.policy.name();
    // Listing sends no call: a transport failure here may be retried as a reconnect. A
    // question the server asks meanwhile is dismissed unseen, as during the first listing.
    called.calling.store(false, Ordering::SeqCst);
    let listed = fresh.list_tools().await;
    called.calling.store(true, Ordering::SeqCst);
    let tools = listed.map_err(Failure::Reconnect)?;
    let mut listed = tools.iter().filter(|t| t["name"] == name);
    let (Some(definition), None) = (listed.next(), listed.next()) else {
        return Err(Failure::Changed(
            "the server no longer lists it once".to_owned(),
        ));
    };
    let policy = ToolPolicy::new(definition, called.trust)
        .map_err(|err| Failure::Changed(format!("the server now lists it unreadably ({err})")))?;
    if policy.retry() != Retry::Safe {
        return Err(Failure::Changed(
            "the server now declares it not safe to retry (not idempotent)".to_owned(),
        ));
    }
    if policy != *called.policy || definition != called.definition {
        return Err(Failure::Changed(
            "the server changed the tool (it now lists it otherwise than when it was first \
             listed)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Why one attempt failed.
enum Failure {
    /// The call itself failed.
    Call(ClientError),
    /// Reconnecting before a retry failed (or listing the tools on the new connection).
    Reconnect(ClientError),
    /// The server on the new connection lists the tool so that it may not be resent.
    Changed(String),
}

impl Failure {
    fn is_transport_failure(&self) -> bool {
        match self {
            Failure::Call(err) => err.is_transport_failure(),
            // Nothing was sent on a connection that could not be set up: a retry is as safe
            // as the retry it was preparing (the credentials being refused is not a blip).
            Failure::Reconnect(err) => {
                matches!(
                    err.kind(),
                    ClientErrorKind::Connect | ClientErrorKind::Transport
                )
            }
            Failure::Changed(_) => false,
        }
    }
}

/// Print the result; its exit status, and the reason of a tool error.
fn print_result(result: &ToolResult, json: bool) -> (u8, Option<String>) {
    let reason = result.error_reason();
    if json {
        println!("{}", term::json(result.json()));
        return if result.is_error() {
            (TOOL_ERROR, reason)
        } else {
            (OK, None)
        };
    }
    if result.is_error() {
        let message = result
            .error_message()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| "the tool failed without a message".to_owned());
        match &reason {
            Some(reason) => eprintln!("error: {}: {}", term::clean(reason), term::clean(&message)),
            None => eprintln!("error: {}", term::clean(&message)),
        }
        return (TOOL_ERROR, reason);
    }
    match result.structured_content() {
        Some(structured) => println!("{}", term::json(structured)),
        None => println!("{}", term::clean_text(&result.text())),
    }
    (OK, None)
}

fn list(tools: &[Value], trust: Trust) {
    for (n, tool) in tools.iter().enumerate() {
        let policy = match ToolPolicy::new(tool, trust) {
            Ok(policy) => policy,
            Err(err) => {
                eprintln!(
                    "aac-host: warning: skipped tool {} of tools/list: {err}",
                    n + 1
                );
                continue;
            }
        };
        warn_malformed(&policy);
        let ask = match policy.consent() {
            Consent::NotNeeded => "runs without asking".to_owned(),
            Consent::HostChoice => "asks (writes)".to_owned(),
            Consent::Required(reason) => format!("asks: {reason}"),
            Consent::AskedByServer => "the server asks the user".to_owned(),
        };
        let retry = match policy.retry() {
            Retry::Safe => "retried on transport failure",
            Retry::Never => "never retried",
        };
        println!(
            "{:<28} {:<28} {ask}; {retry}",
            term::clean(policy.name()),
            term::clean(policy.title())
        );
    }
}

fn tool_names(tools: &[Value]) -> String {
    let names: Vec<String> = tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .map(term::clean)
        .collect();
    if names.is_empty() {
        "nothing".to_owned()
    } else {
        names.join(", ")
    }
}
