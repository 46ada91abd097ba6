//! What a request that could not be dispatched says it asked for, read leniently, so that
//! its refusal is recorded as what it was: the `/mcp` gate and the stdio framing read
//! bodies and lines with these before (or instead of) the MCP layer.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

pub(crate) use super::limits::Counts;
use crate::audit::CallKind;
use crate::server::CallRequest;

use super::repeated::keys_all_differ;
pub(crate) use super::repeated::{may_repeat_a_key, repeated_key};

/// The tool of a record when the request did not say which (a malformed `tools/call`).
pub(crate) const UNKNOWN_TOOL: &str = "(unknown)";

/// The `tools/call` in `body`, if any: the first of a batch, a call with malformed
/// parameters, one without an id, or a body that is not JSON but names the method (a
/// lenient reader could take it for a call). What it does not say is recorded as
/// unknown.
pub(crate) fn tool_call_request(body: &[u8]) -> Option<CallRequest> {
    let body = without_bom(body);
    let Some(value) = serde_json::from_slice::<Value>(body)
        .ok()
        .or_else(|| concatenated(body))
    else {
        // Not JSON serde_json reads (a number out of range, nested too deep, cut short):
        // its top level may still say which call it is, and under which id it is
        // answered.
        let top = top_level(body);
        if top.method.as_deref() == Some("tools/call") {
            let request = CallRequest::new(top.name.as_deref().unwrap_or(UNKNOWN_TOOL), None);
            return Some(match top_id_text(&top) {
                Some(id) => request.request_id(id),
                None => request,
            });
        }
        return says_tools_call(body).then(|| CallRequest::new(UNKNOWN_TOOL, None));
    };
    let mut request = tool_call_in(&value).or_else(|| tool_call_in(&first_key_reading(body)?))?;
    if let Some(pointer) = repeated_params_key(body) {
        request.repeated_key = Some(pointer);
    }
    Some(request)
}

/// Whether the call `body` is repeats a key of its own (`params`, `method`, `id`) or of
/// its `params` (`name`, `arguments`), as the pointer of the repeat in the message: a
/// reading keeping the last (serde_json's) took another tool, other arguments (a
/// `confirm: false` first) or another request than one keeping the first, so the record
/// names the repeat. A scan first: most bodies repeat no key.
pub(crate) fn repeated_params_key(body: &[u8]) -> Option<String> {
    if keys_all_differ(body) {
        return None;
    }
    repeated_key(body).filter(|pointer| {
        matches!(
            pointer.as_str(),
            "/params" | "/method" | "/id" | "/params/arguments" | "/params/name"
        )
    })
}

/// Whether `bytes` (JSON or not) hold the string `tools/call`, as it is or in a string
/// written as a lenient reader would read it: JSON escapes (`"tools\/call"`,
/// `"\u0074ools/call"`), JSON5's (single quotes, `\x74`, `\o` for `o`, `\` before a line
/// end), or the text in UTF-16 or UTF-32 (which some readers detect): text a lenient
/// reader may take for a call. Linear in the length.
pub(crate) fn says_tools_call(bytes: &[u8]) -> bool {
    says(bytes, CALL)
}

/// Whether `bytes` say `word` as [`says_tools_call`] says `tools/call`.
fn says(bytes: &[u8], word: &[u8]) -> bool {
    says_in_ascii(bytes, word)
        // UTF-16 or UTF-32: the ASCII of it is its bytes without the zeros.
        || (bytes.contains(&0) && says_in_ascii(&bytes.iter().copied().filter(|&b| b != 0).collect::<Vec<u8>>(), word))
}

const CALL: &[u8] = b"tools/call";

/// [`says`] of text read as ASCII.
fn says_in_ascii(bytes: &[u8], word: &[u8]) -> bool {
    if bytes.windows(word.len()).any(|w| w == word) {
        return true;
    }
    if !bytes.contains(&b'\\') {
        return false;
    }
    let bytes = without_line_continuations(bytes);
    (0..bytes.len()).any(|at| matches!(bytes[at], b'"' | b'\'') && quoted_word_at(&bytes, at, word))
}

/// `bytes` without the line continuations of JSON5 (a `\` before a line end: LF, CR, CRLF,
/// U+2028, U+2029), which a string reads as nothing.
fn without_line_continuations(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            let rest = &bytes[i + 1..];
            let end = if rest.starts_with(b"\r\n") {
                3
            } else if rest.starts_with(b"\n") || rest.starts_with(b"\r") {
                2
            } else if rest.starts_with("\u{2028}".as_bytes())
                || rest.starts_with("\u{2029}".as_bytes())
            {
                4
            } else {
                // An escape: kept whole (`\\` is not a continuation).
                out.extend_from_slice(&bytes[i..(i + 2).min(bytes.len())]);
                i += 2;
                continue;
            };
            i += end;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Whether the string that opens with the quote at `at` reads `word` and closes there.
/// Stops at the first character that differs (never past the next quote), so that trying
/// every quote of a text stays linear.
fn quoted_word_at(bytes: &[u8], at: usize, word: &[u8]) -> bool {
    let quote = bytes[at];
    let mut i = at + 1;
    for &want in word {
        let Some(&b) = bytes.get(i) else {
            return false;
        };
        let (got, next) = if b == b'\\' {
            match lenient_escape(bytes, i) {
                Some(decoded) => decoded,
                None => return false,
            }
        } else {
            (u32::from(b), i + 1)
        };
        if got != u32::from(want) {
            return false;
        }
        i = next;
    }
    bytes.get(i) == Some(&quote)
}

/// The character of the escape at `at` (a `\`) and where it ends, as JSON and JSON5 read
/// it: `\uXXXX`, `\u{X…}`, `\xXX`, the letters of control characters, else the character
/// itself (`\/`, `\o`).
fn lenient_escape(bytes: &[u8], at: usize) -> Option<(u32, usize)> {
    let hex = |digits: &[u8]| {
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| u32::from_str_radix(d, 16).ok())
    };
    let next = *bytes.get(at + 1)?;
    Some(match next {
        b'u' if bytes.get(at + 2) == Some(&b'{') => {
            let close = bytes[at + 3..].iter().take(9).position(|&b| b == b'}')?;
            (hex(&bytes[at + 3..at + 3 + close])?, at + 4 + close)
        }
        b'u' => (hex(bytes.get(at + 2..at + 6)?)?, at + 6),
        b'x' => (hex(bytes.get(at + 2..at + 4)?)?, at + 4),
        b'b' => (0x08, at + 2),
        b'f' => (0x0c, at + 2),
        b'n' => (u32::from(b'\n'), at + 2),
        b'r' => (u32::from(b'\r'), at + 2),
        b't' => (u32::from(b'\t'), at + 2),
        b'v' => (0x0b, at + 2),
        b'0' => (0, at + 2),
        other => (u32::from(other), at + 2),
    })
}

