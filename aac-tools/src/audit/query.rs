//! Reading the audit table: filters, the records they select, and a summary for spotting
//! anomalies.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use super::sqlite::{Row, SELECT_COLUMNS, StoredRecord};
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
    kind: Option<super::CallKind>,
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

    /// Only calls of this kind (`tool`, `resource`, `prompt`, `completion`).
    pub fn kind(mut self, kind: super::CallKind) -> AuditQuery {
        self.kind = Some(kind);
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

    /// Only the newest `n` matching records (still listed oldest first). SQLite counts to
    /// `i64::MAX`: a larger `n` means as many.
    pub fn limit(mut self, n: usize) -> AuditQuery {
        self.limit = Some(n.min(usize::try_from(i64::MAX).unwrap_or(usize::MAX)));
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
        add("kind = ?", self.kind.map(super::CallKind::as_str));
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
        let mut records = Vec::new();
        self.for_each(conn, |record| {
            records.push(record);
            Ok(())
        })?;
        Ok(records)
    }

    /// [`AuditQuery::fetch`], one record at a time, without holding them all: for a trail
    /// larger than memory. Stops at the first error `each` returns.
    pub fn for_each(
        &self,
        conn: &Connection,
        mut each: impl FnMut(StoredRecord) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        self.for_each_listed(conn, |listed| match listed {
            Listed::Record(record) => each(record),
            Listed::Unreadable(row) => Err(AuditError::new(row.problem)),
        })
    }

    /// [`AuditQuery::for_each`] for a listing, which never stops at a row this version
    /// cannot read back (a `kind` a newer version wrote, a cell edited in the file): the
    /// append-only table cannot be cleaned of it, so it would end every listing for good.
    /// Such a row comes as [`Listed::Unreadable`], its cells as stored.
    pub(crate) fn for_each_listed(
        &self,
        conn: &Connection,
        mut each: impl FnMut(Listed) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
        if !conn.is_autocommit() {
            // In the caller's transaction (a tool's): its snapshot is the caller's.
            return self.for_each_listed_at_once(conn, each);
        }
        // Page by page, each page read in a transaction of its own and handed on after
        // it ended: a reader that held one snapshot for the whole listing (`audit` piped
        // into a pager left open, a listing of millions of records) kept SQLite from
        // starting its write-ahead log over, which grew with every write meanwhile. The
        // trail only grows, so the pages add up to one reading of it as it was.
        let (filter, params) = self.filter();
        let params = || rusqlite::params_from_iter(params.iter());
        // The first and last matching records as the listing starts, found as the filter
        // would be (`--since` through the timestamp index): the pages, read in `seq`
        // order, go from one to the other, never through the rest of the trail (a listing
        // of the last hour of a 3-million-record trail would read it all from its start),
        // and no record appended since is in them.
        let (first, last): (Option<i64>, Option<i64>) = conn
            .query_row(
                &format!("SELECT min(seq), max(seq) FROM aac_audit WHERE {filter}"),
                params(),
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sql_error)?;
        let (Some(first), Some(last_seq)) = (first, last) else {
            return Ok(());
        };
        let mut after: i64 = match self.limit {
            Some(0) => return Ok(()),
            Some(n) => conn
                .query_row(
                    &format!(
                        "SELECT seq FROM aac_audit WHERE {filter} AND seq <= {last_seq} \
                         ORDER BY seq DESC LIMIT 1 OFFSET {}",
                        n - 1
                    ),
                    params(),
                    |r| r.get::<_, i64>(0),
                )
                .optional()
                .map_err(sql_error)?
                .map_or(first - 1, |nth| nth - 1),
            None => first - 1,
        };
        let columns = &*SELECT_COLUMNS;
        loop {
            let sql = format!(
                "SELECT {columns} FROM aac_audit WHERE {filter} AND seq > {after} \
                 AND seq <= {last_seq} ORDER BY seq LIMIT {LISTING_PAGE}"
            );
            let mut page = Vec::new();
            {
                let mut stmt = conn.prepare(&sql).map_err(sql_error)?;
                let mut rows = stmt.query(params()).map_err(sql_error)?;
                while let Some(row) = rows.next().map_err(sql_error)? {
                    page.push(listed(row));
                }
            }
            let Some(end) = page.last().map(Listed::seq) else {
                return Ok(());
            };
            after = end;
            for listed in page {
                each(listed)?;
            }
        }
    }

    /// [`AuditQuery::for_each_listed`] in one statement, inside the caller's transaction.
    fn for_each_listed_at_once(
        &self,
        conn: &Connection,
        mut each: impl FnMut(Listed) -> Result<(), AuditError>,
    ) -> Result<(), AuditError> {
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
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(sql_error)?;
        while let Some(row) = rows.next().map_err(sql_error)? {
            each(listed(row))?;
        }
        Ok(())
    }

    /// A summary of the matching records, for spotting anomalies (the limit is ignored).
    /// It counts calls, not records: a record that counts refusals answered without one
    /// of their own (past a rate limit, or the rest of a refused batch) stands for each.
    pub fn summary(&self, conn: &Connection) -> Result<AuditSummary, AuditError> {
        // Its queries in one read transaction (unless `conn` is in one already): each
        // would otherwise read the trail as it is when it runs, and on a trail a server
        // appends to, the totals by day, by kind and by hour would disagree.
        let snapshot = conn.is_autocommit();
        if snapshot {
            conn.execute_batch("BEGIN").map_err(sql_error)?;
        }
        let summary = self.summary_of(conn);
        if snapshot {
            let _ = conn.execute_batch("COMMIT");
        }
        summary
    }

    /// [`AuditQuery::summary`], in the transaction `conn` is in.
    fn summary_of(&self, conn: &Connection) -> Result<AuditSummary, AuditError> {
        let (filter, params) = self.filter();
        let params = || rusqlite::params_from_iter(params.iter());

        let mut stmt = conn
            .prepare(&format!(
                "SELECT substr(timestamp, 1, 10) AS day, sum({CALLS_OF_A_RECORD_SQL}), \
                 sum({CALLS_OF_A_RECORD_SQL} * (outcome = 'success')), sum({CALLS_OF_A_RECORD_SQL} * (outcome = 'denied')), \
                 sum({CALLS_OF_A_RECORD_SQL} * (outcome = 'error')) \
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

        // At most `PER_HOUR` rows an hour, then one of the rest: a caller can make every
        // refusal a group of its own (a new tool name each call), and a summary of one
        // line per record took 869 MB for a million of them.
        let mut stmt = conn
            .prepare(&format!(
                "WITH groups AS (SELECT substr(timestamp, 1, 13) || ':00:00Z' AS hour, principal, \
                 {TOOL_AS_COUNTED_SQL} AS shown_tool, sum({CALLS_OF_A_RECORD_SQL}) AS denials \
                 FROM aac_audit WHERE {filter} AND outcome = 'denied' \
                 GROUP BY hour, principal, shown_tool), \
                 ranked AS (SELECT *, row_number() OVER (PARTITION BY hour \
                 ORDER BY denials DESC, principal, shown_tool) AS place FROM groups) \
                 SELECT hour, principal, shown_tool, denials, place FROM ranked WHERE place <= {PER_HOUR} \
                 UNION ALL \
                 SELECT hour, NULL, '{OTHERS} (' || count(*) || ')', sum(denials), {PER_HOUR} + 1 \
                 FROM ranked WHERE place > {PER_HOUR} GROUP BY hour \
                 ORDER BY 1, 5"
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

        // The reasons of the most refused tools only, chosen in SQL: every tool's first
        // (a million tool names, a million entries here). Not materialized: read twice
        // from the table rather than every refusal copied into a temporary one.
        let mut stmt = conn
            .prepare(&format!(
                "WITH refused AS NOT MATERIALIZED (SELECT {TOOL_AS_COUNTED_SQL} AS shown_tool, reason, \
                 {CALLS_OF_A_RECORD_SQL} AS calls FROM aac_audit WHERE {filter} AND outcome = 'denied'), \
                 most AS (SELECT shown_tool FROM refused GROUP BY shown_tool \
                 ORDER BY sum(calls) DESC, shown_tool LIMIT {MOST_REFUSED}) \
                 SELECT shown_tool, coalesce(reason, ''), sum(calls) FROM refused \
                 WHERE shown_tool IN most GROUP BY shown_tool, reason"
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

        let mut stmt = conn
            .prepare(&format!(
                "SELECT kind, sum({CALLS_OF_A_RECORD_SQL}), sum({CALLS_OF_A_RECORD_SQL} * (outcome = 'success')), \
                 sum({CALLS_OF_A_RECORD_SQL} * (outcome = 'denied')), sum({CALLS_OF_A_RECORD_SQL} * (outcome = 'error')) \
                 FROM aac_audit WHERE {filter} GROUP BY kind ORDER BY kind"
            ))
            .map_err(sql_error)?;
        let per_kind: Vec<KindCount> = stmt
            .query_map(params(), |r| {
                Ok(KindCount {
                    kind: r.get(0)?,
                    total: count(r.get(1)?),
                    success: count(r.get(2)?),
                    denied: count(r.get(3)?),
                    error: count(r.get(4)?),
                })
            })
            .and_then(Iterator::collect)
            .map_err(sql_error)?;

        let mut summary = AuditSummary {
            total: 0,
            success: 0,
            denied: 0,
            error: 0,
            per_kind,
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

/// A row of a listing: a record, or a row this version cannot read back.
// One at a time, handed on and dropped: a box would only cost each record an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Listed {
    Record(StoredRecord),
    Unreadable(RawRow),
}

impl Listed {
    /// The row's place in the table.
    fn seq(&self) -> i64 {
        match self {
            Listed::Record(record) => record.seq,
            Listed::Unreadable(row) => row.seq,
        }
    }
}

/// A row of `aac_audit` that does not read back as a record, its cells as stored.
pub(crate) struct RawRow {
    /// The row's `seq`.
    pub(crate) seq: i64,
    /// Why it does not read back, naming its record and column (already escaped).
    pub(crate) problem: String,
    /// Each column's name and its cell as stored (text read as UTF-8, lossily).
    pub(crate) cells: Vec<(&'static str, serde_json::Value)>,
}

impl RawRow {
    fn read(row: &rusqlite::Row<'_>, problem: String) -> RawRow {
        use rusqlite::types::ValueRef;
        let cells: Vec<(&'static str, serde_json::Value)> = super::AUDIT_COLUMNS
            .iter()
            .enumerate()
            .map(|(i, &name)| {
                let value = match row.get_ref(i) {
                    Ok(ValueRef::Null) | Err(_) => serde_json::Value::Null,
                    Ok(ValueRef::Integer(n)) => n.into(),
                    Ok(ValueRef::Real(x)) => x.into(),
                    Ok(ValueRef::Text(text)) => String::from_utf8_lossy(text).into_owned().into(),
                    Ok(ValueRef::Blob(bytes)) => format!("x'{}'", crate::hex::encode(bytes)).into(),
                };
                (name, value)
            })
            .collect();
        let seq = cells
            .first()
            .and_then(|(_, v)| v.as_i64())
            .unwrap_or_default();
        RawRow {
            seq,
            problem,
            cells,
        }
    }

    /// The cell of `column`, as text (`-` for NULL).
    pub(crate) fn text(&self, column: &str) -> String {
        match self.cells.iter().find(|(name, _)| *name == column) {
            None | Some((_, serde_json::Value::Null)) => "-".to_owned(),
            Some((_, serde_json::Value::String(text))) => text.clone(),
            Some((_, other)) => other.to_string(),
        }
    }

    /// The row as a JSON object: each column's cell as stored (`scopes_provided` and
    /// `arguments` as the JSON they hold when they hold some), and `unreadable`, why.
    pub(crate) fn json(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        for (name, value) in &self.cells {
            let value = match (name, value) {
                (&("scopes_provided" | "arguments"), serde_json::Value::String(text)) => {
                    serde_json::from_str(text).unwrap_or_else(|_| value.clone())
                }
                _ => value.clone(),
            };
            object.insert((*name).to_owned(), value);
        }
        object.insert("unreadable".to_owned(), self.problem.clone().into());
        serde_json::Value::Object(object)
    }
}

/// How many records a listing reads in one transaction.
const LISTING_PAGE: usize = 1000;

/// One row of a listing: the record, or the row as stored when it does not read back.
fn listed(row: &rusqlite::Row<'_>) -> Listed {
    let read = Row::read(row)
        .map_err(|bad| format!("audit record {}: {}", bad.seq, bad.problem))
        .and_then(|read| read.into_stored().map_err(|e| e.to_string()));
    match read {
        Ok(record) => Listed::Record(record),
        Err(problem) => Listed::Unreadable(RawRow::read(row, problem)),
    }
}

/// How many tools [`AuditSummary::most_refused_tools`] lists.
const MOST_REFUSED: usize = 10;

/// How many (principal, tool) rows of an hour [`AuditSummary::denials_per_hour`] lists,
/// the most refused first; the rest of the hour's denials are one more row, whose tool
/// is [`OTHERS`] with their count of groups.
pub const PER_HOUR: usize = 10;

/// The tool of the row that sums an hour's denials past [`PER_HOUR`]: `(others) (N)`,
/// N the number of (principal, tool) groups in it.
pub const OTHERS: &str = "(others)";

/// SQLite's expression of how many calls a row of `aac_audit` stands for, for a count of
/// your own (`SELECT sum(...) FROM aac_audit`, as `AuditQuery::summary` and the reference
/// dashboard do): one, but a count the framework writes for calls answered without a
/// record of their own stands for each of them: refusals past a rate
/// limit (`rate_limited`, 429, arguments `{"suppressed": n}` and perhaps a `peer`), and
/// the calls of a refused batch past those recorded one by one (tool `(unknown)`,
/// arguments `{"more_calls": n}`), of any kind (a count of reads is a `resource` record of
/// one of those two names). Neither has a request id, and a caller's own arguments
/// never reach the trail as such a number (their values are kept hashed, and no tool may
/// keep one of these names: `Registry` refuses it), so no caller's text counts as more
/// than one call. One count stands for at most 10^12 calls, so that no sum overflows.
pub const CALLS_OF_A_RECORD_SQL: &str = "(CASE WHEN request_id IS NOT NULL \
          OR NOT json_valid(arguments) THEN 1 \
     WHEN json_type(arguments) <> 'object' THEN 1 \
     WHEN kind <> 'tool' AND tool NOT IN ('(rate limited)', '(unknown)') THEN 1 \
     WHEN reason = 'rate_limited' AND status = 429 \
          AND json_type(arguments, '$.suppressed') = 'integer' \
          AND NOT EXISTS (SELECT 1 FROM json_each(aac_audit.arguments) \
                          WHERE key NOT IN ('suppressed', 'peer')) \
          THEN min(max(1, json_extract(arguments, '$.suppressed')), 1000000000000) \
     WHEN tool = '(unknown)' AND json_type(arguments, '$.more_calls') = 'integer' \
          AND NOT EXISTS (SELECT 1 FROM json_each(aac_audit.arguments) WHERE key <> 'more_calls') \
          THEN min(max(1, json_extract(arguments, '$.more_calls')), 1000000000000) \
     ELSE 1 END)";

/// SQLite's expression of the tool a count names: the name a row of `aac_audit` holds, but
/// `(rate limited)`, the framework's name of a count of refusals past a principal's rate,
/// only for such a record (a caller may call a tool of that name; it is then `(unknown)`,
/// as the tool it is not).
pub const TOOL_AS_COUNTED_SQL: &str = "(CASE WHEN tool = '(rate limited)' \
     AND reason IS NOT 'rate_limited' THEN '(unknown)' ELSE tool END)";

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
    /// The calls of each kind (tool calls, resource reads, prompts, completions), in
    /// the order of their names.
    pub per_kind: Vec<KindCount>,
    /// Calls per day (UTC), oldest first.
    pub calls_per_day: Vec<DayCount>,
    /// Denials per hour (UTC), principal and tool: oldest hour first, then most denials;
    /// at most [`PER_HOUR`] rows an hour, then one row of the rest (principal `None`,
    /// tool `(others) (N)`).
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

/// The calls of one kind (`tool`, `resource`, `prompt`, `completion`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindCount {
    /// The kind, as the `kind` column says it.
    pub kind: String,
    /// Calls in all.
    pub total: u64,
    /// Those that succeeded.
    pub success: u64,
    /// Those refused.
    pub denied: u64,
    /// Those whose handler failed.
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

/// Read a point in time for a filter, as the canonical timestamp stored in the table
/// (`2025-06-22T15:30:00.000000Z`). Accepted:
///
/// - an RFC 3339 timestamp, any offset (`2025-06-22T15:30:00Z`, `2025-06-22T17:30:00+02:00`);
/// - a date, meaning its midnight UTC (`2025-06-22`);
/// - an age, meaning that long before now: a number and `s`, `m`, `h`, `d` or `w`
///   (`90s`, `30m`, `24h`, `7d`, `2w`).
pub fn parse_time(text: &str) -> Result<String, AuditError> {
    parse_time_at(text, time::OffsetDateTime::now_utc())
}

/// [`parse_time`] with ages counted back from `now`: two ages resolved against one
/// instant compare as they read (`--since 1h --until 1h`, resolved a few microseconds
/// apart, was a window rather than none).
pub(crate) fn parse_time_at(text: &str, now: time::OffsetDateTime) -> Result<String, AuditError> {
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
            // An age past the calendar's start (year -9999) reads as no time at all.
            let then = now
                .checked_sub(time::Duration::seconds(i64::from(n).saturating_mul(seconds)))
                .ok_or_else(|| {
                    AuditError::new(format!(
                        "cannot read `{text}` as a time: that age reaches before the calendar's start"
                    ))
                })?;
            return Ok(format_timestamp(then));
        }
    }
    Err(AuditError::new(format!(
        "cannot read `{text}` as a time: expected an RFC 3339 timestamp \
         (2025-06-22T15:30:00Z), a date (2025-06-22) or an age (30m, 24h, 7d)"
    )))
}
