//! The application's queries, as async traits split by what they do, implemented for
//! both transaction types: `aac_tools::sqlite::Tx<'_, L>` (`queries/sqlite.rs`) and
//! `aac_tools::postgres::Tx<L>` (`queries/postgres.rs`). The traits, their contracts and
//! the handlers that use them are written once; only the SQL differs.
//!
//! This is the least-privilege pattern of [`aac_tools::access`] at work, every trait
//! under `#[queries]`, whose name is its contract:
//!
//! - `Read*` traits ([`ReadIssues`], [`ReadComments`], [`ReadMembers`], [`ReadUsage`])
//!   work on a transaction of any level;
//! - every method of the `Update*` traits ([`UpdateIssues`], [`UpdateComments`],
//!   [`UpdateAutopilot`], [`UpdateDirectory`]) requires `MayUpdate`, so only tools that
//!   are not `read_only` reach them;
//! - every method of [`DeleteIssues`] requires `MayDelete`, so only the `destructive`
//!   `delete_issue` reaches it.
//!
//! No method writes its bound: `#[queries]` adds it from the trait's name, so none can
//! be forgotten. Both backends' transactions implement `MayUpdate` and `MayDelete` at
//! the same levels, so the rule holds on each.
//!
//! A read-only tool that tries to delete does not compile, on either backend, and says
//! why:
//!
//! ```compile_fail
//! use aacworkflow::backend::ReadStore;
//! use aacworkflow::queries::DeleteIssues;
//! use aacworkflow::transact;
//! use aac_tools::{mcp_tool, Text, ToolError};
//!
//! /// Looks harmless.
//! #[mcp_tool(read_only, scope = "issues:read")]
//! async fn peek(db: ReadStore) -> Result<Text, ToolError> {
//!     // error: non-destructive tool cannot use delete queries
//!     transact!(db, |tx| tx.delete_issue("00000000-0000-0000-0000-000000000000").await)?;
//!     Ok(Text("peeked".into()))
//! }
//! # fn main() {}
//! ```
//!
//! nor one that tries to write:
//!
//! ```compile_fail
//! use aacworkflow::backend::ReadStore;
//! use aacworkflow::queries::UpdateComments;
//! use aacworkflow::transact;
//! use aac_tools::{mcp_tool, Text, ToolError};
//!
//! /// Looks harmless.
//! #[mcp_tool(read_only, scope = "comments:read")]
//! async fn peek(db: ReadStore) -> Result<Text, ToolError> {
//!     // error: read-only tool cannot use update queries
//!     transact!(db, |tx| tx.add_comment("x", "mallory", "hi").await)?;
//!     Ok(Text("peeked".into()))
//! }
//! # fn main() {}
//! ```
//!
//! while the same body in a `destructive` tool, with its `DeleteStore`, does:
//!
//! ```
//! use aacworkflow::backend::DeleteStore;
//! use aacworkflow::queries::DeleteIssues;
//! use aacworkflow::transact;
//! use aac_tools::{mcp_tool, Text, ToolError};
//!
//! /// Deletes, as its annotation says.
//! #[mcp_tool(destructive, scope = "issues:write")]
//! async fn purge(db: DeleteStore) -> Result<Text, ToolError> {
//!     transact!(db, |tx| tx.delete_issue("00000000-0000-0000-0000-000000000000").await)?;
//!     Ok(Text("purged".into()))
//! }
//! # fn main() {}
//! ```
//!
//! And should a write be smuggled through raw SQL, the database refuses it at run time:
//! on SQLite the read-only connection every write, and the authorizer of a tool that is
//! not `destructive` every `DELETE`, `DROP` and schema change; on PostgreSQL the level's
//! role and its `READ ONLY` transaction.

mod postgres;
mod sqlite;

use std::future::Future;

use aac_tools::{ToolError, queries};

use crate::model::{Assignee, AutopilotRun, Comment, Issue, IssueStatus, Role, UsageRow};