/// Whether `body` goes on, after the JSON values that can be read from its start, with
/// bytes that cannot be read and that [say](says_tools_call) `tools/call`: a call that a
/// reader skipping what it cannot read (`{…} x {…}`, `{…},{…}`) would find, and that no
/// reading of the values has.
fn unread_tail_says_call(body: &[u8]) -> bool {
    let (read, end) = in_sequence::<serde::de::IgnoredAny>(body);
    // Nothing read: the body's first call is what the other readings find.
    !read.is_empty() && says_tools_call(&body[end..])
}

/// The JSON values of `body` one after the other, as a lenient reader takes them, and the
/// offset of the first byte none of them holds (the body's length when all of it was
/// read): values separated by JSON's whitespace, or by the other whitespace such a reader
/// skips between values (JSON5's: U+2028, U+2029, U+00A0, a byte-order mark, any Unicode
/// space), up to the first bytes that do not parse. Linear in the body: each separator is
/// read once.
pub(crate) fn in_sequence<T: serde::de::DeserializeOwned>(body: &[u8]) -> (Vec<T>, usize) {
    let mut values = Vec::new();
    let mut at = 0;
    loop {
        let mut stream = serde_json::Deserializer::from_slice(&body[at..]).into_iter::<T>();
        let mut read_to = 0;
        let ended = loop {
            match stream.next() {
                Some(Ok(value)) => {
                    values.push(value);
                    read_to = stream.byte_offset();
                }
                Some(Err(_)) => break false,
                None => break true,
            }
        };
        if ended {
            return (values, body.len());
        }
        // A number or a literal followed by no delimiter JSON knows (`1\u{2028}`) is an
        // error to the stream, which counts it as read all the same: read alone, it is
        // the value it is.
        let failed_at = stream.byte_offset();
        if failed_at > read_to
            && let Ok(value) = serde_json::from_slice::<T>(&body[at + read_to..at + failed_at])
        {
            values.push(value);
        }
        at += failed_at;
        let skipped = lenient_space(&body[at..]);
        if skipped == 0 {
            return (values, at);
        }
        at += skipped;
    }
}

/// How many bytes at the start of `bytes` are whitespace to a lenient reader: any Unicode
/// white space (JSON's four, U+0085, U+00A0, U+2028, U+2029, the spaces of category Zs…)
/// and the byte-order mark U+FEFF, which JSON5 counts as white space.
fn lenient_space(bytes: &[u8]) -> usize {
    let mut at = 0;
    while let Some(&first) = bytes.get(at) {
        let len = match first {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return at,
        };
        let c = bytes
            .get(at..at + len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.chars().next());
        match c {
            Some(c) if c.is_whitespace() || c == '\u{FEFF}' => at += len,
            _ => return at,
        }
    }
    at
}

/// `body` without a UTF-8 byte-order mark in front: rmcp refuses a body that begins with
/// one, but a lenient reader (and the stdio framing) reads past it, so its call is
/// recorded as the call it is.
fn without_bom(body: &[u8]) -> &[u8] {
    body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body)
}

/// Several JSON values one after the other (`{…}{…}`, or with spaces between, U+2028
/// among them: [`in_sequence`]), which JSON-RPC does not allow and rmcp refuses whole,
/// read as the batch a lenient reader would take them for (each one's calls are
/// recorded, not only the first's): the values read before anything that does not parse.
/// One value that only such white space around it kept serde_json from reading is that
/// value; `None` for none, or one followed by what does not parse.
fn concatenated(body: &[u8]) -> Option<Value> {
    let (mut values, end) = in_sequence::<Value>(body);
    match values.len() {
        // One message in white space JSON does not have (U+2028 before it, a second
        // byte-order mark), which serde_json did not read: the message it is.
        1 if end == body.len() => values.pop(),
        0 | 1 => None,
        _ => Some(Value::Array(values)),
    }
}

/// The `tools/call` among the messages of `value`.
fn tool_call_in(value: &Value) -> Option<CallRequest> {
    let call = messages(value).into_iter().find(|m| is_call(m))?;
    let params = call.get("params");
    let tool = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or(UNKNOWN_TOOL);
    let request = CallRequest::new(tool, params.and_then(|p| p.get("arguments")).cloned());
    Some(match call.get("id") {
        Some(id) => request.request_id(id_text(id)),
        None => request,
    })
}

fn is_call(message: &Value) -> bool {
    message.get("method").and_then(Value::as_str) == Some("tools/call")
}

/// Whether `message` is a read, a prompt or a completion.
fn is_item(message: &Value) -> bool {
    message
        .get("method")
        .and_then(Value::as_str)
        .is_some_and(|method| ITEM_METHODS.contains(&method))
}

/// `body` read as a reader that keeps the *first* of repeated keys would (serde_json keeps
/// the last), when it repeats one; `None` otherwise. A message that says
/// `"method":"tools/call","method":"ping"` is a call to such a reader: its refusal is
/// recorded as one, whichever reading rmcp took.
fn first_key_reading(body: &[u8]) -> Option<Value> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

    struct FirstWins;

    impl<'de> DeserializeSeed<'de> for FirstWins {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for FirstWins {
        type Value = Value;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element_seed(FirstWins)? {
                items.push(item);
            }
            Ok(Value::Array(items))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut object = serde_json::Map::new();
            while let Some(key) = map.next_key::<String>()? {
                let value = map.next_value_seed(FirstWins)?;
                object.entry(key).or_insert(value);
            }
            Ok(Value::Object(object))
        }
    }

    /// One value read so.
    struct FirstWinsValue(Value);

    impl<'de> serde::Deserialize<'de> for FirstWinsValue {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            FirstWins.deserialize(deserializer).map(FirstWinsValue)
        }
    }

    // (Of messages one after the other, any may repeat a key, which no reading of the
    // body as one value finds: the byte scan tells when none can.)
    if !may_repeat_a_key(body) {
        return None;
    }
    // Messages one after the other are read as [`concatenated`] reads them: a batch of
    // them (each message of such a body that repeats a key is the call it may be).
    let (values, _) = in_sequence::<FirstWinsValue>(body);
    let mut values: Vec<Value> = values.into_iter().map(|v| v.0).collect();
    match values.len() {
        0 | 1 => values.pop(),
        _ => Some(Value::Array(values)),
    }
}

