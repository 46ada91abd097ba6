//! The `audit` command: query, summarize or verify, and print.

use std::io::Write;

use rusqlite::Connection;

use super::sqlite::{check_table, verify_chain};
use super::{AuditError, AuditQuery, format_json_lines, format_table};

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
    pub fn run(&self, conn: &Connection, out: &mut dyn Write) -> Result<(), AuditError> {
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
        let records = self.query.fetch(conn)?;
        let text = if self.json {
            format_json_lines(&records)
        } else {
            format_table(&records)
        };
        out.write_all(text.as_bytes()).map_err(io)
    }
}

/// `Ok` when nothing is wrong, else every problem in one line.
pub(crate) fn verdict(problems: Vec<String>) -> Result<(), AuditError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(AuditError::new(problems.join("; ")))
    }
}
