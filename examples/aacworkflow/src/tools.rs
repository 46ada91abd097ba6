//! The ten tools. Each attribute is the tool's whole contract: its annotations, its scope,
//! and through them the data handle it gets.
//!
//! | tool | read only | destructive | idempotent | scope |
//! | --- | --- | --- | --- | --- |
//! | `list_issues` | ✓ | | ✓ | `issues:read` |
//! | `get_issue` | ✓ | | ✓ | `issues:read` |
//! | `list_comments` | ✓ | | ✓ | `comments:read` |
//! | `dashboard_usage_daily` | ✓ | | ✓ | `dashboard:read` |
//! | `create_issue` | | | | `issues:write` |
//! | `update_issue` | | | ✓ | `issues:write` |
//! | `comment_issue` | | | | `comments:write` |
//! | `assign_issue_to_agent` | | | ✓ | `agents:write` |
//! | `trigger_autopilot` | | | | `autopilot:run` |
//! | `delete_issue` | | ✓ | ✓ | `issues:write` |
//!
//! Every tool acts in the workspace of the caller's token. An issue of another workspace
//! is answered exactly like one that does not exist.

use aac_tools::{Ctx, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backend::{DeleteStore, ReadStore, WriteStore};
use crate::items::issue_uri;
use crate::model::{
    Assignee, AssigneeKind, AutopilotRun, Comment, Issue, IssueStatus, Role, UsageRow, timestamp,
};
use crate::queries::{
    DeleteIssues, IssueChanges, IssueFilter, ReadComments, ReadIssues, ReadMembers, ReadUsage,
    UpdateAutopilot, UpdateComments, UpdateIssues,
};
use crate::transact;

/// The caller's workspace and user name, from the token.
pub(crate) fn caller(ctx: &Ctx) -> Result<(String, String), ToolError> {
    let principal = ctx.principal();
    let workspace = principal.workspace().ok_or_else(|| {
        ToolError::forbidden(
            "this token belongs to no workspace; create one with `aacworkflow token create --workspace …`",
        )
    })?;
    Ok((workspace.to_owned(), principal.subject().to_owned()))
}

/// Every tool and item that reads asks this first, in its transaction: a user the
/// workspace does not know reads nothing of it (403), whatever its token says (a user
/// removed since the token was made, or a workspace deleted and made again under the
/// same id).
pub(crate) async fn require_member(
    tx: &impl ReadMembers,
    workspace: &str,
    user: &str,
) -> Result<Role, ToolError> {
    tx.role(workspace, user)
        .await?
        .ok_or_else(|| not_a_member(workspace, user))
}

fn not_a_member(workspace: &str, user: &str) -> ToolError {
    ToolError::forbidden(format!(
        "user `{user}` is not a member of workspace `{workspace}`"
    ))
}

/// Every tool that changes data asks this first, before it looks anything up: admins and
/// members may write, a `viewer` reads only, and a user the workspace does not know may
/// do neither (403 either way). `action` says what was refused, e.g. "update issues".
async fn require_writer(
    tx: &impl ReadMembers,
    workspace: &str,
    user: &str,
    action: &str,
) -> Result<Role, ToolError> {
    match tx.role(workspace, user).await? {
        Some(role) if role.may_write() => Ok(role),
        Some(role) => Err(ToolError::forbidden(format!(
            "your role `{}` may not {action}: viewers have read-only access; ask an admin or a member",
            role.as_str()
        ))),
        None => Err(not_a_member(workspace, user)),
    }
}

fn default_limit() -> u32 {
    20
}

fn default_days() -> u32 {
    7
}

fn default_comment_limit() -> u32 {
    100
}

/// Cursors are opaque to clients: the hex of `n:<number>`, the number of the last issue
/// of the page (`list_issues`), or of `c:<count>`, how many comments the pages before gave
/// (`list_comments`: an issue's comments are only ever added after the last, so a count
/// keeps its place).
fn encode_cursor(number: i64) -> String {
    encode_cursor_of("n:", number)
}

fn decode_cursor(cursor: &str) -> Option<i64> {
    decode_cursor_of("n:", cursor)
}

fn encode_cursor_of(kind: &str, number: i64) -> String {
    format!("{kind}{number}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_cursor_of(kind: &str, cursor: &str) -> Option<i64> {
    if !cursor.len().is_multiple_of(2) || cursor.len() > 64 {
        return None;
    }
    let bytes = (0..cursor.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(cursor.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let text = String::from_utf8(bytes).ok()?;
    text.strip_prefix(kind)?.parse().ok().filter(|n| *n > 0)
}

// ---------------------------------------------------------------------------------------
// read-only tools

/// Arguments of `list_issues`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListIssuesArgs {
    /// Only issues with this status.
    pub status: Option<IssueStatus>,
    /// Only issues assigned to this user or agent.
    #[schemars(length(max = 100))]
    pub assignee: Option<String>,
    /// How many issues per page.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: u32,
    /// The `next_cursor` of the previous page, to get the next one.
    #[schemars(length(max = 64))]
    pub cursor: Option<String>,
}

/// One page of issues.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct IssuePage {
    /// The issues, newest first.
    pub issues: Vec<Issue>,
    /// Pass it as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// List the issues of your workspace, newest first, optionally by status or assignee.
///
/// Pages hold `limit` issues (default 20); pass `next_cursor` back as `cursor` for the next.
#[mcp_tool(read_only, idempotent, scope = "issues:read", audit_fields = ["status", "assignee", "limit"])]
pub async fn list_issues(
    db: ReadStore,
    ctx: Ctx,
    args: ListIssuesArgs,
) -> Result<IssuePage, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    let before = match &args.cursor {
        None => None,
        Some(cursor) => Some(decode_cursor(cursor).ok_or_else(invalid_cursor)?),
    };
    let filter = IssueFilter {
        status: args.status,
        assignee: args.assignee,
        before,
        limit: args.limit,
    };
    let (rows, more) = transact!(db, |tx| {
        require_member(tx, &workspace, &user).await?;
        tx.list_issues(&workspace, &filter).await
    })?;
    let next_cursor = if more {
        rows.last().map(|(number, _)| encode_cursor(*number))
    } else {
        None
    };
    Ok(IssuePage {
        issues: rows.into_iter().map(|(_, issue)| issue).collect(),
        next_cursor,
    })
}

fn invalid_cursor() -> ToolError {
    ToolError::bad_request(
        "invalid_cursor",
        "this is not a cursor this tool gives; start again without `cursor`",
    )
}

/// The arguments of tools that name one issue.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IssueIdArgs {
    /// The issue's UUID or its key, such as `AAC-42`.
    #[schemars(length(min = 1, max = 64))]
    pub issue_id: String,
}

/// Get one issue of your workspace by its UUID or its key (`AAC-42`).
#[mcp_tool(read_only, idempotent, scope = "issues:read", audit_fields = ["issue_id"])]
pub async fn get_issue(db: ReadStore, ctx: Ctx, args: IssueIdArgs) -> Result<Issue, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    transact!(db, |tx| {
        require_member(tx, &workspace, &user).await?;
        tx.find_issue(&workspace, &args.issue_id).await
    })
}

