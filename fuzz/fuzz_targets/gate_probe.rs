//! The `/mcp` gate's reading of a POST body (`aac_tools::http::__fuzz_probe`).
//!
//! Input: one byte of flags, then (if flagged) an `Mcp-Name` header up to the first NUL,
//! then the body. Besides "never panics", the oracle is the rule: a body that a
//! lenient JSON reader (the last of repeated keys wins) takes as a `tools/call`, or that
//! comes with `Mcp-Method: tools/call`, is seen as a call, so that its refusal is
//! recorded (a body without any method that the `Mcp-Method` header calls a `tools/call`
//! too, unless it is a JSON-RPC response); and a call is recorded under the tool its body
//! names, the one that runs, whatever an `Mcp-Name` header says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (name, body) = if flags & 1 == 1 {
        match rest.iter().position(|&b| b == 0) {
            Some(nul) => (std::str::from_utf8(&rest[..nul]).ok(), &rest[nul + 1..]),
            None => (None, rest),
        }
    } else {
        (None, rest)
    };
    let method = match flags >> 1 & 3 {
        1 => Some("tools/call"),
        2 => Some("tools/list"),
        _ => None,
    };
    let seen = aac_tools::http::__fuzz_probe(name, method, body);

    let lenient = serde_json::from_slice::<Value>(body).ok();
    let is_call = |m: &Value| m.get("method").and_then(Value::as_str) == Some("tools/call");
    let lenient_call = match &lenient {
        Some(Value::Array(batch)) => batch.iter().any(is_call),
        Some(message) => is_call(message),
        None => false,
    };
    // A request of another method is not a call, whatever its headers say; a body with
    // no method at all that the header calls a `tools/call` is one, unless it is a
    // JSON-RPC response (an answer to the server, which rmcp never dispatches).
    let names_a_method = body.windows(8).any(|w| w == b"\"method\"");
    let is_response = |m: &Value| {
        m.get("method").is_none() && (m.get("result").is_some() || m.get("error").is_some())
    };
    let only_responses = match &lenient {
        Some(Value::Array(batch)) => !batch.is_empty() && batch.iter().all(is_response),
        Some(message) => is_response(message),
        None => false,
    };
    if lenient_call || (method == Some("tools/call") && !names_a_method && !only_responses) {
        assert!(
            seen.is_some(),
            "a tools/call the gate does not see: {:?}",
            String::from_utf8_lossy(body)
        );
    }
    // A single call whose body names its tool is recorded under that name.
    if let (Some((tool, _)), Some(message)) = (&seen, &lenient)
        && is_call(message)
        && let Some(named) = message
            .get("params")
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
        && named != "(unknown)"
    {
        assert_eq!(tool, named, "the body names the tool");
    }
});
