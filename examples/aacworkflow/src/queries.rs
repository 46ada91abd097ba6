//! The application's queries, as traits on [`Tx`] split by what they do.
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
//! be forgotten.
//!
//! A read-only tool that tries to write does not compile, and says why:
//!
//! ```compile_fail
//! use aac_tools::sqlite::ReadDb;
//! use aac_tools::{mcp_tool, Text, ToolError};
//! use aacworkflow::queries::DeleteIssues;
//!
//! /// Looks harmless.
//! #[mcp_tool(read_only, scope = "issues:read")]
//! async fn peek(db: ReadDb) -> Result<Text, ToolError> {
//!     // error: non-destructive tool cannot use delete queries
//!     db.run(|tx| tx.delete_issue("00000000-0000-0000-0000-000000000000")).await?;
//!     Ok(Text("peeked".into()))
//! }
//! # fn main() {}
//! ```
//!
//! And should a write be smuggled through raw SQL, the database refuses it at run time:
//! the read-only transaction every write, the write transaction of a tool that is not
//! `destructive` every `DELETE`, `DROP` and schema change.

use aac_tools::access::Level;
use aac_tools::sqlite::Tx;
use aac_tools::{ToolError, queries};
use rusqlite::{OptionalExtension, Row, params};

use crate::model::{
    Assignee, AssigneeKind, AutopilotRun, Comment, Issue, IssueStatus, Role, UsageRow, now,
};

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

const ISSUE_COLUMNS: &str = "i.id, w.key_prefix || '-' || i.number, i.title, i.body, i.status,
     i.assignee, i.assignee_kind, i.created_by, i.created_at, i.updated_at, i.number
     FROM issues i JOIN workspaces w ON w.id = i.workspace";

fn issue_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, Issue)> {
    let status: String = row.get(4)?;
    let assignee: Option<String> = row.get(5)?;
    let kind: Option<String> = row.get(6)?;
    let assignee = assignee.map(|name| Assignee {
        name,
        kind: if kind.as_deref() == Some("agent") {
            AssigneeKind::Agent
        } else {
            AssigneeKind::User
        },
    });
    Ok((
        row.get(10)?,
        Issue {
            id: row.get(0)?,
            key: row.get(1)?,
            title: row.get(2)?,
            body: row.get(3)?,
            status: IssueStatus::parse(&status).unwrap_or(IssueStatus::Open),
            assignee,
            created_by: row.get(7)?,
            created_at: row.get(8)?,
            updated_at: row.get(9)?,
        },
    ))
}

/// Queries that read issues.
#[queries]
pub trait ReadIssues {
    /// The issue `issue` (UUID or key) in `workspace`, else [`issue_not_found`].
    fn find_issue(&self, workspace: &str, issue: &str) -> Result<Issue, ToolError>;

    /// One page of issues of `workspace`, newest first, each with its number; and whether
    /// more follow.
    fn list_issues(
        &self,
        workspace: &str,
        filter: &IssueFilter,
    ) -> Result<(Vec<(i64, Issue)>, bool), ToolError>;
}

