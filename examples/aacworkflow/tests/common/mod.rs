//! Shared set-up: the demo data on the backend under test.
//!
//! The backend is `AAC_TEST_BACKEND`: `sqlite` (the default; a real file in a temporary
//! directory) or `postgres` (a fresh database and a fresh set of level roles on the
//! server at `AAC_TEST_POSTGRES`, by default `postgres://postgres@127.0.0.1:5432/test`,
//! both dropped with the value). The same tests run on either:
//!
//! ```text
//! cargo test -p aacworkflow                               # SQLite
//! AAC_TEST_BACKEND=postgres cargo test -p aacworkflow     # PostgreSQL
//! ```

#![allow(dead_code, unreachable_pub)]

#[path = "../../../../aac-tools/tests/postgres_support/mod.rs"]
mod postgres_support;

use std::future::Future;
use std::path::PathBuf;

use aac_tools::audit::AuditSink;
use aac_tools::sqlite::{Database, TokenStore};
use aac_tools::tokens::{NewToken, TokenIssuer};
use aac_tools::{Server, postgres};
use aacworkflow::backend::Store;
use aacworkflow::store::{self, OpenMode};
pub use postgres_support::TestDb;

/// Every scope the ten tools use.
pub const ALL_SCOPES: &[&str] = &[
    "agents:write",
    "autopilot:run",
    "comments:read",
    "comments:write",
    "dashboard:read",
    "issues:read",
    "issues:write",
];

/// Whether this run is the PostgreSQL pass (`AAC_TEST_BACKEND=postgres`).
pub fn on_postgres() -> bool {
    match std::env::var("AAC_TEST_BACKEND").as_deref() {
        Err(_) | Ok("" | "sqlite") => false,
        Ok("postgres") => true,
        Ok(other) => panic!("AAC_TEST_BACKEND is `sqlite` or `postgres`, not `{other}`"),
    }
}

/// The backend's name, for messages.
pub fn backend_name() -> &'static str {
    if on_postgres() { "postgres" } else { "sqlite" }
}

/// Run `future` on a runtime of its own, on a thread of its own: for the synchronous
/// helpers below, called inside a test's (single-threaded) runtime.
pub fn block<T: Send>(future: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(future)
        })
        .join()
        .unwrap()
    })
}

/// A fresh, empty PostgreSQL database and roles, from synchronous code.
pub fn test_db() -> TestDb {
    block(TestDb::new())
}

/// `query` (one bigint or text cell) on `url` as the owner, from synchronous code.
pub fn pg_scalar<T>(
    url: &str,
    query: &str,
    params: &[&(dyn postgres::tokio_postgres::types::ToSql + Sync)],
) -> T
where
    T: for<'a> postgres::tokio_postgres::types::FromSql<'a> + Send,
{
    block(async {
        let (client, connection) =
            postgres::tokio_postgres::connect(url, postgres::tokio_postgres::NoTls)
                .await
                .expect("PostgreSQL");
        tokio::spawn(connection);
        client.query_one(query, params).await.expect("query").get(0)
    })
}

/// The demo data on the backend under test.
pub struct Seeded {
    backend: Backend,
}

enum Backend {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
        db: Database,
        tokens: TokenStore,
    },
    Postgres {
        test: TestDb,
        db: postgres::Database,
    },
}

impl Seeded {
    pub async fn new() -> Seeded {
        let backend = if on_postgres() {
            let test = TestDb::new().await;
            let db = postgres::Database::connect(&test.url, test.roles.clone()).expect("connect");
            db.migrate(store::POSTGRES_COMPONENT, &store::POSTGRES_MIGRATIONS)
                .await
                .expect("migrations");
            aacworkflow::seed::seed_demo(&Store::postgres(&db))
                .await
                .expect("demo data");
            Backend::Postgres { test, db }
        } else {
            let dir = tempfile::tempdir().expect("temporary directory");
            let path = dir.path().join("aacworkflow.db");
            let db = store::open(&path, OpenMode::Create).expect("database opens");
            aacworkflow::seed::seed_demo(&Store::sqlite(&db))
                .await
                .expect("demo data");
            let tokens = TokenStore::open(&db).expect("token store");
            Backend::Sqlite {
                _dir: dir,
                path,
                db,
                tokens,
            }
        };
        Seeded { backend }
    }

    /// The SQLite database, on the SQLite pass.
    pub fn sqlite(&self) -> Option<(&Database, &PathBuf)> {
        match &self.backend {
            Backend::Sqlite { db, path, .. } => Some((db, path)),
            Backend::Postgres { .. } => None,
        }
    }

    /// The PostgreSQL database, on the PostgreSQL pass.
    pub fn postgres(&self) -> Option<(&postgres::Database, &TestDb)> {
        match &self.backend {
            Backend::Postgres { db, test } => Some((db, test)),
            Backend::Sqlite { .. } => None,
        }
    }

    /// The server over this database, recording to `audit`.
    pub fn server(&self, audit: impl AuditSink, read_only: bool) -> Server {
        match &self.backend {
            Backend::Sqlite { db, .. } => aacworkflow::server(db, audit, read_only),
            Backend::Postgres { db, .. } => aacworkflow::server_on_postgres(db, audit, read_only),
        }
        .expect("server")
    }

