//! One row of `aac_audit`: the values of a record as the table stores them, and the one
//! hash that chains a row to the one before it. The writer and [`verify_chain`] both
//! hash through [`link_hash`], pinned by a test vector below.
//!
//! [`verify_chain`]: super::verify_chain

use std::borrow::Cow;
use std::fmt;

use rusqlite::ToSql;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use super::reader::StoredRecord;
use super::table::AUDIT_COLUMNS;
use crate::audit::{AuditError, AuditRecord, canonical_timestamp};

/// The columns of a record, `timestamp` to `arguments` (the table's columns less `seq`,
/// `prev_hash` and `hash`), in table order, as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Values {
    timestamp: String,
    tool: String,
    outcome: Cow<'static, str>,
    reason: Option<String>,
    check: Option<Cow<'static, str>>,
    status: i64,
    scopes_provided: String,
    principal: Option<String>,
    workspace: Option<String>,
    transport: String,
    request_id: Option<String>,
    duration_us: i64,
    access_level: Option<Cow<'static, str>>,
    arguments: String,
    /// Stored after `hash` (added to existing tables by `ALTER TABLE`).
    confirmed_by: Option<String>,
    /// Stored after `confirmed_by` (added later).
    kind: Cow<'static, str>,
}

/// How many columns [`Values`] holds before `prev_hash`: all but `seq`, `prev_hash`,
/// `hash` and the columns that follow them (`confirmed_by`, `kind`).
const VALUES: usize = AUDIT_COLUMNS.len() - 5;

impl Values {
    /// A record as it will be stored (its timestamp in the canonical form).
    pub(super) fn from_record(record: AuditRecord) -> Values {
        let timestamp = if is_canonical_timestamp(&record.timestamp) {
            record.timestamp
        } else {
            canonical_timestamp(&record.timestamp).unwrap_or(record.timestamp)
        };
        Values {
            timestamp,
            tool: record.tool,
            outcome: Cow::Borrowed(record.outcome.as_str()),
            reason: record.reason,
            check: record.check.map(|c| Cow::Borrowed(c.as_str())),
            status: i64::from(record.status),
            scopes_provided: serde_json::to_string(&record.scopes_provided)
                .unwrap_or_else(|_| "[]".to_owned()),
            principal: record.principal,
            workspace: record.workspace,
            transport: record.transport,
            request_id: record.request_id,
            duration_us: i64::try_from(record.duration_us).unwrap_or(i64::MAX),
            access_level: record.access_level.map(|a| Cow::Borrowed(a.as_str())),
            arguments: record.arguments.to_string(),
            confirmed_by: record.confirmed_by,
            kind: Cow::Borrowed(record.kind.as_str()),
        }
    }

    /// The values read from a row selected with every column, starting at `first`.
    fn from_sql(r: &rusqlite::Row<'_>, first: usize) -> Result<Values, rusqlite::Error> {
        let str_or_none = |i: usize| -> Result<Option<Cow<'static, str>>, rusqlite::Error> {
            Ok(r.get::<_, Option<String>>(first + i)?.map(Cow::Owned))
        };
        Ok(Values {
            timestamp: r.get(first)?,
            tool: r.get(first + 1)?,
            outcome: Cow::Owned(r.get(first + 2)?),
            reason: r.get(first + 3)?,
            check: str_or_none(4)?,
            status: r.get(first + 5)?,
            scopes_provided: r.get(first + 6)?,
            principal: r.get(first + 7)?,
            workspace: r.get(first + 8)?,
            transport: r.get(first + 9)?,
            request_id: r.get(first + 10)?,
            duration_us: r.get(first + 11)?,
            access_level: str_or_none(12)?,
            arguments: r.get(first + 13)?,
            confirmed_by: r.get(first + VALUES + 2)?,
            kind: Cow::Owned(r.get(first + VALUES + 3)?),
        })
    }

    /// The values to bind, in table order.
    pub(super) fn params(&self) -> [&dyn ToSql; VALUES] {
        [
            &self.timestamp,
            &self.tool,
            &self.outcome,
            &self.reason,
            &self.check,
            &self.status,
            &self.scopes_provided,
            &self.principal,
            &self.workspace,
            &self.transport,
            &self.request_id,
            &self.duration_us,
            &self.access_level,
            &self.arguments,
        ]
    }

    /// The values stored after `prev_hash` and `hash`, in table order.
    pub(super) fn trailing_params(&self) -> [&dyn ToSql; 2] {
        [&self.confirmed_by, &self.kind]
    }

    /// The part of the hash input that does not depend on the row's place in the chain:
    /// the compact JSON array of the values, without its opening `[`.
    pub(super) fn hash_tail(&self) -> String {
        let array = serde_json::to_string(&(
            &self.timestamp,
            &self.tool,
            &self.outcome,
            &self.reason,
            &self.check,
            self.status,
            &self.scopes_provided,
            &self.principal,
            &self.workspace,
            &self.transport,
            &self.request_id,
            self.duration_us,
            &self.access_level,
            &self.arguments,
        ))
        .unwrap_or_default();
        let mut tail = array.get(1..).unwrap_or_default().to_owned();
        // The fields added later join the array only when they differ from what every
        // record before them was, so that those records hash as they always did: a set
        // `confirmed_by` is appended; a kind other than `tool` is appended after
        // `confirmed_by` (`null` when unset), so that the two never read alike.
        let kind = (self.kind != "tool").then_some(&self.kind);
        if (self.confirmed_by.is_some() || kind.is_some()) && tail.ends_with(']') {
            tail.pop();
            tail.push(',');
            tail.push_str(&serde_json::to_string(&self.confirmed_by).unwrap_or_default());
            if let Some(kind) = kind {
                tail.push(',');
                tail.push_str(&serde_json::to_string(kind).unwrap_or_default());
            }
            tail.push(']');
        }
        tail
    }

    /// How the record prints in a log line when it could not be written.
    pub(super) fn describe(tail: &str) -> String {
        format!("[{tail}")
    }
}

