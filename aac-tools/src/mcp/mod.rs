//! MCP itself, from `rmcp`, the official Rust SDK. Every rmcp type of this crate stays
//! inside this module, so that an rmcp upgrade touches one place.
//!
//! The server side is an rmcp `ServerHandler` (written by hand, without rmcp's macros)
//! over [`Server`](crate::Server): `tools/list` from the registry's tool objects, converted once;
//! `tools/call` through [`Server::call`](crate::Server::call), so that every check and the audit record
//! happen exactly as on every other transport; `logging/setLevel`; `ping`; and a
//! [`ClientPeer`](crate::ClientPeer) over rmcp's peer for progress, log messages,
//! sampling, elicitation and cancellation. Every protocol version rmcp supports is
//! accepted.
//!
//! Two transports use it: [`serve_stdio`] here (and [`serve_io`], the same over any
//! byte streams), whose line framing is ours so that a repeated `tools/list` is answered
//! with the bytes of the first answer; and Streamable HTTP at `/mcp` in [`crate::http`].

#[cfg(feature = "mcp")]
mod handler;
#[cfg(feature = "mcp")]
mod level;
#[cfg(feature = "mcp")]
mod peer;
#[cfg(feature = "mcp")]
mod stdio;
#[cfg(feature = "http")]
pub(crate) mod streamable;

#[cfg(feature = "host")]
pub mod client;

#[cfg(feature = "mcp")]
pub use self::stdio::{serve_io, serve_stdio, serve_stdio_until};

/// The longest `initialize` message taken, over stdio and HTTP. What it says of the
/// client is kept, parsed, for as long as the session lasts (one of 1 MiB of `[[],[],…]`
/// took 23 MB, times the sessions a principal may hold); a client's own says a few
/// hundred bytes.
#[cfg(feature = "mcp")]
pub(crate) const MAX_INITIALIZE_BYTES: usize = 64 * 1024;

/// The most JSON values (keys included) an `initialize` message may hold, whatever its
/// length: what it says of the client is kept parsed, at about 200 bytes a value when
/// they are small (64 KiB of `{"":0},…` took 6 MB a session, times the 128 sessions a
/// principal may hold); a client's own holds a few dozen.
#[cfg(feature = "mcp")]
pub(crate) const MAX_INITIALIZE_VALUES: usize = 1024;

/// The error message of an `initialize` over [`MAX_INITIALIZE_BYTES`] or
/// [`MAX_INITIALIZE_VALUES`].
#[cfg(feature = "mcp")]
pub(crate) fn initialize_too_large() -> String {
    format!(
        "Invalid request: an initialize message is limited to {MAX_INITIALIZE_BYTES} bytes \
         and {MAX_INITIALIZE_VALUES} JSON values (what it says of the client is kept for the \
         whole session)"
    )
}

/// Whether `bytes` hold more than `max` JSON values, counted in one pass: each `{` and
/// `[`, each string, and each run of other bytes outside strings that starts after a
/// delimiter or a space, any a lenient reader skips ([`probe::in_sequence`](crate::pipeline::probe))
/// included (a number, a literal, or bytes no reader takes, which count all the same).
#[cfg(feature = "mcp")]
pub(crate) fn more_values_than(line: &[u8], max: usize) -> bool {
    let mut count = 0usize;
    let mut in_string = false;
    // Whether the last byte outside strings ended a token (a delimiter or a space).
    let mut after_delimiter = true;
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        i += 1;
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        let starts = match b {
            b'"' => {
                in_string = true;
                after_delimiter = false;
                true
            }
            b'{' | b'[' => {
                after_delimiter = true;
                true
            }
            // JSON's white space, and what a lenient reader also takes for it between
            // values (vertical tab, form feed, and the bytes of U+2028, a no-break
            // space…: every byte of a character beyond ASCII, outside strings).
            b',' | b':' | b']' | b'}' | b' ' | b'\t' | b'\r' | b'\n' | 0x0B | 0x0C | 0x80.. => {
                after_delimiter = true;
                false
            }
            _ => std::mem::replace(&mut after_delimiter, false),
        };
        if starts {
            count += 1;
            if count > max {
                return true;
            }
        }
    }
    false
}

/// A principal the HTTP layer verified for this request, carried to the MCP handler in
/// the request's extensions, with the credentials it was verified from (a subscription
/// checks them again before each update it is sent).
#[cfg(feature = "http")]
#[derive(Clone, Debug)]
pub(crate) struct VerifiedPrincipal(
    pub(crate) std::sync::Arc<crate::Principal>,
    pub(crate) crate::server::Credentials,
);

