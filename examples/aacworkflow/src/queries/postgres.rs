//! The queries on PostgreSQL (`tokio-postgres`, `$N` parameters), on a transaction
//! logged in as the level's role. The same results as `sqlite.rs`, row for row: text
//! sorts as bytes (`COLLATE "C"`, as SQLite does), comments in the order they were
//! written (`seq`, where SQLite has its `rowid`).

use aac_tools::ToolError;
use aac_tools::access::Level;
use aac_tools::postgres::Tx;
use aac_tools::postgres::tokio_postgres::Row;

use super::{
    DeleteIssues, IssueChanges, IssueFilter, IssueRef, ReadComments, ReadIssues, ReadMembers,
    ReadUsage, Removed, UpdateAutopilot, UpdateComments, UpdateDirectory, UpdateIssues,
    assignee_of, issue_not_found, kind_str, new_id, page,
};
use crate::model::{Assignee, AutopilotRun, Comment, Issue, IssueStatus, Role, UsageRow, now};

const ISSUE_COLUMNS: &str =
    "i.id, w.key_prefix || '-'::text || i.number::text, i.title, i.body, i.status,
     i.assignee, i.assignee_kind, i.created_by, i.created_at, i.updated_at, i.number
     FROM issues i JOIN workspaces w ON w.id = i.workspace";

fn issue_from_row(row: &Row) -> (i64, Issue) {
    let status: String = row.get(4);
    let kind: Option<String> = row.get(6);
    (
        row.get(10),
        Issue {
            id: row.get(0),
            key: row.get(1),
            title: row.get(2),
            body: row.get(3),
            status: IssueStatus::parse(&status).unwrap_or(IssueStatus::Open),
            assignee: assignee_of(row.get(5), kind.as_deref()),
            created_by: row.get(7),
            created_at: row.get(8),
            updated_at: row.get(9),
        },
    )
}

impl<L: Level> ReadIssues for Tx<L> {
    async fn find_issue(&self, workspace: &str, issue: &str) -> Result<Issue, ToolError> {
        let client = self.client();
        let row = match IssueRef::parse(issue) {
            None => None,
            Some(IssueRef::Id(id)) => {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {ISSUE_COLUMNS} WHERE i.workspace = $1 AND i.id = $2"
                    ))
                    .await?;
                client.query_opt(&stmt, &[&workspace, &id]).await?
            }
            Some(IssueRef::Key { prefix, number }) => {
                let stmt = client
                    .prepare_cached(&format!(
                        "SELECT {ISSUE_COLUMNS}
                         WHERE i.workspace = $1 AND w.key_prefix = $2 AND i.number = $3"
                    ))
                    .await?;
                client
                    .query_opt(&stmt, &[&workspace, &prefix, &number])
                    .await?
            }
        };
        row.map(|r| issue_from_row(&r).1)
            .ok_or_else(issue_not_found)
    }

    async fn list_issues(
        &self,
        workspace: &str,
        filter: &IssueFilter,
    ) -> Result<(Vec<(i64, Issue)>, bool), ToolError> {
        let client = self.client();
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {ISSUE_COLUMNS}
                 WHERE i.workspace = $1
                   AND ($2::text IS NULL OR i.status = $2)
                   AND ($3::text IS NULL OR i.assignee = $3)
                   AND ($4::bigint IS NULL OR i.number < $4)
                 ORDER BY i.number DESC
                 LIMIT $5"
            ))
            .await?;
        let limit = i64::from(filter.limit);
        let status = filter.status.map(IssueStatus::as_str);
        let rows: Vec<(i64, Issue)> = client
            .query(
                &stmt,
                &[
                    &workspace,
                    &status,
                    &filter.assignee,
                    &filter.before,
                    &(limit + 1),
                ],
            )
            .await?
            .iter()
            .map(issue_from_row)
            .collect();
        Ok(page(rows, filter.limit))
    }

    async fn issue_keys(
        &self,
        workspace: &str,
        typed: &str,
        limit: u32,
    ) -> Result<Vec<String>, ToolError> {
        let client = self.client();
        // `left`, not `LIKE`: what was typed is compared as it is, wildcards and all.
        let stmt = client
            .prepare_cached(
                "SELECT w.key_prefix || '-' || i.number::text
                 FROM issues i JOIN workspaces w ON w.id = i.workspace
                 WHERE i.workspace = $1
                   AND left(w.key_prefix || '-' || i.number::text, length($2::text)) = $2::text
                 ORDER BY i.number DESC
                 LIMIT $3",
            )
            .await?;
        let keys = client
            .query(&stmt, &[&workspace, &typed, &i64::from(limit)])
            .await?
            .iter()
            .map(|row| row.get(0))
            .collect();
        Ok(keys)
    }
}

