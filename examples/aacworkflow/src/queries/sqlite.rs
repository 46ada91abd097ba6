//! The queries on SQLite (`rusqlite`, `?N` parameters). Each `async fn` runs to
//! completion without waiting: the transaction's body is driven on the blocking thread
//! that holds the connection ([`crate::backend::ready`]).

use aac_tools::ToolError;
use aac_tools::access::Level;
use aac_tools::sqlite::Tx;
use aac_tools::sqlite::rusqlite::{self, OptionalExtension, Row, params};

use super::{
    DeleteIssues, IssueChanges, IssueFilter, IssueRef, ReadComments, ReadIssues, ReadMembers,
    ReadUsage, Removed, UpdateAutopilot, UpdateComments, UpdateDirectory, UpdateIssues,
    assignee_of, issue_not_found, kind_str, new_id, page,
};
use crate::model::{Assignee, AutopilotRun, Comment, Issue, IssueStatus, Role, UsageRow, now};

const ISSUE_COLUMNS: &str = "i.id, w.key_prefix || '-' || i.number, i.title, i.body, i.status,
     i.assignee, i.assignee_kind, i.created_by, i.created_at, i.updated_at, i.number
     FROM issues i JOIN workspaces w ON w.id = i.workspace";

fn issue_from_row(row: &Row<'_>) -> rusqlite::Result<(i64, Issue)> {
    let status: String = row.get(4)?;
    let kind: Option<String> = row.get(6)?;
    Ok((
        row.get(10)?,
        Issue {
            id: row.get(0)?,
            key: row.get(1)?,
            title: row.get(2)?,
            body: row.get(3)?,
            status: IssueStatus::parse(&status).unwrap_or(IssueStatus::Open),
            assignee: assignee_of(row.get(5)?, kind.as_deref()),
            created_by: row.get(7)?,
            created_at: row.get(8)?,
            updated_at: row.get(9)?,
        },
    ))
}

impl<L: Level> ReadIssues for Tx<'_, L> {
    async fn find_issue(&self, workspace: &str, issue: &str) -> Result<Issue, ToolError> {
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

    async fn list_issues(
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
        let rows = stmt
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
        Ok(page(rows, filter.limit))
    }

    async fn issue_keys(
        &self,
        workspace: &str,
        typed: &str,
        limit: u32,
    ) -> Result<Vec<String>, ToolError> {
        // `substr`, not `LIKE`: what was typed is compared as it is, wildcards and all.
        let mut stmt = self.conn().prepare_cached(
            "SELECT w.key_prefix || '-' || i.number
             FROM issues i JOIN workspaces w ON w.id = i.workspace
             WHERE i.workspace = ?1
               AND substr(w.key_prefix || '-' || i.number, 1, length(?2)) = ?2
             ORDER BY i.number DESC
             LIMIT ?3",
        )?;
        let keys = stmt
            .query_map(params![workspace, typed, limit], |row| row.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(keys)
    }
}

impl<L: Level> ReadComments for Tx<'_, L> {
    async fn comments(
        &self,
        issue_id: &str,
        skip: i64,
        limit: u32,
    ) -> Result<(Vec<Comment>, bool), ToolError> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT id, author, body, created_at FROM comments
             WHERE issue_id = ?1 ORDER BY created_at, rowid LIMIT ?2 OFFSET ?3",
        )?;
        let comments = stmt
            .query_map(
                rusqlite::params![issue_id, i64::from(limit) + 1, skip],
                |r| {
                    Ok(Comment {
                        id: r.get(0)?,
                        author: r.get(1)?,
                        body: r.get(2)?,
                        created_at: r.get(3)?,
                    })
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(page(comments, limit))
    }
}

impl<L: Level> ReadMembers for Tx<'_, L> {
    async fn workspace_exists(&self, workspace: &str) -> Result<bool, ToolError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT 1 FROM workspaces WHERE id = ?1")?
            .exists([workspace])?)
    }

    async fn role(&self, workspace: &str, user: &str) -> Result<Option<Role>, ToolError> {
        let role: Option<String> = self
            .conn()
            .prepare_cached("SELECT role FROM users WHERE workspace = ?1 AND name = ?2")?
            .query_row([workspace, user], |r| r.get(0))
            .optional()?;
        Ok(role.as_deref().and_then(Role::parse))
    }

    async fn agent_exists(&self, workspace: &str, agent: &str) -> Result<bool, ToolError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT 1 FROM agents WHERE workspace = ?1 AND name = ?2")?
            .exists([workspace, agent])?)
    }
}

