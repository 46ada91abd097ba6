//! The audit sink on PostgreSQL: the same record, the same columns and the same hash
//! chain as the SQLite sink, one chain for every replica that writes to the database.
//!
//! - **Columns**: the table is made from the SQLite table's one declaration
//!   ([`AUDIT_COLUMNS`](crate::audit::AUDIT_COLUMNS) and their declared types): the same
//!   names, in the same order; integers as `BIGINT`, text as `TEXT`.
//! - **Group commit**: one writer thread per process commits every record waiting for
//!   it in one transaction, and a lone caller commits its own record on its own thread
//!   (the leader/follower worker the SQLite sink uses). The connection is driven by the
//!   thread that appends, with no runtime ([`link`](super::link)): a caller leading on a
//!   worker of the server's runtime stays on it.
//! - **One chain across replicas**: every append locks the one row of `aac_audit_lock`
//!   (`SELECT … FOR UPDATE`, which only the audit role and the owner may) before it reads
//!   the chain's head, so appends from all replicas are serialized, and each batch links
//!   to the last record committed by any of them.
//!   The lock is held from the head's read to the commit: that is the chain's
//!   serialization point, one short transaction per batch, pipelined: two round trips
//!   (the lock and the head; the batch as one prepared insert of arrays, and the
//!   commit), or, when this replica wrote the head itself, one statement in its own
//!   transaction (the lock, then the batch inserted only if the head is still its own;
//!   if not, nothing is, and it goes the two-trip way). `seq` is the table's primary
//!   key: whatever a statement's snapshot saw, two batches can never both follow one
//!   head.
//! - **Least privilege**: the sink logs in as `<prefix>_audit`, which may `INSERT` and
//!   `SELECT` `aac_audit`, and lock the row of `aac_audit_lock`, and nothing else; no role
//!   of the application may `UPDATE` or `DELETE` a record, or touch the lock.
//! - **Fail closed**: when the database cannot be reached, the batch fails, every call
//!   in it is answered 503 `audit_unavailable`, and the sink reports not ready (so the
//!   next calls are refused before their handler runs) until a write succeeds again.
//!   A connection lost around an append (its answer, or the session ended by the
//!   server) leaves the batch in doubt: before its calls are answered, the sink looks for
//!   the batch's last record on a new connection, once the chain's lock is free (the lost
//!   session's transaction holds it to its end), answers them as written if it is there,
//!   and if it is not, appends the batch, once, in the same transaction.
//! - **Verify, queries, summaries**: [`PgSink::mirror`] copies the table into an
//!   in-memory SQLite `aac_audit`, on which `verify_chain`, `AuditQuery` and the
//!   summaries run exactly as on SQLite's own trail.

use std::fmt;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio_postgres::error::{Severity, SqlState};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, SimpleQueryMessage, Statement};

use super::link::{self, Link};
use super::{CONNECT_TIMEOUT, Database, describe};
use crate::BoxFuture;
use crate::audit::sqlite::{
    Cell, MISSING_TABLE, Mirror, OUTCOME_CHECK, PortableRow, declared_columns, integer_columns,
    other_columns,
};
use crate::audit::worker::{Backend, Batching, Health, SinkStats, Worker};
use crate::audit::{
    AUDIT_COLUMNS, AUDIT_TABLE, AuditError, AuditRecord, AuditSink, ChainReport, GENESIS_HASH,
    verify_chain,
};

/// The table of the chain's lock: one row, which every append locks (`FOR UPDATE`) before
/// it reads the chain's head. Only the audit role (and the owner) may lock it: it is
/// granted `SELECT, UPDATE` on the table, and no other role anything, so no data role can
/// take the lock, queue for it, or hold up an append. (An advisory lock, what appends
/// took before, is open to every role: a session-level one taken by a tool's SQL stayed
/// held on its pooled connection and stopped every append of every replica.)
pub(crate) const LOCK_TABLE: &str = "aac_audit_lock";

/// The framework's migration that makes [`LOCK_TABLE`] and its one row (version 3 of the
/// component `aac`). `id` can only be `true`: the table holds one row at most.
pub(crate) const LOCK_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS aac_audit_lock (
    id BOOLEAN PRIMARY KEY DEFAULT true CHECK (id)
);
INSERT INTO aac_audit_lock DEFAULT VALUES ON CONFLICT DO NOTHING;";

/// The statement that takes the chain's lock: it waits for whoever holds it (at most
/// `lock_timeout`) and holds it to the end of its transaction.
fn lock_sql() -> String {
    format!("SELECT FROM {LOCK_TABLE} FOR UPDATE")
}

/// The largest batch one transaction appends.
const MAX_BATCH: usize = 1024;

/// The `CREATE TABLE` of `aac_audit` on PostgreSQL, from the SQLite declaration: the
/// same columns, `NOT NULL` and defaults, and the same `CHECK` of `outcome`.
pub(crate) fn create_table_sql() -> Result<String, AuditError> {
    let columns: Vec<String> = declared_columns()?
        .into_iter()
        .map(|column| {
            let name = column.name;
            if name == "seq" {
                return format!("\"{name}\" BIGINT PRIMARY KEY");
            }
            let ty = if column.integer { "BIGINT" } else { "TEXT" };
            let mut declaration = format!("\"{name}\" {ty}");
            if column.not_null {
                declaration.push_str(" NOT NULL");
            }
            if let Some(default) = &column.default {
                declaration.push_str(&format!(" DEFAULT {default}"));
            }
            if name == "outcome" {
                declaration.push_str(&format!(" CHECK ({OUTCOME_CHECK})"));
            }
            declaration
        })
        .collect();
    Ok(format!(
        "CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} ({});\n\
         CREATE INDEX IF NOT EXISTS aac_audit_timestamp ON {AUDIT_TABLE} (timestamp);",
        columns.join(", ")
    ))
}