/// What the top level of a JSON object says, read without parsing the rest: the raw JSON
/// of its `id` (a string or a scalar), its `method`, its `params.name` and `params.uri`, when written
/// without escapes in the key (the first of a repeated one). For a line that does not parse (nested too deep, a number out of range, cut
/// short): a request among it still deserves an answer under its id.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TopLevel<'a> {
    pub(crate) id: Option<&'a [u8]>,
    pub(crate) method: Option<String>,
    /// `params.name`, when `params` is an object (a `tools/call`'s tool, a prompt's name).
    pub(crate) name: Option<String>,
    /// `params.uri`, when `params` is an object (the resource a read names).
    pub(crate) uri: Option<String>,
}

/// `id` if it is one JSON-RPC allows (a string or an integer), else `null`.
pub(crate) fn json_rpc_id(id: Option<Value>) -> Value {
    id.filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .unwrap_or(Value::Null)
}

/// The `id` of [`top_level`], read without parsing the rest of the message.
pub(crate) fn top_level_id(top: &TopLevel<'_>) -> Value {
    json_rpc_id(top.id.and_then(|raw| serde_json::from_slice(raw).ok()))
}

/// What a message refused unread says ([`top_level`] of its start: of a line over stdio's
/// limit, read before it was dropped, of a line of too many values, of an HTTP body over
/// its limit or too slow): its id (`null` when it has none JSON-RPC allows), its method,
/// its `params.name` and `uri`. Both transports record such a message by it.
pub(crate) struct Unread {
    pub(crate) id: Value,
    method: Option<String>,
    name: Option<String>,
    uri: Option<String>,
}

impl Unread {
    /// What `start`, the start of a message refused unread, says: of a batch, its first
    /// message (whose call a batch over the limit would otherwise hide).
    pub(crate) fn of_start(start: &[u8]) -> Unread {
        let mut at = lenient_space(start);
        // (Each `[` moves one byte on: bounded by the start's length.)
        while start.get(at) == Some(&b'[') {
            at += 1;
            at += lenient_space(&start[at..]);
        }
        Unread::of(top_level(&start[at.min(start.len())..]))
    }

    pub(crate) fn of(top: TopLevel<'_>) -> Unread {
        Unread {
            id: top_level_id(&top),
            method: top.method,
            name: top.name,
            uri: top.uri,
        }
    }

    /// The request to record: of the kind its method names (a read, prompt or
    /// completion is recorded as one, so that `audit --kind` finds it), under its id.
    pub(crate) fn request(&self) -> CallRequest {
        self.request_named(None, None)
    }

    /// [`Unread::request`], its method and name those given (an HTTP request's `Mcp-Method`
    /// and `Mcp-Name` headers) where they are, else those its start says.
    pub(crate) fn request_named(&self, method: Option<&str>, name: Option<&str>) -> CallRequest {
        // What the body says first, as a body under the limit is recorded by what it
        // says: a header that names something else (a `tools/call` of a destructive
        // tool sent with `Mcp-Method: resources/read`) must not hide the call. The
        // headers name only what a body whose start says nothing is.
        let (method, name) = match self.method.as_deref() {
            Some(said) => (
                Some(said),
                match said {
                    "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                        self.uri.as_deref()
                    }
                    _ => self.name.as_deref(),
                },
            ),
            None => (method, name),
        };
        let mut request = CallRequest::unread(method, name);
        if !self.id.is_null() {
            request = request.request_id(id_text(&self.id));
        }
        request
    }
}

/// Whether `message` is a `method` message to any reader: its `method` as a JSON reader
/// reads it (escapes decoded: `"m\u0065thod"` is `method`), or, when it repeats the key,
/// the first of them (as [`top_level`] reads it) or the last (as serde_json does).
pub(crate) fn may_be_method(message: &[u8], method: &str) -> bool {
    #[derive(Deserialize)]
    struct Method<'a> {
        #[serde(default, borrow)]
        method: Option<Cow<'a, str>>,
    }
    match serde_json::from_slice::<Method<'_>>(message) {
        Ok(read) => read.method.as_deref() == Some(method),
        Err(_) => {
            top_level(message).method.as_deref() == Some(method)
                || serde_json::from_slice::<Value>(message)
                    .ok()
                    .is_some_and(|v| v.get("method").and_then(Value::as_str) == Some(method))
        }
    }
}

/// [`TopLevel`] of `json`: one pass over the bytes, strings skipped whole.
pub(crate) fn top_level(json: &[u8]) -> TopLevel<'_> {
    let mut top = TopLevel::default();
    // After any white space a lenient reader skips (U+2028, a byte-order mark…).
    let start = Some(lenient_space(json)).filter(|&at| at < json.len());
    if start.map(|i| json[i]) != Some(b'{') {
        return top;
    }
    /// The end (exclusive, after the closing quote) of the string that opens at `i`.
    fn string_end(json: &[u8], mut i: usize) -> usize {
        i += 1;
        while i < json.len() && json[i] != b'"' {
            i += if json[i] == b'\\' { 2 } else { 1 };
        }
        (i + 1).min(json.len())
    }
    let mut depth = 0usize;
    // At depth 1 (or 2 inside `params`), whether the next string is a key (after `{` or
    // `,`).
    let mut key_next = false;
    // Where the object that is the value of the top level's `params` opens, and whether
    // the reading is inside it (at depth 2).
    let mut params_at = None;
    let mut in_params = false;
    let mut i = start.unwrap_or(0);
    while i < json.len() {
        match json[i] {
            b'"' => {
                let end = string_end(json, i);
                if (depth == 1 || (depth == 2 && in_params)) && key_next {
                    key_next = false;
                    let key = &json[i + 1..end.saturating_sub(1).max(i + 1)];
                    // The value: after the colon and any space.
                    let mut v = end;
                    while v < json.len() && (json[v].is_ascii_whitespace() || json[v] == b':') {
                        v += 1;
                    }
                    let value_end = match json.get(v) {
                        Some(b'"') => string_end(json, v),
                        Some(b'{' | b'[') | None => v,
                        Some(_) => {
                            let mut e = v;
                            while e < json.len()
                                && !matches!(json[e], b',' | b'}' | b']')
                                && !json[e].is_ascii_whitespace()
                            {
                                e += 1;
                            }
                            e
                        }
                    };
                    let value = &json[v..value_end];
                    match (depth, key) {
                        (1, b"id") if top.id.is_none() && !value.is_empty() => {
                            top.id = Some(value);
                        }
                        (1, b"method") if top.method.is_none() => {
                            top.method = serde_json::from_slice::<String>(value).ok();
                        }
                        (1, b"params") if params_at.is_none() && json.get(v) == Some(&b'{') => {
                            params_at = Some(v);
                        }
                        (2, b"name") if top.name.is_none() => {
                            top.name = serde_json::from_slice::<String>(value).ok();
                        }
                        (2, b"uri") if top.uri.is_none() => {
                            top.uri = serde_json::from_slice::<String>(value).ok();
                        }
                        _ => {}
                    }
                    i = value_end.max(end);
                    continue;
                }
                i = end;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth == 2 && params_at == Some(i) {
                    in_params = true;
                }
                key_next = depth == 1 || (depth == 2 && in_params);
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth < 2 {
                    in_params = false;
                }
                key_next = false;
            }
            b',' => key_next = depth == 1 || (depth == 2 && in_params),
            _ => {}
        }
        i += 1;
    }
    top
}

