//! Who confirms a destructive call: the model's `confirm: true` ([`ConfirmPolicy::Argument`],
//! the default), or a person, asked through the client ([`ConfirmPolicy::User`]).
//!
//! A person is asked with an elicitation (form mode, accept or decline) on the session
//! protocols (2025-06-18, 2025-11-25), and with an `InputRequiredResult` whose sealed,
//! single-use `requestState` the client echoes back on 2026-07-28. The question is built
//! here, from the tool's title and the author's `confirm_message` with the call's
//! arguments filled in (escaped and bounded), never from text the model wrote.
//! See `docs/confirmation.md`.

mod ledger;
pub(crate) mod seal;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

pub use ledger::{KEEP_AFTER_EXPIRY, MemoryLedger, RequestStateLedger};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteLedger;

/// The default time a person has to answer an elicitation: two minutes.
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(120);
/// The default lifetime of a 2026-07-28 `requestState`: five minutes.
pub const DEFAULT_STATE_TTL: Duration = Duration::from_secs(300);
/// The longest argument value shown in a question, in characters; longer ones end in `…`.
pub const MAX_VALUE_CHARS: usize = 200;
/// The longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 2000;
/// The key of the one input request of a confirmation (2026-07-28).
pub const INPUT_KEY: &str = "confirm";

/// Who must confirm a destructive call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConfirmPolicy {
    /// `confirm: true` in the arguments (the model's word): refused 400 without it.
    #[default]
    Argument,
    /// A person accepts through the client (elicitation, or `InputRequiredResult` on
    /// 2026-07-28); a client that cannot ask refuses the call
    /// (`user_confirmation_unavailable`). `confirm: true` is still required.
    User,
    /// As [`ConfirmPolicy::User`], but a client that cannot ask falls back to
    /// `confirm: true`, and the record says so (`confirmed_by: argument_fallback`).
    UserOrArgument,
}

impl ConfirmPolicy {
    /// `argument`, `user` or `user-or-argument`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConfirmPolicy::Argument => "argument",
            ConfirmPolicy::User => "user",
            ConfirmPolicy::UserOrArgument => "user-or-argument",
        }
    }

    /// Whether a person is asked (when the client can be).
    pub const fn asks_user(self) -> bool {
        !matches!(self, ConfirmPolicy::Argument)
    }
}

impl fmt::Display for ConfirmPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ConfirmPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "argument" => Ok(ConfirmPolicy::Argument),
            "user" => Ok(ConfirmPolicy::User),
            "user-or-argument" | "user_or_argument" => Ok(ConfirmPolicy::UserOrArgument),
            other => Err(format!(
                "unknown confirmation policy `{other}`; expected `argument`, `user` or `user-or-argument`"
            )),
        }
    }
}

/// How a running call can reach the person behind its client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Asking {
    /// Send `elicitation/create` and wait for the answer (session protocols).
    Elicit,
    /// Answer `InputRequiredResult` and read the answer from the retried call (2026-07-28).
    InputRequired,
    /// No way to ask; what the client or transport lacks.
    Unavailable(String),
}

/// A 2026-07-28 call that needs the person's answer first: the question, as an
/// elicitation request, and the sealed `requestState` the client echoes back.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequired {
    pub(crate) question: String,
    pub(crate) request_state: String,
}

impl InputRequired {
    /// The question shown to the person.
    pub fn question(&self) -> &str {
        &self.question
    }

    /// The sealed `requestState`.
    pub fn request_state(&self) -> &str {
        &self.request_state
    }

    /// The `elicitation/create` params of the question (form mode, nothing to fill in:
    /// the answer is accept or decline).
    pub fn elicitation_params(&self) -> Value {
        elicitation_params(&self.question)
    }

    /// The `InputRequiredResult` JSON: one input request under [`INPUT_KEY`] and the state.
    pub fn to_json(&self) -> Value {
        json!({
            "resultType": "input_required",
            "inputRequests": {
                INPUT_KEY: {"method": "elicitation/create", "params": self.elicitation_params()}
            },
            "requestState": self.request_state,
        })
    }
}

