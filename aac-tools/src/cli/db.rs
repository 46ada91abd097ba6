//! The default way to open the database file, with one line per way it can be wrong.

use std::path::Path;

use rusqlite::ErrorCode;

use super::{CliContext, CliError, OpenMode};
use crate::sqlite::{Database, DbError, TokenStore};

pub(super) fn open(context: &CliContext, mode: OpenMode) -> Result<Database, CliError> {
    let path = context.db_path();
    let name = context.name();
    let shown = path.display();
    if path.is_dir() {
        return Err(CliError::new(format!(
            "`{shown}` is a directory; pass --db with the path of a database file"
        )));
    }
    if !path.exists() {
        if mode != OpenMode::Create {
            return Err(CliError::new(format!(
                "no database at `{shown}`; `{name} serve` or `{name} token create` creates it, \
                 or point --db (or AAC_DB) at an existing one"
            )));
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(CliError::new(format!(
                "cannot create `{shown}`: the directory `{}` does not exist; \
                 create it, or pass --db with another path",
                parent.display()
            )));
        }
    }
    let failed = |e: DbError| describe(path, &e);
    if mode == OpenMode::Read {
        // Nothing to check beyond SQLite's own: the schema is the application's SQL,
        // which only runs on a write.
        return Database::open_read_only(path).map_err(failed);
    }
    let db = Database::open(path).map_err(failed)?;
    let schema = &context.shared.schema;
    if !schema.is_empty() {
        db.with_writer(|conn| {
            let tx = conn.transaction()?;
            for sql in schema {
                tx.execute_batch(sql)?;
            }
            tx.commit()
        })
        .map_err(|e| {
            CliError::new(format!(
                "cannot create the application's tables in `{shown}`: {e}"
            ))
        })?;
    }
    TokenStore::open(&db).map_err(failed)?;
    Ok(db)
}

/// One line for a file SQLite cannot use.
fn describe(path: &Path, err: &DbError) -> CliError {
    let shown = path.display();
    let code = err.sqlite().and_then(rusqlite::Error::sqlite_error_code);
    match code {
        // A refusal of ours (a file other users may write, a FIFO…): it says what to do.
        _ if err.sqlite().is_none() => CliError::new(err.to_string()),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => CliError::new(format!(
            "`{shown}` is not an SQLite database, or is corrupt; pass --db with another path"
        )),
        _ => CliError::new(format!(
            "cannot open `{shown}`: {err}; check that the file and its directory are \
             readable and writable, or pass --db with another path"
        )),
    }
}
