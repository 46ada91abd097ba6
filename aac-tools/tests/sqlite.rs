//! SQLite data handles: WAL and the busy timeout in effect, transactions that commit on
//! `Ok` and roll back on `Err` (or a panic), readers that never wait on each other or on
//! the writer, and database work that never blocks the async runtime.
//!
//! Waits in these tests have a generous deadline only so that a broken build fails with
//! a message instead of hanging; no assertion depends on how long anything takes.

use std::sync::mpsc;
use std::time::Duration;

use aac_tools::ToolError;
use aac_tools::access::{Delete, Read, Write};
use aac_tools::sqlite::{BUSY_TIMEOUT, Database, Db, rusqlite};

/// Long enough never to fire on a working build, short enough to fail a broken one.
const DEADLINE: Duration = Duration::from_secs(60);

struct Fixture {
    _dir: tempfile::TempDir,
    db: Database,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("notes.db")).unwrap();
    db.with_writer(|c| {
        c.execute_batch(
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
             INSERT INTO notes (text) VALUES ('first');",
        )
    })
    .unwrap();
    Fixture { _dir: dir, db }
}

fn count(db: &Database) -> i64 {
    db.with_reader(|c| c.query_row("SELECT count(*) FROM notes", [], |r| r.get(0)))
        .unwrap()
}

fn waited(what: &str) -> impl FnOnce(mpsc::RecvTimeoutError) -> ToolError + '_ {
    move |_| ToolError::internal(format!("gave up waiting for {what}"))
}

#[tokio::test]
async fn wal_busy_timeout_and_foreign_keys_are_in_effect_on_every_connection() {
    let f = fixture();
    let pragmas = |conn: &rusqlite::Connection| -> Result<(String, i64, i64), ToolError> {
        Ok((
            conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?,
            conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0))?,
            conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?,
        ))
    };
    let expected = ("wal".to_owned(), BUSY_TIMEOUT.as_millis() as i64, 1);
    let read =
        f.db.handle::<Read>()
            .run(move |tx| pragmas(tx.conn()))
            .await
            .unwrap();
    let write =
        f.db.handle::<Write>()
            .run(move |tx| pragmas(tx.conn()))
            .await
            .unwrap();
    assert_eq!(read, expected);
    assert_eq!(write, expected);
    assert_eq!(BUSY_TIMEOUT, Duration::from_secs(5));
    // Read transactions run on connections that refuse writes.
    let query_only: i64 =
        f.db.handle::<Read>()
            .run(|tx| Ok(tx.conn().query_row("PRAGMA query_only", [], |r| r.get(0))?))
            .await
            .unwrap();
    assert_eq!(query_only, 1);
    // The file itself is in WAL mode, for every other process too.
    let other = rusqlite::Connection::open(f.db.path()).unwrap();
    let mode: String = other
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_write_waits_for_a_lock_held_elsewhere_instead_of_failing() {
    let f = fixture();
    let other = rusqlite::Connection::open(f.db.path()).unwrap();
    other
        .execute_batch("BEGIN IMMEDIATE; INSERT INTO notes (text) VALUES ('elsewhere');")
        .unwrap();
    let writer = f.db.handle::<Write>();
    let write = tokio::spawn(async move {
        writer
            .run(|tx| {
                Ok(tx
                    .conn()
                    .execute("INSERT INTO notes (text) VALUES ('ours')", [])?)
            })
            .await
    });
    // Give the write time to meet the lock (if it has not, it simply finds it free: the
    // test can then pass without exercising the wait, but it cannot fail spuriously).
    tokio::time::sleep(Duration::from_millis(300)).await;
    other.execute_batch("COMMIT").unwrap();
    assert_eq!(
        write.await.unwrap(),
        Ok(1),
        "the busy timeout let the write wait"
    );
    assert_eq!(count(&f.db), 3);
}

#[tokio::test]
async fn commit_on_ok_rollback_on_err() {
    let f = fixture();
    let db = f.db.handle::<Write>();
    let ok = db
        .run(|tx| {
            Ok(tx
                .conn()
                .execute("INSERT INTO notes (text) VALUES ('kept')", [])?)
        })
        .await;
    assert_eq!(ok, Ok(1));
    assert_eq!(count(&f.db), 2);

    let err = db
        .run(|tx| {
            tx.conn()
                .execute("INSERT INTO notes (text) VALUES ('dropped')", [])?;
            // (An update: the `Write` level refuses deletes, see levels_at_run_time.rs.)
            tx.conn()
                .execute("UPDATE notes SET text = 'changed' WHERE text = 'first'", [])?;
            Err::<(), _>(ToolError::conflict("changed my mind"))
        })
        .await;
    assert_eq!(err, Err(ToolError::conflict("changed my mind")));
    assert_eq!(count(&f.db), 2);
    let texts: Vec<String> =
        f.db.with_reader(|c| {
            c.prepare("SELECT text FROM notes ORDER BY id")?
                .query_map([], |r| r.get(0))?
                .collect()
        })
        .unwrap();
    assert_eq!(texts, ["first", "kept"]);

    // A failing statement is an `Err` like any other: nothing of the closure remains.
    let err =
        f.db.handle::<Delete>()
            .run(|tx| {
                tx.conn().execute("DELETE FROM notes", [])?;
                tx.conn()
                    .execute("INSERT INTO notes (id, text) VALUES (1, NULL)", [])?;
                Ok(())
            })
            .await
            .unwrap_err();
    assert_eq!(err.reason(), "conflict", "{err}");
    assert_eq!(count(&f.db), 2);
}

