//! Reading the audit table: filters, a summary for spotting anomalies, formatting as a
//! table or JSON lines, and a ready-made `audit` command for command-line tools.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::Write;

use rusqlite::Connection;
use serde::Serialize;

use super::sqlite::{Row, SELECT_COLUMNS, StoredRecord, verify_chain};
use super::{AuditError, Outcome, canonical_timestamp, format_timestamp};

fn sql_error(err: rusqlite::Error) -> AuditError {
    AuditError::new(format!("cannot read the audit table: {err}"))
}

/// Filters over the `aac_audit` table. Every filter is optional; they combine with AND.
///
/// ```
/// use aac_tools::audit::{AuditQuery, Outcome};
/// # fn run(conn: &rusqlite::Connection) -> Result<(), aac_tools::audit::AuditError> {
/// let denied_today = AuditQuery::new()
///     .outcome(Outcome::Denied)
///     .since("24h")?
///     .fetch(conn)?;
/// print!("{}", aac_tools::audit::format_table(&denied_today));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    tool: Option<String>,
    outcome: Option<Outcome>,
    reason: Option<String>,
    principal: Option<String>,
    workspace: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<usize>,
}

impl AuditQuery {
    /// No filter: every record.
    pub fn new() -> AuditQuery {
        AuditQuery::default()
    }

    /// Only calls of this tool.
    pub fn tool(mut self, tool: impl Into<String>) -> AuditQuery {
        self.tool = Some(tool.into());
        self
    }

    /// Only this outcome.
    pub fn outcome(mut self, outcome: Outcome) -> AuditQuery {
        self.outcome = Some(outcome);
        self
    }

    /// Only this reason (`insufficient_scope`, `destructive_flag_missing`…).
    pub fn reason(mut self, reason: impl Into<String>) -> AuditQuery {
        self.reason = Some(reason.into());
        self
    }

    /// Only calls by this principal (subject).
    pub fn principal(mut self, principal: impl Into<String>) -> AuditQuery {
        self.principal = Some(principal.into());
        self
    }

    /// Only calls in this workspace.
    pub fn workspace(mut self, workspace: impl Into<String>) -> AuditQuery {
        self.workspace = Some(workspace.into());
        self
    }

    /// Only calls that arrived at or after `time`, as [`parse_time`] reads it (an RFC
    /// 3339 timestamp, a date, or an age such as `24h`).
    pub fn since(mut self, time: &str) -> Result<AuditQuery, AuditError> {
        self.since = Some(parse_time(time)?);
        Ok(self)
    }

    /// Only calls that arrived before `time` (see [`since`](Self::since)).
    pub fn until(mut self, time: &str) -> Result<AuditQuery, AuditError> {
        self.until = Some(parse_time(time)?);
        Ok(self)
    }

    /// Only the newest `n` matching records (still listed oldest first).
    pub fn limit(mut self, n: usize) -> AuditQuery {
        self.limit = Some(n);
        self
    }

