//! The data the tools exchange: issues, comments, runs, usage rows.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An issue's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IssueStatus {
    /// Still to do.
    Open,
    /// Done or dropped.
    Closed,
}

impl IssueStatus {
    /// `open` or `closed`, as stored.
    pub const fn as_str(self) -> &'static str {
        match self {
            IssueStatus::Open => "open",
            IssueStatus::Closed => "closed",
        }
    }

    /// The status stored as `s`.
    pub fn parse(s: &str) -> Option<IssueStatus> {
        match s {
            "open" => Some(IssueStatus::Open),
            "closed" => Some(IssueStatus::Closed),
            _ => None,
        }
    }
}

/// A user's role in a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, deletes included.
    Admin,
    /// Everything, deletes included.
    Member,
    /// Reads only: every tool that changes data refuses a viewer (403).
    Viewer,
}

impl Role {
    /// `admin`, `member` or `viewer`, as stored.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    /// The role stored as `s`.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    /// Whether this role may change data at all (create, update, comment, assign, run).
    pub const fn may_write(self) -> bool {
        matches!(self, Role::Admin | Role::Member)
    }

    /// Whether this role may delete issues.
    pub const fn may_delete(self) -> bool {
        matches!(self, Role::Admin | Role::Member)
    }
}

/// Whether an assignee is a person or an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AssigneeKind {
    /// A user of the workspace.
    User,
    /// An agent of the workspace.
    Agent,
}

/// Who an issue is assigned to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Assignee {
    /// The user's or agent's name.
    pub name: String,
    /// A user or an agent.
    pub kind: AssigneeKind,
}

/// An issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Issue {
    /// The issue's UUID.
    pub id: String,
    /// The issue's key, such as `AAC-42`.
    pub key: String,
    /// One line.
    pub title: String,
    /// The description (may be empty).
    pub body: String,
    /// `open` or `closed`.
    pub status: IssueStatus,
    /// Who it is assigned to, if anyone.
    pub assignee: Option<Assignee>,
    /// The user who created it.
    pub created_by: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When it last changed (RFC 3339, UTC).
    pub updated_at: String,
}

/// A comment on an issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Comment {
    /// The comment's UUID.
    pub id: String,
    /// The user who wrote it.
    pub author: String,
    /// Its text.
    pub body: String,
    /// When it was written (RFC 3339, UTC).
    pub created_at: String,
}

/// A run of the autopilot on an issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AutopilotRun {
    /// The run's UUID (new on every trigger).
    pub run_id: String,
    /// The issue's UUID.
    pub issue_id: String,
    /// The issue's key.
    pub issue_key: String,
    /// The agent that runs it: the issue's assigned agent.
    pub agent: String,
    /// `queued` when triggered.
    pub status: String,
    /// The user who triggered it.
    pub triggered_by: String,
    /// When it was triggered (RFC 3339, UTC).
    pub created_at: String,
}

impl AutopilotRun {
    /// A new run of `agent` on `issue`, queued now by `user`.
    pub fn queued(issue: &Issue, agent: &str, user: &str) -> AutopilotRun {
        AutopilotRun {
            run_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            issue_id: issue.id.clone(),
            issue_key: issue.key.clone(),
            agent: agent.to_owned(),
            status: "queued".to_owned(),
            triggered_by: user.to_owned(),
            created_at: now(),
        }
    }
}

/// Tool calls of one day for one tool, from the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UsageRow {
    /// The day, `YYYY-MM-DD` (UTC).
    pub day: String,
    /// The tool called.
    pub tool: String,
    /// Every attempt.
    pub calls: i64,
    /// Attempts that succeeded.
    pub success: i64,
    /// Attempts refused by a check.
    pub denied: i64,
    /// Attempts whose handler failed.
    pub error: i64,
}

/// Now, RFC 3339 in UTC to the second: `2025-06-22T15:30:00Z`.
pub fn now() -> String {
    timestamp(time::OffsetDateTime::now_utc())
}

/// `at` as RFC 3339 in UTC to the second.
pub fn timestamp(at: time::OffsetDateTime) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    at.to_offset(time::UtcOffset::UTC)
        .format(FORMAT)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}