/// The comments of an issue.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CommentList {
    /// The issue's UUID.
    #[schemars(length(min = 1, max = 64))]
    pub issue_id: String,
    /// The issue's key.
    pub issue_key: String,
    /// The comments, oldest first.
    pub comments: Vec<Comment>,
    /// Pass it as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Arguments of `list_comments`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListCommentsArgs {
    /// The issue's UUID or its key, such as `AAC-42`.
    #[schemars(length(min = 1, max = 64))]
    pub issue_id: String,
    /// How many comments per page.
    #[serde(default = "default_comment_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: u32,
    /// The `next_cursor` of the previous page, to get the next one.
    #[schemars(length(max = 64))]
    pub cursor: Option<String>,
}

/// List the comments of an issue, oldest first.
///
/// Pages hold `limit` comments (default 100); pass `next_cursor` back as `cursor` for the
/// next.
#[mcp_tool(read_only, idempotent, scope = "comments:read", audit_fields = ["issue_id", "limit"])]
pub async fn list_comments(
    db: ReadStore,
    ctx: Ctx,
    args: ListCommentsArgs,
) -> Result<CommentList, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    let given = match &args.cursor {
        None => 0,
        Some(cursor) => decode_cursor_of("c:", cursor).ok_or_else(invalid_cursor)?,
    };
    let (comments, more) = transact!(db, |tx| {
        require_member(tx, &workspace, &user).await?;
        let issue = tx.find_issue(&workspace, &args.issue_id).await?;
        let (comments, more) = tx.comments(&issue.id, given, args.limit).await?;
        Ok(((issue, comments), more))
    })?;
    let ((issue, comments), more) = (comments, more);
    let next_cursor =
        more.then(|| encode_cursor_of("c:", given.saturating_add(comments.len() as i64)));
    Ok(CommentList {
        comments,
        issue_id: issue.id,
        issue_key: issue.key,
        next_cursor,
    })
}

