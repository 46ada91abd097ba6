//! Walking the hash chain.

use std::fmt;

use rusqlite::Connection;
use serde::Serialize;

use super::row::Row;
use super::table::{
    AUDIT_TABLE, GENESIS_HASH, SELECT_COLUMNS, check_table, foreign_triggers, missing_triggers,
    sql_error,
};
use crate::audit::AuditError;

/// What [`verify_chain`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainReport {
    /// Records checked (up to and including the first broken one).
    pub checked: u64,
    /// The last record's `seq` and `hash` when the chain is intact: note them somewhere
    /// else to detect a later truncation of the table.
    pub head: Option<(i64, String)>,
    /// The first broken link, if any.
    pub broken: Option<BrokenLink>,
    /// The append-only triggers (`aac_audit_no_update`, `aac_audit_no_delete`) that are
    /// missing or not the ones the sink creates: with them gone, the database no longer
    /// refuses an `UPDATE` or `DELETE` of a record. Empty when both are in place.
    pub missing_triggers: Vec<String>,
    /// Triggers on `aac_audit` that the sink did not create: one can drop a record as it
    /// is inserted, leaving a chain that verifies without it. Empty when there are none.
    pub foreign_triggers: Vec<String>,
    /// What SQLite's `PRAGMA integrity_check` says of `aac_audit` and its indexes, when it
    /// finds something (at most 10 lines, each cut to 200 characters). The chain is
    /// walked by `seq`, through the table itself; an index that disagrees with the table
    /// (an entry edited in the file) makes every query that goes through it (`--since`,
    /// the dashboard) miss records the chain holds. Empty when the check says `ok`.
    pub integrity: Vec<String>,
}

/// The most lines of [`ChainReport::integrity`] (SQLite lists up to 100).
const MOST_INTEGRITY_LINES: usize = 10;
/// The longest line of [`ChainReport::integrity`], in characters.
const LONGEST_INTEGRITY_LINE: usize = 200;

impl ChainReport {
    /// Whether every record links to the previous one and matches its hash.
    pub fn is_intact(&self) -> bool {
        self.broken.is_none()
    }

    /// What is wrong, one phrase each: the broken link, the missing triggers. Empty when
    /// the chain is intact and guarded.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(broken) = &self.broken {
            problems.push(format!("the audit chain is broken at {broken}"));
        }
        if !self.missing_triggers.is_empty() {
            problems.push(format!(
                "append-only triggers of `aac_audit` missing or altered ({}): records can be \
                 changed or deleted without the database refusing (a trail of an older \
                 release lacks some until the server, or a command that writes such as \
                 `init`, opens it with this one: they are made then)",
                shown(&self.missing_triggers, ", ")
            ));
        }
        if !self.foreign_triggers.is_empty() {
            problems.push(format!(
                "triggers on `aac_audit` that are not the framework's ({}): one can drop \
                 records as they are written, unseen by the chain",
                shown(&self.foreign_triggers, ", ")
            ));
        }
        if !self.integrity.is_empty() {
            problems.push(format!(
                "SQLite's integrity check of `aac_audit` and its indexes fails ({}): a query \
                 through an index (`--since`, a dashboard) may miss records the chain holds",
                shown(&self.integrity, "; ")
            ));
        }
        problems
    }
}

impl fmt::Display for ChainReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.broken, &self.head) {
            (Some(broken), _) => write!(f, "chain broken: {broken}"),
            (None, Some((seq, hash))) => write!(
                f,
                "chain intact: {} records, head seq {seq} hash {hash}",
                self.checked
            ),
            (None, None) => f.write_str("chain intact: no records"),
        }?;
        if !self.missing_triggers.is_empty() {
            write!(
                f,
                "\nappend-only triggers missing or altered: {}",
                shown(&self.missing_triggers, ", ")
            )?;
        }
        if !self.foreign_triggers.is_empty() {
            write!(
                f,
                "\ntriggers on aac_audit that are not the framework's: {}",
                shown(&self.foreign_triggers, ", ")
            )?;
        }
        if !self.integrity.is_empty() {
            write!(
                f,
                "\nSQLite's integrity check of aac_audit and its indexes: {}",
                shown(&self.integrity, "; ")
            )?;
        }
        Ok(())
    }
}

/// `texts` read from the database, each escaped as a table cell is (a name or a message
/// written by whoever could write the file must not drive the terminal), joined.
fn shown(texts: &[String], separator: &str) -> String {
    texts
        .iter()
        .map(|text| crate::audit::format::printable(text))
        .collect::<Vec<_>>()
        .join(separator)
}