impl<L: Level> ReadIssues for Tx<'_, L> {
    fn find_issue(&self, workspace: &str, issue: &str) -> Result<Issue, ToolError> {
        let found = match IssueRef::parse(issue) {
            None => None,
            Some(IssueRef::Id(id)) => self
                .conn()
                .prepare_cached(&format!(
                    "SELECT {ISSUE_COLUMNS} WHERE i.workspace = ?1 AND i.id = ?2"
                ))?
                .query_row(params![workspace, id], issue_from_row)
                .optional()?,
            Some(IssueRef::Key { prefix, number }) => self
                .conn()
                .prepare_cached(&format!(
                    "SELECT {ISSUE_COLUMNS}
                     WHERE i.workspace = ?1 AND w.key_prefix = ?2 AND i.number = ?3"
                ))?
                .query_row(params![workspace, prefix, number], issue_from_row)
                .optional()?,
        };
        found.map(|(_, issue)| issue).ok_or_else(issue_not_found)
    }

    fn list_issues(
        &self,
        workspace: &str,
        filter: &IssueFilter,
    ) -> Result<(Vec<(i64, Issue)>, bool), ToolError> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {ISSUE_COLUMNS}
             WHERE i.workspace = ?1
               AND (?2 IS NULL OR i.status = ?2)
               AND (?3 IS NULL OR i.assignee = ?3)
               AND (?4 IS NULL OR i.number < ?4)
             ORDER BY i.number DESC
             LIMIT ?5"
        ))?;
        let limit = i64::from(filter.limit);
        let mut rows = stmt
            .query_map(
                params![
                    workspace,
                    filter.status.map(IssueStatus::as_str),
                    filter.assignee,
                    filter.before,
                    limit + 1
                ],
                issue_from_row,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let more = rows.len() as i64 > limit;
        rows.truncate(filter.limit as usize);
        Ok((rows, more))
    }
}

/// Queries that read comments.
#[queries]
pub trait ReadComments {
    /// The comments of the issue with this UUID, oldest first.
    fn comments(&self, issue_id: &str) -> Result<Vec<Comment>, ToolError>;
}

impl<L: Level> ReadComments for Tx<'_, L> {
    fn comments(&self, issue_id: &str) -> Result<Vec<Comment>, ToolError> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT id, author, body, created_at FROM comments
             WHERE issue_id = ?1 ORDER BY created_at, rowid",
        )?;
        let comments = stmt
            .query_map([issue_id], |r| {
                Ok(Comment {
                    id: r.get(0)?,
                    author: r.get(1)?,
                    body: r.get(2)?,
                    created_at: r.get(3)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(comments)
    }
}

/// Queries that read who belongs to a workspace.
#[queries]
pub trait ReadMembers {
    /// Whether the workspace exists.
    fn workspace_exists(&self, workspace: &str) -> Result<bool, ToolError>;
    /// The role of `user` in `workspace`, if the user belongs to it.
    fn role(&self, workspace: &str, user: &str) -> Result<Option<Role>, ToolError>;
    /// Whether `agent` is an agent of `workspace`.
    fn agent_exists(&self, workspace: &str, agent: &str) -> Result<bool, ToolError>;
}

impl<L: Level> ReadMembers for Tx<'_, L> {
    fn workspace_exists(&self, workspace: &str) -> Result<bool, ToolError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT 1 FROM workspaces WHERE id = ?1")?
            .exists([workspace])?)
    }

    fn role(&self, workspace: &str, user: &str) -> Result<Option<Role>, ToolError> {
        let role: Option<String> = self
            .conn()
            .prepare_cached("SELECT role FROM users WHERE workspace = ?1 AND name = ?2")?
            .query_row([workspace, user], |r| r.get(0))
            .optional()?;
        Ok(role.as_deref().and_then(Role::parse))
    }

    fn agent_exists(&self, workspace: &str, agent: &str) -> Result<bool, ToolError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT 1 FROM agents WHERE workspace = ?1 AND name = ?2")?
            .exists([workspace, agent])?)
    }
}

/// Queries that read the audit trail (the `aac_audit` table the SQLite audit sink writes
/// into the same file).
#[queries]
pub trait ReadUsage {
    /// Tool calls per day and tool in `workspace` since the start of `since_day`
    /// (`YYYY-MM-DD`), oldest day first.
    fn usage_daily(&self, workspace: &str, since_day: &str) -> Result<Vec<UsageRow>, ToolError>;
}

