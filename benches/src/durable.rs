//! The durable audit sinks of variants (a) and (a-normal), and what one flush to disk
//! costs on the file system they write to.

use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use aac_tools::audit::{SqliteSink, Synchronous};

/// The SQLite audit sink on `path` with its defaults (group commit, WAL) and this
/// `synchronous`: `Full` (the default: each commit is synced to disk before the answer
/// leaves) or `Normal` (commits reach the operating system; synced at checkpoints).
pub fn sink(path: &Path, synchronous: Synchronous) -> io::Result<SqliteSink> {
    SqliteSink::builder(path)
        .synchronous(synchronous)
        .open()
        .map_err(io::Error::other)
}

/// `fdatasync` latencies, in nanoseconds, of `count` small writes to a file in `dir`:
/// the first half appended (the file grows, as the write-ahead log does between
/// checkpoints), the second half overwriting its start (as the log is rewritten after
/// one). A write-ahead log commit of one audit record is about this size.
pub fn fdatasync_latencies(dir: &Path, count: usize) -> io::Result<Vec<u64>> {
    let path = dir.join("fdatasync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let frame = [0x5au8; 4096 + 24];
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        if i == count / 2 {
            file.seek(SeekFrom::Start(0))?;
        }
        file.write_all(&frame)?;
        let started = Instant::now();
        file.sync_data()?;
        latencies.push(started.elapsed().as_nanos() as u64);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(latencies)
}