/// Create `aac_audit` if missing, and check an existing one has the expected columns.
pub(crate) async fn ensure_table(client: &Client) -> Result<(), AuditError> {
    // A table of other columns is named as such, before its index fails to be made.
    let columns = table_columns(client).await?;
    if !columns.is_empty() && columns != AUDIT_COLUMNS {
        return Err(other_columns(&columns));
    }
    let sql = super::migrating(&create_table_sql()?);
    client
        .batch_execute(&sql)
        .await
        .map_err(|e| AuditError::new(format!("cannot create `aac_audit`: {}", describe(&e))))?;
    let columns = table_columns(client).await?;
    if columns != AUDIT_COLUMNS {
        return Err(other_columns(&columns));
    }
    client
        .batch_execute(&super::migrating(&guards_sql()))
        .await
        .map_err(|e| {
            AuditError::new(format!(
                "cannot make `aac_audit` append-only: {}",
                describe(&e)
            ))
        })?;
    Ok(())
}

/// The function every append-only guard of `aac_audit` runs: it refuses.
const GUARD_FUNCTION: &str = "aac_audit_append_only";

/// Its body, as `pg_proc.prosrc` keeps it.
const GUARD_BODY: &str = "
BEGIN
    RAISE EXCEPTION 'aac_audit is append-only: % of audit records is refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
";

/// The append-only guards of `aac_audit` on PostgreSQL: each trigger's name and its
/// `pg_trigger.tgtype` (row `1`, before `2`, delete `8`, update `16`, truncate `32`). The
/// audit role may only insert and select, but the owner (whose URL every command and
/// replica is given) may do anything its privileges allow: these make the database refuse
/// an `UPDATE`, `DELETE` or `TRUNCATE` of the trail whoever sends it, as SQLite's
/// triggers do, and `audit --verify` names any that is missing, disabled or altered.
const GUARDS: [(&str, i16); 3] = [
    ("aac_audit_no_update", 1 | 2 | 16),
    ("aac_audit_no_delete", 1 | 2 | 8),
    ("aac_audit_no_truncate", 2 | 32),
];

/// The statements that make the guards (again: a migration puts back what was dropped).
fn guards_sql() -> String {
    let mut sql = format!(
        "CREATE OR REPLACE FUNCTION {GUARD_FUNCTION}() RETURNS trigger LANGUAGE plpgsql \
         AS $aac${GUARD_BODY}$aac$;\n"
    );
    for (name, tgtype) in GUARDS {
        let (when, each) = match tgtype & (8 | 16 | 32) {
            8 => ("DELETE", "ROW"),
            16 => ("UPDATE", "ROW"),
            _ => ("TRUNCATE", "STATEMENT"),
        };
        sql.push_str(&format!(
            "DROP TRIGGER IF EXISTS {name} ON {AUDIT_TABLE};\n\
             CREATE TRIGGER {name} BEFORE {when} ON {AUDIT_TABLE} FOR EACH {each} \
             EXECUTE FUNCTION {GUARD_FUNCTION}();\n"
        ));
    }
    sql
}

