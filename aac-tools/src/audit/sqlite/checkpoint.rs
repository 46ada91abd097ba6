//! Signed checkpoints of the chain's head: tamper evidence that holds against someone
//! who can write the database file.
//!
//! The hash chain catches an edit, a deletion or an insertion, but a writer of the file
//! can re-hash every record after the one it edited, or cut the newest records, and the
//! chain still verifies. A checkpoint is the head (`seq`, `hash`) signed with an Ed25519
//! key kept outside the database, appended to a file of its own (one JSON object per
//! line); [`verify_checkpoints`] checks every signature with the public key and that the
//! table still holds each checkpointed record with the same hash: a re-hash, an edit, a
//! deletion and a truncation before the last checkpoint all show. (As with CloudTrail's
//! signed digest files and Certificate Transparency's signed tree heads.)

use std::fmt;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use rusqlite::{Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::table::{AUDIT_TABLE, sql_error};
use super::verify::{ChainReport, verify_chain};
use crate::audit::{AuditError, now_timestamp};

/// The key that signs checkpoints. Keep it outside the database (an environment variable,
/// a secret store); give verifiers its public half ([`CheckpointKey::public_hex`]).
#[derive(Clone)]
pub struct CheckpointKey(SigningKey);

impl fmt::Debug for CheckpointKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CheckpointKey")
            .field(&self.public_hex())
            .finish()
    }
}

impl CheckpointKey {
    /// A new random key.
    pub fn generate() -> Result<CheckpointKey, AuditError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| AuditError::new(format!("no randomness for a checkpoint key: {e}")))?;
        Ok(CheckpointKey(SigningKey::from_bytes(&secret)))
    }

    /// The key from its 64 hex digits ([`CheckpointKey::secret_hex`]).
    pub fn from_hex(text: &str) -> Result<CheckpointKey, AuditError> {
        let bytes = unhex::<32>(text.trim())
            .ok_or_else(|| AuditError::new("a checkpoint key is 64 hex digits"))?;
        Ok(CheckpointKey(SigningKey::from_bytes(&bytes)))
    }

    /// The secret key, 64 hex digits.
    pub fn secret_hex(&self) -> String {
        hex(&self.0.to_bytes())
    }

    /// The public key, 64 hex digits: what [`verify_checkpoints`] needs.
    pub fn public_hex(&self) -> String {
        hex(self.0.verifying_key().as_bytes())
    }
}

/// One signed head of the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The head record's `seq`.
    pub seq: i64,
    /// The head record's `hash`.
    pub hash: String,
    /// When the checkpoint was taken (the audit trail's timestamp format).
    pub at: String,
    /// The Ed25519 signature of [`Checkpoint::signed_message`], 128 hex digits.
    pub signature: String,
    /// The records since the previous checkpoint that the server signing this one did not
    /// write (inclusive runs of `seq`): another process appending to the same file, or
    /// someone who can write it. Signed with the rest; [`verify_checkpoints`] fails on
    /// any. Empty when the signer cannot tell ([`write_checkpoint`]) or all were its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<(i64, i64)>,
}

impl Checkpoint {
    /// The signed bytes of a checkpoint without [`Checkpoint::foreign`] records:
    /// `aac-audit-checkpoint\n<seq>\n<hash>\n<at>`.
    pub fn message(seq: i64, hash: &str, at: &str) -> String {
        format!("aac-audit-checkpoint\n{seq}\n{hash}\n{at}")
    }

    /// The signed bytes of this checkpoint: [`Checkpoint::message`], and when it names
    /// foreign records, `\nforeign <first>-<last>,…` after it.
    pub fn signed_message(&self) -> String {
        let mut message = Checkpoint::message(self.seq, &self.hash, &self.at);
        if !self.foreign.is_empty() {
            let runs: Vec<String> = self
                .foreign
                .iter()
                .map(|(a, b)| format!("{a}-{b}"))
                .collect();
            message.push_str("\nforeign ");
            message.push_str(&runs.join(","));
        }
        message
    }
}

/// Sign the chain's current head and append it to the checkpoint file at `path`
/// (created if needed, synced). `None` when the table is empty or its head is the last
/// checkpoint's already.
///
/// It signs the head it finds, whoever appended it: a record someone who can write the
/// file chains to the head before this runs is signed with the rest. A server signs with
/// [`write_checkpoint_for`] instead, which names such records.
pub fn write_checkpoint(
    conn: &Connection,
    key: &CheckpointKey,
    path: impl AsRef<Path>,
) -> Result<Option<Checkpoint>, AuditError> {
    write_checkpoint_naming(conn, key, path.as_ref(), None)
}