impl<L: Level> ReadUsage for Tx<'_, L> {
    fn usage_daily(&self, workspace: &str, since_day: &str) -> Result<Vec<UsageRow>, ToolError> {
        let has_trail = self
            .conn()
            .prepare_cached(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'aac_audit'",
            )?
            .exists([])?;
        if !has_trail {
            // No call was ever recorded in this file (the trail is created with the
            // first record): no usage.
            return Ok(Vec::new());
        }
        let mut stmt = self.conn().prepare_cached(
            "SELECT substr(timestamp, 1, 10) AS day, tool, count(*),
                    sum(outcome = 'success'), sum(outcome = 'denied'), sum(outcome = 'error')
             FROM aac_audit
             WHERE workspace = ?1 AND timestamp >= ?2
             GROUP BY day, tool
             ORDER BY day, tool",
        )?;
        let rows = stmt
            .query_map([workspace, since_day], |r| {
                Ok(UsageRow {
                    day: r.get(0)?,
                    tool: r.get(1)?,
                    calls: r.get(2)?,
                    success: r.get(3)?,
                    denied: r.get(4)?,
                    error: r.get(5)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
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
    ) -> Result<Issue, ToolError>;

    /// Apply `changes` to `issue`. Only fields that differ are written, and the issue's
    /// `updated_at` moves only then: the same update twice changes nothing the second time.
    fn update_issue(&self, issue: &Issue, changes: &IssueChanges) -> Result<bool, ToolError>;

    /// Assign `issue` to a user or an agent. Returns whether anything changed.
    fn assign_issue(&self, issue: &Issue, assignee: &Assignee) -> Result<bool, ToolError>;
}

impl<L: Level> UpdateIssues for Tx<'_, L> {
    fn create_issue(
        &self,
        workspace: &str,
        author: &str,
        title: &str,
        body: &str,
    ) -> Result<Issue, ToolError> {
        let number: i64 = self
            .conn()
            .prepare_cached(
                "UPDATE workspaces SET next_number = next_number + 1 WHERE id = ?1
                 RETURNING next_number - 1",
            )?
            .query_row([workspace], |r| r.get(0))
            .optional()?
            .ok_or_else(|| {
                ToolError::forbidden(format!("workspace `{workspace}` does not exist"))
            })?;
        let id = uuid::Uuid::new_v4().hyphenated().to_string();
        let at = now();
        self.conn()
            .prepare_cached(
                "INSERT INTO issues (id, workspace, number, title, body, status, created_by, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6, ?7, ?7)",
            )?
            .execute(params![id, workspace, number, title, body, author, at])?;
        self.find_issue(workspace, &id)
    }

    fn update_issue(&self, issue: &Issue, changes: &IssueChanges) -> Result<bool, ToolError> {
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE issues SET
                     title = coalesce(?2, title),
                     body = coalesce(?3, body),
                     status = coalesce(?4, status),
                     updated_at = ?5
                 WHERE id = ?1
                   AND (title IS NOT coalesce(?2, title)
                        OR body IS NOT coalesce(?3, body)
                        OR status IS NOT coalesce(?4, status))",
            )?
            .execute(params![
                issue.id,
                changes.title,
                changes.body,
                changes.status.map(IssueStatus::as_str),
                now()
            ])?;
        Ok(changed > 0)
    }

    fn assign_issue(&self, issue: &Issue, assignee: &Assignee) -> Result<bool, ToolError> {
        let kind = match assignee.kind {
            AssigneeKind::User => "user",
            AssigneeKind::Agent => "agent",
        };
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE issues SET assignee = ?2, assignee_kind = ?3, updated_at = ?4
                 WHERE id = ?1 AND (assignee IS NOT ?2 OR assignee_kind IS NOT ?3)",
            )?
            .execute(params![issue.id, assignee.name, kind, now()])?;
        Ok(changed > 0)
    }
}

/// Queries that add comments.
#[queries]
pub trait UpdateComments {
    /// Add a comment by `author` to the issue with this UUID.
    fn add_comment(&self, issue_id: &str, author: &str, body: &str) -> Result<Comment, ToolError>;
}

