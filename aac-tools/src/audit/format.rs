//! The audit trail as people read it: an aligned table, JSON lines, the summary as text.
//! Every value a caller chose (a tool name, a principal) is escaped before it reaches a
//! terminal.

use std::fmt::{self, Write as _};

use super::AuditSummary;
use super::sqlite::StoredRecord;

impl fmt::Display for AuditSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} calls: {} success, {} denied, {} error",
            self.total, self.success, self.denied, self.error
        )?;
        // Resource reads, prompts and completions are in the trail beside tool calls.
        if self.per_kind.iter().any(|k| k.kind != "tool") {
            writeln!(f, "\nby kind")?;
            let rows: Vec<Vec<String>> = self
                .per_kind
                .iter()
                .map(|k| {
                    vec![
                        k.kind.clone(),
                        k.total.to_string(),
                        k.success.to_string(),
                        k.denied.to_string(),
                        k.error.to_string(),
                    ]
                })
                .collect();
            f.write_str(&table(
                &["kind", "calls", "success", "denied", "error"],
                &rows,
            ))?;
        }
        writeln!(f, "\ncalls per day")?;
        let rows: Vec<Vec<String>> = self
            .calls_per_day
            .iter()
            .map(|d| {
                vec![
                    d.day.clone(),
                    d.total.to_string(),
                    d.success.to_string(),
                    d.denied.to_string(),
                    d.error.to_string(),
                ]
            })
            .collect();
        f.write_str(&table(
            &["day", "calls", "success", "denied", "error"],
            &rows,
        ))?;
        writeln!(f, "\nmost refused tools")?;
        let rows: Vec<Vec<String>> = self
            .most_refused_tools
            .iter()
            .map(|t| {
                let reasons = t
                    .reasons
                    .iter()
                    .map(|(reason, n)| format!("{reason} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                vec![t.tool.clone(), t.denials.to_string(), reasons]
            })
            .collect();
        f.write_str(&table(&["tool", "denied", "reasons"], &rows))?;
        writeln!(f, "\ndenials per hour by principal and tool")?;
        let rows: Vec<Vec<String>> = self
            .denials_per_hour
            .iter()
            .map(|h| {
                vec![
                    h.hour.clone(),
                    h.principal.clone().unwrap_or_else(|| "-".to_owned()),
                    h.tool.clone(),
                    h.denials.to_string(),
                ]
            })
            .collect();
        f.write_str(&table(&["hour", "principal", "tool", "denied"], &rows))
    }
}

/// The records as an aligned text table, one line per record, with a header.
pub fn format_table(records: &[StoredRecord]) -> String {
    let rows: Vec<Vec<String>> = records.iter().map(table_row).collect();
    table(&TABLE_HEADER, &rows)
}

/// The header of [`format_table`].
/// (`kind` last, so that the columns before it keep their places: a prompt, a completion
/// and a resource read are told from a tool call of the same name.)
pub(crate) const TABLE_HEADER: [&str; 13] = [
    "seq",
    "timestamp",
    "tool",
    "outcome",
    "reason",
    "status",
    "principal",
    "workspace",
    "transport",
    "access",
    "confirmed_by",
    "ms",
    "kind",
];

/// One record's cells in [`format_table`], as stored (not yet made printable).
pub(crate) fn table_row(s: &StoredRecord) -> Vec<String> {
    let r = &s.record;
    let dash = || "-".to_owned();
    vec![
        s.seq.to_string(),
        r.timestamp.clone(),
        r.tool.clone(),
        r.outcome.as_str().to_owned(),
        r.reason.clone().unwrap_or_else(dash),
        r.status.to_string(),
        r.principal.clone().unwrap_or_else(dash),
        r.workspace.clone().unwrap_or_else(dash),
        r.transport.clone(),
        r.access_level
            .map(|a| a.as_str().to_owned())
            .unwrap_or_else(dash),
        r.confirmed_by.clone().unwrap_or_else(dash),
        format!("{:.3}", r.duration_us as f64 / 1000.0),
        r.kind.as_str().to_owned(),
    ]
}

/// The records as JSON lines, one [`StoredRecord`] JSON object per line.
pub fn format_json_lines(records: &[StoredRecord]) -> String {
    let mut out = String::new();
    for record in records {
        out.push_str(&json_text(record));
        out.push('\n');
    }
    out
}