    /// The server over this database, recording to the backend's own audit trail (the
    /// `aac_audit` table in the file, or in the PostgreSQL database).
    pub fn server_with_trail(&self) -> Server {
        match &self.backend {
            Backend::Sqlite { path, .. } => self.server(
                aac_tools::audit::SqliteSink::open(path).expect("audit sink"),
                false,
            ),
            Backend::Postgres { db, .. } => {
                self.server(postgres::PgSink::open(db).expect("audit sink"), false)
            }
        }
    }

    /// A connection to the audit trail as `aacworkflow audit` reads it: the file's
    /// `aac_audit`, or PostgreSQL's copied into memory (`postgres::mirror`).
    pub fn trail(&self) -> rusqlite::Connection {
        match &self.backend {
            Backend::Sqlite { path, .. } => aac_tools::audit::open_reader(path).expect("trail"),
            Backend::Postgres { test, .. } => {
                let config: postgres::tokio_postgres::Config = test.url.parse().unwrap();
                block(async move { postgres::mirror(&config).await.expect("trail") })
            }
        }
    }

    /// `--db` for the command line, and the environment it needs.
    pub fn db_arg(&self) -> (String, Vec<(&'static str, String)>) {
        match &self.backend {
            Backend::Sqlite { path, .. } => (path.display().to_string(), Vec::new()),
            Backend::Postgres { test, .. } => (
                test.url.clone(),
                vec![("AAC_DB_ROLE_PREFIX", test.roles.prefix().to_owned())],
            ),
        }
    }

    /// A token for `user` in `workspace` with `scopes`.
    pub fn token(&self, user: &str, workspace: &str, scopes: &[&str]) -> String {
        self.create_token(user, Some(workspace), scopes, None).token
    }

    /// A token, as `token create` makes it.
    pub fn create_token(
        &self,
        user: &str,
        workspace: Option<&str>,
        scopes: &[&str],
        ttl_seconds: Option<i64>,
    ) -> NewToken {
        match &self.backend {
            Backend::Sqlite { tokens, .. } => tokens
                .create(user, workspace, scopes, ttl_seconds)
                .expect("token"),
            Backend::Postgres { test, .. } => block(async {
                let tokens = pg_tokens(test);
                TokenIssuer::create(&tokens, user, workspace, scopes, ttl_seconds)
                    .await
                    .expect("token")
            }),
        }
    }

    /// Revoke the token with this id.
    pub fn revoke(&self, id: &str) {
        let revoked = match &self.backend {
            Backend::Sqlite { tokens, .. } => tokens.revoke(id).expect("revoke"),
            Backend::Postgres { test, .. } => block(async {
                TokenIssuer::revoke(&pg_tokens(test), id)
                    .await
                    .expect("revoke")
            }),
        };
        assert!(revoked, "token {id} revoked");
    }

    /// The UUID of the issue with this key in this workspace.
    pub fn issue_uuid(&self, workspace: &str, number: i64) -> String {
        const QUERY: &str = "SELECT id FROM issues WHERE workspace = $1 AND number = $2";
        match &self.backend {
            Backend::Sqlite { db, .. } => db
                .with_reader(|c| {
                    c.query_row(
                        &QUERY.replace('$', "?"),
                        rusqlite::params![workspace, number],
                        |r| r.get(0),
                    )
                })
                .expect("issue exists"),
            Backend::Postgres { test, .. } => pg_scalar(&test.url, QUERY, &[&workspace, &number]),
        }
    }

    /// Remove `user` from `workspace` (the tokens made for them stay).
    pub fn remove_user(&self, workspace: &str, user: &str) {
        const QUERY: &str = "DELETE FROM users WHERE workspace = $1 AND name = $2";
        let removed: i64 = match &self.backend {
            Backend::Sqlite { db, .. } => db
                .with_writer(|c| {
                    c.execute(&QUERY.replace('$', "?"), rusqlite::params![workspace, user])
                        .map(|n| n as i64)
                })
                .expect("removed"),
            Backend::Postgres { test, .. } => pg_scalar(
                &test.url,
                &format!("WITH gone AS ({QUERY} RETURNING 1) SELECT count(*) FROM gone"),
                &[&workspace, &user],
            ),
        };
        assert_eq!(removed, 1, "{user} was a member of {workspace}");
    }

    /// `SELECT count(*) FROM <table>`.
    pub fn count(&self, table: &str) -> i64 {
        let query = format!("SELECT count(*) FROM {table}");
        match &self.backend {
            Backend::Sqlite { db, .. } => db
                .with_reader(|c| c.query_row(&query, [], |r| r.get(0)))
                .expect("count"),
            Backend::Postgres { test, .. } => pg_scalar(&test.url, &query, &[]),
        }
    }
}

/// A token store on `test`'s database, for a runtime of its own (its connections live on
/// the runtime that opens them).
fn pg_tokens(test: &TestDb) -> postgres::TokenStore {
    let db = postgres::Database::connect(&test.url, test.roles.clone()).expect("connect");
    postgres::TokenStore::open(&db).expect("token store")
}