#[tokio::test]
async fn a_panic_inside_a_transaction_rolls_it_back_and_the_writer_keeps_working() {
    let f = fixture();
    let db = f.db.handle::<Write>();
    let panicked = tokio::spawn({
        let db = db.clone();
        async move {
            db.run(|tx| -> Result<(), ToolError> {
                tx.conn()
                    .execute("INSERT INTO notes (text) VALUES ('half')", [])?;
                panic!("the query code fell over");
            })
            .await
        }
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(count(&f.db), 1, "the half-done write was rolled back");
    let ok = db
        .run(|tx| {
            Ok(tx
                .conn()
                .execute("INSERT INTO notes (text) VALUES ('after')", [])?)
        })
        .await;
    assert_eq!(ok, Ok(1), "the writer is not left inside a transaction");
    assert_eq!(count(&f.db), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_do_not_wait_on_each_other_nor_on_the_writer() {
    let f = fixture();
    // Two read transactions, each open until it has heard from the other: if readers
    // were serialised, the first would wait forever for the second.
    let (to_a, a_hears) = mpsc::channel::<()>();
    let (to_b, b_hears) = mpsc::channel::<()>();
    let reader = |tell: mpsc::Sender<()>, hear: mpsc::Receiver<()>| {
        let db = f.db.handle::<Read>();
        async move {
            db.run(move |tx| {
                let n: i64 = tx
                    .conn()
                    .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?;
                tell.send(()).unwrap();
                hear.recv_timeout(DEADLINE)
                    .map_err(waited("the other reader"))?;
                Ok(n)
            })
            .await
        }
    };
    let (a, b) = tokio::join!(reader(to_b, a_hears), reader(to_a, b_hears));
    assert_eq!((a, b), (Ok(1), Ok(1)));

    // A write transaction held open does not stop a reader, who sees the last commit.
    let (reader_done, writer_hears) = mpsc::channel::<()>();
    let (writer_in, reader_hears) = tokio::sync::oneshot::channel::<()>();
    let writer = f.db.handle::<Write>();
    let write = tokio::spawn(async move {
        writer
            .run(move |tx| {
                tx.conn()
                    .execute("INSERT INTO notes (text) VALUES ('pending')", [])?;
                writer_in.send(()).unwrap();
                writer_hears
                    .recv_timeout(DEADLINE)
                    .map_err(waited("the reader"))?;
                Ok(())
            })
            .await
    });
    reader_hears.await.unwrap();
    let seen =
        f.db.handle::<Read>()
            .run(|tx| {
                Ok(tx
                    .conn()
                    .query_row("SELECT count(*) FROM notes", [], |r| r.get::<_, i64>(0))?)
            })
            .await;
    reader_done.send(()).unwrap();
    assert_eq!(
        seen,
        Ok(1),
        "the reader did not wait for the writer, nor see its uncommitted row"
    );
    assert_eq!(write.await.unwrap(), Ok(()));
    assert_eq!(count(&f.db), 2);
}

/// A current-thread runtime: if database work ran on it, the task that sends the message
/// the work waits for could never run.
#[tokio::test(flavor = "current_thread")]
async fn database_work_never_blocks_the_async_runtime() {
    let f = fixture();
    for level in ["read", "write"] {
        let (send, receive) = mpsc::channel::<&'static str>();
        let (started, work_started) = tokio::sync::oneshot::channel::<()>();
        let work = move |tx_conn: &rusqlite::Connection| -> Result<&'static str, ToolError> {
            let _: i64 = tx_conn.query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?;
            started.send(()).unwrap();
            receive
                .recv_timeout(DEADLINE)
                .map_err(waited("the runtime's message"))
        };
        let run = async {
            match level {
                "read" => f.db.handle::<Read>().run(move |tx| work(tx.conn())).await,
                _ => f.db.handle::<Write>().run(move |tx| work(tx.conn())).await,
            }
        };
        let sender = async move {
            work_started.await.unwrap();
            // Only this runtime's thread can run this line.
            send.send("from the runtime").unwrap();
        };
        let (result, ()) = tokio::join!(run, sender);
        assert_eq!(result, Ok("from the runtime"), "{level}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_are_serialised_without_losing_updates() {
    let f = fixture();
    f.db.with_writer(|c| {
        c.execute_batch("CREATE TABLE counter (n INTEGER); INSERT INTO counter VALUES (0);")
    })
    .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let db = f.db.handle::<Write>();
        tasks.push(tokio::spawn(async move {
            db.run(|tx| {
                let n: i64 = tx
                    .conn()
                    .query_row("SELECT n FROM counter", [], |r| r.get(0))?;
                tx.conn().execute("UPDATE counter SET n = ?1", [n + 1])?;
                Ok(())
            })
            .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let n: i64 =
        f.db.with_reader(|c| c.query_row("SELECT n FROM counter", [], |r| r.get(0)))
            .unwrap();
    assert_eq!(n, 32);
}

#[test]
fn a_file_that_is_not_a_database_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.db");
    std::fs::write(&path, b"this is not a database, it is a shopping list").unwrap();
    let err = Database::open(&path).unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "`{}` is not a usable SQLite database: ",
            path.display()
        )),
        "{err}"
    );
    assert!(err.sqlite().is_some());
}

#[tokio::test]
async fn handles_are_cheap_clones_of_one_database() {
    let f = fixture();
    let a: Db<Write> = f.db.handle();
    let b = a.clone();
    a.run(|tx| {
        Ok(tx
            .conn()
            .execute("INSERT INTO notes (text) VALUES ('a')", [])?)
    })
    .await
    .unwrap();
    let seen = b
        .run(|tx| {
            Ok(tx
                .conn()
                .query_row("SELECT count(*) FROM notes", [], |r| r.get::<_, i64>(0))?)
        })
        .await;
    assert_eq!(seen, Ok(2));
    assert!(format!("{b:?}").contains("level: Write"), "{b:?}");
}