/// [`write_checkpoint`] by the server whose audit trail `sink` writes: from its second
/// checkpoint on, the records since the previous one that `sink` did not append are named
/// in it ([`Checkpoint::foreign`], signed), logged as an error, and fail
/// [`verify_checkpoints`]. The first signs the head it finds (what came before the
/// server is not its own to tell). One server per file: another process appending to
/// the same file is named too.
pub fn write_checkpoint_for(
    sink: &crate::audit::SqliteSink,
    conn: &Connection,
    key: &CheckpointKey,
    path: impl AsRef<Path>,
) -> Result<Option<Checkpoint>, AuditError> {
    write_checkpoint_naming(conn, key, path.as_ref(), Some(sink.written()))
}

fn write_checkpoint_naming(
    conn: &Connection,
    key: &CheckpointKey,
    path: &Path,
    written: Option<&std::sync::Mutex<super::writer::Written>>,
) -> Result<Option<Checkpoint>, AuditError> {
    // Before anything opens it: the open of a FIFO waits for ever.
    crate::sqlite::refuse_special_path(path).map_err(AuditError::new)?;
    let head: Option<(i64, String)> = conn
        .query_row(
            &format!("SELECT seq, hash FROM {AUDIT_TABLE} ORDER BY seq DESC LIMIT 1"),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql_error)?;
    let Some((seq, hash)) = head else {
        // Nothing yet: whatever comes is watched from the start.
        if let Some(written) = written {
            lock(written).watching_after.get_or_insert(0);
        }
        return Ok(None);
    };
    let last = last_checkpoint(path);
    if let Some(last) = &last
        && last.seq == seq
        && last.hash == hash
    {
        if let Some(written) = written {
            lock(written).signed(seq);
        }
        return Ok(None);
    }
    // The records since the previous checkpoint (or since the sink was first watched)
    // that the sink did not append.
    // (The sink counts a batch before its `COMMIT`: any record of its that this reading
    // sees is counted already.)
    let watching_after = written.and_then(|w| lock(w).watching_after);
    let foreign = match (written, watching_after) {
        (Some(written), Some(after)) => {
            let after = last.as_ref().map_or(after, |l| l.seq.max(after));
            let mut statement = conn
                .prepare(&format!(
                    "SELECT seq FROM {AUDIT_TABLE} WHERE seq > ?1 AND seq <= ?2 ORDER BY seq"
                ))
                .map_err(sql_error)?;
            let seqs = statement
                .query_map([after, seq], |r| r.get::<_, i64>(0))
                .map_err(sql_error)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_error)?;
            lock(written).not_written(&seqs)
        }
        _ => Vec::new(),
    };
    if !foreign.is_empty() {
        tracing::error!(
            ?foreign,
            "audit records this server did not write were appended to its trail (another process on the same file, or someone who can write it): the checkpoint names them, and `audit --verify --checkpoints` fails"
        );
    }
    let at = now_timestamp();
    let mut checkpoint = Checkpoint {
        seq,
        hash,
        at,
        signature: String::new(),
        foreign,
    };
    let signature = key.0.sign(checkpoint.signed_message().as_bytes());
    checkpoint.signature = hex(&signature.to_bytes());
    let cannot = |e: std::io::Error| {
        AuditError::new(format!(
            "cannot write the checkpoint file `{}`: {e}",
            path.display()
        ))
    };
    let mut options = OpenOptions::new();
    // (Read too: for the end of the last line, and the first.)
    options.create(true).append(true).read(true);
    // A new file is its owner's only, as the databases are.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(cannot)?;
    refuse_other_files(&file, path)?;
    let start = cut_torn_line(&file, path).map_err(cannot)?;
    let mut line = serde_json::to_string(&checkpoint).unwrap_or_default();
    line.push('\n');
    let appended = file
        .write_all(line.as_bytes())
        .and_then(|()| file.sync_data());
    if let Err(err) = appended {
        // A full disk takes what fits: the part that went in comes out again, rather
        // than the next checkpoint being glued to it (which made every later `--verify
        // --checkpoints` fail on a line that is no checkpoint). If this fails too, the
        // next write cuts it.
        let _ = file.set_len(start).and_then(|()| file.sync_data());
        return Err(cannot(err));
    }
    if let Some(written) = written {
        lock(written).signed(checkpoint.seq);
    }
    Ok(Some(checkpoint))
}

