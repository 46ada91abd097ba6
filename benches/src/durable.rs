//! The durable audit sink of variant (a).

use std::io;
use std::path::Path;

use aac_tools::audit::SqliteSink;

/// The SQLite audit sink on `path` with its defaults: group commit, WAL,
/// `synchronous = FULL` (each commit is synced to disk before the answer leaves).
pub fn sink(path: &Path) -> io::Result<SqliteSink> {
    SqliteSink::open(path).map_err(io::Error::other)
}