/// The columns of `aac_audit`, in order; none when there is no such table.
async fn table_columns(client: &Client) -> Result<Vec<String>, AuditError> {
    Ok(client
        .query(
            "SELECT column_name::text FROM information_schema.columns
             WHERE table_schema::text = 'public'::text AND table_name::text = 'aac_audit'::text \
             ORDER BY ordinal_position",
            &[],
        )
        .await
        .map_err(|e| AuditError::new(format!("cannot read `aac_audit`: {}", describe(&e))))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// The insert of a batch in one statement. For any batch (`one` false): one array per
/// column (`$1` to `$n`, `BIGINT[]` or `TEXT[]` as the column is declared), unnested into
/// rows. For a batch of one record (`one`), what a lone caller appends: one value per
/// column. (The same record as arrays costs PostgreSQL far more: `unnest` of `n` arrays
/// fills `n` tuple stores, 60–80 µs of the server's time for one row, where the
/// insert itself takes about 15.)
///
/// With `if_head`, the statement is a transaction of its own (no `BEGIN`, no `COMMIT`:
/// one round trip, as one durable single-row insert is): it takes the chain's lock
/// before any row is inserted (the rows are joined to the lock's), and inserts only if
/// the chain's head is still `$n+1` (its `seq`) and `$n+2` (its hash), the head this
/// connection wrote. The head is read in the statement's snapshot, which may be older
/// than the lock: if another replica appended in between, the first row's `seq` is
/// then already taken, and the primary key refuses the batch (a unique violation,
/// taken as a wrong guess), so a stale snapshot can fail the guess, never fork the
/// chain.
fn insert_sql(integer: &[bool], if_head: bool, one: bool) -> String {
    let columns: Vec<String> = AUDIT_COLUMNS.iter().map(|c| format!("\"{c}\"")).collect();
    let values: Vec<String> = integer
        .iter()
        .enumerate()
        .map(|(i, integer)| {
            let ty = if *integer { "bigint" } else { "text" };
            if one {
                format!("${}::{ty}", i + 1)
            } else {
                // `unnest(a, b, …)` is `ROWS FROM (unnest(a), unnest(b), …)`, written out
                // so that the built-in is named (a multi-argument `unnest` is syntax
                // only when unqualified).
                format!("pg_catalog.unnest(${}::{ty}[])", i + 1)
            }
        })
        .collect();
    let (columns, values) = (columns.join(", "), values.join(", "));
    let rows = if one {
        format!("SELECT {values}")
    } else {
        format!("SELECT batch.* FROM ROWS FROM ({values}) AS batch")
    };
    if if_head {
        let lock = if one { "FROM" } else { "CROSS JOIN" };
        format!(
            "WITH chain_lock AS MATERIALIZED ({}) \
             INSERT INTO {AUDIT_TABLE} ({columns}) {rows} {lock} chain_lock WHERE EXISTS \
             (SELECT 1 FROM (SELECT seq, hash FROM {AUDIT_TABLE} ORDER BY seq DESC LIMIT 1) head \
             WHERE head.seq = ${}::bigint AND head.hash = ${}::text)",
            lock_sql(),
            integer.len() + 1,
            integer.len() + 2
        )
    } else {
        format!("INSERT INTO {AUDIT_TABLE} ({columns}) {rows}")
    }
}

/// The two forms of an insert, as SQL ([`insert_sql`]) or prepared.
struct Forms<T> {
    /// A batch of one record: one value per column.
    one: T,
    /// Any batch: one array per column.
    many: T,
}

impl Forms<String> {
    fn new(integer: &[bool], if_head: bool) -> Forms<String> {
        Forms {
            one: insert_sql(integer, if_head, true),
            many: insert_sql(integer, if_head, false),
        }
    }
}

impl Forms<Statement> {
    /// The statement for `columns` (a batch as one array per column), and its parameters.
    fn bind<'a>(
        &'a self,
        columns: &'a [ColumnValues],
    ) -> (&'a Statement, Vec<&'a (dyn ToSql + Sync)>) {
        if columns.first().is_some_and(|c| c.len() == 1) {
            (&self.one, columns.iter().map(ColumnValues::only).collect())
        } else {
            (
                &self.many,
                columns.iter().map(ColumnValues::value).collect(),
            )
        }
    }
}

/// The transaction, the chain's lock, then the chain's head as it is once the lock is
/// held, in one simple query.
fn open_sql() -> String {
    format!(
        "BEGIN; {}; SELECT seq, hash FROM {AUDIT_TABLE} ORDER BY seq DESC LIMIT 1",
        lock_sql()
    )
}

/// The values of one column for every row of a batch, in its declared type.
enum ColumnValues {
    Int(Vec<Option<i64>>),
    Text(Vec<Option<String>>),
}

impl ColumnValues {
    fn new(integer: bool, rows: usize) -> ColumnValues {
        if integer {
            ColumnValues::Int(Vec::with_capacity(rows))
        } else {
            ColumnValues::Text(Vec::with_capacity(rows))
        }
    }

    /// Append `cell`, converted to the column's type as SQLite's affinity would.
    fn push(&mut self, cell: &Cell) {
        match (self, cell) {
            (ColumnValues::Int(v), Cell::Int(i)) => v.push(Some(*i)),
            (ColumnValues::Int(v), Cell::Text(t)) => v.push(t.parse::<i64>().ok()),
            (ColumnValues::Int(v), Cell::Null) => v.push(None),
            (ColumnValues::Text(v), Cell::Int(i)) => v.push(Some(i.to_string())),
            (ColumnValues::Text(v), Cell::Text(t)) => v.push(Some(t.clone())),
            (ColumnValues::Text(v), Cell::Null) => v.push(None),
        }
    }

    fn len(&self) -> usize {
        match self {
            ColumnValues::Int(v) => v.len(),
            ColumnValues::Text(v) => v.len(),
        }
    }

    fn value(&self) -> &(dyn ToSql + Sync) {
        match self {
            ColumnValues::Int(v) => v,
            ColumnValues::Text(v) => v,
        }
    }

    /// The value of a column of one row.
    fn only(&self) -> &(dyn ToSql + Sync) {
        match self {
            ColumnValues::Int(v) => &v[0],
            ColumnValues::Text(v) => &v[0],
        }
    }
}

struct PgBackend {
    config: tokio_postgres::Config,
    /// The connection, once open, and what drives it.
    session: Option<Session>,
    integer: Vec<bool>,
    sql: Sql,
    last_attempt: Option<Instant>,
    retry_interval: Duration,
    problem: Option<AuditError>,
    /// A batch in doubt that could not be settled (the database could not be reached to
    /// look for it), with what its last record would be: kept, and settled before the next
    /// batch is written, or as the sink ends. At most one: while it is here, no other
    /// batch is written, so none other can be left in doubt.
    unsettled: Option<((i64, String), Vec<PortableRow>)>,
}

/// An open connection: what the sink knows of it, and its socket's half.
struct Session {
    conn: Conn,
    link: Link,
}

impl PgBackend {
    fn connect(&mut self) -> Result<(), AuditError> {
        if self
            .session
            .as_ref()
            .is_some_and(|s| !s.conn.client.is_closed())
        {
            return Ok(());
        }
        self.session = None;
        if let Some(at) = self.last_attempt
            && at.elapsed() < self.retry_interval
            && let Some(problem) = &self.problem
        {
            return Err(problem.clone());
        }
        self.last_attempt = Some(Instant::now());
        let deadline = self
            .config
            .get_connect_timeout()
            .map(|timeout| Instant::now() + *timeout);
        let sql = &self.sql;
        let lock_rows = format!("SELECT pg_catalog.count(*) FROM {LOCK_TABLE}");
        let connected = link::connect(&self.config).and_then(|(client, mut link)| {
            // Planned once per connection, not per batch. (A generic plan, forced, was
            // slower: PostgreSQL's custom plans of the arrays are worth their planning.)
            let prepared = link.run(
                async {
                    tokio::try_join!(
                        client.batch_execute(SESSION_LIMITS),
                        client.prepare(&sql.insert.one),
                        client.prepare(&sql.insert.many),
                        client.prepare(&sql.insert_if_head.one),
                        client.prepare(&sql.insert_if_head.many),
                        client.simple_query(&lock_rows),
                    )
                },
                deadline,
            );
            match prepared {
                // Without its row the lock would lock nothing. (Appends would still never
                // fork the chain, `seq` being the primary key, but concurrent ones would
                // fail.) Only the owner can delete it; a migration puts it back.
                Ok(Ok((.., lock_rows))) if !one_row(&lock_rows) => Err(format!(
                    "`{LOCK_TABLE}` has lost the row of the chain's lock: migrate the \
                     database (`Database::migrate`, which `init` and `serve` run)"
                )),
                Ok(Ok(((), one, many, one_if_head, many_if_head, _))) => Ok(Session {
                    conn: Conn {
                        client,
                        insert: Forms { one, many },
                        insert_if_head: Forms {
                            one: one_if_head,
                            many: many_if_head,
                        },
                        head: None,
                        skip_guess: 0,
                        in_doubt: None,
                        short: None,
                        full: None,
                    },
                    link,
                }),
                Ok(Err(err)) => Err(describe(&err)),
                Err(err) => Err(err.to_string()),
            }
        });
        match connected {
            Ok(session) => {
                self.session = Some(session);
                self.problem = None;
                Ok(())
            }
            Err(err) => {
                let problem =
                    AuditError::new(format!("the audit database cannot be reached: {err}"));
                self.problem = Some(problem.clone());
                Err(problem)
            }
        }
    }
}

impl Backend for PgBackend {
    type Item = PortableRow;

    fn prepare(record: AuditRecord) -> PortableRow {
        PortableRow::from_record(record)
    }

    fn describe(item: &PortableRow) -> String {
        item.describe()
    }

    fn restore(item: &PortableRow) -> Option<AuditRecord> {
        item.restore()
    }

    fn write_batch(&mut self, batch: &[PortableRow]) -> Result<(), AuditError> {
        // A batch left in doubt goes first: until it is settled, nothing else is written
        // (this batch is refused, and handed back, as for any write that failed).
        self.settle_kept()?;
        let mut reopened = false;
        loop {
            self.connect()?;
            let Some(Session { conn, link }) = self.session.as_mut() else {
                return Err(AuditError::new("the audit database is not connected"));
            };
            let deadline = Some(Instant::now() + APPEND_DEADLINE);
            let appended = link.run(conn.append(&self.sql, &self.integer, batch), deadline);
            let (err, lost) = match appended {
                Ok(Ok(())) => match conn.short.take() {
                    None if conn.full.is_some() => {
                        return Err(chain_full(conn.full.take().unwrap_or(i64::MAX)));
                    }
                    None => return Ok(()),
                    Some((rows, records)) => {
                        return Err(AuditError::new(format!(
                            "the audit database took {rows} rows for {records} records: a \
                             trigger or rule on `aac_audit` that is not the framework's drops records"
                        )));
                    }
                },
                Ok(Err(err)) => (describe(&err), !statement_error(&err)),
                // No answer within `APPEND_DEADLINE` (a database, or a proxy on the way,
                // that stalls with the connection open), or the socket could not be waited
                // on: what the database did with the batch is not known; settled on a new
                // connection if its commit was sent, refused otherwise.
                Err(err) => (
                    format!(
                        "cannot wait for the audit database's answer ({err}): the batch may be in the trail"
                    ),
                    false,
                ),
            };
            // Whatever failed, the connection is opened (and its statements prepared) again.
            let in_doubt = conn.in_doubt.take();
            self.session = None;
            if in_doubt.is_none() && lost && !reopened {
                // The connection was found lost (closed by the server while idle: a
                // restart, an idle timeout, an administrator) before anything of the batch
                // was sent to be committed: nothing of it can be in the trail. Once more,
                // on a new connection.
                tracing::info!(
                    error = %err,
                    "the audit database's connection was lost before an append; appending on a new connection"
                );
                reopened = true;
                continue;
            }
            let err = AuditError::new(format!("cannot write to the audit database: {err}"));
            return match in_doubt {
                Some(head) => self.settle(head, batch, err),
                None => Err(err),
            };
        }
    }
}

impl PgBackend {
    /// The connection was lost after the statement that commits `batch` was sent (or
    /// found lost as it was sent: a connection the server closed while it was idle), so
    /// the batch may be durable though its answer never came. On a new connection, in one
    /// transaction that takes the chain's lock (the lost session's transaction, if it
    /// still runs, holds it to its end), look for the batch's last record (`seq`, `hash`)
    /// ([`Conn::find_or_append`]):
    ///
    /// - there: the batch is answered as written, and the connection knows the head;
    /// - not there: it is appended in that transaction, once;
    /// - not known (no connection, the lock still held after [`SETTLE_LOCK_TIMEOUT`]):
    ///   `err`, as for any failed batch.
    fn settle(
        &mut self,
        (seq, hash): (i64, String),
        batch: &[PortableRow],
        err: AuditError,
    ) -> Result<(), AuditError> {
        // Kept as the calls were answered (503, the audit failed), as the records a sink
        // hands back are: found in the trail, the batch stays as it was committed.
        // Kept with the last record of what was sent last, which is what may be in the
        // trail: the batch's own, or that of the append that tried to settle it.
        let keep = |backend: &mut PgBackend, head: (i64, String)| {
            let answered = batch.iter().map(as_unavailable).collect();
            backend.unsettled = Some((head, answered));
            Err(err.clone().in_doubt().kept_by_sink())
        };
        if self.connect().is_err() {
            tracing::warn!(
                seq,
                "the audit database's answer to an append was lost and it cannot be reached: the batch is refused, kept, and settled once the database can be reached"
            );
            return keep(self, (seq, hash));
        }
        let Some(Session { conn, link }) = self.session.as_mut() else {
            return keep(self, (seq, hash));
        };
        let integer = &self.integer;
        let settled = link
            .run(
                async {
                    let settled = conn
                        .find_or_append(integer, batch, (seq, hash.clone()))
                        .await;
                    conn.rolled_back_on_error(settled).await
                },
                Some(Instant::now() + SETTLE_LOCK_TIMEOUT + APPEND_DEADLINE),
            )
            .map_err(|e| e.to_string())
            .and_then(|settled| settled.map_err(|e| describe(&e)));
        match settled {
            Ok(true) => {
                tracing::warn!(
                    seq,
                    "the audit database's answer to an append was lost; the batch was found in the trail and is answered as written"
                );
                Ok(())
            }
            Ok(false) if self.session.as_ref().is_some_and(|s| s.conn.full.is_some()) => {
                let full = self
                    .session
                    .as_mut()
                    .and_then(|session| session.conn.full.take())
                    .unwrap_or(i64::MAX);
                tracing::error!(
                    seq,
                    "a batch in doubt was not in the trail and cannot be appended: the chain's last seq is {full}"
                );
                Err(chain_full(full))
            }
            Ok(false) => {
                tracing::warn!(
                    seq,
                    "the audit database's connection was lost during an append that did not commit; the batch was appended on a new connection"
                );
                Ok(())
            }
            Err(settle) => {
                tracing::warn!(
                    seq,
                    "the audit database's answer to an append was lost and the batch could not be settled ({settle}): it is refused, kept, and settled once the database can be reached",
                );
                // The append that settled it, left in doubt in its turn, is what to look
                // for next: the batch's own last record was not in the trail.
                let sent = self
                    .session
                    .as_mut()
                    .and_then(|session| session.conn.in_doubt.take());
                self.session = None;
                keep(self, sent.unwrap_or((seq, hash)))
            }
        }
    }

    /// Settle the batch kept in doubt, if any ([`PgBackend::settle`]): `Ok` once it is
    /// found in the trail or appended, or when there is none; else it stays kept.
    fn settle_kept(&mut self) -> Result<(), AuditError> {
        let Some((head, batch)) = self.unsettled.take() else {
            return Ok(());
        };
        let err = AuditError::new(
            "cannot write to the audit database: a batch of an earlier append is still in doubt",
        );
        let settled = self.settle(head, &batch, err.clone());
        if settled.is_ok() {
            return Ok(());
        }
        // (`settle` kept it again.) The batch asked for is not in doubt: nothing of it was
        // sent.
        Err(match self.problem.clone() {
            Some(problem) => problem,
            None => err,
        })
    }
}

/// `row` as its call was answered ([`AuditRecord::answered_unavailable`]).
fn as_unavailable(row: &PortableRow) -> PortableRow {
    match row.restore() {
        Some(record) => PortableRow::from_record(record.answered_unavailable()),
        None => row.clone(),
    }
}

impl Drop for PgBackend {
    /// The sink ends (its server stops): one last try at the batch kept in doubt, so that
    /// it is not lost with the process while the database can be reached.
    fn drop(&mut self) {
        if self.unsettled.is_some() {
            self.last_attempt = None;
            if let Err(err) = self.settle_kept() {
                tracing::error!(
                    error = %err,
                    "the audit sink ends with a batch in doubt it could not settle: it may be missing from the trail"
                );
            }
        }
    }
}

/// The sink's session bounds what a stalled replica can hold up, since every replica
/// appends to one chain under one lock:
///
/// - `idle_in_transaction_session_timeout`: an append that reads the head first holds the
///   chain's lock across a round trip. A replica frozen there (a paused VM, a debugger, a
///   network partition) would keep it from every other replica until TCP noticed, hours
///   later; PostgreSQL ends its session after 2 s instead, which releases the lock (and
///   the frozen replica, once it runs again, settles its batch as in doubt).
/// - `lock_timeout`: an append waits at most 5 s for the lock (or any other, such as an
///   administrator's `LOCK TABLE`); past that its calls are answered 503
///   `audit_unavailable` rather than left waiting.
const SESSION_LIMITS: &str =
    "SET idle_in_transaction_session_timeout = '2s'; SET lock_timeout = '5s'";

/// The longest an append waits for the database's answer: its wait for the chain's lock
/// (`lock_timeout`, [`SESSION_LIMITS`]) and time for the statement and its commit. A
/// database that stalls with the connection open (a hung host, a proxy or pooler that
/// stops forwarding) would otherwise hold the sink's writer, and every call behind it,
/// until TCP gave up, many minutes later; past it the batch is settled as in doubt, or
/// refused (503 `audit_unavailable`), and the sink is not ready until a write succeeds.
const APPEND_DEADLINE: Duration = Duration::from_secs(10);

/// How long [`PgBackend::settle`] waits for the chain's lock: longer than a lost session
/// idle in its transaction can hold it ([`SESSION_LIMITS`]).
const SETTLE_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQL of an append.
struct Sql {
    open: String,
    insert: Forms<String>,
    insert_if_head: Forms<String>,
}

/// The sink's connection and what it knows.
struct Conn {
    client: Client,
    insert: Forms<Statement>,
    insert_if_head: Forms<Statement>,
    /// The chain's head as this connection's last append left it (`None` after a failed
    /// or wrongly guessed one: read it first).
    head: Option<(i64, String)>,
    /// Appends left before the head is guessed again, after another replica was found to
    /// have appended in between.
    skip_guess: u32,
    /// After a failed append: the head it would have left, when the statement that
    /// commits it was sent and the connection was lost before its answer came.
    in_doubt: Option<(i64, String)>,
    /// After an append the database committed with fewer rows than records (a trigger
    /// that is not the framework's returned `NULL` for some): how many, of how many.
    short: Option<(u64, usize)>,
    /// After an append refused because the head's `seq` is one no record can follow
    /// ([`chained`]): that `seq`.
    full: Option<i64>,
}

/// How many appends read the head first after a wrong guess: another replica is writing.
const SKIP_AFTER_MISS: u32 = 32;

/// The batch's rows chained after `(seq, prev)`, as one array per column; and the head
/// they leave. `None` when their `seq` would pass `i64::MAX` (a row of that `seq` written
/// by the owner or the audit role): no record can follow it.
fn chained(
    integer: &[bool],
    batch: &[PortableRow],
    (mut seq, mut prev): (i64, String),
) -> Option<(Vec<ColumnValues>, (i64, String))> {
    i64::try_from(batch.len())
        .ok()
        .and_then(|n| seq.checked_add(n))?;
    let mut columns: Vec<ColumnValues> = integer
        .iter()
        .map(|integer| ColumnValues::new(*integer, batch.len()))
        .collect();
    for row in batch {
        seq += 1;
        let hash = row.link(&prev, seq);
        let mut cells = columns.iter_mut();
        let mut next = || cells.next().expect("one column per declared column");
        next().push(&Cell::Int(seq));
        for cell in row.cells() {
            next().push(cell);
        }
        next().push(&Cell::Text(std::mem::replace(&mut prev, hash.clone())));
        next().push(&Cell::Text(hash));
        for cell in row.trailing() {
            next().push(cell);
        }
    }
    debug_assert!(columns.iter().all(|c| c.len() == batch.len()));
    Some((columns, (seq, prev)))
}

/// The refusal of an append after a head of `seq` that no record can follow.
fn chain_full(seq: i64) -> AuditError {
    AuditError::new(format!(
        "cannot write to the audit database: the last record of `{AUDIT_TABLE}` has seq {seq}, \
         past which no record can be numbered (a row written by hand, not by an append); \
         no record is appended until it is removed"
    ))
}

/// Whether `err` is a statement's error (severity `ERROR`): the session goes on, and the
/// statement changed nothing. Anything else (the connection lost, or the session ended by
/// a `FATAL` error) ended the session.
fn statement_error(err: &tokio_postgres::Error) -> bool {
    err.as_db_error()
        .is_some_and(|db| db.parsed_severity() == Some(Severity::Error))
}

/// Poll `future` once. A request of `tokio_postgres` is on the connection after its first
/// poll, so the next one asked for follows it there: pipelined, one round trip for both.
async fn sent<F: Future>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

/// The output of a future [`sent`] already.
async fn outcome<F: Future>(first: Poll<F::Output>, future: Pin<&mut F>) -> F::Output {
    match first {
        Poll::Ready(output) => output,
        Poll::Pending => future.await,
    }
}

impl Conn {
    /// `err`, which ended an append whose committing statement was sent. A statement's
    /// error (severity `ERROR`) leaves the session going and nothing of the append
    /// committed; anything else (the connection lost, or the session ended by a `FATAL`
    /// error, as when an administrator or a timeout ends it) may have come after the
    /// commit: the append is in doubt.
    fn doubt(&mut self, err: tokio_postgres::Error, after: (i64, String)) -> tokio_postgres::Error {
        self.in_doubt = (!statement_error(&err)).then_some(after);
        err
    }

    /// Append `batch` in one transaction, chained to the last record any replica
    /// committed. When this connection wrote the head, one round trip: one statement, its
    /// own transaction, that takes the lock and inserts the batch only if the head is
    /// still its own. Otherwise (or when another replica appended in between), two: the
    /// lock and the head in one query, then the batch with its `COMMIT`. Any failure
    /// rolls the transaction back (a `COMMIT` behind a failed statement is one already)
    /// before the error is returned.
    async fn append(
        &mut self,
        sql: &Sql,
        integer: &[bool],
        batch: &[PortableRow],
    ) -> Result<(), tokio_postgres::Error> {
        let result = self.append_open(sql, integer, batch).await;
        self.rolled_back_on_error(result).await
    }

    /// `result`, after rolling the transaction back if it is an error. Though the caller
    /// then drops this connection, it is driven only while an append runs (and the
    /// database may not see it closed at once): an aborted transaction would keep the
    /// chain's lock from every other replica. Best effort.
    async fn rolled_back_on_error<T>(
        &self,
        result: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        if result.is_err() && !self.client.is_closed() {
            let _ = self.client.batch_execute("ROLLBACK").await;
        }
        result
    }

    async fn append_open(
        &mut self,
        sql: &Sql,
        integer: &[bool],
        batch: &[PortableRow],
    ) -> Result<(), tokio_postgres::Error> {
        if self.skip_guess > 0 {
            self.skip_guess -= 1;
        } else if let Some(head) = self.head.take()
            && let Some((columns, after)) = chained(integer, batch, head.clone())
        {
            let (statement, mut params) = self.insert_if_head.bind(&columns);
            params.push(&head.0);
            params.push(&head.1);
            // In doubt until its answer comes: an append given up on at its deadline
            // (`APPEND_DEADLINE`) may have committed.
            self.in_doubt = Some(after.clone());
            let rows = match self.client.execute(statement, &params).await {
                Ok(rows) => rows,
                // The statement's snapshot predates another replica's append: the batch's
                // first `seq` is taken (see `insert_sql`). Nothing was inserted.
                Err(err) if err.code() == Some(&SqlState::UNIQUE_VIOLATION) => 0,
                Err(err) => return Err(self.doubt(err, after)),
            };
            self.in_doubt = None;
            if rows == batch.len() as u64 {
                self.head = Some(after);
                return Ok(());
            }
            // Another replica appended since this connection's last batch: nothing was
            // inserted (the statement's transaction released the lock). Read the head.
            self.skip_guess = SKIP_AFTER_MISS;
        }
        // Read committed: the head's statement takes its snapshot after the lock, so it
        // sees the batch of whoever held the lock before.
        let head = head_of(&self.client.simple_query(&sql.open).await?);
        self.insert_and_commit(integer, batch, head).await
    }

    /// In a transaction that holds the chain's lock, whose head is `head`: insert `batch`
    /// after it, and commit.
    async fn insert_and_commit(
        &mut self,
        integer: &[bool],
        batch: &[PortableRow],
        head: (i64, String),
    ) -> Result<(), tokio_postgres::Error> {
        let Some((columns, after)) = chained(integer, batch, head.clone()) else {
            // Nothing sent: the transaction (and the chain's lock) is let go.
            self.head = None;
            self.client.batch_execute("ROLLBACK").await?;
            self.full = Some(head.0);
            return Ok(());
        };
        let (statement, params) = self.insert.bind(&columns);
        // In doubt until the `COMMIT`'s answer comes (see `append_open`).
        self.in_doubt = Some(after.clone());
        let (rows, committed) = {
            let client = &self.client;
            let mut inserted = pin!(client.execute(statement, &params));
            let inserted_first = sent(inserted.as_mut()).await;
            let mut committed = pin!(client.batch_execute("COMMIT"));
            let committed_first = sent(committed.as_mut()).await;
            (
                outcome(inserted_first, inserted).await,
                outcome(committed_first, committed).await,
            )
        };
        let rows = match (rows, committed) {
            (Ok(rows), Ok(())) => rows,
            // (The database refused the insert: the `COMMIT` was a rollback.)
            (Err(err), _) | (_, Err(err)) => return Err(self.doubt(err, after)),
        };
        self.in_doubt = None;
        // One row per element of the arrays, which are as long as the batch, unless a
        // trigger that is not ours dropped some (a `BEFORE INSERT` returning `NULL`): the
        // batch is then refused (`write_batch`), not answered as written, and the head
        // read again.
        if rows != batch.len() as u64 {
            self.short = Some((rows, batch.len()));
            self.head = None;
            return Ok(());
        }
        self.head = Some(after);
        Ok(())
    }

    /// Settle a batch in doubt whose last record would be `(seq, hash)`, in one
    /// transaction that holds the chain's lock: `true` if that record is in the trail,
    /// else the batch is appended after the head (`false`). Holding the lock from the
    /// look to the append is what keeps the batch from being there twice: an append of
    /// the lost session that reached the database late waits for the lock, and then
    /// finds the head moved (or its first `seq` taken).
    async fn find_or_append(
        &mut self,
        integer: &[bool],
        batch: &[PortableRow],
        (seq, hash): (i64, String),
    ) -> Result<bool, tokio_postgres::Error> {
        let timeout = SETTLE_LOCK_TIMEOUT.as_millis();
        let query = format!(
            "BEGIN; SET LOCAL lock_timeout = {timeout}; {}; \
             SELECT hash AS settled FROM {AUDIT_TABLE} WHERE seq = {seq}; \
             SELECT seq, hash FROM {AUDIT_TABLE} ORDER BY seq DESC LIMIT 1",
            lock_sql()
        );
        let messages = self.client.simple_query(&query).await?;
        let found = messages.iter().find_map(|message| match message {
            SimpleQueryMessage::Row(row)
                if row.columns().first().is_some_and(|c| c.name() == "settled") =>
            {
                row.get(0)
            }
            _ => None,
        });
        if found == Some(hash.as_str()) {
            self.client.batch_execute("COMMIT").await?;
            self.head = Some((seq, hash));
            return Ok(true);
        }
        self.insert_and_commit(integer, batch, head_of(&messages))
            .await
            .map(|()| false)
    }
}

/// Whether the answer of a `SELECT count(*)` is 1.
fn one_row(messages: &[SimpleQueryMessage]) -> bool {
    messages
        .iter()
        .any(|message| matches!(message, SimpleQueryMessage::Row(row) if row.get(0) == Some("1")))
}

/// The chain's head in the answer of a query that read it (its one row of two columns,
/// `seq` and `hash`): the genesis when the trail is empty.
fn head_of(messages: &[SimpleQueryMessage]) -> (i64, String) {
    let head = messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) if row.columns().len() == 2 => Some((
            row.get(0).and_then(|seq| seq.parse::<i64>().ok()),
            row.get(1).map(str::to_owned),
        )),
        _ => None,
    });
    match head {
        Some((seq, hash)) => (seq.unwrap_or_default(), hash.unwrap_or_default()),
        None => (0, GENESIS_HASH.to_owned()),
    }
}