/// Tool calls per day and tool of a workspace since a day: the library's counts (a count
/// of refusals stands for each call it counts; a name a caller made up for the framework's
/// count is `(unknown)`), as `audit --stats` makes them.
static USAGE_DAILY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    use aac_tools::audit::{CALLS_OF_A_RECORD_SQL, TOOL_AS_COUNTED_SQL};
    // Names no tool of this server has are one group, `(unknown)`, in the query itself:
    // folded afterwards, every name a caller ever sent came back as a row of its own (a
    // million names, 70 MB of the server's memory for one call of a 164-byte answer).
    let known = crate::tools::TOOL_NAMES
        .iter()
        .chain(&["(rate limited)"])
        .map(|name| format!("'{name}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT day, tool, sum(calls), sum(calls * (outcome = 'success')),
                sum(calls * (outcome = 'denied')), sum(calls * (outcome = 'error'))
         FROM (
             SELECT substr(timestamp, 1, 10) AS day, outcome,
                    CASE WHEN {TOOL_AS_COUNTED_SQL} IN ({known}) THEN {TOOL_AS_COUNTED_SQL}
                         ELSE '(unknown)' END AS tool,
                    {CALLS_OF_A_RECORD_SQL} AS calls
             FROM aac_audit
             WHERE workspace = ?1 AND timestamp >= ?2 AND kind = 'tool'
         )
         GROUP BY day, tool
         ORDER BY day, tool"
    )
});

impl<L: Level> ReadUsage for Tx<'_, L> {
    async fn usage_daily(
        &self,
        workspace: &str,
        since_day: &str,
    ) -> Result<Vec<UsageRow>, ToolError> {
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
        let mut stmt = self.conn().prepare_cached(&USAGE_DAILY)?;
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

impl<L: Level> UpdateIssues for Tx<'_, L> {
    async fn create_issue(
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
        let id = new_id();
        let at = now();
        self.conn()
            .prepare_cached(
                "INSERT INTO issues (id, workspace, number, title, body, status, created_by, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6, ?7, ?7)",
            )?
            .execute(params![id, workspace, number, title, body, author, at])?;
        self.find_issue(workspace, &id).await
    }

    async fn update_issue(&self, issue: &Issue, changes: &IssueChanges) -> Result<bool, ToolError> {
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

    async fn assign_issue(&self, issue: &Issue, assignee: &Assignee) -> Result<bool, ToolError> {
        let changed = self
            .conn()
            .prepare_cached(
                "UPDATE issues SET assignee = ?2, assignee_kind = ?3, updated_at = ?4
                 WHERE id = ?1 AND (assignee IS NOT ?2 OR assignee_kind IS NOT ?3)",
            )?
            .execute(params![
                issue.id,
                assignee.name,
                kind_str(assignee.kind),
                now()
            ])?;
        Ok(changed > 0)
    }
}

impl<L: Level> UpdateComments for Tx<'_, L> {
    async fn add_comment(
        &self,
        issue_id: &str,
        author: &str,
        body: &str,
    ) -> Result<Comment, ToolError> {
        let comment = Comment {
            id: new_id(),
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

impl<L: Level> UpdateAutopilot for Tx<'_, L> {
    async fn queue_run(
        &self,
        issue: &Issue,
        agent: &str,
        user: &str,
    ) -> Result<AutopilotRun, ToolError> {
        let run = AutopilotRun::queued(issue, agent, user);
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

impl<L: Level> UpdateDirectory for Tx<'_, L> {
    async fn ensure_workspace(&self, workspace: &str, key_prefix: &str) -> Result<(), ToolError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO workspaces (id, key_prefix) VALUES (?1, ?2)",
            [workspace, key_prefix],
        )?;
        Ok(())
    }

    async fn ensure_user(&self, workspace: &str, user: &str, role: Role) -> Result<(), ToolError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO users (workspace, name, role) VALUES (?1, ?2, ?3)",
            [workspace, user, role.as_str()],
        )?;
        Ok(())
    }

    async fn ensure_agent(
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

impl<L: Level> DeleteIssues for Tx<'_, L> {
    async fn delete_issue(&self, issue_id: &str) -> Result<Removed, ToolError> {
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