/// The first place where the chain does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenLink {
    /// The `seq` of the first record that does not verify.
    pub seq: i64,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for BrokenLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "record {}: {}", self.seq, self.problem)
    }
}

/// Walk the whole chain in `seq` order and report the first broken link: a gap in
/// `seq` (a deleted record), a `prev_hash` that is not the previous record's hash (a
/// deleted, inserted or re-hashed record), or a hash that does not match the record's
/// contents (an edited record).
///
/// It also reports the append-only triggers that are missing or altered
/// ([`ChainReport::missing_triggers`]) and any other trigger on the table
/// ([`ChainReport::foreign_triggers`]), and fails, creating nothing, when there is no
/// `aac_audit` table or one of other columns: a trail that is gone is not an empty one.
///
/// It runs SQLite's `PRAGMA integrity_check` on the table and its indexes
/// ([`ChainReport::integrity`]): the walk reads the table by `seq`, and an index edited in
/// the file to disagree with it hides records from the queries that use it.
///
/// Truncation of the newest records leaves an intact, shorter chain: compare
/// [`ChainReport::head`] with a head noted earlier to catch it.
pub fn verify_chain(conn: &Connection) -> Result<ChainReport, AuditError> {
    check_table(conn)?;
    let missing_triggers = missing_triggers(conn)?;
    let foreign_triggers = foreign_triggers(conn)?;
    let integrity = integrity(conn);
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {} FROM {AUDIT_TABLE} ORDER BY seq",
            *SELECT_COLUMNS
        ))
        .map_err(sql_error)?;
    let mut rows = stmt.query([]).map_err(sql_error)?;
    let mut checked = 0u64;
    let mut prev: Option<(i64, String)> = None;
    while let Some(r) = rows.next().map_err(sql_error)? {
        checked += 1;
        let row = match Row::read(r) {
            Ok(row) => row,
            Err(bad) => {
                return Ok(ChainReport {
                    checked,
                    head: None,
                    broken: Some(BrokenLink {
                        seq: bad.seq,
                        problem: bad.problem,
                    }),
                    missing_triggers,
                    foreign_triggers,
                    integrity,
                });
            }
        };
        let (expected_seq, expected_prev) = match &prev {
            Some((seq, hash)) => (seq + 1, hash.as_str()),
            None => (1, GENESIS_HASH),
        };
        let problem = if row.seq > expected_seq {
            Some(format!(
                "records {expected_seq} to {} are missing (deleted)",
                row.seq - 1
            ))
        } else if row.seq < expected_seq {
            Some(format!(
                "a record numbered {} precedes the chain's first record, 1",
                row.seq
            ))
        } else if row.prev_hash != expected_prev {
            Some(match &prev {
                Some((seq, _)) => format!(
                    "prev_hash does not match the hash of record {seq} (a record was removed, \
                     inserted or re-hashed)"
                ),
                None => "the first record's prev_hash is not the genesis hash".to_owned(),
            })
        } else if row.compute_hash() != row.hash {
            Some("contents do not match the record's hash (the record was edited)".to_owned())
        } else {
            None
        };
        if let Some(problem) = problem {
            return Ok(ChainReport {
                checked,
                head: None,
                broken: Some(BrokenLink {
                    seq: row.seq,
                    problem,
                }),
                missing_triggers,
                foreign_triggers,
                integrity,
            });
        }
        prev = Some((row.seq, row.hash));
    }
    Ok(ChainReport {
        checked,
        head: prev,
        broken: None,
        missing_triggers,
        foreign_triggers,
        integrity,
    })
}

/// What `PRAGMA integrity_check` finds wrong with `aac_audit` and its indexes, bounded
/// (a damaged file can make SQLite list a hundred lines, each naming what the file says),
/// or why it could not run: nothing when it says `ok`.
fn integrity(conn: &Connection) -> Vec<String> {
    let bounded = |line: &str| -> String {
        let mut cut: String = line.chars().take(LONGEST_INTEGRITY_LINE).collect();
        if cut.len() < line.len() {
            cut.push('…');
        }
        cut
    };
    let check = || -> Result<Vec<String>, rusqlite::Error> {
        let mut stmt = conn.prepare(&format!("PRAGMA main.integrity_check({AUDIT_TABLE})"))?;
        let mut rows = stmt.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let line: String = row.get(0)?;
            if line == "ok" {
                continue;
            }
            if found.len() == MOST_INTEGRITY_LINES {
                found.push("…".to_owned());
                break;
            }
            found.push(bounded(&line));
        }
        Ok(found)
    };
    check().unwrap_or_else(|e| vec![bounded(&format!("the check could not run: {e}"))])
}