/// How a caller names an issue: its UUID or its key (`AAC-42`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueRef {
    /// A UUID, normalised to lowercase with hyphens.
    Id(String),
    /// A key: the workspace's prefix (uppercase) and the issue's number.
    Key {
        /// `AAC`.
        prefix: String,
        /// `42`.
        number: i64,
    },
}

impl IssueRef {
    /// Parse `s` as a UUID or a key; `None` if it is neither.
    pub fn parse(s: &str) -> Option<IssueRef> {
        let s = s.trim();
        if let Ok(id) = uuid::Uuid::parse_str(s) {
            return Some(IssueRef::Id(id.hyphenated().to_string()));
        }
        let (prefix, number) = s.rsplit_once('-')?;
        let valid_prefix = !prefix.is_empty()
            && prefix.len() <= 10
            && prefix.bytes().all(|b| b.is_ascii_alphabetic());
        let number: i64 = number.parse().ok().filter(|n| *n > 0)?;
        valid_prefix.then(|| IssueRef::Key {
            prefix: prefix.to_ascii_uppercase(),
            number,
        })
    }
}

/// The one answer for an issue that is not in the caller's workspace, whether it exists
/// elsewhere or nowhere: workspace boundaries leak nothing.
pub fn issue_not_found() -> ToolError {
    ToolError::not_found("no issue with this id or key in your workspace")
}

/// What [`ReadIssues::list_issues`] returns: one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueFilter {
    /// Only issues with this status.
    pub status: Option<IssueStatus>,
    /// Only issues assigned to this user or agent.
    pub assignee: Option<String>,
    /// Only issues numbered below this (the cursor).
    pub before: Option<i64>,
    /// At most this many.
    pub limit: u32,
}

/// The changes [`UpdateIssues::update_issue`] applies; `None` leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssueChanges {
    /// A new title.
    pub title: Option<String>,
    /// A new body.
    pub body: Option<String>,
    /// A new status.
    pub status: Option<IssueStatus>,
}

/// What deleting an issue removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// Comments removed with the issue.
    pub comments: i64,
    /// Autopilot runs removed with the issue.
    pub runs: i64,
}

// The futures carry no `Send` bound: SQLite's are driven on the blocking thread that
// holds the connection (never sent anywhere), and PostgreSQL's are `Send` by their
// concrete types, which the handlers see.

/// Queries that read issues.
#[queries]
pub trait ReadIssues {
    /// The issue `issue` (UUID or key) in `workspace`, else [`issue_not_found`].
    fn find_issue(
        &self,
        workspace: &str,
        issue: &str,
    ) -> impl Future<Output = Result<Issue, ToolError>>;

    /// One page of issues of `workspace`, newest first, each with its number; and whether
    /// more follow.
    fn list_issues(
        &self,
        workspace: &str,
        filter: &IssueFilter,
    ) -> impl Future<Output = Result<(Vec<(i64, Issue)>, bool), ToolError>>;

    /// The keys of the issues of `workspace` that start with `typed` (as stored:
    /// `AAC-12`), newest first, at most `limit`.
    fn issue_keys(
        &self,
        workspace: &str,
        typed: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<String>, ToolError>>;
}

/// Queries that read comments.
#[queries]
pub trait ReadComments {
    /// At most `limit` comments of the issue with this UUID, oldest first, after the first
    /// `skip`, and whether more follow.
    fn comments(
        &self,
        issue_id: &str,
        skip: i64,
        limit: u32,
    ) -> impl Future<Output = Result<(Vec<Comment>, bool), ToolError>>;
}

/// Queries that read who belongs to a workspace.
#[queries]
pub trait ReadMembers {
    /// Whether the workspace exists.
    fn workspace_exists(&self, workspace: &str) -> impl Future<Output = Result<bool, ToolError>>;
    /// The role of `user` in `workspace`, if the user belongs to it.
    fn role(
        &self,
        workspace: &str,
        user: &str,
    ) -> impl Future<Output = Result<Option<Role>, ToolError>>;
    /// Whether `agent` is an agent of `workspace`.
    fn agent_exists(
        &self,
        workspace: &str,
        agent: &str,
    ) -> impl Future<Output = Result<bool, ToolError>>;
}

/// Queries that read the audit trail: on SQLite the `aac_audit` table the audit sink
/// writes into the same file; on PostgreSQL the view `aacworkflow_usage` over
/// `aac_audit` (the data roles may not read the trail itself; the view, the
/// application's own, shows them the columns it names).
#[queries]
pub trait ReadUsage {
    /// Tool calls per day and tool in `workspace` since the start of `since_day`
    /// (`YYYY-MM-DD`), oldest day first.
    fn usage_daily(
        &self,
        workspace: &str,
        since_day: &str,
    ) -> impl Future<Output = Result<Vec<UsageRow>, ToolError>>;
}

/// Queries that create or change issues.
#[queries]
pub trait UpdateIssues {
    /// Create an issue in `workspace` with the workspace's next key.
    fn create_issue(
        &self,
        workspace: &str,
        author: &str,
        title: &str,
        body: &str,
    ) -> impl Future<Output = Result<Issue, ToolError>>;

