//! The terminal: the question, the answer, and text from the server made safe to print.

use std::io::{BufRead, Write};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use aac_tools::host::{Consent, ToolPolicy, must_escape};
use aac_tools::mcp::client::{AskUser, DeclinedUnshown, UserAnswer};
use serde_json::{Map, Value};

/// Server text on one line, with its control characters (line breaks and tabs included)
/// and the invisible ones escaped (`\n`, `\u{202e}`), so that a title, a reason or an
/// error message cannot start a line of its own, move the cursor, rewrite the question or
/// hide what it asks. Every text of the server that the host prints goes through it,
/// except the text result of a tool ([`clean_text`]) and JSON ([`json`]). The library's
/// escaping, so that the server's logs (`--verbose`) are escaped as this is.
pub(crate) fn clean(text: &str) -> String {
    aac_tools::host::escape_line(text)
}

/// The text result of a tool, which may hold several lines: [`clean`], but line breaks,
/// tabs and indentation are kept.
pub(crate) fn clean_text(text: &str) -> String {
    aac_tools::host::escape_text(text)
}

/// JSON, pretty, with every control and invisible character in its strings written as a
/// JSON escape (`\u202e`): the same JSON, safe to print. (serde_json escapes only the
/// C0 controls; outside strings its pretty output holds ASCII alone.)
pub(crate) fn json(value: &serde_json::Value) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut out = String::with_capacity(pretty.len());
    for c in pretty.chars() {
        if c != '\n' && must_escape(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The question for this call: the title and the values of the required arguments, e.g.
/// `Delete issue AAC-42? [y/N]`.
pub(crate) fn question(
    policy: &ToolPolicy,
    definition: &Value,
    arguments: &Map<String, Value>,
) -> String {
    let mut subject = clean(policy.title());
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
                subject.push_str(&clean(s));
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

/// What the server's own questions got during the call.
#[derive(Clone, Default)]
pub(crate) struct Answers {
    /// Questions shown.
    pub(crate) asked: Arc<AtomicUsize>,
    /// One was answered no.
    pub(crate) declined: Arc<AtomicBool>,
    /// One was dismissed (no terminal, or its end of input).
    pub(crate) dismissed: Arc<AtomicBool>,
}

impl Answers {
    /// How the server's question was refused, if one was: `answered no`, or `dismissed`.
    pub(crate) fn refused(&self) -> Option<&'static str> {
        if self.declined.load(Ordering::SeqCst) {
            Some("answered no")
        } else if self.dismissed.load(Ordering::SeqCst) {
            Some("dismissed")
        } else {
            None
        }
    }
}

/// One question on the terminal at a time: a server that asks two at once gets them shown
/// and answered in turn, each whole, so that the answer typed at one prompt is that
/// prompt's (two readers of `/dev/tty` at once would take each other's lines).
static TERMINAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The answer to a server's own confirmation: its question (made safe to print) and
/// `[y/N]` on the terminal. Never answered by `--yes`: the server asks because a person,
/// not a script or the model driving it, must say yes, and records that a person did.
/// Nor by stdin: asked and answered on the controlling terminal (`/dev/tty`), as `sudo`
/// and `ssh` ask for a password, so that `echo y | aac-host …` is no yes; without a
/// terminal there is nobody to ask, and the question is dismissed.
///
/// Only while the host's call is in flight (`calling`): a question the server sends at
/// any other time (while the tools are listed, or while the host asks its own question,
/// whose `y` would answer the server's) is dismissed without being shown, and so is one
/// whose turn at the terminal comes after the call ended. `answers` counts the questions
/// shown and notes a no or a dismissal.
pub(crate) fn server_question(yes: bool, calling: Arc<AtomicBool>, answers: Answers) -> AskUser {
    Arc::new(move |question: String| {
        let in_call = calling.load(Ordering::SeqCst);
        let (calling, answers) = (Arc::clone(&calling), answers.clone());
        Box::pin(async move {
            if !in_call {
                eprintln!(
                    "(the server asked a question outside the call this host made: \
                     dismissed, not shown)"
                );
                return UserAnswer::Cancel;
            }
            let shown = format!("the server asks: {} [y/N] ", clean(&question));
            let asked = Arc::clone(&answers.asked);
            let answer = tokio::task::spawn_blocking(move || {
                let _turn = TERMINAL.lock().unwrap_or_else(|e| e.into_inner());
                if !calling.load(Ordering::SeqCst) {
                    return UserAnswer::Cancel;
                }
                asked.fetch_add(1, Ordering::SeqCst);
                if yes {
                    eprintln!(
                        "(--yes answers this host's questions, not the server's: it asks a \
                         person)"
                    );
                }
                ask_terminal(&shown)
            })
            .await
            .unwrap_or(UserAnswer::Cancel);
            match answer {
                UserAnswer::Decline => answers.declined.store(true, Ordering::SeqCst),
                UserAnswer::Cancel => answers.dismissed.store(true, Ordering::SeqCst),
                UserAnswer::Accept => {}
            }
            answer
        })
    })
}

/// Told of a server's question the client declined without showing it (a form with
/// fields, a URL to open): during the call, recorded as a no, so that a server that runs
/// anyway is warned about, and a `user_declined` refusal is a decline.
pub(crate) fn declined_unshown(calling: Arc<AtomicBool>, answers: Answers) -> DeclinedUnshown {
    Arc::new(move || {
        if calling.load(Ordering::SeqCst) {
            eprintln!(
                "(the server asked a question this host cannot show (fields to fill in, or a \
                 link to open): declined)"
            );
            answers.declined.store(true, Ordering::SeqCst);
        } else {
            eprintln!(
                "(the server asked a question outside the call this host made: declined, not \
                 shown)"
            );
        }
    })
}

/// `question` on the controlling terminal, and its answer from there: yes only for `y`
/// or `yes`, any other line a no; no terminal (nobody to ask), or its end of input,
/// dismisses the question.
fn ask_terminal(question: &str) -> UserAnswer {
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let mut terminal = match terminal {
        Ok(terminal) => terminal,
        Err(err) => {
            eprintln!(
                "{question}\n(no terminal to ask a person on ({err}): the server's question \
                 is dismissed, as nobody could answer it; stdin never answers it)"
            );
            return UserAnswer::Cancel;
        }
    };
    if terminal.write_all(question.as_bytes()).is_err() || terminal.flush().is_err() {
        return UserAnswer::Cancel;
    }
    let mut line = String::new();
    if std::io::BufReader::new(&terminal)
        .read_line(&mut line)
        .is_err()
    {
        return UserAnswer::Cancel;
    }
    if line.is_empty() {
        let _ = terminal.write_all(b"\n");
        return UserAnswer::Cancel;
    }
    let answer = line.trim().to_ascii_lowercase();
    if answer == "y" || answer == "yes" {
        UserAnswer::Accept
    } else {
        UserAnswer::Decline
    }
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
    let shown = json(&Value::Object(arguments.clone())).replace('\n', "\n  ");
    let retry = if policy.safe_to_retry() {
        "retried if the connection fails"
    } else {
        "not retried if the connection fails"
    };
    let mut stderr = std::io::stderr().lock();
    let _ = write!(
        stderr,
        "`{}` ({}) {why}\n  arguments: {shown}\n  {retry}\n{} ",
        clean(policy.name()),
        clean(policy.title()),
        question(policy, definition, arguments),
    );
    let _ = stderr.flush();
    drop(stderr);
    read_yes().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clean_is_the_library_escaping() {
        assert_eq!(clean("a\nb\u{336}"), r"a\nb\u{336}");
        assert_eq!(clean_text("a\nb\u{200b}"), "a\nb\\u{200b}");
    }

    #[test]
    fn json_escapes_invisible_characters_and_stays_the_same_json() {
        let value = json!({
            "bidi": "a\u{202e}b\u{2067}c",
            "zero width": "\u{200b}\u{feff}",
            "controls": "\u{7f}\u{85}\n",
            "tag": "\u{e0041}",
            "separators": "\u{2028}\u{2029}",
            "plain": "é ✓"
        });
        let printed = json(&value);
        assert!(printed.contains(r"a\u202eb\u2067c"), "{printed}");
        assert!(printed.contains(r"\udb40\udc41"), "{printed}");
        assert!(
            !printed.chars().any(|c| c != '\n' && must_escape(c)),
            "{printed}"
        );
        assert!(printed.contains("é ✓"));
        let back: serde_json::Value = serde_json::from_str(&printed).unwrap();
        assert_eq!(back, value);
    }
}