/// The messages of a JSON-RPC body: the message itself, or each message of a batch, a
/// batch nested in it flattened (that is not JSON-RPC, and is refused whole, but each
/// call it holds is recorded as a batch's would be).
pub(crate) fn messages(value: &Value) -> Vec<&Value> {
    fn walk<'v>(value: &'v Value, out: &mut Vec<&'v Value>) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| walk(item, out)),
            message => out.push(message),
        }
    }
    // (serde_json's recursion limit bounds the nesting.)
    let mut out = Vec::new();
    walk(value, &mut out);
    out
}

/// The id of [`top_level`] as a record keeps it, when it is one JSON-RPC allows (a string
/// or an integer).
pub(crate) fn top_id_text(top: &TopLevel<'_>) -> Option<String> {
    let id = serde_json::from_slice::<Value>(top.id?).ok()?;
    (id.is_string() || id.is_i64() || id.is_u64()).then(|| id_text(&id))
}

/// A JSON-RPC id as a record keeps it: as the answer carries it (rmcp reads a number
/// written `1.0`, `1e2` or `-0` as the integer 1, 100 or 0, and answers under that).
pub(crate) fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_none() => {
            match n.as_f64() {
                // Below 2^53, where rmcp takes an integral float for an integer (and every
                // such float is one exactly); past it, it refuses the id.
                Some(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
                    format!("{}", f as i64)
                }
                _ => n.to_string(),
            }
        }
        other => other.to_string(),
    }
}

/// The `resources/read` (or `resources/subscribe`, `resources/unsubscribe`), `prompts/get`
/// or `completion/complete` in `body`, if any (the first of a batch), as the attempt that
/// records its refusal.
pub(crate) fn item_request(body: &[u8]) -> Option<CallRequest> {
    let body = without_bom(body);
    // The common case first, without building a tree: one well-formed request of another
    // method (`tools/list`, `initialize`…) is not a read.
    #[derive(Deserialize)]
    struct Method<'a> {
        #[serde(default, borrow)]
        method: Option<Cow<'a, str>>,
    }
    if let Ok(Method {
        method: Some(method),
    }) = serde_json::from_slice::<Method<'_>>(body)
        && !ITEM_METHODS.contains(&method.as_ref())
    {
        return None;
    }
    // A lenient reading (the last of repeated keys wins, else the first); in a batch, the
    // first item read.
    let Some(value) = serde_json::from_slice::<Value>(body)
        .ok()
        .or_else(|| concatenated(body))
    else {
        return unreadable_item(body);
    };
    let first_reading;
    let message = match messages(&value).into_iter().find(|m| is_item(m)) {
        Some(message) => message,
        None => {
            first_reading = first_key_reading(body)?;
            messages(&first_reading).into_iter().find(|m| is_item(m))?
        }
    };
    let params = message.get("params");
    let field = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    // What the request does not say (a malformed one) is recorded as unknown.
    let text = |v: Option<&Value>| field(v).unwrap_or_else(|| UNKNOWN_TOOL.to_owned());
    let param = |name: &str| params.and_then(|p| p.get(name));
    let mut request = match message.get("method")?.as_str()? {
        "resources/read" => CallRequest::resource(text(param("uri"))),
        // A subscription is granted by reading the resource (`McpHandler::subscribe`).
        "resources/subscribe" => CallRequest::resource(text(param("uri"))).subscription(),
        // An unsubscription is checked by the same read (`McpHandler::unsubscribe`).
        "resources/unsubscribe" => CallRequest::resource(text(param("uri"))).unsubscription(),
        "prompts/get" => CallRequest::prompt(text(param("name")), param("arguments").cloned()),
        "completion/complete" => {
            let reference = param("ref");
            let resource = reference
                .and_then(|r| r.get("type"))
                .and_then(Value::as_str)
                == Some("ref/resource");
            let target = text(reference.and_then(|r| r.get(if resource { "uri" } else { "name" })));
            let argument = param("argument");
            // A name or value of another type than a string is recorded as the JSON it
            // is, not as an empty string.
            let sent = |name: &str| {
                argument
                    .and_then(|a| a.get(name))
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .unwrap_or_default()
            };
            CallRequest::completion(
                target,
                resource,
                sent("name"),
                sent("value"),
                serde_json::Map::new(),
            )
        }
        _ => return None,
    };
    if let Some(id) = message.get("id") {
        request = request.request_id(id_text(id));
    }
    Some(request)
}

/// The methods of the requests that are recorded as attempts besides `tools/call`.
const ITEM_METHODS: [&str; 5] = [
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/get",
    "completion/complete",
];

/// The read, prompt or completion of a body serde_json cannot read (a string that is not
/// UTF-8, a number out of range, nested too deep, cut short, UTF-16…): by its top level,
/// else by the method its bytes [say](says) (as for a `tools/call`, what a lenient reader
/// could take it for); what it names is unknown.
fn unreadable_item(body: &[u8]) -> Option<CallRequest> {
    let top = top_level(body);
    let method = match top.method.as_deref() {
        Some(method) if ITEM_METHODS.contains(&method) => method,
        _ => ITEM_METHODS
            .into_iter()
            .find(|method| says(body, method.as_bytes()))?,
    };
    let unknown = || UNKNOWN_TOOL.to_owned();
    let request = match method {
        "resources/read" => CallRequest::resource(unknown()),
        "resources/subscribe" => CallRequest::resource(unknown()).subscription(),
        "resources/unsubscribe" => CallRequest::resource(unknown()).unsubscription(),
        "prompts/get" => CallRequest::prompt(top.name.clone().unwrap_or_else(unknown), None),
        _ => CallRequest::completion(
            unknown(),
            false,
            String::new(),
            String::new(),
            serde_json::Map::new(),
        ),
    };
    Some(match top_id_text(&top) {
        Some(id) => request.request_id(id),
        None => request,
    })
}

/// The arguments of the `tools/call` in `body`, for the record of an attempt the MCP
/// layer never dispatched.
pub(crate) fn tool_call_arguments(body: &[u8]) -> Option<Value> {
    tool_call_request(body)?.arguments
}