    /// Apply `changes` to `issue`. Only fields that differ are written, and the issue's
    /// `updated_at` moves only then: the same update twice changes nothing the second time.
    fn update_issue(
        &self,
        issue: &Issue,
        changes: &IssueChanges,
    ) -> impl Future<Output = Result<bool, ToolError>>;

    /// Assign `issue` to a user or an agent. Returns whether anything changed.
    fn assign_issue(
        &self,
        issue: &Issue,
        assignee: &Assignee,
    ) -> impl Future<Output = Result<bool, ToolError>>;
}

/// Queries that add comments.
#[queries]
pub trait UpdateComments {
    /// Add a comment by `author` to the issue with this UUID.
    fn add_comment(
        &self,
        issue_id: &str,
        author: &str,
        body: &str,
    ) -> impl Future<Output = Result<Comment, ToolError>>;
}

/// Queries that start autopilot runs.
#[queries]
pub trait UpdateAutopilot {
    /// Queue a new run of `agent` on `issue`, triggered by `user`.
    fn queue_run(
        &self,
        issue: &Issue,
        agent: &str,
        user: &str,
    ) -> impl Future<Output = Result<AutopilotRun, ToolError>>;
}

/// Queries that set up workspaces, users and agents (the command line's `init --demo`).
#[queries]
pub trait UpdateDirectory {
    /// Add a workspace whose issue keys start with `key_prefix`, unless it exists.
    fn ensure_workspace(
        &self,
        workspace: &str,
        key_prefix: &str,
    ) -> impl Future<Output = Result<(), ToolError>>;
    /// Add a user with `role`, unless the user exists.
    fn ensure_user(
        &self,
        workspace: &str,
        user: &str,
        role: Role,
    ) -> impl Future<Output = Result<(), ToolError>>;
    /// Add an agent, unless it exists.
    fn ensure_agent(
        &self,
        workspace: &str,
        agent: &str,
        description: &str,
    ) -> impl Future<Output = Result<(), ToolError>>;
}

/// Queries that delete.
#[queries]
pub trait DeleteIssues {
    /// Delete the issue with this UUID, its comments and its runs.
    fn delete_issue(&self, issue_id: &str) -> impl Future<Output = Result<Removed, ToolError>>;
}

/// A new UUID, as ids are stored.
/// A page of at most `limit` rows, from a query asked for `limit + 1`, and whether more
/// follow (the extra row says so).
fn page<T>(mut rows: Vec<T>, limit: u32) -> (Vec<T>, bool) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    (rows, more)
}

fn new_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// `user` or `agent`, as stored.
fn kind_str(kind: crate::model::AssigneeKind) -> &'static str {
    match kind {
        crate::model::AssigneeKind::User => "user",
        crate::model::AssigneeKind::Agent => "agent",
    }
}

/// An assignee from its stored columns.
fn assignee_of(name: Option<String>, kind: Option<&str>) -> Option<Assignee> {
    name.map(|name| Assignee {
        name,
        kind: if kind == Some("agent") {
            crate::model::AssigneeKind::Agent
        } else {
            crate::model::AssigneeKind::User
        },
    })
}
