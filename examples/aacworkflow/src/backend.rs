//! The tools' data handle on either backend: [`Store<L>`], an SQLite
//! [`aac_tools::sqlite::Db<L>`] or a PostgreSQL [`aac_tools::postgres::Db<L>`] at the
//! tool's access level, and [`transact!`](crate::transact), which runs one transaction
//! on it.
//!
//! A tool names `ReadStore`, `WriteStore` or `DeleteStore` as it would name `ReadDb`…:
//! the level is the store's own ([`ToolParam::NEEDS`]), so `#[mcp_tool]` checks it at
//! compile time exactly as for the backends' handles, and the store is built from the
//! backend's handle of the same level, so the backend's run-time rules apply too
//! (SQLite's read-only connection and authorizer, PostgreSQL's level roles and
//! `READ ONLY` transactions).
//!
//! The queries ([`crate::queries`]) are async traits implemented for both transaction
//! types, `sqlite::Tx<'_, L>` and `postgres::Tx<L>`, each gated by `#[queries]` on its
//! name. A handler's transaction is written once, as the body of `transact!`, and
//! compiled once per backend:
//!
//! - on SQLite it runs inside [`aac_tools::sqlite::Db::run`], on a blocking thread, and
//!   is driven by [`ready`]: SQLite queries never wait on anything, so the body completes
//!   on its first poll;
//! - on PostgreSQL it runs between [`aac_tools::postgres::Db::begin`] and
//!   [`aac_tools::postgres::Tx::commit`], awaiting each query; an `Err` drops the
//!   transaction, which rolls it back.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use aac_tools::access::{Delete, Level, Read, Write};
use aac_tools::{Call, ToolError, ToolParam, postgres, sqlite};

/// A data handle at access level `L` on the server's backend.
pub enum Store<L> {
    /// The SQLite file.
    Sqlite(sqlite::Db<L>),
    /// The PostgreSQL database.
    Postgres(postgres::Db<L>),
}

/// The store of `read_only` tools.
pub type ReadStore = Store<Read>;
/// The store of tools that are neither `read_only` nor `destructive`.
pub type WriteStore = Store<Write>;
/// The store of `destructive` tools.
pub type DeleteStore = Store<Delete>;

impl<L: Level> std::fmt::Debug for Store<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Sqlite(db) => f.debug_tuple("Sqlite").field(db).finish(),
            Store::Postgres(db) => f.debug_tuple("Postgres").field(db).finish(),
        }
    }
}

impl<L> Clone for Store<L> {
    fn clone(&self) -> Self {
        match self {
            Store::Sqlite(db) => Store::Sqlite(db.clone()),
            Store::Postgres(db) => Store::Postgres(db.clone()),
        }
    }
}

impl<L: Level> Store<L> {
    /// The store over an SQLite database, for code outside tools (seeding, tests).
    pub fn sqlite(db: &sqlite::Database) -> Store<L> {
        Store::Sqlite(db.handle::<L>())
    }

    /// The store over a PostgreSQL database, for code outside tools (seeding, tests).
    pub fn postgres(db: &postgres::Database) -> Store<L> {
        Store::Postgres(db.handle::<L>())
    }
}

/// A store is the backend's handle of the same level: the server registers one
/// database, SQLite's or PostgreSQL's, as its state.
impl<L: Level> ToolParam for Store<L> {
    const NEEDS: aac_tools::access::AccessLevel = L::LEVEL;

    fn from_call(call: &mut Call) -> Result<Self, ToolError> {
        match <sqlite::Db<L> as ToolParam>::from_call(call) {
            Ok(db) => Ok(Store::Sqlite(db)),
            // No SQLite database registered (or a handle above the tool's level, which
            // PostgreSQL's handle refuses in the same words).
            Err(sqlite) => match <postgres::Db<L> as ToolParam>::from_call(call) {
                Ok(db) => Ok(Store::Postgres(db)),
                Err(_) => Err(sqlite),
            },
        }
    }
}

/// The value of a future that completes on its first poll: the body of a transaction on
/// SQLite, whose queries never wait. One that would wait is a bug, answered 500.
pub fn ready<T>(future: impl Future<Output = Result<T, ToolError>>) -> Result<T, ToolError> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => Err(ToolError::internal(
            "an SQLite transaction waited on something: its queries must run to completion",
        )),
    }
}

/// Run one transaction on a [`Store`]: `transact!(store, |tx| body)`, where `body` is an
/// expression of type `Result<T, ToolError>` that may `.await` queries on `tx` and use
/// `?`. Committed when it is `Ok`, rolled back when it is `Err`. The body is compiled once
/// per backend, so it may use only the query traits (implemented for both), and the
/// level's gating applies to each.
///
/// ```
/// use aacworkflow::backend::ReadStore;
/// use aacworkflow::queries::ReadIssues;
/// use aacworkflow::transact;
///
/// async fn title(db: ReadStore) -> Result<String, aac_tools::ToolError> {
///     transact!(db, |tx| {
///         let issue = tx.find_issue("demo", "AAC-1").await?;
///         Ok(issue.title)
///     })
/// }
/// ```
#[macro_export]
macro_rules! transact {
    ($store:expr, |$tx:ident| $body:expr) => {
        match $store {
            $crate::backend::Store::Sqlite(db) => {
                db.run(move |$tx| $crate::backend::ready(async move { $body }))
                    .await
            }
            $crate::backend::Store::Postgres(db) => match db.begin().await {
                ::core::result::Result::Err(err) => ::core::result::Result::Err(err),
                ::core::result::Result::Ok(tx) => {
                    let value: ::core::result::Result<_, ::aac_tools::ToolError> = {
                        let $tx = &tx;
                        async move { $body }.await
                    };
                    match value {
                        // Dropped uncommitted on an error: rolled back.
                        ::core::result::Result::Err(err) => ::core::result::Result::Err(err),
                        ::core::result::Result::Ok(value) => tx.commit().await.map(|()| value),
                    }
                }
            },
        }
    };
}