impl<L: Level> UpdateComments for Tx<'_, L> {
    fn add_comment(&self, issue_id: &str, author: &str, body: &str) -> Result<Comment, ToolError> {
        let comment = Comment {
            id: uuid::Uuid::new_v4().hyphenated().to_string(),
            author: author.to_owned(),
            body: body.to_owned(),
            created_at: now(),
        };
        self.conn()
            .prepare_cached(
                "INSERT INTO comments (id, issue_id, author, body, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                comment.id,
                issue_id,
                comment.author,
                comment.body,
                comment.created_at
            ])?;
        Ok(comment)
    }
}

/// Queries that start autopilot runs.
#[queries]
pub trait UpdateAutopilot {
    /// Queue a new run of `agent` on `issue`, triggered by `user`.
    fn queue_run(&self, issue: &Issue, agent: &str, user: &str) -> Result<AutopilotRun, ToolError>;
}

impl<L: Level> UpdateAutopilot for Tx<'_, L> {
    fn queue_run(&self, issue: &Issue, agent: &str, user: &str) -> Result<AutopilotRun, ToolError> {
        let run = AutopilotRun {
            run_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            issue_id: issue.id.clone(),
            issue_key: issue.key.clone(),
            agent: agent.to_owned(),
            status: "queued".to_owned(),
            triggered_by: user.to_owned(),
            created_at: now(),
        };
        self.conn()
            .prepare_cached(
                "INSERT INTO autopilot_runs (id, issue_id, agent, status, triggered_by, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                run.run_id,
                run.issue_id,
                run.agent,
                run.status,
                run.triggered_by,
                run.created_at
            ])?;
        Ok(run)
    }
}

/// Queries that set up workspaces, users and agents (the command line's `init --demo`).
#[queries]
pub trait UpdateDirectory {
    /// Add a workspace whose issue keys start with `key_prefix`, unless it exists.
    fn ensure_workspace(&self, workspace: &str, key_prefix: &str) -> Result<(), ToolError>;
    /// Add a user with `role`, unless the user exists.
    fn ensure_user(&self, workspace: &str, user: &str, role: Role) -> Result<(), ToolError>;
    /// Add an agent, unless it exists.
    fn ensure_agent(
        &self,
        workspace: &str,
        agent: &str,
        description: &str,
    ) -> Result<(), ToolError>;
}

impl<L: Level> UpdateDirectory for Tx<'_, L> {
    fn ensure_workspace(&self, workspace: &str, key_prefix: &str) -> Result<(), ToolError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO workspaces (id, key_prefix) VALUES (?1, ?2)",
            [workspace, key_prefix],
        )?;
        Ok(())
    }

    fn ensure_user(&self, workspace: &str, user: &str, role: Role) -> Result<(), ToolError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO users (workspace, name, role) VALUES (?1, ?2, ?3)",
            [workspace, user, role.as_str()],
        )?;
        Ok(())
    }

    fn ensure_agent(
        &self,
        workspace: &str,
        agent: &str,
        description: &str,
    ) -> Result<(), ToolError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO agents (workspace, name, description) VALUES (?1, ?2, ?3)",
            [workspace, agent, description],
        )?;
        Ok(())
    }
}

/// What deleting an issue removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// Comments removed with the issue.
    pub comments: i64,
    /// Autopilot runs removed with the issue.
    pub runs: i64,
}

/// Queries that delete.
#[queries]
pub trait DeleteIssues {
    /// Delete the issue with this UUID, its comments and its runs.
    fn delete_issue(&self, issue_id: &str) -> Result<Removed, ToolError>;
}

impl<L: Level> DeleteIssues for Tx<'_, L> {
    fn delete_issue(&self, issue_id: &str) -> Result<Removed, ToolError> {
        let conn = self.conn();
        let comments = conn.execute("DELETE FROM comments WHERE issue_id = ?1", [issue_id])?;
        let runs = conn.execute("DELETE FROM autopilot_runs WHERE issue_id = ?1", [issue_id])?;
        let issues = conn.execute("DELETE FROM issues WHERE id = ?1", [issue_id])?;
        if issues == 0 {
            return Err(issue_not_found());
        }
        Ok(Removed {
            comments: comments as i64,
            runs: runs as i64,
        })
    }
}