/// Writes audit records to the PostgreSQL table `aac_audit`, append-only and
/// hash-chained across every replica, durable (committed) before
/// [`record`](AuditSink::record) returns. Cheap to clone.
#[derive(Clone)]
pub struct PgSink {
    inner: Arc<Inner>,
}

struct Inner {
    config: tokio_postgres::Config,
    worker: Worker<PgBackend>,
}

impl fmt::Debug for PgSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgSink")
            .field("ready", &self.ready().is_ok())
            .finish_non_exhaustive()
    }
}

impl PgSink {
    /// A group-commit sink on `db`, logged in as its audit role. The table comes from
    /// [`Database::migrate`]. Never fails on an unreachable database: the sink then
    /// refuses calls with 503 until it can write.
    pub fn open(db: &Database) -> Result<PgSink, AuditError> {
        let mut config = db.owner_config().clone();
        config.user(db.roles().audit());
        config.connect_timeout(CONNECT_TIMEOUT);
        PgSink::with_config(config)
    }

    /// A sink logged in as `config` says (a role that may `INSERT` and `SELECT`
    /// `aac_audit`).
    pub fn with_config(config: tokio_postgres::Config) -> Result<PgSink, AuditError> {
        // Appends read the head after the lock, in read committed, whatever the role's
        // own defaults say.
        let config = super::pinned(config, false);
        let integer: Vec<bool> = integer_columns()?
            .into_iter()
            .map(|(_, integer)| integer)
            .collect();
        let mut backend = PgBackend {
            config: config.clone(),
            session: None,
            sql: Sql {
                open: open_sql(),
                insert: Forms::new(&integer, false),
                insert_if_head: Forms::new(&integer, true),
            },
            integer,
            last_attempt: None,
            retry_interval: Duration::from_secs(1),
            problem: None,
            unsettled: None,
        };
        // Not ready from the start when the database cannot be reached: calls are refused
        // before their handler runs, rather than after.
        let problem = backend.connect().err();
        let health = Arc::new(Health::new(problem));
        let worker = Worker::spawn(
            "aac-audit-postgres",
            backend,
            Batching::group(MAX_BATCH),
            health,
        )?;
        Ok(PgSink {
            inner: Arc::new(Inner { config, worker }),
        })
    }