/// The hash of the row at `seq` after `prev_hash`, whose values give `tail`
/// ([`Values::hash_tail`]), as lowercase hex:
///
/// `hex(sha256(prev_hash ‖ "\n[" ‖ seq ‖ "," ‖ tail))`, that is `prev_hash`, a newline
/// and the compact JSON array `[seq, timestamp, …, arguments]` of the stored values
/// (`scopes_provided` and `arguments` as the JSON text they are stored as), with `kind`
/// last when it is not `tool`.
pub(super) fn link_hash(prev_hash: &[u8], seq: i64, tail: &str) -> [u8; 64] {
    let mut hasher = Sha256::new();
    hasher.update(prev_hash);
    hasher.update(b"\n[");
    hasher.update(seq.to_string().as_bytes());
    hasher.update(b",");
    hasher.update(tail.as_bytes());
    let mut out = [0u8; 64];
    hex_into(&hasher.finalize(), &mut out);
    out
}

/// Lowercase hex of (at most 32) `bytes` into `out`.
pub(super) fn hex_into(bytes: &[u8], out: &mut [u8; 64]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().take(32).enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0x0f)];
    }
}

/// One row of `aac_audit`, as stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) seq: i64,
    values: Values,
    pub(crate) prev_hash: String,
    pub(crate) hash: String,
}

/// A row whose cells cannot be read as a record: a value of another type than its
/// column declares (text in `status`, a real in `duration_us`), which only an edit of
/// the file puts there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable {
    /// The row's `seq` (the row id, which is always an integer).
    pub(crate) seq: i64,
    /// What is wrong, naming the column.
    pub(crate) problem: String,
}

impl Row {
    /// Read a row selected with [`SELECT_COLUMNS`](super::SELECT_COLUMNS); a cell of
    /// the wrong type is [`Unreadable`], with the row's `seq`.
    pub(crate) fn read(r: &rusqlite::Row<'_>) -> Result<Row, Unreadable> {
        let seq: i64 = r.get(0).map_err(|e| Unreadable {
            seq: 0,
            problem: cell_problem(&e),
        })?;
        let row = || -> Result<Row, rusqlite::Error> {
            Ok(Row {
                seq,
                values: Values::from_sql(r, 1)?,
                prev_hash: r.get(VALUES + 1)?,
                hash: r.get(VALUES + 2)?,
            })
        };
        row().map_err(|e| Unreadable {
            seq,
            problem: cell_problem(&e),
        })
    }

    /// The hash this row should have ([`link_hash`]).
    pub(crate) fn compute_hash(&self) -> String {
        let hash = link_hash(
            self.prev_hash.as_bytes(),
            self.seq,
            &self.values.hash_tail(),
        );
        String::from_utf8_lossy(&hash).into_owned()
    }