    /// The `WHERE` clause and its parameters.
    fn filter(&self) -> (String, Vec<String>) {
        let mut clauses: Vec<&str> = Vec::new();
        let mut params: Vec<String> = Vec::new();
        let mut add = |clause: &'static str, value: Option<&str>| {
            if let Some(value) = value {
                clauses.push(clause);
                params.push(value.to_owned());
            }
        };
        add("tool = ?", self.tool.as_deref());
        add("outcome = ?", self.outcome.map(Outcome::as_str));
        add("reason = ?", self.reason.as_deref());
        add("principal = ?", self.principal.as_deref());
        add("workspace = ?", self.workspace.as_deref());
        add("timestamp >= ?", self.since.as_deref());
        add("timestamp < ?", self.until.as_deref());
        let sql = if clauses.is_empty() {
            "1".to_owned()
        } else {
            clauses.join(" AND ")
        };
        (sql, params)
    }

    /// The matching records, oldest first.
    ///
    /// `conn` is any connection to the database (a read-only one is enough), for example
    /// a tool's `tx.conn()` or [`open_reader`](super::open_reader).
    pub fn fetch(&self, conn: &Connection) -> Result<Vec<StoredRecord>, AuditError> {
        let (filter, params) = self.filter();
        let columns = &*SELECT_COLUMNS;
        let sql = match self.limit {
            Some(n) => format!(
                "SELECT * FROM (SELECT {columns} FROM aac_audit WHERE {filter} \
                 ORDER BY seq DESC LIMIT {n}) ORDER BY seq"
            ),
            None => format!("SELECT {columns} FROM aac_audit WHERE {filter} ORDER BY seq"),
        };
        let mut stmt = conn.prepare(&sql).map_err(sql_error)?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params.iter()), Row::from_sql)
            .map_err(sql_error)?;
        let mut records = Vec::new();
        for row in rows {
            records.push(row.map_err(sql_error)?.into_stored()?);
        }
        Ok(records)
    }

    /// A summary of the matching records, for spotting anomalies (the limit is ignored).
    pub fn summary(&self, conn: &Connection) -> Result<AuditSummary, AuditError> {
        let (filter, params) = self.filter();
        let params = || rusqlite::params_from_iter(params.iter());

        let mut stmt = conn
            .prepare(&format!(
                "SELECT substr(timestamp, 1, 10) AS day, count(*), \
                 sum(outcome = 'success'), sum(outcome = 'denied'), sum(outcome = 'error') \
                 FROM aac_audit WHERE {filter} GROUP BY day ORDER BY day"
            ))
            .map_err(sql_error)?;
        let calls_per_day: Vec<DayCount> = stmt
            .query_map(params(), |r| {
                Ok(DayCount {
                    day: r.get(0)?,
                    total: count(r.get(1)?),
                    success: count(r.get(2)?),
                    denied: count(r.get(3)?),
                    error: count(r.get(4)?),
                })
            })
            .and_then(Iterator::collect)
            .map_err(sql_error)?;

        let mut stmt = conn
            .prepare(&format!(
                "SELECT substr(timestamp, 1, 13) || ':00:00Z' AS hour, principal, tool, count(*) \
                 FROM aac_audit WHERE {filter} AND outcome = 'denied' \
                 GROUP BY hour, principal, tool ORDER BY hour, count(*) DESC, principal, tool"
            ))
            .map_err(sql_error)?;
        let denials_per_hour: Vec<HourlyDenials> = stmt
            .query_map(params(), |r| {
                Ok(HourlyDenials {
                    hour: r.get(0)?,
                    principal: r.get(1)?,
                    tool: r.get(2)?,
                    denials: count(r.get(3)?),
                })
            })
            .and_then(Iterator::collect)
            .map_err(sql_error)?;

        let mut stmt = conn
            .prepare(&format!(
                "SELECT tool, coalesce(reason, ''), count(*) FROM aac_audit \
                 WHERE {filter} AND outcome = 'denied' GROUP BY tool, reason"
            ))
            .map_err(sql_error)?;
        let mut by_tool: BTreeMap<String, ToolRefusals> = BTreeMap::new();
        let rows = stmt
            .query_map(params(), |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    count(r.get(2)?),
                ))
            })
            .map_err(sql_error)?;
        for row in rows {
            let (tool, reason, n) = row.map_err(sql_error)?;
            let entry = by_tool.entry(tool.clone()).or_insert_with(|| ToolRefusals {
                tool,
                denials: 0,
                reasons: BTreeMap::new(),
            });
            entry.denials += n;
            entry.reasons.insert(reason, n);
        }
        let mut most_refused_tools: Vec<ToolRefusals> = by_tool.into_values().collect();
        most_refused_tools.sort_by(|a, b| b.denials.cmp(&a.denials).then(a.tool.cmp(&b.tool)));
        most_refused_tools.truncate(MOST_REFUSED);

        let mut summary = AuditSummary {
            total: 0,
            success: 0,
            denied: 0,
            error: 0,
            calls_per_day,
            denials_per_hour,
            most_refused_tools,
        };
        for day in &summary.calls_per_day {
            summary.total += day.total;
            summary.success += day.success;
            summary.denied += day.denied;
            summary.error += day.error;
        }
        Ok(summary)
    }
}

/// How many tools [`AuditSummary::most_refused_tools`] lists.
const MOST_REFUSED: usize = 10;

fn count(n: Option<i64>) -> u64 {
    n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

/// What [`AuditQuery::summary`] found. Its JSON form has the same fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditSummary {
    /// Calls in all.
    pub total: u64,
    /// Calls that succeeded.
    pub success: u64,
    /// Calls refused.
    pub denied: u64,
    /// Calls whose handler failed.
    pub error: u64,
    /// Calls per day (UTC), oldest first.
    pub calls_per_day: Vec<DayCount>,
    /// Denials per hour (UTC), principal and tool: oldest hour first, then most denials.
    pub denials_per_hour: Vec<HourlyDenials>,
    /// The tools refused most often (at most ten), most refused first.
    pub most_refused_tools: Vec<ToolRefusals>,
}

