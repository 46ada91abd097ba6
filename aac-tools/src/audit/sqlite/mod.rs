//! The SQLite sink: an append-only, hash-chained table `aac_audit`, written by one
//! thread that commits the records of concurrent callers together (group commit).
//!
//! - [`table`]: the table, its columns (declared once) and its creation;
//! - [`row`]: one row's values, read or written, and the one hash that chains them;
//! - [`writer`]: the sink, its writer thread and its transactions;
//! - [`reader`]: read-only connections and rows read back as records;
//! - [`verify`]: the walk of the chain;
//! - [`checkpoint`]: signed checkpoints of the chain's head.

mod checkpoint;
#[cfg(feature = "postgres")]
mod portable;
mod reader;
mod row;
mod table;
mod verify;
mod writer;

#[cfg(feature = "cli")]
pub(crate) use checkpoint::verify_checkpoints_of;
pub use checkpoint::{
    Checkpoint, CheckpointKey, CheckpointReport, read_checkpoints, verify_checkpoints,
    write_checkpoint, write_checkpoint_for,
};
#[cfg(feature = "postgres")]
pub(crate) use portable::{Cell, Mirror, PortableRow, declared_columns, integer_columns};
pub use reader::{StoredRecord, open_reader};
pub(crate) use row::Row;
pub use table::{AUDIT_COLUMNS, AUDIT_TABLE, GENESIS_HASH, ensure_table};
#[cfg(feature = "postgres")]
pub(crate) use table::{MISSING_TABLE, OUTCOME_CHECK, other_columns};
pub(crate) use table::{SELECT_COLUMNS, check_table, sql_error, trigger_names};
pub use verify::{BrokenLink, ChainReport, verify_chain};
pub use writer::{CommitMode, SqliteSink, SqliteSinkBuilder, Synchronous};