/// Arguments of `dashboard_usage_daily`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct UsageArgs {
    /// How many days back, today included.
    #[serde(default = "default_days")]
    #[schemars(range(min = 1, max = 90))]
    pub days: u32,
}

/// Tool usage of a workspace.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// The workspace.
    pub workspace: String,
    /// The first day counted, `YYYY-MM-DD` (UTC).
    pub since: String,
    /// Calls per day and tool, oldest day first; days without calls are absent.
    pub rows: Vec<UsageRow>,
    /// Every call counted.
    pub total_calls: i64,
}

/// Tool calls per day and tool in your workspace, from the audit trail.
///
/// Counts every attempt, refused ones included, split by outcome.
#[mcp_tool(read_only, idempotent, scope = "dashboard:read", audit_fields = ["days"])]
pub async fn dashboard_usage_daily(
    db: ReadStore,
    ctx: Ctx,
    args: UsageArgs,
) -> Result<Usage, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    let first_day =
        time::OffsetDateTime::now_utc() - time::Duration::days(i64::from(args.days) - 1);
    let since = timestamp(first_day)[..10].to_owned();
    let rows = {
        let (workspace, since) = (workspace.clone(), since.clone());
        transact!(db, |tx| {
            require_member(tx, &workspace, &user).await?;
            tx.usage_daily(&workspace, &since).await
        })?
    };
    let rows = by_known_tool(rows);
    Ok(Usage {
        total_calls: rows.iter().map(|r| r.calls).sum(),
        workspace,
        since,
        rows,
    })
}

/// The ten tools' names: the dashboard names no other (`audit_trail.rs`
/// `the_dashboard_knows_the_ten_tools_by_name` keeps the list true).
pub const TOOL_NAMES: [&str; 10] = [
    "assign_issue_to_agent",
    "comment_issue",
    "create_issue",
    "dashboard_usage_daily",
    "delete_issue",
    "get_issue",
    "list_comments",
    "list_issues",
    "trigger_autopilot",
    "update_issue",
];

/// The dashboard's rows with every name the trail holds that is not one of the ten tools
/// (a call of a tool that does not exist is recorded under the name its caller sent: any
/// text, up to 128 bytes, which the dashboard would hand to every reader of the workspace)
/// counted together under `(unknown)`, and the framework's count of refusals past the
/// principal's rate under `(rate limited)`. Rows stay ordered by day, then tool.
fn by_known_tool(rows: Vec<UsageRow>) -> Vec<UsageRow> {
    let mut merged: std::collections::BTreeMap<(String, String), UsageRow> =
        std::collections::BTreeMap::new();
    for row in rows {
        let tool = if TOOL_NAMES.contains(&row.tool.as_str()) || row.tool == "(rate limited)" {
            row.tool
        } else {
            "(unknown)".to_owned()
        };
        let entry = merged
            .entry((row.day.clone(), tool.clone()))
            .or_insert_with(|| UsageRow {
                day: row.day,
                tool,
                calls: 0,
                success: 0,
                denied: 0,
                error: 0,
            });
        entry.calls += row.calls;
        entry.success += row.success;
        entry.denied += row.denied;
        entry.error += row.error;
    }
    merged.into_values().collect()
}

// ---------------------------------------------------------------------------------------
// tools that write

/// Arguments of `create_issue`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateIssueArgs {
    /// One line saying what is wrong or wanted.
    #[schemars(length(min = 1, max = 200))]
    pub title: String,
    /// The details.
    #[schemars(length(max = 20000))]
    pub body: Option<String>,
}

/// Whether `text` shows nothing: only white space, control characters and characters that
/// draw nothing (zero-width spaces, the Hangul fillers, the braille blank, tags…), which a
/// title made of would list as an empty line.
fn blank(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_whitespace() || c.is_control() || aac_tools::confirm::is_invisible(c))
}