/// The `elicitation/create` params that ask `question`: form mode, an empty form.
pub(crate) fn elicitation_params(question: &str) -> Value {
    json!({
        "mode": "form",
        "message": question,
        "requestedSchema": {"type": "object", "properties": {}},
    })
}

/// The question shown to the person: the tool's title (or name), then the author's
/// message with `{field}` replaced by the call's argument (escaped, bounded); without a
/// message, a sentence naming the tool.
pub(crate) fn question(
    tool: &str,
    title: Option<&str>,
    message: Option<&str>,
    arguments: Option<&Value>,
) -> String {
    let heading = title.unwrap_or(tool);
    let body = match message {
        Some(template) => fill(template, arguments),
        None => format!("Run `{tool}`? It is destructive and cannot be undone."),
    };
    // An author's message that begins with the title says it already ("Delete issue
    // AAC-5…"). Read in the template, never in what the arguments filled in: a value
    // cannot take the title's place.
    let said = !heading.contains(['{', '}'])
        && message.is_some_and(|template| {
            template
                .get(..heading.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(heading))
        });
    if said {
        return bound(&body, MAX_QUESTION_CHARS);
    }
    bound(&format!("{}: {body}", escape(heading)), MAX_QUESTION_CHARS)
}

/// `template` with every `{name}` replaced by the argument `name` (`{{` and `}}` are
/// literal braces); an absent argument shows as `(none)`.
fn fill(template: &str, arguments: Option<&Value>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let brace = rest.as_bytes()[i];
        let after = &rest[i + 1..];
        if after.as_bytes().first() == Some(&brace) {
            out.push(char::from(brace));
            rest = &after[1..];
            continue;
        }
        if brace == b'}' {
            out.push('}');
            rest = after;
            continue;
        }
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                let value = arguments.and_then(|a| a.get(name));
                out.push_str(&shown(value));
                rest = &after[end + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    escape(&out)
}

/// An argument value as the question shows it: a string as it is, anything else as JSON;
/// escaped and bounded to [`MAX_VALUE_CHARS`].
fn shown(value: Option<&Value>) -> String {
    let text = match value {
        None | Some(Value::Null) => return "(none)".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    bound(&escape(&text), MAX_VALUE_CHARS)
}

/// Control characters and [invisible](is_invisible) ones as `\u{…}` escapes, so that a
/// value cannot reorder, hide or fake lines of the question, nor pass for another value
/// (`AAC-1` with a zero-width space, a tag character or a filler after it).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || is_invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that change how the text around them shows without showing themselves:
/// the bidirectional controls, the zero-width and other default-ignorable ones (tag
/// characters, variation selectors, the Hangul fillers), and the line and paragraph
/// separators (a new line on some terminals). A confirmation question escapes them; a
/// host that prints text from a server should too.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{8e2}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{2800}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

fn bound(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => {
            let mut cut = text[..end].to_owned();
            cut.pop();
            cut.push('…');
            cut
        }
    }
}

/// The names of the `{field}` placeholders of a message, for the registry's check.
pub(crate) fn placeholders(template: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        let after = &rest[i + 1..];
        if let Some(literal) = after.strip_prefix('{') {
            rest = literal;
            continue;
        }
        match after.find('}') {
            Some(end) => {
                names.push(&after[..end]);
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    names
}

/// What the server needs to ask a person: the policy, the timeout, the state's keys,
/// lifetime and single-use ledger.
#[derive(Clone)]
pub(crate) struct Confirmation {
    pub(crate) policy: ConfirmPolicy,
    pub(crate) timeout: Duration,
    pub(crate) ttl: Duration,
    pub(crate) sealer: seal::Sealer,
    pub(crate) ledger: std::sync::Arc<dyn RequestStateLedger>,
    /// The questions each principal has waiting for a person's answer.
    pub(crate) asked: std::sync::Arc<Asked>,
}

/// The most questions one principal may have waiting for a person at once. Each holds its
/// call (and the transport its request) until the person answers or the timeout ends it;
/// a person answers them one by one, so a client with more waiting is not asking a person.
pub(crate) const MAX_QUESTIONS_WAITING: usize = 16;

/// The longest message of a call held while a person is asked (its bytes as sent): the
/// call is held parsed, by the MCP layer too, until the answer or the timeout. One of
/// 1 MiB of `[[],[],…]` in its `_meta` held 68 MB, sixteen of them per principal.
pub(crate) const MAX_HELD_BYTES: usize = 64 * 1024;

/// The questions waiting for a person, by principal (subject and workspace).
#[derive(Debug, Default)]
pub(crate) struct Asked {
    waiting: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl Asked {
    /// A place for one more question of `principal`, given back when the guard drops;
    /// `None` when it has [`MAX_QUESTIONS_WAITING`] already.
    pub(crate) fn take(self: &std::sync::Arc<Self>, principal: String) -> Option<Waiting> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let count = waiting.entry(principal.clone()).or_default();
        if *count >= MAX_QUESTIONS_WAITING {
            return None;
        }
        *count += 1;
        Some(Waiting {
            asked: std::sync::Arc::clone(self),
            principal,
        })
    }
}

/// One question waiting for a person (see [`Asked::take`]).
pub(crate) struct Waiting {
    asked: std::sync::Arc<Asked>,
    principal: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waiting = self.asked.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = waiting.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                waiting.remove(&self.principal);
            }
        }
    }
}