    /// The record this row stores, or why the row cannot be read back.
    pub(crate) fn into_stored(self) -> Result<StoredRecord, AuditError> {
        let record = self.values.into_record(self.seq)?;
        Ok(StoredRecord {
            seq: self.seq,
            record,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

impl Values {
    /// The values of a record as [`Values::hash_tail`] wrote them (the compact JSON array
    /// without its opening `[`): how a record a sink could not write is handed back.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn from_tail(tail: &str) -> Option<Values> {
        let cells: Vec<serde_json::Value> = serde_json::from_str(&format!("[{tail}")).ok()?;
        let text = |i: usize| cells.get(i)?.as_str().map(str::to_owned);
        let word = |i: usize| text(i).map(Cow::Owned);
        Some(Values {
            timestamp: text(0)?,
            tool: text(1)?,
            outcome: word(2)?,
            reason: text(3),
            check: word(4),
            status: cells.get(5)?.as_i64()?,
            scopes_provided: text(6)?,
            principal: text(7),
            workspace: text(8),
            transport: text(9)?,
            request_id: text(10),
            duration_us: cells.get(11)?.as_i64()?,
            access_level: word(12),
            arguments: text(13)?,
            confirmed_by: text(14),
            kind: word(15).unwrap_or(Cow::Borrowed("tool")),
        })
    }

    /// The record these values store, or why they cannot be read back (`seq`: the row's,
    /// for the message).
    pub(crate) fn into_record(self, seq: i64) -> Result<AuditRecord, AuditError> {
        // The cell's text may be anyone's (an edited file): escaped like every printed value.
        let bad = |what: &str, e: &dyn fmt::Display| {
            let e = e.to_string();
            let e = crate::audit::format::printable(&e);
            AuditError::new(format!("audit record {seq}: unreadable `{what}`: {e}"))
        };
        let v = self;
        Ok(AuditRecord {
            outcome: parse_word(&v.outcome).map_err(|e| bad("outcome", &e))?,
            check: v
                .check
                .as_deref()
                .map(parse_word)
                .transpose()
                .map_err(|e| bad("check", &e))?,
            status: u16::try_from(v.status).map_err(|e| bad("status", &e))?,
            scopes_provided: serde_json::from_str(&v.scopes_provided)
                .map_err(|e| bad("scopes_provided", &e))?,
            duration_us: u64::try_from(v.duration_us).map_err(|e| bad("duration_us", &e))?,
            access_level: v
                .access_level
                .as_deref()
                .map(parse_word)
                .transpose()
                .map_err(|e| bad("access_level", &e))?,
            arguments: serde_json::from_str(&v.arguments).map_err(|e| bad("arguments", &e))?,
            tool: v.tool,
            reason: v.reason,
            timestamp: v.timestamp,
            principal: v.principal,
            workspace: v.workspace,
            transport: v.transport,
            request_id: v.request_id,
            confirmed_by: v.confirmed_by,
            kind: v.kind.parse().map_err(|e: String| bad("kind", &e))?,
        })
    }
}

/// What a failed read of a cell means, naming its column.
fn cell_problem(err: &rusqlite::Error) -> String {
    use rusqlite::Error as E;
    let column = |i: usize| AUDIT_COLUMNS.get(i).copied().unwrap_or("?");
    match err {
        E::InvalidColumnType(i, _, found) => format!(
            "the column `{}` holds {} where the table declares {} (the record was edited)",
            column(*i),
            type_name(*found),
            declared(column(*i)),
        ),
        E::FromSqlConversionFailure(i, found, e) => format!(
            "the column `{}` holds {} that cannot be read ({e}; the record was edited)",
            column(*i),
            type_name(*found),
        ),
        E::IntegralValueOutOfRange(i, n) => format!(
            "the column `{}` holds {n}, out of range (the record was edited)",
            column(*i)
        ),
        other => format!("cannot read the record: {other}"),
    }
}

fn type_name(t: rusqlite::types::Type) -> &'static str {
    use rusqlite::types::Type;
    match t {
        Type::Null => "NULL",
        Type::Integer => "an integer",
        Type::Real => "a real",
        Type::Text => "text",
        Type::Blob => "a blob",
    }
}

/// What the table declares for `column`, in words.
fn declared(column: &str) -> &'static str {
    match column {
        "seq" | "status" | "duration_us" => "an integer",
        "timestamp" | "tool" | "outcome" | "scopes_provided" | "transport" | "arguments"
        | "prev_hash" | "hash" | "kind" => "text",
        _ => "text or NULL",
    }
}

fn parse_word<T: DeserializeOwned>(word: &str) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::Value::String(word.to_owned()))
}