/// Refuse to write into `file` (at `path`) unless it is empty or its first line is a
/// checkpoint: a `--checkpoints` path naming another file (a mistyped path, or a link a
/// local user planted to a file of the operator's) had its last line cut and a
/// checkpoint appended to it.
fn refuse_other_files(file: &std::fs::File, path: &Path) -> Result<(), AuditError> {
    use std::os::unix::fs::FileExt;
    let mut head = vec![0u8; 4096];
    let read = file.read_at(&mut head, 0).map_err(|e| {
        AuditError::new(format!(
            "cannot read the checkpoint file `{}`: {e}",
            path.display()
        ))
    })?;
    if read == 0 {
        return Ok(());
    }
    let first = head[..read]
        .split(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    // A first line cut short (a full disk at the very first write) is the writer's own.
    let cut_short = read == first.len();
    if cut_short || serde_json::from_slice::<Checkpoint>(first).is_ok() {
        return Ok(());
    }
    Err(AuditError::new(format!(
        "`{}` is not a checkpoint file (its first line is not a checkpoint): nothing was \
         written to it; name a new file, or the file of this trail's checkpoints",
        path.display()
    )))
}

/// The length of `file` once a last line without its newline (a write a full disk or a
/// power loss cut short, never a whole checkpoint) is cut off; such a line is cut, with a
/// warning. A line longer than anything a checkpoint writes is left as it is (and
/// `--verify` reports it).
fn cut_torn_line(file: &std::fs::File, path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    /// Far more than one line (about 250 bytes, more with records named as foreign).
    const TAIL: u64 = 64 * 1024;
    let len = file.metadata()?.len();
    // The common case, one byte read: the last line is whole (or there is none).
    if !crate::audit::ends_with_a_cut_line(file)? {
        return Ok(len);
    }
    let from = len.saturating_sub(TAIL);
    let mut tail = vec![0u8; usize::try_from(len - from).unwrap_or(0)];
    file.read_exact_at(&mut tail, from)?;
    let cut = match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => from + i as u64 + 1,
        None if from == 0 => 0,
        None => return Ok(len),
    };
    tracing::warn!(
        path = %path.display(),
        bytes = len - cut,
        "the checkpoint file ended with a line cut short (a write a full disk or a crash interrupted): removed"
    );
    file.set_len(cut)?;
    file.sync_data()?;
    Ok(cut)
}

/// The file's last checkpoint, read from its end (the file only grows: reading it whole
/// every few seconds, as a server writing checkpoints does, would cost memory and time
/// with its age); `None` if there is none, or the last line is not one.
fn last_checkpoint(path: &Path) -> Option<Checkpoint> {
    use std::io::{Read, Seek, SeekFrom};
    /// Far more than one line (about 250 bytes).
    const TAIL: u64 = 4096;
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().rev().find(|line| !line.trim().is_empty())?;
    serde_json::from_str(line).ok()
}

/// Every checkpoint in the file at `path`, oldest first.
pub fn read_checkpoints(path: impl AsRef<Path>) -> Result<Vec<Checkpoint>, AuditError> {
    use std::io::Read;
    /// Far longer than any checkpoint (about 250 bytes, more with records named as
    /// foreign): a longer line is no checkpoint, and is not read whole (`/dev/zero` as
    /// the file took 1.7 GB in 3 s).
    const MAX_LINE: u64 = 1024 * 1024;
    let path = path.as_ref();
    crate::sqlite::refuse_special_path(path)
        .map_err(|why| AuditError::new(format!("cannot read the checkpoint file: {why}")))?;
    let file = std::fs::File::open(path).map_err(|e| {
        AuditError::new(format!(
            "cannot read the checkpoint file `{}`: {e}",
            path.display()
        ))
    })?;
    let mut checkpoints = Vec::new();
    let mut lines = BufReader::new(file);
    let mut line = String::new();
    for n in 0.. {
        line.clear();
        let read = (&mut lines)
            .take(MAX_LINE)
            .read_line(&mut line)
            .map_err(|e| AuditError::new(format!("checkpoint file: {e}")))?;
        if read == 0 {
            break;
        }
        if read as u64 == MAX_LINE && !line.ends_with('\n') {
            return Err(AuditError::new(format!(
                "checkpoint file, line {}: longer than {MAX_LINE} bytes, not a checkpoint",
                n + 1
            )));
        }
        // The last line without its newline is a write cut short (a full disk, a crash),
        // never a whole checkpoint: the writer cuts it before its next line.
        if !line.ends_with('\n') {
            tracing::warn!(
                line = n + 1,
                "the checkpoint file ends with a line cut short: not a checkpoint, skipped"
            );
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let checkpoint = serde_json::from_str(&line).map_err(|e| {
            AuditError::new(format!(
                "checkpoint file, line {}: not a checkpoint: {e}",
                n + 1
            ))
        })?;
        checkpoints.push(checkpoint);
    }
    Ok(checkpoints)
}

/// What [`verify_checkpoints`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointReport {
    /// Checkpoints whose signature and record were checked.
    pub checked: usize,
    /// The newest checkpoint's `seq`, if any.
    pub last_seq: Option<i64>,
    /// The first problem, if any.
    pub problem: Option<String>,
}

impl CheckpointReport {
    /// Whether every checkpoint is signed by the key and matches the table.
    pub fn is_intact(&self) -> bool {
        self.problem.is_none()
    }
}