/// The attempt of a `resources/read`, `prompts/get` or `completion/complete` the `/mcp`
/// gate let through (or the stdio framing read): recorded as `not_dispatched` if the MCP
/// layer refuses the request before the handler begins its own attempt.
#[cfg(feature = "mcp")]
#[derive(Clone)]
pub(crate) struct PendingItem(pub(crate) PendingAttempt);

/// The verdict of the rate on a request the stdio framing records itself as refused (one
/// rmcp hands the handler as a method it does not know): set once its record is written,
/// to the rate's error when the request was past its caller's rate, in which case the
/// handler answers with it, as the record says.
#[derive(Clone)]
pub(crate) struct LineRate(
    pub(crate) std::sync::Arc<tokio::sync::SetOnce<Option<crate::ToolError>>>,
);

/// An attempt the `/mcp` gate (or the stdio framing) began, carried to the MCP handler in
/// the request's extensions, which takes it up ([`Attempt::dispatch`](crate::Attempt)). If
/// the MCP layer answers without dispatching the call, the transport records it
/// ([`PendingAttempt::abandoned`], [`PendingAttempt::refused`]); if the request is dropped
/// later still untaken, the attempt records itself as not dispatched, with the arguments
/// read back from the body.
#[cfg(feature = "mcp")]
#[derive(Clone)]
pub(crate) struct PendingAttempt(std::sync::Arc<std::sync::Mutex<Pending>>);

#[cfg(feature = "mcp")]
struct Pending {
    attempt: Option<crate::Attempt>,
    body: tokio_util::bytes::Bytes,
    arguments: fn(&[u8]) -> Option<serde_json::Value>,
}

#[cfg(feature = "mcp")]
impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut attempt) = self.attempt.take() {
            attempt.set_arguments((self.arguments)(&self.body));
        }
    }
}

#[cfg(feature = "mcp")]
impl PendingAttempt {
    /// Carry `attempt`; `arguments` reads the call's arguments from `body` for the record
    /// of an attempt nobody took up.
    pub(crate) fn new(
        attempt: crate::Attempt,
        body: tokio_util::bytes::Bytes,
        arguments: fn(&[u8]) -> Option<serde_json::Value>,
    ) -> PendingAttempt {
        let mut attempt = attempt.undispatched();
        attempt.message_bytes(body.len());
        PendingAttempt(std::sync::Arc::new(std::sync::Mutex::new(Pending {
            attempt: Some(attempt),
            body,
            arguments,
        })))
    }

    /// Take the attempt up (once).
    pub(crate) fn take(&self) -> Option<crate::Attempt> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .attempt
            .take()
    }

    /// Take a call's attempt up (once), and let go of the request as sent, which only an
    /// attempt nobody took up needs (a call waiting for a person held a copy of its whole
    /// line, up to 16 MiB over stdio, besides rmcp's reading of it).
    pub(crate) fn take_call(&self) -> Option<crate::Attempt> {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let attempt = pending.attempt.take();
        if attempt.is_some() {
            pending.body = tokio_util::bytes::Bytes::new();
        }
        attempt
    }

    /// The MCP handler began its own attempt for this request (a resource read, prompt or
    /// completion): the gate's is not needed and leaves no record.
    pub(crate) fn taken_up(&self) {
        if let Some(attempt) = self.take() {
            attempt.forget();
        }
    }

    /// The pointer to a key the request's `arguments` repeat, as sent (rmcp kept the last
    /// of them, so the parsed request cannot tell).
    pub(crate) fn repeated_argument_key(&self) -> Option<String> {
        let pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        crate::pipeline::probe::repeated_argument_key(&pending.body)
    }

    /// The attempt, with its arguments read back from the body, if nobody took it up:
    /// the MCP layer answered the request with an error of its own, so nobody will.
    pub(crate) fn refused(&self) -> Option<crate::Attempt> {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut attempt = pending.attempt.take()?;
        attempt.set_arguments((pending.arguments)(&pending.body));
        Some(attempt)
    }

    /// Whether the request is gone (nobody else holds it).
    pub(crate) fn is_dropped(&self) -> bool {
        std::sync::Arc::strong_count(&self.0) == 1
    }

    /// The attempt, if nobody else holds the request any more and nobody took it up: the
    /// MCP layer answered without dispatching the call.
    #[cfg(feature = "http")]
    pub(crate) fn abandoned(&self) -> Option<crate::Attempt> {
        if std::sync::Arc::strong_count(&self.0) == 1 {
            self.take()
        } else {
            None
        }
    }
}
