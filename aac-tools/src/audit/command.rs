//! The `audit` command: query, summarize or verify, and print.

use std::io::Write;

use rusqlite::Connection;

use super::format::{TABLE_HEADER, aligned_line, json_text, table_cell, table_row};
use super::query::{Listed, RawRow};
use super::sqlite::{check_table, verify_chain};
use super::{AuditError, AuditQuery};

/// The `audit` command of a server's command line (the one `aac_tools::cli` gives every
/// server): the records, the summary or the chain's verification, as text or JSON.
///
/// ```
/// use aac_tools::audit::{AuditCommand, AuditQuery, Outcome};
/// # fn run(conn: &rusqlite::Connection) -> Result<(), aac_tools::audit::AuditError> {
/// let command = AuditCommand {
///     query: AuditQuery::new().outcome(Outcome::Denied).since("24h")?,
///     json: true,
///     ..AuditCommand::default()
/// };
/// command.run(conn, &mut std::io::stdout())?;
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
    /// Run the command against the database behind `conn` and write its output to
    /// `out`. A broken chain or missing append-only triggers (with `--verify`) are an
    /// error, after the report is written. Nothing is created: without an `aac_audit`
    /// table (or with one of other columns) every form fails, saying so.
    ///
    /// A row this version cannot read back as a record (a `kind` a newer version wrote, a
    /// cell edited in the file) is listed all the same, its cells as stored (escaped as
    /// every cell), with a warning on stderr that names it: the table is append-only, and
    /// one such row must not end every listing. (`--verify` checks its hash as any other.)
    pub fn run(&self, conn: &Connection, out: &mut dyn Write) -> Result<(), AuditError> {
        self.run_with_warnings(conn, out, &mut std::io::stderr())
    }

    /// [`AuditCommand::run`], its warnings (a row it cannot read back) written to
    /// `warnings` instead of stderr.
    pub fn run_with_warnings(
        &self,
        conn: &Connection,
        out: &mut dyn Write,
        warnings: &mut dyn Write,
    ) -> Result<(), AuditError> {
        let io = |e: std::io::Error| AuditError::new(format!("cannot write the output: {e}"));
        check_table(conn)?;
        if self.verify {
            let report = verify_chain(conn)?;
            if self.json {
                let json = super::format::json_text(&report);
                writeln!(out, "{json}").map_err(io)?;
            } else {
                writeln!(out, "{report}").map_err(io)?;
            }
            return verdict(report.problems());
        }
        if self.stats {
            let summary = self.query.summary(conn)?;
            if self.json {
                let json = super::format::json_text(&summary);
                writeln!(out, "{json}").map_err(io)?;
            } else {
                write!(out, "{summary}").map_err(io)?;
            }
            return Ok(());
        }
        // One record at a time, as it is read: a trail of any size is listed in the
        // memory of one record (the table reads it twice, once for the columns' widths).
        if self.json {
            return self.query.for_each_listed(conn, |listed| {
                let mut line = match listed {
                    Listed::Record(record) => json_text(&record),
                    Listed::Unreadable(row) => {
                        warn(warnings, &row);
                        json_text(&row.json())
                    }
                };
                line.push('\n');
                out.write_all(line.as_bytes()).map_err(io)
            });
        }
        // Both reads in one read transaction: one snapshot of a trail a server may be
        // appending to.
        let snapshot = conn.is_autocommit();
        if snapshot {
            conn.execute_batch("BEGIN")
                .map_err(super::sqlite::sql_error)?;
        }
        let listed = self.table(conn, out, warnings);
        if snapshot {
            let _ = conn.execute_batch("COMMIT");
        }
        listed
    }

    /// The records as an aligned table, read twice: once for the columns' widths.
    fn table(
        &self,
        conn: &Connection,
        out: &mut dyn Write,
        warnings: &mut dyn Write,
    ) -> Result<(), AuditError> {
        let io = |e: std::io::Error| AuditError::new(format!("cannot write the output: {e}"));
        let cells = |listed: &Listed| match listed {
            Listed::Record(record) => table_row(record),
            Listed::Unreadable(row) => raw_table_row(row),
        };
        let mut widths: Vec<usize> = TABLE_HEADER.iter().map(|h| h.chars().count()).collect();
        self.query.for_each_listed(conn, |listed| {
            for (w, cell) in widths.iter_mut().zip(cells(&listed)) {
                *w = (*w).max(table_cell(&cell).chars().count());
            }
            Ok(())
        })?;
        out.write_all(aligned_line(&widths, TABLE_HEADER.iter().copied()).as_bytes())
            .map_err(io)?;
        self.query.for_each_listed(conn, |listed| {
            if let Listed::Unreadable(row) = &listed {
                warn(warnings, row);
            }
            let cells = cells(&listed);
            let cells: Vec<_> = cells.iter().map(|cell| table_cell(cell)).collect();
            let line = aligned_line(&widths, cells.iter().map(|cell| cell.as_ref()));
            out.write_all(line.as_bytes()).map_err(io)
        })
    }
}

/// A row the listing shows as stored: said on `warnings` (best effort: a warning that
/// cannot be written does not stop the listing).
fn warn(warnings: &mut dyn Write, row: &RawRow) {
    let _ = writeln!(
        warnings,
        "warning: {} (listed as stored: a newer version's record, or one edited in the file)",
        row.problem
    );
}

/// The cells of [`TABLE_HEADER`] of a row that does not read back, as stored.
fn raw_table_row(row: &RawRow) -> Vec<String> {
    let ms = match row.cells.iter().find(|(name, _)| *name == "duration_us") {
        Some((_, serde_json::Value::Number(n))) if n.is_i64() => {
            format!("{:.3}", n.as_i64().unwrap_or_default() as f64 / 1000.0)
        }
        _ => row.text("duration_us"),
    };
    vec![
        row.seq.to_string(),
        row.text("timestamp"),
        row.text("tool"),
        row.text("outcome"),
        row.text("reason"),
        row.text("status"),
        row.text("principal"),
        row.text("workspace"),
        row.text("transport"),
        row.text("access_level"),
        row.text("confirmed_by"),
        ms,
        row.text("kind"),
    ]
}

/// `Ok` when nothing is wrong, else every problem in one line.
pub(crate) fn verdict(problems: Vec<String>) -> Result<(), AuditError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(AuditError::new(problems.join("; ")))
    }
}