    /// Records written and the transactions that wrote them, by this process, since
    /// the sink opened.
    pub fn stats(&self) -> SinkStats {
        self.inner.worker.stats()
    }

    /// Copy the whole trail, in `seq` order, into an in-memory SQLite `aac_audit`: verify
    /// it with [`verify_chain`], query it with `AuditQuery` and the summaries.
    pub async fn mirror(&self) -> Result<rusqlite::Connection, AuditError> {
        mirror(&self.inner.config).await
    }

    /// Walk the hash chain of the whole trail.
    pub async fn verify(&self) -> Result<ChainReport, AuditError> {
        verify_chain(&self.mirror().await?)
    }
}

/// Copy the trail of the database `config` reaches into an in-memory SQLite table.
pub async fn mirror(config: &tokio_postgres::Config) -> Result<rusqlite::Connection, AuditError> {
    let unreachable =
        |e: tokio_postgres::Error| AuditError::new(format!("audit database: {}", describe(&e)));
    let (client, task) = super::connect(config)
        .await
        .map_err(|why| AuditError::new(format!("audit database: {why}")))?;
    // Read, never created: a trail that is gone is not an empty one.
    let columns = table_columns(&client).await?;
    if columns.is_empty() {
        return Err(AuditError::new(MISSING_TABLE));
    }
    if columns != AUDIT_COLUMNS {
        return Err(other_columns(&columns));
    }
    let integer: Vec<bool> = integer_columns()?.into_iter().map(|(_, i)| i).collect();
    let columns: Vec<String> = AUDIT_COLUMNS.iter().map(|c| format!("\"{c}\"")).collect();
    let rows = client
        .query(
            &format!(
                "SELECT {} FROM {AUDIT_TABLE} ORDER BY seq",
                columns.join(", ")
            ),
            &[],
        )
        .await
        .map_err(unreachable)?;
    let mut mirror = Mirror::new()?;
    for row in &rows {
        // A column whose type someone changed (`status` to text, say) is named, as any
        // other edit of the table's shape is, rather than read as something it is not.
        let cells = integer
            .iter()
            .enumerate()
            .map(|(i, integer)| {
                let cell = if *integer {
                    row.try_get::<_, Option<i64>>(i)
                        .map(|v| v.map_or(Cell::Null, Cell::Int))
                } else {
                    row.try_get::<_, Option<String>>(i)
                        .map(|v| v.map_or(Cell::Null, Cell::Text))
                };
                cell.map_err(|err| {
                    AuditError::new(format!(
                        "the audit table {AUDIT_TABLE} was edited: its column `{}` is not of the \
                         type the framework made ({err}); the trail cannot be read as written",
                        AUDIT_COLUMNS[i]
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        mirror.push(cells)?;
    }
    // The framework's triggers are its append-only guards, each as made: enabled, on
    // every row (no `WHEN`, no column list), running the function as written. Any other
    // trigger is someone else's, and one could drop records as they are written; a guard
    // missing, disabled or altered lets the trail be changed (`audit --verify` names
    // either).
    let triggers = client
        .query(
            "SELECT t.tgname::text, t.tgtype, t.tgenabled::text, t.tgqual IS NULL, \
                    pg_catalog.cardinality(t.tgattr::int2[]) = 0, p.proname::text, p.prosrc \
             FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid \
             WHERE t.tgrelid = pg_catalog.to_regclass($1::text)::oid AND NOT t.tgisinternal ORDER BY t.tgname",
            &[&AUDIT_TABLE],
        )
        .await
        .map_err(unreachable)?;
    let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut guarded = Vec::new();
    for row in &triggers {
        let name: String = row.get(0);
        let Some((_, tgtype)) = GUARDS.iter().find(|(guard, _)| *guard == name) else {
            mirror.foreign_trigger(&name)?;
            continue;
        };
        let intact = row.get::<_, i16>(1) == *tgtype
            && row.get::<_, String>(2) == "O"
            && row.get::<_, bool>(3)
            && row.get::<_, bool>(4)
            && row.get::<_, String>(5) == GUARD_FUNCTION
            && words(&row.get::<_, String>(6)) == words(GUARD_BODY);
        if intact {
            guarded.push(name);
        } else {
            // Altered: what it does now is someone else's (it may drop records).
            mirror.foreign_trigger(&name)?;
        }
    }
    for (guard, _) in GUARDS {
        if !guarded.iter().any(|name| name == guard) {
            mirror.missing_trigger(guard)?;
        }
    }
    // Row-level security hides rows from a reader (this one, the owner, too when forced)
    // while the sink goes on appending: a trail read through it verifies without them.
    let secured = client
        .query(
            "SELECT c.relrowsecurity, c.relforcerowsecurity, \
                    (SELECT pg_catalog.count(*) FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid) \
             FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1::text)::oid",
            &[&AUDIT_TABLE],
        )
        .await
        .map_err(unreachable)?;
    if let Some(row) = secured.first() {
        let (on, forced, policies): (bool, bool, i64) = (row.get(0), row.get(1), row.get(2));
        if on || forced || policies > 0 {
            mirror.foreign_trigger(&format!(
                "row-level security ({}{policies} policies), which can hide records from \
                 this reading",
                if forced { "forced, " } else { "" }
            ))?;
        }
    }
    // A rule rewrites an insert as a trigger can (`DO INSTEAD NOTHING`): named as one.
    let rules = client
        .query(
            "SELECT rulename::text FROM pg_catalog.pg_rules WHERE tablename = $1::name ORDER BY rulename",
            &[&AUDIT_TABLE],
        )
        .await
        .map_err(unreachable)?;
    for row in &rules {
        mirror.foreign_trigger(&format!("rule {}", row.get::<_, String>(0)))?;
    }
    drop(client);
    task.abort();
    mirror.finish()
}

impl AuditSink for PgSink {
    fn ready(&self) -> Result<(), AuditError> {
        self.inner.worker.ready()
    }

    fn record(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), AuditError>> {
        self.inner.worker.record(record)
    }
}