fn blank_title() -> ToolError {
    ToolError::bad_request(
        "invalid_arguments",
        "`title` cannot be blank: it needs a character that shows",
    )
}

/// Create an issue in your workspace. Returns it with its `id` (UUID) and `key` (`AAC-42`).
///
/// Not idempotent: each call creates a new issue.
#[mcp_tool(scope = "issues:write")]
pub async fn create_issue(
    db: WriteStore,
    ctx: Ctx,
    args: CreateIssueArgs,
) -> Result<Issue, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    if blank(&args.title) {
        return Err(blank_title());
    }
    transact!(db, |tx| {
        require_writer(tx, &workspace, &user, "create issues").await?;
        tx.create_issue(
            &workspace,
            &user,
            args.title.trim(),
            args.body.as_deref().unwrap_or(""),
        )
        .await
    })
}

/// Arguments of `update_issue`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct UpdateIssueArgs {
    /// The issue's UUID or its key, such as `AAC-42`.
    #[schemars(length(min = 1, max = 64))]
    pub issue_id: String,
    /// A new title.
    #[schemars(length(min = 1, max = 200))]
    pub title: Option<String>,
    /// A new description.
    #[schemars(length(max = 20000))]
    pub body: Option<String>,
    /// `open` or `closed`.
    pub status: Option<IssueStatus>,
}

/// An issue after an update.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Updated {
    /// Whether this call changed anything (`false` when the issue already was so).
    pub changed: bool,
    /// The issue as it is now.
    pub issue: Issue,
}

/// Change an issue's title, description or status. Fields left out stay as they are.
///
/// Idempotent: the same update twice leaves the issue as the first one did.
#[mcp_tool(idempotent, scope = "issues:write", audit_fields = ["issue_id", "status"])]
pub async fn update_issue(
    db: WriteStore,
    ctx: Ctx,
    args: UpdateIssueArgs,
) -> Result<Updated, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    transact!(db, |tx| {
        require_writer(tx, &workspace, &user, "update issues").await?;
        let issue = tx.find_issue(&workspace, &args.issue_id).await?;
        let changes = IssueChanges {
            title: args.title.map(|t| t.trim().to_owned()),
            body: args.body,
            status: args.status,
        };
        if changes.title.as_deref().is_some_and(blank) {
            return Err(blank_title());
        }
        let changed = tx.update_issue(&issue, &changes).await?;
        Ok(Updated {
            changed,
            issue: tx.find_issue(&workspace, &issue.id).await?,
        })
    })
    .inspect(|updated| announce_change(&ctx, updated))
}

/// Arguments of `comment_issue`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CommentArgs {
    /// The issue's UUID or its key, such as `AAC-42`.
    #[schemars(length(min = 1, max = 64))]
    pub issue_id: String,
    /// The comment.
    #[schemars(length(min = 1, max = 20000))]
    pub body: String,
}

/// Add a comment to an issue. Not idempotent: each call adds a comment.
#[mcp_tool(scope = "comments:write", audit_fields = ["issue_id"])]
pub async fn comment_issue(
    db: WriteStore,
    ctx: Ctx,
    args: CommentArgs,
) -> Result<Comment, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    transact!(db, |tx| {
        require_writer(tx, &workspace, &user, "comment on issues").await?;
        let issue = tx.find_issue(&workspace, &args.issue_id).await?;
        tx.add_comment(&issue.id, &user, &args.body).await
    })
}

/// Arguments of `assign_issue_to_agent`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AssignArgs {
    /// The issue's UUID or its key, such as `AAC-42`.
    #[schemars(length(min = 1, max = 64))]
    pub issue_id: String,
    /// The name of an agent of your workspace, such as `autopilot`.
    #[schemars(length(min = 1, max = 100))]
    pub agent: String,
}

/// Assign an issue to one of your workspace's agents.
///
/// Idempotent: assigning the agent it already has changes nothing.
#[mcp_tool(idempotent, scope = "agents:write", audit_fields = ["issue_id", "agent"])]
pub async fn assign_issue_to_agent(
    db: WriteStore,
    ctx: Ctx,
    args: AssignArgs,
) -> Result<Updated, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    transact!(db, |tx| {
        require_writer(tx, &workspace, &user, "assign issues").await?;
        let issue = tx.find_issue(&workspace, &args.issue_id).await?;
        if !tx.agent_exists(&workspace, &args.agent).await? {
            return Err(ToolError::not_found(format!(
                "no agent `{}` in your workspace",
                args.agent
            )));
        }
        let assignee = Assignee {
            name: args.agent,
            kind: AssigneeKind::Agent,
        };
        let changed = tx.assign_issue(&issue, &assignee).await?;
        Ok(Updated {
            changed,
            issue: tx.find_issue(&workspace, &issue.id).await?,
        })
    })
    .inspect(|updated| announce_change(&ctx, updated))
}