/// `value` as one line of JSON in which every character a terminal or a line reader could
/// take for something else is written as a `\uXXXX` escape: on top of what JSON escapes
/// itself (the C0 controls, `"` and `\`), DEL, the C1 controls (`U+009B` is a CSI),
/// the line and paragraph separators `U+2028`/`U+2029` and `U+0085` (which split a line
/// for some readers), bidi controls and zero-width characters: what [`printable`]
/// escapes in a table. The JSON means the same; the output is one record a line, and
/// shows what the caller sent.
pub(crate) fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    let escaped = |c: char| c as u32 >= 0x7f && c.escape_debug().len() > 1;
    if !json.chars().any(escaped) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if escaped(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// An aligned text table. Every cell goes through [`table_cell`]: the values come
/// from callers (a tool name, a principal), and a newline, an escape sequence or a run of
/// spaces in one must not forge a row or a column, or drive the terminal.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| table_cell(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    out.push_str(&aligned_line(&widths, header.iter().copied()));
    for row in &rows {
        out.push_str(&aligned_line(&widths, row.iter().map(|cell| cell.as_ref())));
    }
    out
}

/// One line of a table: each cell (already [`printable`]) padded to its column's width,
/// two spaces between columns, no trailing space, and a newline.
pub(crate) fn aligned_line<'a>(widths: &[usize], cells: impl Iterator<Item = &'a str>) -> String {
    let mut text = String::new();
    for (i, cell) in cells.enumerate() {
        if i > 0 {
            text.push_str("  ");
        }
        let _ = write!(text, "{cell:<width$}", width = widths[i]);
    }
    let mut line = text.trim_end().to_owned();
    line.push('\n');
    line
}

/// `text` as a cell of a table whose columns are two spaces apart: [`printable`], and a
/// space that begins or ends it or follows another written `\u{20}` (and an empty value
/// written `""`), so that a value
/// (a tool name, a URI, a principal, as a caller wrote it) holds no run of spaces that
/// would read as the gap between two columns, and cannot pass for cells of its own.
pub(crate) fn table_cell(text: &str) -> std::borrow::Cow<'_, str> {
    // Nothing would be no cell at all: an empty value is shown as one.
    if text.is_empty() {
        return std::borrow::Cow::Borrowed("\"\"");
    }
    let shown = printable(text);
    if !shown.starts_with(' ') && !shown.ends_with(' ') && !shown.contains("  ") {
        return shown;
    }
    let mut out = String::with_capacity(shown.len() + 8);
    let last = shown.chars().count().saturating_sub(1);
    let mut after_space = true;
    for (i, c) in shown.chars().enumerate() {
        if c == ' ' && (after_space || i == last) {
            out.push_str("\\u{20}");
        } else {
            out.push(c);
        }
        after_space = c == ' ';
    }
    std::borrow::Cow::Owned(out)
}