/// The arguments of the read, prompt or completion in `body`, for the record of an
/// attempt nobody took up.
pub(crate) fn item_arguments(body: &[u8]) -> Option<Value> {
    item_request(body)?.arguments
}

/// The most calls of one batch recorded one by one; the rest are counted in one more
/// record, so that a batch of many small calls costs a bounded amount of disk.
pub(crate) const MAX_BATCH_RECORDS: usize = 32;

/// Every call, read, prompt and completion of the JSON-RPC batch `body` but the one
/// recorded already (its first `tools/call`, which [`tool_call_request`] reads, else its
/// first read, prompt or completion, which [`item_request`] reads), in the batch's order,
/// at most [`MAX_BATCH_RECORDS`] − 1 of them, and how many more the batch holds. Empty
/// when `body` is not a batch of several (or several values one after the other).
/// The record of the calls of a refused batch past those recorded one by one: its
/// arguments, `{"more_calls": n}` for calls the batch holds, or `{"calls_named_unread": n}`
/// for a body no reader parses, where `n` counts how often its bytes say `tools/call` (what
/// it may hold, not calls: the trail's counts of calls, `audit --stats` and the reference
/// dashboard, take it as one record, so that no junk a caller sends counts as thousands).
pub(crate) fn count_of_the_rest(more: u64, unread: bool) -> Value {
    if unread {
        serde_json::json!({"calls_named_unread": more})
    } else {
        serde_json::json!({"more_calls": more})
    }
}

/// [`rest_of_batch`], and whether `more` counts mentions in bytes no reader parses.
pub(crate) fn rest_of_batch_read(body: &[u8]) -> (Vec<CallRequest>, Counts, bool) {
    let body = without_bom(body);
    let unread = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err()
        && concatenated(body).is_none();
    let (kept, more) = rest_of_batch(body);
    (kept, more, unread && !more.is_empty())
}

/// The request of the record that counts the calls of `kind` of a batch past those
/// recorded one by one: of that kind (a count of reads is a record of kind `resource`),
/// of a tool, URI, prompt or reference nobody can name.
pub(crate) fn count_request(kind: CallKind) -> CallRequest {
    match kind {
        CallKind::Tool => CallRequest::new(UNKNOWN_TOOL, None),
        CallKind::Resource => CallRequest::resource(UNKNOWN_TOOL),
        CallKind::Prompt => CallRequest::prompt(UNKNOWN_TOOL, None),
        CallKind::Completion => CallRequest::completion(
            UNKNOWN_TOOL,
            false,
            String::new(),
            String::new(),
            serde_json::Map::new(),
        ),
    }
}

pub(crate) fn rest_of_batch(body: &[u8]) -> (Vec<CallRequest>, Counts) {
    let body = without_bom(body);
    let read = serde_json::from_slice::<Value>(body)
        .ok()
        .or_else(|| concatenated(body));
    let (mut kept, mut more) = match &read {
        Some(value @ Value::Array(_)) => rest_of_values(body, value),
        _ => (Vec::new(), Counts::default()),
    };
    // What comes after bytes no reading gets past, if it says `tools/call`: one record of
    // an unknown tool, in the batch's bound.
    if unread_tail_says_call(body) {
        if kept.len() < MAX_BATCH_RECORDS - 1 {
            kept.push(CallRequest::new(UNKNOWN_TOOL, None));
        } else {
            more.add(CallKind::Tool);
        }
    }
    // Nothing of it can be read as JSON (a batch nested past serde_json's 128 levels,
    // say): the calls it names past the first (recorded already) are counted.
    if read.is_none() && kept.is_empty() {
        let named = body
            .windows(CALL.len())
            .filter(|w| *w == CALL)
            .count()
            .saturating_sub(1);
        more = Counts::of(CallKind::Tool, named as u64);
    }
    (kept, more)
}

/// [`rest_of_batch`] of `value`, the batch read from `body` (or its values one after the
/// other): the calls, reads, prompts and completions kept to be recorded one by one, and
/// the rest counted by kind.
fn rest_of_values(body: &[u8], value: &Value) -> (Vec<CallRequest>, Counts) {
    let mut batch = messages(value);
    // The call recorded already: the first of this reading, else of the reading that
    // keeps the first of repeated keys (as `tool_call_request` finds it).
    let mut first = batch.iter().position(|m| is_call(m));
    // Else the read, prompt or completion recorded already, as `item_request` finds it.
    let mut first_item = batch.iter().position(|m| is_item(m));
    // A message that repeats a key (`"method":"tools/call",…,"method":"ping"`) is a call
    // to a reader that keeps the first: each such message is recorded as the call it may
    // be, as it is alone, not only the batch's first.
    let first_wins = first_key_reading(body);
    if let Some(first_wins) = &first_wins {
        let other = messages(first_wins);
        if other.len() == batch.len() {
            first = first.or_else(|| other.iter().position(|m| is_call(m)));
            first_item = first_item.or_else(|| other.iter().position(|m| is_item(m)));
            // (A read, prompt or completion likewise, unless this reading has one.)
            for (mine, theirs) in batch.iter_mut().zip(other) {
                if !is_call(mine) && (is_call(theirs) || (!is_item(mine) && is_item(theirs))) {
                    *mine = theirs;
                }
            }
        }
    }
    // Only a message with a method can be a call, a read, a prompt or a completion: the
    // others (half a million bare numbers in 1 MiB) are not written out and read again
    // one by one, which took 0.8 s of CPU for a body sent without a token.
    let may_be_request = |m: &&Value| m.get("method").is_some();
    let first = first.or(first_item);
    let mut requests = batch
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != first)
        .filter(|(_, message)| may_be_request(message))
        .filter_map(|(_, message)| {
            let one = serde_json::to_vec(message).ok()?;
            tool_call_request(&one).or_else(|| item_request(&one))
        });
    let kept: Vec<CallRequest> = requests.by_ref().take(MAX_BATCH_RECORDS - 1).collect();
    let mut more = Counts::default();
    for request in requests {
        more.add(request.kind);
    }
    (kept, more)
}

/// [`repeated_key`] in the arguments of the `tools/call` that `body` is (one message, as
/// the MCP layer dispatches it), as a pointer into those arguments.
pub(crate) fn repeated_argument_key(body: &[u8]) -> Option<String> {
    repeated_key(call_params(body)?.arguments?.get().as_bytes())
}