/// The calls of one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayCount {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// Calls in all.
    pub total: u64,
    /// Calls that succeeded.
    pub success: u64,
    /// Calls refused.
    pub denied: u64,
    /// Calls whose handler failed.
    pub error: u64,
}

/// The denials of one principal on one tool within one hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HourlyDenials {
    /// The start of the hour, `YYYY-MM-DDTHH:00:00Z`.
    pub hour: String,
    /// The principal's subject (`None`: no valid credentials).
    pub principal: Option<String>,
    /// The tool.
    pub tool: String,
    /// How many calls were refused.
    pub denials: u64,
}

/// How often one tool was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolRefusals {
    /// The tool (as named by the callers, so unknown tools appear too).
    pub tool: String,
    /// Refusals in all.
    pub denials: u64,
    /// Refusals per reason.
    pub reasons: BTreeMap<String, u64>,
}

impl fmt::Display for AuditSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} calls: {} success, {} denied, {} error",
            self.total, self.success, self.denied, self.error
        )?;
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
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|s| {
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
                format!("{:.3}", r.duration_us as f64 / 1000.0),
            ]
        })
        .collect();
    table(
        &[
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
            "ms",
        ],
        &rows,
    )
}

/// The records as JSON lines, one [`StoredRecord`] JSON object per line.
pub fn format_json_lines(records: &[StoredRecord]) -> String {
    let mut out = String::new();
    for record in records {
        out.push_str(&serde_json::to_string(record).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// An aligned text table. Every cell goes through [`crate::printable`]: the values come
/// from callers (a tool name, a principal), and a newline or an escape sequence in one
/// must not forge a row or drive the terminal.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| crate::printable(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let _ = write!(text, "{cell:<width$}", width = widths[i]);
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(|cell| cell.as_ref()));
    }
    out
}

/// Read a point in time for a filter, as the canonical timestamp stored in the table
/// (`2025-06-22T15:30:00.000000Z`). Accepted:
///
/// - an RFC 3339 timestamp, any offset (`2025-06-22T15:30:00Z`, `2025-06-22T17:30:00+02:00`);
/// - a date, meaning its midnight UTC (`2025-06-22`);
/// - an age, meaning that long before now: a number and `s`, `m`, `h`, `d` or `w`
///   (`90s`, `30m`, `24h`, `7d`, `2w`).
pub fn parse_time(text: &str) -> Result<String, AuditError> {
    let text = text.trim();
    if let Some(canonical) = canonical_timestamp(text) {
        return Ok(canonical);
    }
    if let Some(canonical) = canonical_timestamp(&format!("{text}T00:00:00Z")) {
        return Ok(canonical);
    }
    if let Some(unit) = text.chars().last()
        && let Ok(n) = text[..text.len() - unit.len_utf8()].parse::<u32>()
    {
        let seconds: i64 = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => 0,
        };
        if seconds > 0 {
            let then = time::OffsetDateTime::now_utc()
                - time::Duration::seconds(i64::from(n).saturating_mul(seconds));
            return Ok(format_timestamp(then));
        }
    }
    Err(AuditError::new(format!(
        "cannot read `{text}` as a time: expected an RFC 3339 timestamp \
         (2025-06-22T15:30:00Z), a date (2025-06-22) or an age (30m, 24h, 7d)"
    )))
}

/// The usage line of [`AuditCommand`].
pub const AUDIT_USAGE: &str = "\
usage: audit [--tool T] [--outcome success|denied|error] [--reason R] [--principal P]
             [--workspace W] [--since TIME] [--until TIME] [--limit N]
             [--json] [--stats] [--verify]
TIME is an RFC 3339 timestamp, a date (2025-06-22) or an age (30m, 24h, 7d).
--stats prints a summary (calls per day, most refused tools, denials per hour by
principal and tool) instead of the records; --verify checks the hash chain.";