/// `text` safe to print on a terminal: control characters and anything else that is not
/// printable (escape sequences, bidirectional overrides, line separators, zero-width and
/// combining marks) become Rust escapes such as `\n` and `\u{1b}`, so that a value can
/// neither break a table's layout nor drive the terminal. A backslash is doubled, so that
/// an escape in the output always stands for the character it names.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    // Rust's printable set keeps some characters a terminal shows as nothing (Hangul
    // fillers, the braille blank, format characters): the confirmation question's list
    // escapes those too.
    let plain = |c: char| {
        ((c != '\\' && c.escape_debug().len() == 1) || c == '\'' || c == '"')
            && !crate::confirm::is_invisible(c)
    };
    if text.chars().all(plain) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if plain(c) {
            out.push(c);
        } else if c.escape_debug().len() == 1 {
            // Invisible, yet printable to Rust: escaped by its code point.
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.extend(c.escape_debug());
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Characters Rust calls printable but a terminal shows as nothing (a Hangul filler,
    /// the braille blank, an Arabic number sign) are escaped by their code point.
    #[test]
    fn blank_looking_characters_are_escaped() {
        let shown = printable("a\u{2800}b\u{3164}c\u{600}d\u{13430}é");
        assert_eq!(shown, "a\\u{2800}b\\u{3164}c\\u{600}d\\u{13430}é");
    }

    #[test]
    fn json_lines_escape_what_could_drive_a_terminal_or_split_a_line() {
        let tool = "a\u{202e}b\u{2066}c\u{200b}d\u{9b}e\u{85}f\u{2028}g\u{7f}h\u{e9}\u{1F600}";
        let record = stored(1, tool, "p\u{202e}");
        let line = format_json_lines(std::slice::from_ref(&record));
        assert_eq!(line.lines().count(), 1);
        for raw in [
            '\u{202e}', '\u{2066}', '\u{200b}', '\u{9b}', '\u{85}', '\u{2028}', '\u{7f}',
        ] {
            assert!(!line.contains(raw), "{raw:?} in {line}");
        }
        assert!(
            line.contains(r"a\u202eb\u2066c\u200bd\u009be\u0085f\u2028g\u007fh"),
            "{line}"
        );
        // Printable characters stay as they are, and the JSON means the same.
        assert!(
            line.contains('\u{e9}') && line.contains('\u{1F600}'),
            "{line}"
        );
        let back: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(back["tool"], tool);
        assert_eq!(back["principal"], "p\u{202e}");
    }
    use crate::audit::AuditRecord;
    use crate::audit::{HourlyDenials, Outcome};

    fn stored(seq: i64, tool: &str, principal: &str) -> StoredRecord {
        StoredRecord {
            seq,
            record: AuditRecord {
                tool: tool.to_owned(),
                outcome: Outcome::Denied,
                reason: Some("unknown_tool".to_owned()),
                check: None,
                status: 404,
                scopes_provided: Vec::new(),
                timestamp: "2026-12-01T05:00:00.000000Z".to_owned(),
                principal: Some(principal.to_owned()),
                workspace: None,
                transport: "stdio".to_owned(),
                request_id: None,
                duration_us: 1000,
                access_level: None,
                arguments: serde_json::json!({}),
                confirmed_by: None,
                kind: crate::audit::CallKind::Tool,
            },
            prev_hash: String::new(),
            hash: String::new(),
        }
    }

    /// A tool name is whatever a caller sent: a newline in it forged a table row, and an
    /// OSC sequence retitled the terminal.
    #[test]
    fn table_cells_cannot_forge_rows_or_drive_the_terminal() {
        let evil =
            "x\n99   2026-01-01T00:00:00.000000Z  get_note  success\x1b]0;pwned\x07\u{202e}\r\t";
        let table = format_table(&[
            stored(1, evil, "mallory\x1b[2J"),
            stored(2, "get_note", "alice"),
        ]);
        assert_eq!(table.lines().count(), 3, "a header and two rows:\n{table}");
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "no control character reaches the terminal: {table:?}"
        );
        assert!(!table.contains('\u{202e}'), "no bidirectional override");
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.contains(r"x\n99 \u{20}\u{20}2026-01-01T00:00:00.000000Z \u{20}get_note \u{20}success\u{1b}]0;pwned\u{7}\u{202e}\r\t"),
            "{row}"
        );
        assert!(row.contains(r"mallory\u{1b}[2J"), "{row}");
        // Nor a column: a run of spaces in a value (`get_issue  success  …` as a tool
        // name, or a principal) is no gap between two columns.
        let forged = "get_issue  success  -  200  oscar  other ";
        let table = format_table(&[stored(1, forged, " mallory  x")]);
        let columns = |line: &str| line.split("  ").filter(|c| !c.is_empty()).count();
        let (header, row) = (table.lines().next().unwrap(), table.lines().nth(1).unwrap());
        assert_eq!(columns(row), columns(header), "{table}");
        assert!(
            row.contains(
                r"get_issue \u{20}success \u{20}- \u{20}200 \u{20}oscar \u{20}other\u{20}"
            ),
            "{row}"
        );
        assert!(row.contains(r"\u{20}mallory \u{20}x"), "{row}");
        assert_eq!(table_cell("a b"), "a b");
        let table = format_table(&[stored(1, "", "")]);
        let (header, row) = (table.lines().next().unwrap(), table.lines().nth(1).unwrap());
        assert_eq!(
            columns(row),
            columns(header),
            "an empty tool is a cell: {table}"
        );
        // Plain text, quotes and non-ASCII letters are left alone; a backslash is doubled.
        assert_eq!(
            printable("notes:read 'é' \"ü\" 日本"),
            "notes:read 'é' \"ü\" 日本"
        );
        assert_eq!(printable(r"a\nb"), r"a\\nb");

        // The summary goes through the same table.
        let summary = AuditSummary {
            total: 1,
            success: 0,
            denied: 1,
            error: 0,
            per_kind: vec![super::super::KindCount {
                kind: "prompt\u{1b}[31m".to_owned(),
                total: 1,
                success: 0,
                denied: 1,
                error: 0,
            }],
            calls_per_day: Vec::new(),
            denials_per_hour: vec![HourlyDenials {
                hour: "2026-12-01T05:00:00Z".to_owned(),
                principal: Some("eve\n".to_owned()),
                tool: evil.to_owned(),
                denials: 1,
            }],
            most_refused_tools: Vec::new(),
        };
        let text = summary.to_string();
        assert!(
            !text.contains('\x1b') && !text.contains("eve\n"),
            "{text:?}"
        );
    }
}