/// [`repeated_argument_key`] and [`repeated_input_responses_key`] from one reading of
/// `body`.
pub(crate) fn repeated_call_keys(body: &[u8]) -> (Option<String>, Option<String>) {
    let Some(params) = call_params(body) else {
        return (None, None);
    };
    let repeated = |raw: Option<&serde_json::value::RawValue>| repeated_key(raw?.get().as_bytes());
    (repeated(params.arguments), repeated(params.input_responses))
}

/// The `params` of the `tools/call` that `body` is, borrowed as sent: its arguments and a
/// 2026-07-28 retry's `inputResponses`.
#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    arguments: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, rename = "inputResponses")]
    input_responses: Option<&'a serde_json::value::RawValue>,
}

fn call_params(body: &[u8]) -> Option<CallParams<'_>> {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        params: CallParams<'a>,
    }
    serde_json::from_slice::<Message<'_>>(body)
        .ok()
        .map(|m| m.params)
}

/// [`repeated_key`] in the `inputResponses` of the `tools/call` that `body` is (a
/// 2026-07-28 retry carrying a person's answer), as a pointer into them.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn repeated_input_responses_key(body: &[u8]) -> Option<String> {
    // No key of the whole body repeats (a scan, no parse): the check of most calls.
    if keys_all_differ(body) {
        return None;
    }
    repeated_key(call_params(body)?.input_responses?.get().as_bytes())
}

/// The error that replaces a client's answer (`id`) whose JSON repeats the key at
/// `pointer`, as one JSON-RPC message.
pub(crate) fn ambiguous_answer(id: &serde_json::Value, pointer: &str) -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32600,
            "message": format!(
                "the answer repeats the key `{}`: which of its values is meant cannot be known",
                crate::audit::bounded(pointer, 256)
            ),
            "data": {"aac": super::AMBIGUOUS_ANSWER},
        },
    })
}

#[cfg(test)]
mod tests {
    /// A body no reader parses that says `tools/call` thousands of times holds no call a
    /// reader can count: its count is of mentions, under a key of its own, so that it
    /// counts as one record, not as thousands of calls. A batch's count is of its calls.
    #[test]
    fn the_rest_of_an_unread_body_is_counted_as_mentions_not_calls() {
        let junk = format!("[{}", "\"tools/call\",".repeat(1000));
        let (kept, more, unread) = super::rest_of_batch_read(junk.as_bytes());
        assert!(kept.is_empty());
        assert_eq!((more.total(), unread), (999, true));
        assert_eq!(
            super::count_of_the_rest(more.total(), unread),
            serde_json::json!({"calls_named_unread": 999})
        );
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
        let batch = format!("[{}]", vec![call; 40].join(","));
        let (kept, more, unread) = super::rest_of_batch_read(batch.as_bytes());
        assert_eq!((kept.len(), more.total(), unread), (31, 8, false));
        assert_eq!(
            super::count_of_the_rest(more.total(), unread),
            serde_json::json!({"more_calls": 8})
        );
    }

    /// The rest of a batch past those recorded one by one is counted by kind: the reads,
    /// prompts and completions in it are counted as such, not as tool calls.
    #[test]
    fn the_rest_of_a_batch_is_counted_by_kind() {
        use crate::audit::CallKind;
        let read = r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x://1"}}"#;
        let prompt = r#"{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"p"}}"#;
        let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}"#;
        // The first call is recorded already, 31 more one by one: the rest are 5 reads
        // and 4 prompts.
        let mut batch = vec![call; 32];
        batch.extend([read; 5]);
        batch.extend([prompt; 4]);
        let batch = format!("[{}]", batch.join(","));
        let (kept, more, _) = super::rest_of_batch_read(batch.as_bytes());
        assert_eq!(kept.len(), 31);
        assert_eq!(
            more.by_kind().collect::<Vec<_>>(),
            [(CallKind::Resource, 5), (CallKind::Prompt, 4)]
        );
        assert_eq!(
            super::count_request(CallKind::Resource).kind(),
            CallKind::Resource
        );
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn values_in_sequence_are_read_past_any_white_space_a_lenient_reader_skips() {
        fn read(body: &str) -> (Vec<Value>, &str) {
            let (values, end) = in_sequence::<Value>(body.as_bytes());
            (values, &body[end..])
        }
        assert_eq!(read("1 2\n3"), (vec![json!(1), json!(2), json!(3)], ""));
        for separator in [
            "\u{2028}",
            "\u{2029}",
            "\u{a0}",
            "\u{85}",
            "\u{feff}",
            "\u{3000}",
            "\u{b}\u{c}",
        ] {
            assert_eq!(
                read(&format!(
                    "{{\"a\":1}}{separator}[2] {separator} 3{separator}"
                )),
                (vec![json!({"a": 1}), json!([2]), json!(3)], ""),
                "{separator:?}"
            );
        }
        // What is no white space ends the reading, where it begins.
        assert_eq!(read("1\u{2028}x 2"), (vec![json!(1)], "x 2"));
        assert_eq!(read("true\u{a0}null"), (vec![json!(true), json!(null)], ""));
        assert_eq!(read("1 {\"a\":"), (vec![json!(1)], "{\"a\":"));
        assert_eq!(read("1\u{200b}2"), (vec![json!(1)], "\u{200b}2"));
        // Bytes that are not UTF-8, or a character cut short, are no white space either.
        let (values, end) = in_sequence::<Value>(b"1\xe2\x80");
        assert_eq!((values, end), (vec![json!(1)], 1));
        assert_eq!(read(""), (vec![], ""));
        assert!(concatenated("{\"a\":1}\u{2028}{\"b\":2}".as_bytes()).is_some());
    }