impl fmt::Display for CheckpointReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.problem, self.last_seq) {
            (Some(problem), _) => write!(f, "checkpoints broken: {problem}"),
            (None, Some(seq)) => write!(
                f,
                "checkpoints intact: {} signed checkpoints, the newest at seq {seq}",
                self.checked
            ),
            (None, None) => f.write_str("checkpoints intact: none yet"),
        }
    }
}

/// Check the checkpoints of the file at `path` against the table behind `conn`: each
/// signed by the key whose public half is `public_hex`, their `seq` never going back,
/// each checkpointed record still in the table with the same hash, and the chain intact.
pub fn verify_checkpoints(
    conn: &Connection,
    path: impl AsRef<Path>,
    public_hex: &str,
) -> Result<CheckpointReport, AuditError> {
    let public = public_key(public_hex)?;
    let checkpoints = read_checkpoints(path)?;
    let chain = verify_chain(conn)?;
    check_against(conn, &public, checkpoints, &chain)
}

/// [`verify_checkpoints`] with the chain's report made already (the command line prints
/// both).
#[cfg(feature = "cli")]
pub(crate) fn verify_checkpoints_of(
    conn: &Connection,
    path: &Path,
    public_hex: &str,
    chain: &ChainReport,
) -> Result<CheckpointReport, AuditError> {
    let public = public_key(public_hex)?;
    check_against(conn, &public, read_checkpoints(path)?, chain)
}

/// The public key from its 64 hex digits.
fn public_key(hex: &str) -> Result<VerifyingKey, AuditError> {
    let bytes = unhex::<32>(hex.trim())
        .ok_or_else(|| AuditError::new("a public checkpoint key is 64 hex digits"))?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| {
        AuditError::new(
            "the public checkpoint key is not a valid Ed25519 public key (its 64 hex digits \
             name no point of the curve); pass the one `audit --new-checkpoint-key` printed",
        )
    })
}

fn check_against(
    conn: &Connection,
    public: &VerifyingKey,
    checkpoints: Vec<Checkpoint>,
    chain: &ChainReport,
) -> Result<CheckpointReport, AuditError> {
    let mut report = CheckpointReport {
        checked: 0,
        last_seq: None,
        problem: None,
    };
    if let Some(broken) = &chain.broken {
        report.problem = Some(format!("the chain itself is broken: {broken}"));
        return Ok(report);
    }
    let mut previous = 0;
    for checkpoint in checkpoints {
        let problem = check_one(conn, public, &checkpoint, previous)?;
        if let Some(problem) = problem {
            report.problem = Some(format!("checkpoint at seq {}: {problem}", checkpoint.seq));
            return Ok(report);
        }
        previous = checkpoint.seq;
        report.checked += 1;
        report.last_seq = Some(checkpoint.seq);
    }
    Ok(report)
}

fn check_one(
    conn: &Connection,
    public: &VerifyingKey,
    checkpoint: &Checkpoint,
    previous: i64,
) -> Result<Option<String>, AuditError> {
    let signed = unhex::<64>(&checkpoint.signature).map(|bytes| Signature::from_bytes(&bytes));
    let message = checkpoint.signed_message();
    if signed.is_none_or(|s| public.verify(message.as_bytes(), &s).is_err()) {
        return Ok(Some(
            "the signature does not verify with this public key (a forged or altered checkpoint)"
                .to_owned(),
        ));
    }
    if checkpoint.seq < previous {
        return Ok(Some(format!(
            "goes back from seq {previous} (the checkpoint file was reordered)"
        )));
    }
    let stored: Option<String> = conn
        .query_row(
            &format!("SELECT hash FROM {AUDIT_TABLE} WHERE seq = ?1"),
            [checkpoint.seq],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_error)?;
    if !checkpoint.foreign.is_empty() {
        let runs: Vec<String> = checkpoint
            .foreign
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    format!("{a}")
                } else {
                    format!("{a}–{b}")
                }
            })
            .collect();
        let (which, were) = match checkpoint.foreign.as_slice() {
            [(a, b)] if a == b => ("the record", "was"),
            _ => ("the records", "were"),
        };
        return Ok(Some(format!(
            "{which} at seq {} {were} appended by another writer than the server that signed \
             it (another process on the same file, or someone who can write it)",
            runs.join(", ")
        )));
    }
    Ok(match stored {
        None => {
            Some("the record is gone (the table was truncated or the record deleted)".to_owned())
        }
        Some(hash) if hash != checkpoint.hash => Some(
            "the record's hash differs from the signed one (records were edited and re-hashed)"
                .to_owned(),
        ),
        Some(_) => None,
    })
}

use crate::hex::encode as hex;

fn lock(
    written: &std::sync::Mutex<super::writer::Written>,
) -> std::sync::MutexGuard<'_, super::writer::Written> {
    written
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    crate::hex::decode(text)?.try_into().ok()
}