impl<L: Level> ReadComments for Tx<L> {
    async fn comments(
        &self,
        issue_id: &str,
        skip: i64,
        limit: u32,
    ) -> Result<(Vec<Comment>, bool), ToolError> {
        let client = self.client();
        let stmt = client
            .prepare_cached(
                "SELECT id, author, body, created_at FROM comments
                 WHERE issue_id = $1 ORDER BY created_at COLLATE \"C\", seq
                 LIMIT $2 OFFSET $3",
            )
            .await?;
        let comments: Vec<Comment> = client
            .query(&stmt, &[&issue_id, &(i64::from(limit) + 1), &skip])
            .await?
            .iter()
            .map(|r| Comment {
                id: r.get(0),
                author: r.get(1),
                body: r.get(2),
                created_at: r.get(3),
            })
            .collect();
        Ok(page(comments, limit))
    }
}

impl<L: Level> ReadMembers for Tx<L> {
    async fn workspace_exists(&self, workspace: &str) -> Result<bool, ToolError> {
        let client = self.client();
        let stmt = client
            .prepare_cached("SELECT 1 FROM workspaces WHERE id = $1")
            .await?;
        Ok(client.query_opt(&stmt, &[&workspace]).await?.is_some())
    }

    async fn role(&self, workspace: &str, user: &str) -> Result<Option<Role>, ToolError> {
        let client = self.client();
        let stmt = client
            .prepare_cached("SELECT role FROM users WHERE workspace = $1 AND name = $2")
            .await?;
        let role: Option<String> = client
            .query_opt(&stmt, &[&workspace, &user])
            .await?
            .map(|r| r.get(0));
        Ok(role.as_deref().and_then(Role::parse))
    }

    async fn agent_exists(&self, workspace: &str, agent: &str) -> Result<bool, ToolError> {
        let client = self.client();
        let stmt = client
            .prepare_cached("SELECT 1 FROM agents WHERE workspace = $1 AND name = $2")
            .await?;
        Ok(client
            .query_opt(&stmt, &[&workspace, &agent])
            .await?
            .is_some())
    }
}

impl<L: Level> ReadUsage for Tx<L> {
    async fn usage_daily(
        &self,
        workspace: &str,
        since_day: &str,
    ) -> Result<Vec<UsageRow>, ToolError> {
        let client = self.client();
        // Names no tool of this server has are one group, `(unknown)`, in the query
        // itself: folded afterwards, every name a caller ever sent came back as a row.
        let known: Vec<&str> = crate::tools::TOOL_NAMES
            .iter()
            .copied()
            .chain(["(rate limited)"])
            .collect();
        let stmt = client
            .prepare_cached(
                "SELECT day, shown, sum(calls)::bigint,
                        COALESCE(sum(calls) FILTER (WHERE outcome = 'success'), 0)::bigint,
                        COALESCE(sum(calls) FILTER (WHERE outcome = 'denied'), 0)::bigint,
                        COALESCE(sum(calls) FILTER (WHERE outcome = 'error'), 0)::bigint
                 FROM (SELECT day, outcome, calls,
                              CASE WHEN tool = ANY($3) THEN tool ELSE '(unknown)' END AS shown
                       FROM aacworkflow_usage
                       WHERE workspace = $1 AND timestamp COLLATE \"C\" >= $2) AS usage
                 GROUP BY day, shown
                 ORDER BY day COLLATE \"C\", shown COLLATE \"C\"",
            )
            .await?;
        Ok(client
            .query(&stmt, &[&workspace, &since_day, &known])
            .await?
            .iter()
            .map(|r| UsageRow {
                day: r.get(0),
                tool: r.get(1),
                calls: r.get(2),
                success: r.get(3),
                denied: r.get(4),
                error: r.get(5),
            })
            .collect())
    }
}

impl<L: Level> UpdateIssues for Tx<L> {
    async fn create_issue(
        &self,
        workspace: &str,
        author: &str,
        title: &str,
        body: &str,
    ) -> Result<Issue, ToolError> {
        let client = self.client();
        // The workspace's row lock orders concurrent creates, on every replica.
        let next = client
            .prepare_cached(
                "UPDATE workspaces SET next_number = next_number + 1 WHERE id = $1
                 RETURNING next_number - 1",
            )
            .await?;
        let number: i64 = client
            .query_opt(&next, &[&workspace])
            .await?
            .map(|r| r.get(0))
            .ok_or_else(|| {
                ToolError::forbidden(format!("workspace `{workspace}` does not exist"))
            })?;
        let id = new_id();
        let at = now();
        let insert = client
            .prepare_cached(
                "INSERT INTO issues (id, workspace, number, title, body, status, created_by, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, 'open', $6, $7, $7)",
            )
            .await?;
        client
            .execute(
                &insert,
                &[&id, &workspace, &number, &title, &body, &author, &at],
            )
            .await?;
        self.find_issue(workspace, &id).await
    }

    async fn update_issue(&self, issue: &Issue, changes: &IssueChanges) -> Result<bool, ToolError> {
        let client = self.client();
        let stmt = client
            .prepare_cached(
                "UPDATE issues SET
                     title = coalesce($2, title),
                     body = coalesce($3, body),
                     status = coalesce($4, status),
                     updated_at = $5
                 WHERE id = $1
                   AND (title IS DISTINCT FROM coalesce($2, title)
                        OR body IS DISTINCT FROM coalesce($3, body)
                        OR status IS DISTINCT FROM coalesce($4, status))",
            )
            .await?;
        let status = changes.status.map(IssueStatus::as_str);
        let changed = client
            .execute(
                &stmt,
                &[&issue.id, &changes.title, &changes.body, &status, &now()],
            )
            .await?;
        Ok(changed > 0)
    }