/// Whether `text` already has the canonical form `YYYY-MM-DDTHH:MM:SS.ffffffZ` (as the
/// pipeline writes it), which spares parsing it again.
fn is_canonical_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 27
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            26 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::access::AccessLevel;
    use crate::audit::{Check, GENESIS_HASH, Outcome};

    fn record() -> AuditRecord {
        AuditRecord {
            tool: "delete_issue".to_owned(),
            outcome: Outcome::Denied,
            reason: Some("destructive_flag_missing".to_owned()),
            check: Some(Check::Confirm),
            status: 400,
            scopes_provided: vec!["issues:write".to_owned()],
            timestamp: "2025-06-22T15:30:00.000000Z".to_owned(),
            principal: Some("alice".to_owned()),
            workspace: Some("demo".to_owned()),
            transport: "http".to_owned(),
            request_id: Some("req-1".to_owned()),
            duration_us: 434,
            access_level: Some(AccessLevel::Delete),
            arguments: json!({"issue_id": "sha256:0123456789abcdef"}),
            confirmed_by: None,
            kind: crate::audit::CallKind::Tool,
        }
    }

    /// A record a sink could not write is handed back as it was: from its values, or from
    /// the hash tail (all a PostgreSQL row keeps), whichever optional columns it has.
    #[test]
    fn a_record_is_restored_from_its_values_and_its_tail() {
        let mut confirmed = record();
        confirmed.confirmed_by = Some("user".to_owned());
        let mut resource = record();
        resource.kind = crate::audit::CallKind::Resource;
        resource.reason = None;
        resource.check = None;
        resource.access_level = None;
        for original in [record(), confirmed, resource] {
            let values = Values::from_record(original.clone());
            let tail = values.hash_tail();
            assert_eq!(values.clone().into_record(0).unwrap(), original);
            let from_tail = Values::from_tail(&tail).expect("a tail reads back");
            assert_eq!(from_tail.hash_tail(), tail);
            assert_eq!(from_tail.into_record(0).unwrap(), original);
        }
        assert!(Values::from_tail("not json").is_none());
    }

    /// The chain's hash is a stable on-disk contract: a fixed record at a fixed place
    /// hashes to this value, written here once, forever.
    #[test]
    fn the_hash_of_a_fixed_record_is_pinned() {
        let values = Values::from_record(record());
        let tail = values.hash_tail();
        assert_eq!(
            format!("[1,{tail}"),
            r#"[1,"2025-06-22T15:30:00.000000Z","delete_issue","denied","destructive_flag_missing","confirm",400,"[\"issues:write\"]","alice","demo","http","req-1",434,"delete","{\"issue_id\":\"sha256:0123456789abcdef\"}"]"#
        );
        let first = link_hash(GENESIS_HASH.as_bytes(), 1, &tail);
        assert_eq!(
            std::str::from_utf8(&first).unwrap(),
            "25372bf7d4465cf93296a7fa0d90deb857508ed345c1fc429751d64451013183"
        );
        let second = link_hash(&first, 2, &tail);
        assert_eq!(
            std::str::from_utf8(&second).unwrap(),
            "df9e47412fd9971430bbd8df19654b4f15a156cd71002a6664ef370cd911542e"
        );
    }

    /// `confirmed_by` joins the hashed array only when set: the pinned vector above is
    /// unchanged, and a set value changes the hash.
    #[test]
    fn confirmed_by_is_hashed_only_when_set() {
        let mut confirmed = record();
        confirmed.confirmed_by = Some("user".to_owned());
        let tail = Values::from_record(confirmed).hash_tail();
        assert_eq!(
            format!("[1,{tail}"),
            r#"[1,"2025-06-22T15:30:00.000000Z","delete_issue","denied","destructive_flag_missing","confirm",400,"[\"issues:write\"]","alice","demo","http","req-1",434,"delete","{\"issue_id\":\"sha256:0123456789abcdef\"}","user"]"#
        );
        let plain = Values::from_record(record()).hash_tail();
        assert!(
            link_hash(GENESIS_HASH.as_bytes(), 1, &tail)
                != link_hash(GENESIS_HASH.as_bytes(), 1, &plain)
        );
    }

    /// A record of another kind than `tool` hashes its kind last; a tool's hash is the
    /// pinned one above (chains written before the `kind` column stay valid).
    #[test]
    fn a_kind_other_than_tool_is_hashed_last() {
        let mut read = record();
        read.kind = crate::audit::CallKind::Resource;
        let tail = Values::from_record(read).hash_tail();
        assert!(
            tail.ends_with(r#","{\"issue_id\":\"sha256:0123456789abcdef\"}",null,"resource"]"#),
            "{tail}"
        );
        // Never the same bytes as a tool record whose `confirmed_by` says `resource`.
        let mut lookalike = record();
        lookalike.confirmed_by = Some("resource".to_owned());
        assert_ne!(Values::from_record(lookalike).hash_tail(), tail);
        let first = link_hash(GENESIS_HASH.as_bytes(), 1, &tail);
        assert_ne!(
            std::str::from_utf8(&first).unwrap(),
            "25372bf7d4465cf93296a7fa0d90deb857508ed345c1fc429751d64451013183"
        );
    }

    /// The hash is SHA-256 of exactly the documented bytes.
    #[test]
    fn the_hash_input_is_prev_newline_and_the_json_array() {
        let values = Values::from_record(record());
        let tail = values.hash_tail();
        let input = format!("{GENESIS_HASH}\n[7,{tail}");
        let mut expected = [0u8; 64];
        hex_into(&Sha256::digest(input.as_bytes()), &mut expected);
        assert_eq!(link_hash(GENESIS_HASH.as_bytes(), 7, &tail), expected);
    }
}