/// A ready-made `audit` command for a server's command line:
/// `audit [--tool T] [--outcome O] [--since TIME] [--json] [--stats] [--verify] …`
/// (see [`AUDIT_USAGE`]).
///
/// ```
/// use aac_tools::audit::AuditCommand;
/// # fn run(conn: &rusqlite::Connection) -> Result<(), aac_tools::audit::AuditError> {
/// let args = ["--outcome", "denied", "--since", "24h", "--json"];
/// AuditCommand::parse(args)?.run(conn, &mut std::io::stdout())?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditCommand {
    /// The filters.
    pub query: AuditQuery,
    /// JSON lines (records) or JSON (summary, verification) instead of text.
    pub json: bool,
    /// The summary instead of the records.
    pub stats: bool,
    /// Verify the hash chain instead of listing records.
    pub verify: bool,
}

impl AuditCommand {
    /// Read the arguments that follow `audit` (`--flag value` or `--flag=value`).
    pub fn parse<I, S>(args: I) -> Result<AuditCommand, AuditError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut command = AuditCommand::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let arg = arg.as_ref();
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
                _ => (arg, None),
            };
            match flag {
                "--json" => command.json = true,
                "--stats" => command.stats = true,
                "--verify" => command.verify = true,
                "--tool" | "--outcome" | "--reason" | "--principal" | "--workspace" | "--since"
                | "--until" | "--limit" => {
                    let value = match inline {
                        Some(value) => value,
                        None => args.next().map(|v| v.as_ref().to_owned()).ok_or_else(|| {
                            AuditError::new(format!("`{flag}` needs a value\n{AUDIT_USAGE}"))
                        })?,
                    };
                    let q = std::mem::take(&mut command.query);
                    command.query = match flag {
                        "--tool" => q.tool(value),
                        "--reason" => q.reason(value),
                        "--principal" => q.principal(value),
                        "--workspace" => q.workspace(value),
                        "--since" => q.since(&value)?,
                        "--until" => q.until(&value)?,
                        "--limit" => q.limit(value.parse().map_err(|_| {
                            AuditError::new(format!("`--limit` needs a number, not `{value}`"))
                        })?),
                        _ => q.outcome(match value.as_str() {
                            "success" => Outcome::Success,
                            "denied" => Outcome::Denied,
                            "error" => Outcome::Error,
                            other => {
                                return Err(AuditError::new(format!(
                                    "unknown outcome `{other}`; expected `success`, `denied` or `error`"
                                )));
                            }
                        }),
                    };
                }
                other => {
                    return Err(AuditError::new(format!(
                        "unknown argument `{other}`\n{AUDIT_USAGE}"
                    )));
                }
            }
        }
        Ok(command)
    }

    /// Run the command against the database behind `conn` and write its output to
    /// `out`. A broken chain (with `--verify`) is an error, after the report is written.
    pub fn run(&self, conn: &Connection, out: &mut dyn Write) -> Result<(), AuditError> {
        let io = |e: std::io::Error| AuditError::new(format!("cannot write the output: {e}"));
        if self.verify {
            let report = verify_chain(conn)?;
            if self.json {
                let json = serde_json::to_string(&report).unwrap_or_default();
                writeln!(out, "{json}").map_err(io)?;
            } else {
                writeln!(out, "{report}").map_err(io)?;
            }
            return match report.broken {
                Some(broken) => Err(AuditError::new(format!(
                    "the audit chain is broken at {broken}"
                ))),
                None => Ok(()),
            };
        }
        if self.stats {
            let summary = self.query.summary(conn)?;
            if self.json {
                let json = serde_json::to_string(&summary).unwrap_or_default();
                writeln!(out, "{json}").map_err(io)?;
            } else {
                write!(out, "{summary}").map_err(io)?;
            }
            return Ok(());
        }
        let records = self.query.fetch(conn)?;
        let text = if self.json {
            format_json_lines(&records)
        } else {
            format_table(&records)
        };
        out.write_all(text.as_bytes()).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditRecord;

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
            row.contains(r"x\n99   2026-01-01T00:00:00.000000Z  get_note  success\u{1b}]0;pwned\u{7}\u{202e}\r\t"),
            "{row}"
        );
        assert!(row.contains(r"mallory\u{1b}[2J"), "{row}");
        // Plain text, quotes and non-ASCII letters are left alone; a backslash is doubled.
        assert_eq!(
            crate::printable("notes:read 'é' \"ü\" 日本"),
            "notes:read 'é' \"ü\" 日本"
        );
        assert_eq!(crate::printable(r"a\nb"), r"a\\nb");

        // The summary goes through the same table.
        let summary = AuditSummary {
            total: 1,
            success: 0,
            denied: 1,
            error: 0,
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
