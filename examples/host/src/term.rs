//! The terminal: the question, the answer, and text from the server made safe to print.

use std::io::{BufRead, Write};

use std::sync::Arc;

use aac_tools::host::{Consent, ToolPolicy};
use aac_tools::mcp::client::AskUser;
use serde_json::{Map, Value};

/// Server text with its control characters (and the invisible bidirectional and zero-width
/// ones) escaped, so that a title or a result cannot move the cursor, rewrite the question
/// or hide what it asks.
pub(crate) fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if (c.is_control() && c != '\n' && c != '\t') || invisible {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// [`clean`], on one line.
fn clean_line(text: &str) -> String {
    clean(text).replace('\n', "\\n")
}

/// The question for this call: the title and the values of the required arguments, e.g.
/// `Delete issue AAC-42? [y/N]`.
pub(crate) fn question(
    policy: &ToolPolicy,
    definition: &Value,
    arguments: &Map<String, Value>,
) -> String {
    let mut subject = clean_line(policy.title());
    let required = definition["inputSchema"]["required"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for key in required.iter().filter_map(Value::as_str) {
        if key == "confirm" {
            continue;
        }
        match arguments.get(key) {
            Some(Value::String(s)) => {
                subject.push(' ');
                subject.push_str(&clean_line(s));
            }
            Some(v @ (Value::Number(_) | Value::Bool(_))) => {
                subject.push(' ');
                subject.push_str(&v.to_string());
            }
            _ => {}
        }
    }
    format!("{subject}? [y/N]")
}

/// The answer to a server's own confirmation: its question (made safe to print) and
/// `[y/N]` on the terminal, or yes by `--yes`, said so.
pub(crate) fn server_question(yes: bool) -> AskUser {
    Arc::new(move |question: String| {
        Box::pin(async move {
            let shown = format!("the server asks: {} [y/N]", clean_line(&question));
            if yes {
                eprintln!("{shown} — answered yes by --yes");
                return true;
            }
            eprint!("{shown} ");
            read_yes().await
        })
    })
}

/// One line from stdin: true only for `y` or `yes`; end of input is a no.
async fn read_yes() -> bool {
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(_) => line,
            Err(_) => String::new(),
        }
    })
    .await
    .unwrap_or_default();
    if line.is_empty() {
        eprintln!();
    }
    let answer = line.trim().to_ascii_lowercase();
    answer == "y" || answer == "yes"
}

/// Show the call and ask on the terminal; true only for `y` or `yes`.
///
/// The question goes to stderr and the answer comes from stdin; end of input is a no.
pub(crate) async fn ask(
    policy: &ToolPolicy,
    definition: &Value,
    arguments: &Map<String, Value>,
) -> bool {
    let why = match policy.consent() {
        Consent::Required(reason) => format!("must be confirmed: {reason}"),
        Consent::HostChoice => "changes data on the server".to_owned(),
        Consent::NotNeeded => "is read-only".to_owned(),
        Consent::AskedByServer => "is confirmed by the server".to_owned(),
    };
    let shown = serde_json::to_string_pretty(&Value::Object(arguments.clone()))
        .unwrap_or_default()
        .replace('\n', "\n  ");
    let retry = if policy.safe_to_retry() {
        "retried if the connection fails"
    } else {
        "not retried if the connection fails"
    };
    let mut stderr = std::io::stderr().lock();
    let _ = write!(
        stderr,
        "`{}` ({}) {why}\n  arguments: {shown}\n  {retry}\n{} ",
        clean_line(policy.name()),
        clean_line(policy.title()),
        question(policy, definition, arguments),
    );
    let _ = stderr.flush();
    drop(stderr);
    read_yes().await
}