    #[test]
    fn keys_that_all_differ_are_told_without_reading_the_json() {
        assert!(keys_all_differ(
            br#"{"id":1,"text":"a:b","tags":["x","y"],"limit":3}"#
        ));
        assert!(keys_all_differ(br#"{"a" : {"b":"\"c\":"}}"#));
        for json in [
            br#"{"a":1,"a":2}"#.as_slice(),
            br#"{"a":{"a":1}}"#,
            br#"{"\u0061":1}"#,
        ] {
            assert!(!keys_all_differ(json), "{}", String::from_utf8_lossy(json));
        }
    }

    #[test]
    fn a_repeated_key_is_found_at_any_depth_however_it_is_spelled() {
        for (json, pointer) in [
            (r#"{"confirm":false,"confirm":true}"#, Some("/confirm")),
            (r#"{"confirm":true,"\u0063onfirm":false}"#, Some("/confirm")),
            (r#"{"a":{"b":[1,{"c":1,"c":2}]}}"#, Some("/a/b/1/c")),
            (r#"{"a/b":{"~":1,"~":2}}"#, Some("/a~1b/~0")),
            (r#"{"a":1,"b":{"a":2}}"#, None),
            (r#"[{"a":1},{"a":2}]"#, None),
            (r#"{"a":1"#, None),
            // The same key in two objects is no repetition; an escaped quote is no end.
            (r#"{"a":{"a":"x\":"},"b":"\"a\":"}"#, None),
            (
                r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k18":18,"k19":19,"k20":20,"k21":21,"k22":22,"k23":23,"k24":24,"k25":25,"k26":26,"k27":27,"k28":28,"k29":29,"k30":30,"k31":31,"k32":32,"k5":5}"#,
                Some("/k5"),
            ),
        ] {
            assert_eq!(repeated_key(json.as_bytes()).as_deref(), pointer, "{json}");
        }
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"k":1,"k":2}}}"#;
        assert_eq!(repeated_argument_key(call).as_deref(), Some("/k"));
        let fine = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"k":1}}}"#;
        assert_eq!(repeated_argument_key(fine), None);
    }

    /// A call hidden behind a repeated `method` key, to a reader that keeps the first, is a
    /// call: its refusal is recorded as one.
    #[test]
    fn a_completion_s_argument_of_another_type_is_recorded_as_sent() {
        let body = |value: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{{"ref":{{"type":"ref/prompt","name":"p"}},"argument":{{"name":"n","value":{value}}}}}}}"#
            )
        };
        for (value, recorded) in [
            ("5", "5"),
            (r#""ab""#, "ab"),
            (r#"{"a":[1]}"#, r#"{"a":[1]}"#),
        ] {
            let request = item_request(body(value).as_bytes()).expect(value);
            assert_eq!(
                request.arguments.as_ref().unwrap()["value"],
                recorded,
                "{value}"
            );
        }
    }

    #[test]
    fn a_call_behind_a_repeated_method_key_is_found_either_way() {
        for body in [
            r#"{"jsonrpc":"2.0","method":"tools/call","method":"ping","id":50,"params":{"name":"delete_issue"}}"#,
            r#"{"jsonrpc":"2.0","method":"ping","method":"tools/call","id":50,"params":{"name":"delete_issue"}}"#,
            r#"[{"jsonrpc":"2.0","method":"tools\/call","method":"ping","id":50,"params":{"name":"delete_issue"}}]"#,
        ] {
            let call = tool_call_request(body.as_bytes()).expect(body);
            assert_eq!(call.tool(), "delete_issue", "{body}");
        }
        let read = r#"{"jsonrpc":"2.0","method":"resources/read","method":"ping","id":5,"params":{"uri":"x://1"}}"#;
        assert!(item_request(read.as_bytes()).is_some());
        assert!(tool_call_request(read.as_bytes()).is_none());
        let plain = r#"{"jsonrpc":"2.0","method":"ping","id":5,"params":{"a":1,"a":2}}"#;
        assert!(tool_call_request(plain.as_bytes()).is_none());
        assert!(item_request(plain.as_bytes()).is_none());
    }

    #[test]
    fn the_top_level_id_and_method_are_read_without_parsing_the_rest() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{}1{}}}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let top = top_level(deep.as_bytes());
        assert_eq!(
            (top.id, top.method.as_deref(), top.name.as_deref()),
            (Some(&b"7"[..]), Some("tools/call"), Some("x"))
        );
        // `params.name` after a nested value, and only there.
        for (json, name) in [
            (
                r#"{"params":{"arguments":{"name":"inner","a":[{"name":"n"}]},"name":"t"}}"#,
                Some("t"),
            ),
            (r#"{"params":{"meta":["name","x"]},"name":"top"}"#, None),
            (r#"{"params":["name","x"]}"#, None),
            (r#"{"x":{"name":"y"},"params":{"name":"z"#, None),
            (r#"{"x":{"name":"y"},"params":{"name":"z"}"#, Some("z")),
        ] {
            assert_eq!(top_level(json.as_bytes()).name.as_deref(), name, "{json}");
        }
        for (json, id, method) in [
            (
                r#"{"method":"ping","id":"a\"b"}"#,
                Some(r#""a\"b""#),
                Some("ping"),
            ),
            (r#" { "id" : 12 , "method" : "x" "#, Some("12"), Some("x")),
            // Keys deeper down, or in strings, are not the message's.
            (
                r#"{"params":{"id":1,"method":"m"},"x":"\"id\":2"}"#,
                None,
                None,
            ),
            (r#"{"id":null}"#, Some("null"), None),
            (r#"[{"id":1,"method":"m"}]"#, None, None),
            ("not json", None, None),
            (
                r#"{"id":1e999999,"method":"tools/call""#,
                Some("1e999999"),
                Some("tools/call"),
            ),
        ] {
            let top = top_level(json.as_bytes());
            assert_eq!(top.id, id.map(str::as_bytes), "{json}");
            assert_eq!(top.method.as_deref(), method, "{json}");
        }
    }

    /// A call serde_json cannot read (a number out of range, nesting past its limit, cut
    /// short) is recorded as the call of the tool it names, under its id.
    #[test]
    fn an_unread_batch_is_named_by_its_first_message() {
        let start = br#" [ [{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delete_issue","arguments":{"issue_id":"AAC-1"}}}, {"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"get_issue","arguments":{"issue_id":"xxxxxxxx"#;
        let request = Unread::of_start(start).request();
        assert_eq!(request.tool, "delete_issue");
        assert_eq!(request.request_id.as_deref(), Some("9"));
        // A message that is no batch reads as before; nothing but brackets names nothing.
        let one = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t"#;
        assert_eq!(
            Unread::of_start(one).request().request_id.as_deref(),
            Some("a")
        );
        assert_eq!(Unread::of_start(b"[[[[").request().tool, UNKNOWN_TOOL);
    }

    #[test]
    fn an_unreadable_call_is_named_by_its_top_level() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"q-1","method":"tools/call","params":{{"arguments":{{"a":{}1{}}},"name":"drop"}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for (json, tool, id) in [
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"n":1e999}}}"#,
                "add",
                Some("5"),
            ),
            (deep.as_str(), "drop", Some("q-1")),
            (
                r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"add"}} x"#,
                "add",
                Some("6"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"add""#,
                "add",
                None,
            ),
            (r#"{"method":"ping","x":"tools/call""#, UNKNOWN_TOOL, None),
        ] {
            let request = tool_call_request(json.as_bytes()).expect(json);
            assert_eq!(request.tool, tool, "{json}");
            assert_eq!(request.request_id.as_deref(), id, "{json}");
        }
    }

    /// A byte-order mark in front does not hide the call behind it.
    #[test]
    fn tools_call_is_seen_however_a_string_escapes_it() {
        for text in [
            r#"xx{"method":"tools/call"}"#,
            r#"xx{"method":"tools\/call"}"#,
            r#"/*c*/{"method":"\u0074ools\/c\u0061ll"}"#,
            r#"["\u0074\u006f\u006f\u006c\u0073\u002f\u0063\u0061\u006c\u006c",]"#,
            // JSON5: other escapes, single quotes, a line continued.
            r#"{"method":"t\ools/call"}"#,
            r#"{"method":"tools\/c\all"}"#,
            r#"{"method":"\x74ools/call"}"#,
            r#"{'method':'tools\/call'}"#,
            r#"{'method':'\u{74}ools\u002fcall'}"#,
            "{\"method\":\"tools/\\\ncall\"}",
            "{\"method\":\"tools/\\\u{2028}call\"}",
            // An apostrophe before it does not hide it.
            r#"don't {"method":"tools\/call"}"#,
        ] {
            assert!(says_tools_call(text.as_bytes()), "{text}");
        }
        // In UTF-16 or UTF-32.
        let text = r#"{"method":"tools\/call"}"#;
        let utf16: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let utf32: Vec<u8> = text
            .chars()
            .flat_map(|c| u32::from(c).to_be_bytes())
            .collect();
        assert!(says_tools_call(&utf16) && says_tools_call(&utf32));
        for text in [
            r#"{"method":"tools\/list"}"#,
            r#"{"method":"tools/cal"}"#,
            r#""tools\/call"#,
            "",
            r#"\""#,
            r#"{"method":"\tool\u0073\/cal"}"#,
            "{\"method\":\"tools/\\\\\ncall\"}",
        ] {
            assert!(!says_tools_call(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn a_call_after_bytes_no_reader_gets_past_is_one_more_record() {
        let get = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get"}}"#;
        let del = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"del"}}"#;
        let escaped = del.replace("tools/call", r"tools\/call");
        let tools = |(rest, more): (Vec<CallRequest>, Counts)| {
            (
                rest.into_iter().map(|r| r.tool).collect::<Vec<_>>(),
                more.total(),
            )
        };
        for body in [
            format!("{get} x {del}"),
            format!("{get},{escaped}"),
            format!("{get}{get} x {escaped}"),
        ] {
            let (rest, more) = tools(rest_of_batch(body.as_bytes()));
            assert_eq!(
                rest.last().map(String::as_str),
                Some(UNKNOWN_TOOL),
                "{body}"
            );
            assert_eq!(more, 0, "{body}");
        }
        // Read whole, or nothing read (the first reading has it), or nothing after: none.
        for body in [
            format!("{get}{del}"),
            format!("xx{del}"),
            format!("{get} x "),
        ] {
            let (rest, _) = tools(rest_of_batch(body.as_bytes()));
            assert!(!rest.iter().any(|t| t == UNKNOWN_TOOL), "{body}: {rest:?}");
        }
        // A call the framing could not read at all, escaped: still a call.
        let request = tool_call_request(format!("xx{escaped}").as_bytes()).expect("a call");
        assert_eq!(request.tool, UNKNOWN_TOOL);
    }

    #[test]
    fn each_call_of_a_batch_behind_a_repeated_method_key_is_found() {
        let call = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"t{id}"}}}}"#
            )
        };
        let hidden = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"t{id}"}},"method":"ping"}}"#
            )
        };
        let tools = |body: &str| {
            let first = tool_call_request(body.as_bytes()).map(|r| r.tool);
            let (rest, more) = rest_of_batch(body.as_bytes());
            (
                first,
                rest.into_iter().map(|r| r.tool).collect::<Vec<_>>(),
                more.total(),
            )
        };
        assert_eq!(
            tools(&format!("[{},{}]", call("a"), hidden("b"))),
            (Some("ta".to_owned()), vec!["tb".to_owned()], 0)
        );
        assert_eq!(
            tools(&format!("[{},{}]", hidden("b"), call("a"))),
            (Some("ta".to_owned()), vec!["tb".to_owned()], 0)
        );
        // Nested past serde_json's depth: nothing read, the calls named counted.
        let deep = format!("{}[{}]{}", "[".repeat(130), call("a"), "]".repeat(130));
        let calls: Vec<String> = (0..40).map(|i| call(&i.to_string())).collect();
        let deep_many = format!(
            "{}[{}]{}",
            "[".repeat(130),
            calls.join(","),
            "]".repeat(130)
        );
        assert_eq!(tools(&deep), (Some(UNKNOWN_TOOL.to_owned()), vec![], 0));
        assert_eq!(
            tools(&deep_many),
            (Some(UNKNOWN_TOOL.to_owned()), vec![], 39)
        );
        let many: Vec<String> = (0..40).map(|i| hidden(&i.to_string())).collect();
        let (first, rest, more) = tools(&format!("[{}]", many.join(",")));
        assert_eq!(first.as_deref(), Some("t0"));
        assert_eq!((rest.len(), more), (31, 8));
        assert_eq!(rest[0], "t1");
    }

    #[test]
    fn a_call_behind_a_byte_order_mark_is_read() {
        let body = b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"add\"}}";
        let request = tool_call_request(body).expect("a call");
        assert_eq!(
            (request.tool.as_str(), request.request_id.as_deref()),
            ("add", Some("3"))
        );
    }

    /// Ids as the answer carries them: an integral number however written.
    #[test]
    fn ids_are_kept_as_they_are_answered() {
        for (id, text) in [
            (serde_json::json!("a"), "a"),
            (serde_json::json!(7), "7"),
            (serde_json::json!(1.0), "1"),
            (serde_json::json!(1e2), "100"),
            (serde_json::json!(-0.0), "0"),
            (serde_json::json!(-3.0), "-3"),
            (serde_json::json!(1.5), "1.5"),
            (serde_json::json!(1e300), "1e+300"),
            (serde_json::json!(1e17), "1e+17"),
        ] {
            assert_eq!(id_text(&id), text, "{id}");
        }
    }

    /// A hostile caller's arguments: one object of 200,000 distinct keys (3 MB, well within
    /// a stdio line or a raised HTTP body limit), then one repeat. Each key is looked up,
    /// not compared with every key before it (20 billion comparisons, minutes of a core).
    #[test]
    fn an_object_of_many_distinct_keys_is_read_once() {
        let count = 200_000;
        let mut json = String::from("{");
        for i in 0..count {
            json.push_str(&format!("\"k{i}\":0,"));
        }
        json.push_str("\"k7\":1}");
        assert_eq!(repeated_key(json.as_bytes()).as_deref(), Some("/k7"));
        json.truncate(json.len() - "\"k7\":1}".len() - 1);
        json.push('}');
        assert_eq!(repeated_key(json.as_bytes()), None);
    }
}