    async fn assign_issue(&self, issue: &Issue, assignee: &Assignee) -> Result<bool, ToolError> {
        let client = self.client();
        let stmt = client
            .prepare_cached(
                "UPDATE issues SET assignee = $2, assignee_kind = $3, updated_at = $4
                 WHERE id = $1
                   AND (assignee IS DISTINCT FROM $2 OR assignee_kind IS DISTINCT FROM $3)",
            )
            .await?;
        let changed = client
            .execute(
                &stmt,
                &[&issue.id, &assignee.name, &kind_str(assignee.kind), &now()],
            )
            .await?;
        Ok(changed > 0)
    }
}

/// Keep the issue until this transaction ends (`FOR KEY SHARE`, what the foreign key's own
/// check takes): a `delete_issue` in progress is waited for, and an issue it deleted is not
/// found (404), never a foreign-key error.
async fn issue_kept<L: Level>(tx: &Tx<L>, issue_id: &str) -> Result<(), ToolError> {
    let client = tx.client();
    let stmt = client
        .prepare_cached("SELECT 1 FROM issues WHERE id = $1 FOR KEY SHARE")
        .await?;
    match client.query_opt(&stmt, &[&issue_id]).await? {
        Some(_) => Ok(()),
        None => Err(issue_not_found()),
    }
}

impl<L: Level> UpdateComments for Tx<L> {
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
        let client = self.client();
        issue_kept(self, issue_id).await?;
        let stmt = client
            .prepare_cached(
                "INSERT INTO comments (id, issue_id, author, body, created_at)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .await?;
        client
            .execute(
                &stmt,
                &[
                    &comment.id,
                    &issue_id,
                    &comment.author,
                    &comment.body,
                    &comment.created_at,
                ],
            )
            .await?;
        Ok(comment)
    }
}

impl<L: Level> UpdateAutopilot for Tx<L> {
    async fn queue_run(
        &self,
        issue: &Issue,
        agent: &str,
        user: &str,
    ) -> Result<AutopilotRun, ToolError> {
        let run = AutopilotRun::queued(issue, agent, user);
        let client = self.client();
        issue_kept(self, &issue.id).await?;
        let stmt = client
            .prepare_cached(
                "INSERT INTO autopilot_runs (id, issue_id, agent, status, triggered_by, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .await?;
        client
            .execute(
                &stmt,
                &[
                    &run.run_id,
                    &run.issue_id,
                    &run.agent,
                    &run.status,
                    &run.triggered_by,
                    &run.created_at,
                ],
            )
            .await?;
        Ok(run)
    }
}

impl<L: Level> UpdateDirectory for Tx<L> {
    async fn ensure_workspace(&self, workspace: &str, key_prefix: &str) -> Result<(), ToolError> {
        self.client()
            .execute(
                "INSERT INTO workspaces (id, key_prefix) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&workspace, &key_prefix],
            )
            .await?;
        Ok(())
    }

    async fn ensure_user(&self, workspace: &str, user: &str, role: Role) -> Result<(), ToolError> {
        self.client()
            .execute(
                "INSERT INTO users (workspace, name, role) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&workspace, &user, &role.as_str()],
            )
            .await?;
        Ok(())
    }

    async fn ensure_agent(
        &self,
        workspace: &str,
        agent: &str,
        description: &str,
    ) -> Result<(), ToolError> {
        self.client()
            .execute(
                "INSERT INTO agents (workspace, name, description) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&workspace, &agent, &description],
            )
            .await?;
        Ok(())
    }
}

impl<L: Level> DeleteIssues for Tx<L> {
    async fn delete_issue(&self, issue_id: &str) -> Result<Removed, ToolError> {
        let client = self.client();
        // The issue's row locked first: a comment or run being added to it commits before
        // (and is counted), or waits and finds the issue gone (404), as on SQLite, where
        // one writer at a time gives the same order. Without the lock, a comment committed
        // between the counts and the issue's own `DELETE` went uncounted with the cascade,
        // and one after it failed on the foreign key with the database's text.
        let stmt = client
            .prepare_cached("SELECT 1 FROM issues WHERE id = $1 FOR UPDATE")
            .await?;
        if client.query_opt(&stmt, &[&issue_id]).await?.is_none() {
            return Err(issue_not_found());
        }
        let comments = client
            .execute("DELETE FROM comments WHERE issue_id = $1", &[&issue_id])
            .await?;
        let runs = client
            .execute(
                "DELETE FROM autopilot_runs WHERE issue_id = $1",
                &[&issue_id],
            )
            .await?;
        let issues = client
            .execute("DELETE FROM issues WHERE id = $1", &[&issue_id])
            .await?;
        if issues == 0 {
            return Err(issue_not_found());
        }
        Ok(Removed {
            comments: comments as i64,
            runs: runs as i64,
        })
    }
}
