//! Shared set-up: a real SQLite file in a temporary directory, seeded with the demo data.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

use aac_tools::sqlite::{Database, TokenStore};
use aacworkflow::store::{self, OpenMode};

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

/// A seeded database in a temporary directory (removed on drop).
pub struct Seeded {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub db: Database,
    pub tokens: TokenStore,
}

impl Seeded {
    pub async fn new() -> Seeded {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("aacworkflow.db");
        let db = store::open(&path, OpenMode::Create).expect("database opens");
        aacworkflow::seed::seed_demo(&aacworkflow::backend::Store::sqlite(&db))
            .await
            .expect("demo data");
        let tokens = TokenStore::open(&db).expect("token store");
        Seeded {
            dir,
            path,
            db,
            tokens,
        }
    }

    /// A token for `user` in `workspace` with `scopes`.
    pub fn token(&self, user: &str, workspace: &str, scopes: &[&str]) -> String {
        self.tokens
            .create(user, Some(workspace), scopes, None)
            .expect("token")
            .token
    }

    /// The UUID of the issue with this key in this workspace.
    pub fn issue_uuid(&self, workspace: &str, number: i64) -> String {
        self.db
            .with_reader(|c| {
                c.query_row(
                    "SELECT id FROM issues WHERE workspace = ?1 AND number = ?2",
                    rusqlite::params![workspace, number],
                    |r| r.get(0),
                )
            })
            .expect("issue exists")
    }

    /// `SELECT count(*) FROM <table>`.
    pub fn count(&self, table: &str) -> i64 {
        self.db
            .with_reader(|c| {
                c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            })
            .expect("count")
    }
}