/// Start the autopilot on an issue: its assigned agent works on it.
///
/// Not idempotent: each call queues a new run. The issue must be open and assigned to an
/// agent (see `assign_issue_to_agent`). At most 30 calls a minute per user.
#[mcp_tool(scope = "autopilot:run", rate = "30/min", audit_fields = ["issue_id"])]
pub async fn trigger_autopilot(
    db: WriteStore,
    ctx: Ctx,
    args: IssueIdArgs,
) -> Result<AutopilotRun, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    transact!(db, |tx| {
        require_writer(tx, &workspace, &user, "start the autopilot").await?;
        let issue = tx.find_issue(&workspace, &args.issue_id).await?;
        if issue.status == IssueStatus::Closed {
            return Err(ToolError::conflict(format!(
                "{} is closed; reopen it with `update_issue` first",
                issue.key
            )));
        }
        let agent = match &issue.assignee {
            Some(Assignee {
                name,
                kind: AssigneeKind::Agent,
            }) => name.clone(),
            _ => {
                return Err(ToolError::conflict(format!(
                    "{} is not assigned to an agent; assign one with `assign_issue_to_agent` first",
                    issue.key
                )));
            }
        };
        tx.queue_run(&issue, &agent, &user).await
    })
}

/// What `delete_issue` removed.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Deleted {
    /// The deleted issue's UUID.
    pub id: String,
    /// Its key.
    pub key: String,
    /// Its title.
    pub title: String,
    /// Comments deleted with it.
    pub comments_deleted: i64,
    /// Autopilot runs deleted with it.
    pub runs_deleted: i64,
}

/// Delete an issue permanently, with its comments and autopilot runs.
///
/// Destructive: send `confirm: true` only after the user has explicitly agreed.
/// Viewers may not delete.
#[mcp_tool(
    destructive,
    idempotent,
    scope = "issues:write",
    audit_fields = ["issue_id"],
    confirm_message = "Delete issue {issue_id} with its comments and autopilot runs? This cannot be undone."
)]
pub async fn delete_issue(
    db: DeleteStore,
    ctx: Ctx,
    args: IssueIdArgs,
) -> Result<Deleted, ToolError> {
    let (workspace, user) = caller(&ctx)?;
    transact!(db, |tx| {
        let role = require_writer(tx, &workspace, &user, "delete issues").await?;
        if !role.may_delete() {
            return Err(ToolError::forbidden(format!(
                "your role `{}` may not delete issues; ask an admin or a member",
                role.as_str()
            )));
        }
        let issue = tx.find_issue(&workspace, &args.issue_id).await?;
        let removed = tx.delete_issue(&issue.id).await?;
        Ok(Deleted {
            id: issue.id,
            key: issue.key,
            title: issue.title,
            comments_deleted: removed.comments,
            runs_deleted: removed.runs,
        })
    })
    .inspect(|deleted| announce(&ctx, &deleted.id, &deleted.key))
}

/// Tell the sessions subscribed to an issue's resource (by its key or by its UUID) that
/// it changed, once the change is committed.
fn announce(ctx: &Ctx, id: &str, key: &str) {
    ctx.notify_resource_updated(issue_uri(key));
    ctx.notify_resource_updated(issue_uri(id));
}

/// [`announce`] an update that changed something.
fn announce_change(ctx: &Ctx, updated: &Updated) {
    if updated.changed {
        announce(ctx, &updated.issue.id, &updated.issue.key);
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_cursor, encode_cursor};

    #[test]
    fn cursors_round_trip_and_refuse_forgeries() {
        assert_eq!(decode_cursor(&encode_cursor(42)), Some(42));
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("6e3a"), None); // "n:" with no number
        assert_eq!(decode_cursor(&encode_cursor(0)), None);
        assert_eq!(decode_cursor("abc"), None);
    }
}