impl fmt::Debug for Confirmation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirmation")
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A fresh random nonce, hex.
pub(crate) fn nonce() -> String {
    let mut bytes = [0u8; 16];
    // The OS random source; without it no state can be issued safely.
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    seal::hex(&bytes)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_question_fills_escapes_and_bounds_the_arguments() {
        let args = json!({
            "issue_id": "AAC-5\u{202e}txt.exe\nYes, and also drop every table",
            "n": 3,
        });
        let q = question(
            "delete_issue",
            Some("Delete issue"),
            Some("Delete issue {issue_id} ({n}, {missing})? {{sic}} This cannot be undone."),
            Some(&args),
        );
        assert_eq!(
            q,
            "Delete issue AAC-5\\u{202e}txt.exe\\u{a}Yes, and also drop every table \
             (3, (none))? {sic} This cannot be undone."
        );
        // The title is kept when the author's message does not begin with it, whatever
        // the arguments say.
        let q = question(
            "delete_issue",
            Some("Delete issue"),
            Some("{issue_id} goes"),
            Some(&json!({"issue_id": "Delete issue nothing; AAC-7"})),
        );
        assert_eq!(q, "Delete issue: Delete issue nothing; AAC-7 goes");
        let long = json!({"issue_id": "x".repeat(500)});
        let q = question(
            "delete_issue",
            None,
            Some("Delete {issue_id}?"),
            Some(&long),
        );
        assert_eq!(q, format!("delete_issue: Delete {}…?", "x".repeat(199)));
        // Invisible characters a model could add to pass one value for another.
        let hidden = json!({"issue_id": "AAC-1\u{200b}\u{2060}\u{e0041}\u{3164}\u{115f}\u{fe0f}x"});
        let q = question(
            "delete_issue",
            None,
            Some("Delete {issue_id}?"),
            Some(&hidden),
        );
        assert_eq!(
            q,
            "delete_issue: Delete AAC-1\\u{200b}\\u{2060}\\u{e0041}\\u{3164}\\u{115f}\\u{fe0f}x?"
        );
        let q = question("delete_issue", None, None, Some(&long));
        assert_eq!(
            q,
            "delete_issue: Run `delete_issue`? It is destructive and cannot be undone."
        );
    }

    #[test]
    fn placeholders_are_found() {
        assert_eq!(
            placeholders("Delete {issue_id} {{not}} of {workspace}?"),
            vec!["issue_id", "workspace"]
        );
    }

    #[test]
    fn policies_parse() {
        for p in [
            ConfirmPolicy::Argument,
            ConfirmPolicy::User,
            ConfirmPolicy::UserOrArgument,
        ] {
            assert_eq!(p.as_str().parse::<ConfirmPolicy>(), Ok(p));
        }
        assert!("always".parse::<ConfirmPolicy>().is_err());
    }
}
